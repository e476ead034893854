"""kpe's server and command line; app.py, state.py and settings.py are the composition root (docs/architecture.md)."""
