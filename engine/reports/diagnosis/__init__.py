"""``kpe explain pod``: why one pod of a cluster is pending, and how that is printed."""
