"""The ``kpe`` command: check, test, explain, diff, snapshot, scheduler-config and serve."""
