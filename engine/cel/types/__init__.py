"""CEL values at run time: their representation, type names, operators and conversions."""
