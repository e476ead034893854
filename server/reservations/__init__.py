"""The reservation controller (placeholder pods for free slots) and its endpoint."""
