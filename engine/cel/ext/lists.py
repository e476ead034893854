"""Kubernetes' CEL lists library (k8s.io/apiserver/pkg/cel/library/lists.go):
``isSorted``, ``sum``, ``min``, ``max``, ``indexOf``, ``lastIndexOf`` on lists; and
cel-go's lists extension (``ext.Lists()``, version 3 in Kubernetes' base environment
since 1.34): ``lists.range``, ``distinct``, ``flatten``, ``reverse``, ``slice``,
``sort`` and the ``sortBy`` macro (the parser expands ``l.sortBy(e, key)`` to
``l.map(e, [e, key]).sortBy()``, which ``sort_by_keys`` below sorts).

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


# -- cel-go's lists extension -------------------------------------------------------------

MAX_RANGE: Final = 1_000_000  # cel-go's defaultMaxRangeSize


def lists_range(n: Any) -> list[int]:
    if type(n) is not int:
        raise no_such_overload("lists.range", n)
    if n < 0:
        raise EvalError(f"lists.range: size must be non-negative, got {n}")
    if n > MAX_RANGE:
        raise EvalError(f"lists.range: size {n} exceeds maximum allowed ({MAX_RANGE})")
    return list(range(n))


def reverse(lst: Any) -> list[Any]:
    return list(reversed(lst))


def list_slice(lst: Any, start: Any = None, end: Any = None) -> list[Any]:
    if type(start) is not int or type(end) is not int:
        raise no_such_overload("slice", lst, start, end)
    if start < 0 or end < 0:
        raise EvalError(f"cannot slice({start}, {end}), negative indexes not supported")
    if start > end:
        raise EvalError(f"cannot slice({start}, {end}), start index must be less than or equal to end index")
    if len(lst) < end:
        raise EvalError(f"cannot slice({start}, {end}), list is length {len(lst)}")
    return list(lst[start:end])


def flatten(lst: Any, depth: Any = 1) -> list[Any]:
    if type(depth) is not int:
        raise no_such_overload("flatten", lst, depth)
    if depth < 0:
        raise EvalError("level must be non-negative")
    out: list[Any] = []
    for item in lst:
        if type(item) in (list, tuple) and depth > 0:
            out.extend(flatten(item, depth - 1))
        else:
            out.append(item)
    return out


def distinct(lst: Any) -> list[Any]:
    """The first of each run of equal elements (CEL equality: ``1`` and ``1.0`` are one)."""
    out: list[Any] = []
    for item in lst:
        if not any(operators.equals(item, seen) for seen in out):
            out.append(item)
    return out


def _sortable(value: Any) -> bool:
    return type(value) in _ORDERED or bool(getattr(type(value), "cel_ordered", False))


def _sorted_by(items: list[Any], keys: list[Any]) -> list[Any]:
    """``items`` in the order of their ``keys``: one comparable type (cel-go's
    ``sortListByAssociatedKeys``; equal keys keep their order)."""
    if not items:
        return []
    first = keys[0]
    if not _sortable(first):
        raise EvalError("list elements must be comparable")
    if any(type(k) is not type(first) for k in keys):
        raise EvalError("list elements must have the same type")
    order = sorted(range(len(items)), key=lambda i: keys[i])
    return [items[i] for i in order]


def sort(lst: Any) -> list[Any]:
    return _sorted_by(list(lst), list(lst))


def sort_by_keys(pairs: Any) -> list[Any]:
    """The ``sortBy`` macro's second half: ``[[element, key], ...]`` to the elements in key order."""
    if any(type(p) not in (list, tuple) or len(p) != 2 for p in pairs):
        raise EvalError("sortBy() takes a variable name and a key expression: l.sortBy(e, key)")
    return _sorted_by([p[0] for p in pairs], [p[1] for p in pairs])


def _flat_count(lst: Any, depth: Any) -> int:
    if type(depth) is not int or depth < 0:
        return 0
    n = len(lst)
    if depth > 0:
        n += sum(_flat_count(x, depth - 1) for x in lst if type(x) in (list, tuple))
    return n


# Run-time cost (limits.py's units): one per element read or built, as a comprehension
# over the list would be; distinct compares every pair.
def _length_cost(lst: Any = (), *_: Any) -> int:
    return len(lst) if type(lst) in (list, tuple) else 0


def _range_cost(n: Any = 0, *_: Any) -> int:
    return n if type(n) is int and 0 < n <= MAX_RANGE else 0


def _flatten_cost(lst: Any = (), depth: Any = 1, *_: Any) -> int:
    return _flat_count(lst, depth) if type(lst) in (list, tuple) else 0


def _distinct_cost(lst: Any = (), *_: Any) -> int:
    return len(lst) * len(lst) if type(lst) in (list, tuple) else 0


def _on_lists(fn: Any) -> dict[type, Any]:
    return {list: fn, tuple: fn}


FUNCTIONS: dict[str, Any] = {"lists.range": lists_range}

METHODS: dict[str, dict[type, Any]] = {
    "isSorted": _on_lists(is_sorted),
    "sum": _on_lists(list_sum),
    "min": _on_lists(list_min),
    "max": _on_lists(list_max),
    "indexOf": _on_lists(index_of),
    "lastIndexOf": _on_lists(last_index_of),
    "reverse": _on_lists(reverse),  # string.reverse() is the strings extension's
    "slice": _on_lists(list_slice),
    "flatten": _on_lists(flatten),
    "distinct": _on_lists(distinct),
    "sort": _on_lists(sort),
    "sortBy": _on_lists(sort_by_keys),
}

RESULT_TYPES: dict[str, str] = {
    "isSorted": "bool", "indexOf": "int", "lastIndexOf": "int",
    "lists.range": "list", "slice": "list", "flatten": "list", "distinct": "list", "sort": "list", "sortBy": "list",
}

COSTS: dict[str, Any] = {
    "lists.range": _range_cost,
    "slice": _length_cost,
    "flatten": _flatten_cost,
    "distinct": _distinct_cost,
    "sort": _length_cost,
    "sortBy": _length_cost,
}
