"""The extender verbs kube-scheduler calls, their HTTP path, and the scheduler configuration that points at them."""
