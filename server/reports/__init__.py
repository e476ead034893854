"""PolicyReports of what Audit-mode policies would have done: the leader's reporter."""
