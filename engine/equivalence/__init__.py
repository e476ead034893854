"""The equivalence cache, a layer around the filter and score decisions: results kept for pods the policies cannot tell apart."""
