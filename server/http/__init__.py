"""The HTTP layer every surface shares: listeners and TLS, request bodies and their limits, the extender wire format, the worker thread."""
