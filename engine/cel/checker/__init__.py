"""What is known of an expression before it runs: its types, checked against the
Kubernetes schemas (``types``, ``typemodel``, ``signatures``, ``schema``), and its
worst-case cost (``cost``, ``shapes``)."""
