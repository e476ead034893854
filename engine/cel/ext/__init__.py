"""The function libraries: CEL's extensions and Kubernetes' CEL libraries, each a module the library loader reads."""
