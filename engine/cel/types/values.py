"""How CEL values are represented at run time.

Values are the plain Python objects JSON decoding produces, so Kubernetes
objects need no conversion: null=None, bool, int (int64), float (double),
str, bytes, list, dict. The CEL types JSON has no word for get small classes:
``UInt`` (uint64), ``CelType`` (type values), ``Optional``; timestamps,
durations and the Kubernetes library types live in their own modules.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, Final

from engine.cel.types.names import register_type as register_type
from engine.cel.types.names import type_name as type_name

INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1
UINT64_MAX: Final = 2**64 - 1


class UInt(int):
    """A CEL uint. A subclass of int so arithmetic is cheap; ``type(x) is UInt``
    tells it apart from a CEL int."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"{int(self)}u"


class CelType:
    """A CEL type value, as returned by ``type(x)``; equal by name."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __eq__(self, other: object) -> bool:
        return type(other) is CelType and other.name == self.name

    def __hash__(self) -> int:
        return hash(("CelType", self.name))

    def __repr__(self) -> str:
        return self.name


class Optional:
    """CEL's ``optional_type``: a value that may be absent."""

    __slots__ = ("value", "present")

    # CEL's deep equality and optional indexing are the operators' (engine.cel.types.operators),
    # which build on this module: they install themselves here when loaded, and engine.cel
    # loads them before any value can be made.
    equals: ClassVar[Callable[[Any, Any], bool]]
    index: ClassVar[Callable[["Optional", Any], "Optional"]]

    def __init__(self, value: Any = None, present: bool = True) -> None:
        self.value = value
        self.present = present

    def __eq__(self, other: object) -> bool:
        if type(other) is not Optional:
            return False
        if not self.present or not other.present:
            return self.present == other.present
        return Optional.equals(self.value, other.value)

    def __hash__(self) -> int:
        return hash(("Optional", self.present))

    def __getitem__(self, key: Any) -> "Optional":
        # `.field` and `[key]` on an optional chain: an absent step gives optional.none().
        return Optional.index(self, key)

    def __repr__(self) -> str:
        return f"optional.of({self.value!r})" if self.present else "optional.none()"


OPTIONAL_NONE: Final = Optional(None, False)


class MapBoolKey:
    """A bool as the key of a map kpe built (a literal, ``transformMap``).

    CEL's ``true`` and ``1`` (``false`` and ``0``) are different keys, but
    Python's ``True == 1`` makes them one dict key. Inside a map a bool key is
    stored as one of the two instances of this class: it hashes like the bool,
    equals only a bool of the same value (so ``{True: 'a'}`` still compares
    equal in Python), and never equals an int. Kubernetes objects have string
    keys only, so their lookups never meet it; iteration hands the plain bool
    back (``plain_key``)."""

    __slots__ = ("value",)

    def __init__(self, value: bool) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return other is self or (type(other) is bool and other is self.value) or (
            type(other) is MapBoolKey and other.value is self.value
        )

    def __hash__(self) -> int:
        return hash(self.value)

    def __repr__(self) -> str:
        return repr(self.value)


TRUE_KEY: Final = MapBoolKey(True)
FALSE_KEY: Final = MapBoolKey(False)


def map_key(key: Any) -> Any:
    """``key`` as it is stored in a map: bools become ``TRUE_KEY``/``FALSE_KEY``."""
    if type(key) is bool:
        return TRUE_KEY if key else FALSE_KEY
    return key


def plain_key(key: Any) -> Any:
    """A stored map key as the CEL value it stands for."""
    return key.value if type(key) is MapBoolKey else key


def has_bool_keys(mapping: dict[Any, Any]) -> bool:
    """Whether iterating ``mapping`` needs ``plain_key`` (two hash lookups, no scan)."""
    return TRUE_KEY in mapping or FALSE_KEY in mapping

# Names for the classes defined here; other modules register theirs the same way.
register_type(UInt, "uint")
register_type(CelType, "type")
register_type(Optional, "optional_type")


def type_of(value: object) -> CelType:
    """``type(value)`` in CEL."""
    return CelType(type_name(value))
