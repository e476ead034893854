"""cel-go's sets extension (``ext.Sets()``, in Kubernetes' base environment since 1.29):
``sets.contains``, ``sets.equivalent`` and ``sets.intersects`` on two lists.

Membership is CEL's ``in`` on a list: heterogeneous equality, so ``1``, ``1u`` and
``1.0`` are the same element and ``[1]`` equals ``[1.0]``; duplicates do not count.

Run-time cost, as Kubernetes charges it (cel-go's ``trackSetsCost``): one unit per
pair of elements compared, ``len(a) * len(b)``, twice that for ``sets.equivalent``
(it tests containment both ways).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from engine.cel.errors import no_such_overload
from engine.cel.types import operators

_LISTS = (list, tuple)


def _member(item: Any, lst: Any) -> bool:
    return any(operators.equals(item, x) for x in lst)


def _lists(name: str, a: Any, b: Any) -> None:
    if type(a) not in _LISTS or type(b) not in _LISTS:
        raise no_such_overload(name, a, b)


def sets_contains(a: Any, b: Any) -> bool:
    """Whether every element of ``b`` is in ``a``."""
    _lists("sets.contains", a, b)
    return all(_member(x, a) for x in b)


def sets_equivalent(a: Any, b: Any) -> bool:
    """Whether each list contains the other (as sets)."""
    _lists("sets.equivalent", a, b)
    return all(_member(x, a) for x in b) and all(_member(x, b) for x in a)


def sets_intersects(a: Any, b: Any) -> bool:
    """Whether the lists have an element in common."""
    _lists("sets.intersects", a, b)
    return any(_member(x, b) for x in a)


def _pairs(factor: int) -> Callable[..., int]:
    def cost(a: Any = None, b: Any = None, *_: Any) -> int:
        if type(a) not in _LISTS or type(b) not in _LISTS:
            return 0
        return factor * len(a) * len(b)

    return cost


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "sets.contains": sets_contains,
    "sets.equivalent": sets_equivalent,
    "sets.intersects": sets_intersects,
}

RESULT_TYPES: dict[str, str] = {name: "bool" for name in FUNCTIONS}

COSTS: dict[str, Callable[..., int]] = {
    "sets.contains": _pairs(1),
    "sets.equivalent": _pairs(2),
    "sets.intersects": _pairs(1),
}
