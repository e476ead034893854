"""Kubernetes' cost units and what the estimate knows of values (``kubecost.py``):
cost and size ranges that saturate at cel-go's "unknown" (the largest uint64), and the
sizes a value of each kind may have when the expression does not show it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from engine.cel.checker.shapes import DEFAULT_LIST, DEFAULT_STRING, Shape

MAX = (1 << 64) - 1  # cel-go's "unknown": estimates saturate at the largest uint64
STRING_FACTOR = 0.1  # cel-go's StringTraversalCostFactor
REGEX_FACTOR = 0.25  # cel-go's RegexStringLengthCostFactor
LIST_CREATE, MAP_CREATE, STRUCT_CREATE = 10, 30, 40
MAX_REQUEST_BYTES = 3 * 1024 * 1024  # Kubernetes' MaxRequestSizeBytes
MAX_NAME_FORMAT_REGEX = 128  # Kubernetes' MaxNameFormatRegexSize
MAX_FORMAT_SIZE = 64


def sat_add(a: int, b: int) -> int:
    return min(a + b, MAX)


def sat_mul(a: int, b: int) -> int:
    return min(a * b, MAX)


def sat_factor(n: int, f: float) -> int:
    return MAX if n >= MAX or n * f >= MAX else math.ceil(n * f)


@dataclass(frozen=True)
class Cost:
    lo: int
    hi: int

    def __add__(self, other: Cost) -> Cost:
        return Cost(sat_add(self.lo, other.lo), sat_add(self.hi, other.hi))

    def times(self, size: Size) -> Cost:
        return Cost(sat_mul(self.lo, size.lo), sat_mul(self.hi, size.hi))

    def union(self, other: Cost) -> Cost:
        return Cost(min(self.lo, other.lo), max(self.hi, other.hi))


ZERO, ONE = Cost(0, 0), Cost(1, 1)


@dataclass(frozen=True)
class Size:
    lo: int
    hi: int

    def factor(self, f: float) -> Cost:
        return Cost(sat_factor(self.lo, f), sat_factor(self.hi, f))

    def add(self, other: Size) -> Size:
        return Size(sat_add(self.lo, other.lo), sat_add(self.hi, other.hi))

    def union(self, other: Size) -> Size:
        return Size(min(self.lo, other.lo), max(self.hi, other.hi))


UNKNOWN = Size(0, MAX)


@dataclass(frozen=True)
class Value:
    """What the estimate knows of a value: its kind (``string``, ``bytes``, ``list``,
    ``map``, ``scalar``, ``dyn``, or a library type), its size when known (``None``:
    the size a value of its kind may have), its items, keys and fields."""

    kind: str = "dyn"
    size: Size | None = None
    item: Value | None = None
    key: Value | None = None
    fields: Mapping[str, Value] = field(default_factory=dict)
    other: Value | None = None

    def field(self, name: str) -> Value:
        return self.fields.get(name) or self.other or DYN

    def element(self) -> Value:
        return self.item or DYN


DYN = Value()
SCALAR = Value("scalar", Size(1, 1))


@dataclass(frozen=True)
class Sizes:
    """The size of a value whose size the expression does not show, by kind."""

    string: Size
    list: Size
    map: Size
    dyn: Size = UNKNOWN

    def of(self, kind: str) -> Size:
        if kind in ("string", "bytes"):
            return self.string
        if kind == "list":
            return self.list
        if kind == "map":
            return self.map
        return self.dyn


# Kubernetes' own assumptions for fields without maxLength/maxItems (apiserver/pkg/cel/common/schemas.go):
# a string fills the request but its quotes; a list or map holds as many of its smallest
# items ("" or {}, two bytes, plus a comma; for a map, a key of "" and the colon too).
REQUEST_BOUND = Sizes(
    string=Size(0, MAX_REQUEST_BYTES - 2),
    list=Size(0, (MAX_REQUEST_BYTES - 2) // 3),
    map=Size(0, (MAX_REQUEST_BYTES - 2) // 8),
    dyn=Size(0, MAX_REQUEST_BYTES - 2),
)


# kpe's assumptions (shapes.py) for a value whose shape says nothing more.
ASSUMED = Sizes(string=Size(0, DEFAULT_STRING), list=Size(0, DEFAULT_LIST), map=Size(0, DEFAULT_LIST), dyn=Size(0, DEFAULT_STRING))


def from_shape(shape: Shape, sizes: Sizes | None = None) -> Value:
    """A kpe ``Shape`` as a ``Value``: its sizes (kpe's assumptions), or ``sizes`` for
    every size (the request bound) when given."""
    kind = {"scalar": "scalar", "string": "string", "list": "list", "map": "map"}.get(shape.kind, "dyn")
    if kind == "scalar":
        return SCALAR
    if sizes is not None:
        size = sizes.of(kind)
    else:
        size = Size(0, shape.items if kind in ("list", "map") else shape.chars if kind == "string" else max(shape.chars, shape.items))
    item = from_shape(shape.item, sizes) if shape.item is not None else None
    key = from_shape(shape.key, sizes) if shape.key is not None else None
    fields = {name: from_shape(sub, sizes) for name, sub in shape.fields.items()}
    other = from_shape(shape.other, sizes) if shape.other is not None else None
    if kind == "dyn" and item is None:
        item = other = Value("dyn", size)  # a generic field: generic all the way down
    return Value(kind, size, item, key, fields, other)


# Sizes for what one evaluation costs apart from the work that grows with its values: no
# string or list has a character or an item, a value of unknown kind is one scalar.
FIXED = Sizes(string=Size(0, 0), list=Size(0, 0), map=Size(0, 0), dyn=Size(1, 1))


@dataclass(frozen=True)
class Part:
    cost: Cost
    value: Value


def product(a: Cost, b: Cost) -> Cost:
    return Cost(sat_mul(a.lo, b.lo), sat_mul(a.hi, b.hi))


def join(a: Value, b: Value) -> Value:
    if a is b:
        return a
    kind = a.kind if a.kind == b.kind else "dyn"
    size = a.size.union(b.size) if a.size is not None and b.size is not None else None
    item = a.item if b.item is None else b.item if a.item is None else join(a.item, b.item)
    return Value(kind, size, item, a.key or b.key, {**b.fields, **a.fields}, a.other or b.other)


def unsized(item: Value | None) -> Value:
    return item if item is not None else SCALAR
