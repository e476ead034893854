"""The policy model and the loading pipeline: YAML with positions, JSON Schema, typed CEL compile, the immutable compiled set."""
