"""Reports for people: explain, why a pod is pending, the impact of a policy change, policy tests, tables."""
