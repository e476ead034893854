"""CEL types as the typed check (``engine.cel.checker.types``) sees them.

A ``Type`` is a name and parameters: ``int``, ``string``, ``list(string)``,
``map(string, int)``, ``optional(int)``, ``timestamp``, the library's opaque types
(``kubernetes.Quantity``, ``net.IP``...), and ``dyn``, which is anything and fits
everywhere. An ``ObjectType`` is a Kubernetes schema object (``Pod``,
``ObjectMeta``) or a ``params`` object: named fields, each with its type; at run
time it is a JSON object (a ``map``), and it is accepted wherever a map is.

The rules are lenient where kpe's run time is: ``null`` fits any type (JSON
fields may be ``null``), objects are maps, and anything the check cannot be
sure of is ``dyn``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

NUMERIC = frozenset(("int", "uint", "double"))
# Types whose values are never maps or lists: equality between two different ones
# has no overload in CEL (numbers aside, which compare across int, uint and double).
SIMPLE = frozenset(
    (
        "int", "uint", "double", "bool", "string", "bytes", "timestamp", "duration", "type",
        "kubernetes.Quantity", "kubernetes.Semver", "kubernetes.URL", "net.IP", "net.CIDR",
    )
)
CONTAINERS = frozenset(("list", "map", "optional"))


@dataclass(frozen=True)
class Type:
    name: str
    params: tuple[Type, ...] = ()

    def __str__(self) -> str:
        if self.name in CONTAINERS:
            return f"{self.name}({', '.join(str(p) for p in self.params)})"
        return self.name

    @property
    def is_param(self) -> bool:
        """A type parameter of a signature (``A``, ``K``, ``V``)."""
        return len(self.name) == 1 and self.name.isupper()

    @property
    def elem(self) -> Type:
        """A list's elements, a map's values, an optional's value (``dyn`` for other types)."""
        if self.name == "list" or self.name == "optional":
            return self.params[0]
        if self.name == "map":
            return self.params[1]
        return DYN

    @property
    def key(self) -> Type:
        return self.params[0] if self.name == "map" else DYN


@dataclass(frozen=True)
class ObjectType(Type):
    """An object with named fields. ``label`` names it in messages (``ObjectMeta``);
    ``open``: other fields are ``dyn`` rather than errors (``params``); ``present``: the fields
    every object of a Kubernetes kind has (schema.py says how it knows), which an expression
    may read without a guard (engine/policy/lints.py)."""

    fields: Mapping[str, Type] = field(default_factory=dict, compare=False, hash=False, repr=False)
    present: frozenset[str] = field(default=frozenset(), compare=False, hash=False, repr=False)
    label: str = field(default="", compare=False)
    open: bool = field(default=False, compare=False)

    def __str__(self) -> str:
        return self.label or self.name


DYN = Type("dyn")
NULL = Type("null_type")
INT = Type("int")
UINT = Type("uint")
DOUBLE = Type("double")
BOOL = Type("bool")
STRING = Type("string")
BYTES = Type("bytes")
TIMESTAMP = Type("timestamp")
DURATION = Type("duration")
TYPE = Type("type")


def named(name: str) -> Type:
    return Type(name)


def list_of(elem: Type) -> Type:
    return Type("list", (elem,))


def map_of(key: Type, value: Type) -> Type:
    return Type("map", (key, value))


def optional_of(value: Type) -> Type:
    return Type("optional", (value,))


def is_dyn(t: Type) -> bool:
    return t.name == "dyn"


def is_concrete(t: Type) -> bool:
    """Whether the check knows ``t`` exactly: no ``dyn``, ``null``, type parameter or
    schema object in it (those compare leniently, so they never make literals mixed)."""
    if isinstance(t, ObjectType) or t.name in ("dyn", "null_type") or t.is_param:
        return False
    return all(is_concrete(p) for p in t.params)


def is_maplike(t: Type) -> bool:
    return t.name == "map" or isinstance(t, ObjectType)


def join(a: Type, b: Type) -> Type:
    """The type of a value that is one or the other (``?:`` branches, list items); ``dyn`` when they differ."""
    if a == b:
        return a
    if a.name == "null_type":
        return b
    if b.name == "null_type":
        return a
    if a.name == b.name and a.name in CONTAINERS and not isinstance(a, ObjectType) and not isinstance(b, ObjectType):
        return Type(a.name, tuple(join(x, y) for x, y in zip(a.params, b.params)))
    return DYN


def comparable(a: Type, b: Type) -> bool:
    """Whether CEL has an equality between values of these types (leniently: anything
    with ``dyn``, ``null``, an optional or a type parameter in it compares)."""
    for t in (a, b):
        if is_dyn(t) or t.name == "null_type" or t.name == "optional" or t.is_param:
            return True
    if a.name in NUMERIC and b.name in NUMERIC:
        return True
    if a.name in SIMPLE or b.name in SIMPLE:
        return a.name == b.name
    if a.name == "list" or b.name == "list":
        return a.name == b.name and comparable(a.elem, b.elem)
    if a.name == "map" and b.name == "map":
        return comparable(a.key, b.key) and comparable(a.elem, b.elem)
    return True  # objects and maps: JSON objects both


def assignable(expected: Type, actual: Type, bindings: dict[str, Type]) -> bool:
    """Whether a value of type ``actual`` fits a parameter of type ``expected``,
    binding the signature's type parameters in ``bindings``."""
    if expected.is_param:
        bound = bindings.get(expected.name)
        if bound is None:
            bindings[expected.name] = actual
        elif bound != actual and actual.name != "null_type":
            # Two different types for one parameter: leniently dyn (kpe's run time compares values).
            bindings[expected.name] = join(bound, actual)
        return True
    if is_dyn(actual) or actual.name == "null_type":
        _bind_dyn(expected, bindings)
        return True
    if is_dyn(expected):
        return True
    if isinstance(actual, ObjectType):
        if expected.name != "map":
            return False
        _bind_dyn(expected.elem, bindings)
        return assignable(expected.key, STRING, bindings)
    if expected.name != actual.name:
        return False
    return all(assignable(e, a, bindings) for e, a in zip(expected.params, actual.params))


def _bind_dyn(expected: Type, bindings: dict[str, Type]) -> None:
    """A ``dyn`` value fits: every type parameter it stands for is ``dyn`` from now on."""
    if expected.is_param:
        bindings[expected.name] = DYN
    for p in expected.params:
        _bind_dyn(p, bindings)


def substitute(t: Type, bindings: Mapping[str, Type]) -> Type:
    """``t`` with its type parameters replaced by what they were bound to (``dyn`` if unbound)."""
    if t.is_param:
        return bindings.get(t.name, DYN)
    if t.params and not isinstance(t, ObjectType):
        return Type(t.name, tuple(substitute(p, bindings) for p in t.params))
    return t
