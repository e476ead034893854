"""The ``kpe`` command: check, test, explain, diff, snapshot, scheduler-config, serve and completion."""
