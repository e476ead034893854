"""``kpe diff``: what a policy change does to a cluster's pods, and how that is printed."""
