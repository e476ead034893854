"""The served policy set and its hot reload."""
