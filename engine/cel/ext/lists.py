"""Kubernetes' CEL lists library (k8s.io/apiserver/pkg/cel/library/lists.go):
``isSorted``, ``sum``, ``min``, ``max``, ``indexOf``, ``lastIndexOf`` on lists.

Kubernetes declares these only for lists of one comparable (or summable) element type
and rejects the rest when it type-checks; here the same limits are checked per call.
Numbers compare across int, uint and double by value, as CEL's ordering does.
"""

from __future__ import annotations

import math
from typing import Any, Final

from engine.cel.types import operators
from engine.cel.errors import EvalError, no_such_overload
from engine.cel.types.values import UInt, type_name

_NUMERIC: Final = frozenset((int, UInt, float))
_ORDERED: Final = frozenset((int, UInt, float, bool, str, bytes))
# The names the timestamp and duration classes register under (see values.register_type).
_TIME_NAMES: Final = frozenset(("google.protobuf.Timestamp", "google.protobuf.Duration", "timestamp", "duration"))
_DURATION_NAMES: Final = frozenset(("google.protobuf.Duration", "duration"))


def _check_ordered(name: str, lst: Any, item: Any) -> None:
    t = type(item)
    if t not in _ORDERED and type_name(item) not in _TIME_NAMES:
        raise no_such_overload(name, lst)


def _compare(name: str, a: Any, b: Any) -> int | None:
    """-1, 0 or 1; None where cel-go's Compare gives an error that the Kubernetes
    functions ignore (NaN). Elements of different kinds have no order."""
    ta, tb = type(a), type(b)
    if ta in _NUMERIC and tb in _NUMERIC:
        if ta is float and math.isnan(a) or tb is float and math.isnan(b):
            return None
        return int((a > b) - (a < b))  # Python compares int and float exactly
    if ta is not tb:
        raise no_such_overload(name, a, b)
    try:
        return int((a > b) - (a < b))
    except TypeError:
        raise no_such_overload(name, a, b) from None


def is_sorted(lst: Any) -> bool:
    prev: Any = None
    for i, item in enumerate(lst):
        _check_ordered("isSorted", lst, item)
        if i and _compare("isSorted", prev, item) == 1:
            return False
        prev = item
    return True


def _extreme(name: str, lst: Any, replace_when: int) -> Any:
    if not lst:
        raise EvalError(f"{name} called on empty list")
    result = lst[0]
    _check_ordered(name, lst, result)
    for item in lst[1:]:
        _check_ordered(name, lst, item)
        # Ties keep the earlier element, as Kubernetes does: [1, 1.0].min() is 1.
        if _compare(name, result, item) == replace_when:
            result = item
    return result


def list_min(lst: Any) -> Any:
    return _extreme("min", lst, 1)


def list_max(lst: Any) -> Any:
    return _extreme("max", lst, -1)


def list_sum(lst: Any) -> Any:
    """The sum of numbers or durations of one type; an empty list sums to int 0
    (Kubernetes can tell an empty list<double> apart statically, a run-time list cannot)."""
    if not lst:
        return 0
    first = type(lst[0])
    if first not in _NUMERIC and type_name(lst[0]) not in _DURATION_NAMES:
        raise no_such_overload("sum", lst)
    total = lst[0]
    for item in lst[1:]:
        if type(item) is not first:
            raise no_such_overload("sum", lst)
        total = operators.add(total, item)  # int64/uint64 overflow is an error
    return total


def index_of(lst: Any, item: Any) -> int:
    for i, x in enumerate(lst):
        if operators.equals(x, item):
            return i
    return -1


def last_index_of(lst: Any, item: Any) -> int:
    for i in range(len(lst) - 1, -1, -1):
        if operators.equals(lst[i], item):
            return i
    return -1


def _on_lists(fn: Any) -> dict[type, Any]:
    return {list: fn, tuple: fn}


FUNCTIONS: dict[str, Any] = {}

METHODS: dict[str, dict[type, Any]] = {
    "isSorted": _on_lists(is_sorted),
    "sum": _on_lists(list_sum),
    "min": _on_lists(list_min),
    "max": _on_lists(list_max),
    "indexOf": _on_lists(index_of),
    "lastIndexOf": _on_lists(last_index_of),
}

RESULT_TYPES: dict[str, str] = {"isSorted": "bool", "indexOf": "int", "lastIndexOf": "int"}
