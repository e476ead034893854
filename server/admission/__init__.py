"""Scheduling gates: the admission webhook that adds them, the controller that lifts them, requeueing after a reload."""
