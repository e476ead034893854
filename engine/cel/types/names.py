"""CEL type names of run-time values, for ``type(x)`` and error messages.

A registry rather than a table of classes, so that the modules defining CEL types
(``values``, the timestamps, quantity and semver libraries) each name their own and
this module imports none of them: the errors name values' types through it.
"""

from __future__ import annotations

_TYPE_NAMES: dict[type, str] = {
    type(None): "null_type",
    bool: "bool",
    int: "int",
    float: "double",
    str: "string",
    bytes: "bytes",
    list: "list",
    tuple: "list",
    dict: "map",
}


def register_type(cls: type, name: str) -> None:
    """Give a library class its CEL type name (``type(x)`` and error messages use it)."""
    _TYPE_NAMES[cls] = name


def type_name(value: object) -> str:
    """The CEL type name of a run-time value."""
    return _TYPE_NAMES.get(type(value), type(value).__name__)


def class_name(cls: type) -> str:
    """The CEL type name of a class's values (its Python name when none is registered)."""
    return _TYPE_NAMES.get(cls, cls.__name__)
