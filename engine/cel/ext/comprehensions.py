"""The second half of the ``transformMapEntry`` macro of cel-go's two-variable
comprehensions (``ext.TwoVarComprehensions()``, in Kubernetes' base environment since 1.32).

The parser expands ``r.transformMapEntry(k, v, [filter,] entry)`` to
``r.transformList(k, v, [filter,] entry).transformMapEntry()``: the comprehension
builds one map per selected item, and ``merge_entries`` here merges them in order.
As cel-go's ``@mapInsert``, a key that is already there is an error
(``insert failed: key 1 already exists``), with CEL's key equality: ``0`` and
``0u`` are one key.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from engine.cel.errors import EvalError, no_such_overload
from engine.cel.types import operators
from engine.cel.types.values import plain_key


def _go_text(key: Any) -> str:
    """A key as Go's %v prints a CEL value (``0u`` is ``0``, ``true`` is ``true``)."""
    if type(key) is bool:
        return "true" if key else "false"
    return str(int(key)) if isinstance(key, int) else str(key)


def merge_entries(maps: Any) -> dict[Any, Any]:
    out: dict[Any, Any] = {}
    for entry in maps:
        if type(entry) is not dict:
            raise no_such_overload("transformMapEntry", entry)
        for key, value in entry.items():
            if operators.contains(out, plain_key(key)):
                raise EvalError(f"insert failed: key {_go_text(plain_key(key))} already exists")
            out[key] = value
    return out


def _cost(maps: Any = (), *_: Any) -> int:
    return sum(len(m) for m in maps if type(m) is dict) if type(maps) in (list, tuple) else 0


METHODS: dict[str, dict[type, Callable[..., Any]]] = {"transformMapEntry": {list: merge_entries, tuple: merge_entries}}

RESULT_TYPES: dict[str, str] = {"transformMapEntry": "map"}

COSTS: dict[str, Callable[..., int]] = {"transformMapEntry": _cost}
