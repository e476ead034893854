"""CEL operators over run-time values: equality, ordering, arithmetic with
int64/uint64 overflow, indexing, membership and size.

Generated code calls these where it cannot prove the operand types at compile
time; where it can, it inlines the Python operator instead.
"""

from __future__ import annotations

import math
from typing import Any

from engine.cel.errors import DivisionByZeroError, EvalError, IntOverflowError, NoSuchKeyError, no_such_overload
from engine.cel.limits import MAX_LIST_SIZE, MAX_STRING_SIZE, list_too_large, string_too_large
from engine.cel.types.values import FALSE_KEY, INT64_MAX, INT64_MIN, TRUE_KEY, UINT64_MAX, MapBoolKey, Optional, OPTIONAL_NONE, UInt, map_key, type_name

_NUMERIC = frozenset((int, UInt, float))


def equals(a: Any, b: Any) -> bool:
    """CEL's heterogeneous equality: numbers compare by value across int, uint and
    double; values of different kinds are simply unequal."""
    ta, tb = type(a), type(b)
    if ta is tb:
        if ta is list:
            return len(a) == len(b) and all(equals(x, y) for x, y in zip(a, b))
        if ta is dict:
            if len(a) != len(b):
                return False
            for k, v in a.items():
                found = _lookup(b, k)
                if found is _ABSENT or not equals(v, found):
                    return False
            return True
        return bool(a == b)
    if ta in _NUMERIC and tb in _NUMERIC:
        # As the ordering does (and cel-go, cel-cpp): an int or uint meets a double
        # as a double, so 2**63-1 == 2.0**63 like neither < nor > holds between them.
        if ta is float or tb is float:
            return float(a) == float(b)
        return bool(a == b)
    return False


def not_equals(a: Any, b: Any) -> bool:
    return not equals(a, b)


_ORDERED = frozenset((int, UInt, float, str, bytes, bool))


def _comparable(a: Any, b: Any, op: str) -> tuple[Any, Any]:
    ta, tb = type(a), type(b)
    if ta is tb:
        # Library types opt in to <, <=, >, >= (timestamps and durations do; quantities compare with methods).
        if ta in _ORDERED or getattr(ta, "cel_ordered", False):
            return a, b
    elif ta in _NUMERIC and tb in _NUMERIC:
        # Like cel-go, an int or uint meets a double as a double (rounding included).
        if ta is float or tb is float:
            return float(a), float(b)
        return a, b
    raise no_such_overload(op, a, b)


def less(a: Any, b: Any) -> bool:
    a, b = _comparable(a, b, "_<_")
    return bool(a < b)


def less_equal(a: Any, b: Any) -> bool:
    a, b = _comparable(a, b, "_<=_")
    return bool(a <= b)


def greater(a: Any, b: Any) -> bool:
    a, b = _comparable(a, b, "_>_")
    return bool(a > b)


def greater_equal(a: Any, b: Any) -> bool:
    a, b = _comparable(a, b, "_>=_")
    return bool(a >= b)


def check_int(value: int) -> int:
    if INT64_MIN <= value <= INT64_MAX:
        return value
    raise IntOverflowError("integer overflow")


def check_uint(value: int) -> UInt:
    if 0 <= value <= UINT64_MAX:
        return UInt(value)
    raise IntOverflowError("unsigned integer overflow")


def add(a: Any, b: Any) -> Any:
    ta, tb = type(a), type(b)
    if ta is tb:
        if ta is int:
            return check_int(a + b)
        if ta is UInt:
            return check_uint(a + b)
        if ta is float:
            return a + b
        if ta in (str, bytes, list):
            size = len(a) + len(b)
            if size > (MAX_LIST_SIZE if ta is list else MAX_STRING_SIZE):
                raise list_too_large("_+_", size) if ta is list else string_too_large("_+_", size)
            return a + b
        if ta in (bool, dict, type(None)):
            raise no_such_overload("_+_", a, b)
    if ta not in _PLAIN and (ta is not tb or hasattr(ta, "__add__")):
        try:
            result = a + b
        except TypeError:
            raise no_such_overload("_+_", a, b) from None
        if result is not NotImplemented:
            return result
    raise no_such_overload("_+_", a, b)


_PLAIN = frozenset((int, UInt, float, str, bytes, list, dict, bool, type(None)))


def subtract(a: Any, b: Any) -> Any:
    ta, tb = type(a), type(b)
    if ta is tb:
        if ta is int:
            return check_int(a - b)
        if ta is UInt:
            return check_uint(a - b)
        if ta is float:
            return a - b
    if ta not in _PLAIN:
        try:
            return a - b
        except TypeError:
            pass
    raise no_such_overload("_-_", a, b)


def multiply(a: Any, b: Any) -> Any:
    ta, tb = type(a), type(b)
    if ta is tb:
        if ta is int:
            return check_int(a * b)
        if ta is UInt:
            return check_uint(a * b)
        if ta is float:
            return a * b
    raise no_such_overload("_*_", a, b)


def _truncated_quotient(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def divide(a: Any, b: Any) -> Any:
    ta, tb = type(a), type(b)
    if ta is tb:
        if ta is int or ta is UInt:
            if b == 0:
                raise DivisionByZeroError("division by zero")
            q = _truncated_quotient(a, b)
            return check_int(q) if ta is int else UInt(q)
        if ta is float:
            if b == 0.0:
                if a == 0.0 or math.isnan(a):
                    return math.nan
                return math.copysign(math.inf, a) * math.copysign(1.0, b)
            return a / b
    raise no_such_overload("_/_", a, b)


def modulo(a: Any, b: Any) -> Any:
    ta, tb = type(a), type(b)
    if ta is tb and (ta is int or ta is UInt):
        if b == 0:
            raise DivisionByZeroError("modulus by zero")
        r = a - b * _truncated_quotient(a, b)
        return check_int(r) if ta is int else UInt(r)
    raise no_such_overload("_%_", a, b)


def negate(a: Any) -> Any:
    ta = type(a)
    if ta is int:
        return check_int(-a)
    if ta is float:
        return -a
    if ta not in _PLAIN:
        try:
            return -a
        except TypeError:
            pass
    raise no_such_overload("-_", a)


def logical_not(a: Any) -> bool:
    if a is True:
        return False
    if a is False:
        return True
    raise no_such_overload("!_", a)


_ABSENT = object()


def _lookup(mapping: dict[Any, Any], key: Any) -> Any:
    """Map lookup with CEL's key rules: int, uint and integral doubles find each
    other, bools only match bools."""
    tk = type(key)
    if tk is float:
        if not key.is_integer():
            return _ABSENT
        key, tk = int(key), int
    if tk is bool or tk is MapBoolKey:
        # A stored MapBoolKey, or a plain bool key of a dict from elsewhere (YAML
        # params); MapBoolKey never equals an int key.
        return mapping.get(TRUE_KEY if key is True or key is TRUE_KEY else FALSE_KEY, _ABSENT)
    if (tk is int or tk is UInt) and (key == 0 or key == 1):
        # A plain Python True/False key would answer for 1/0: skip those.
        for k, v in mapping.items():
            if type(k) is not bool and type(k) is not MapBoolKey and k == key:
                return v
        return _ABSENT
    return mapping.get(key, _ABSENT)


def index(container: Any, key: Any) -> Any:
    """``container[key]``."""
    tc = type(container)
    if tc is dict:
        tk = type(key)
        if tk not in (str, int, UInt, bool, float):
            raise no_such_overload("_[_]", container, key)
        value = _lookup(container, key)
        if value is _ABSENT:
            raise NoSuchKeyError(f"no such key: {key!r}")
        return value
    if tc is list:
        i = _list_position(container, key)
        if not 0 <= i < len(container):
            raise EvalError(f"index out of bounds: {i}")
        return container[i]
    if tc is Optional:
        return optional_index(container, key)
    raise no_such_overload("_[_]", container, key)


def _list_position(container: list[Any], key: Any) -> int:
    """A list index as cel-go's IndexOrError reads it: an int, or a uint or double
    that is exactly an int64; any other uint or double is an error, not just absent."""
    tk = type(key)
    if tk is int:
        return key  # type: ignore[no-any-return]
    if tk is UInt:
        if key <= INT64_MAX:
            return int(key)
        raise EvalError(f"unsupported index value {int(key)}u in list")
    if tk is float:
        if key.is_integer() and INT64_MIN <= key < 2.0**63:
            return int(key)
        raise EvalError(f"unsupported index value {key!r} in list")
    raise no_such_overload("_[_]", container, key)


def optional_index(container: Any, key: Any) -> Optional:
    """``container[?key]``, and ``[key]`` on an optional: absent entries give ``optional.none()``."""
    if type(container) is Optional:
        if not container.present:
            return OPTIONAL_NONE
        container = container.value
    tc = type(container)
    if tc is dict:
        value = _lookup(container, key)
        return OPTIONAL_NONE if value is _ABSENT else Optional(value)
    if tc is list:
        i = _list_position(container, key)
        return Optional(container[i]) if 0 <= i < len(container) else OPTIONAL_NONE
    raise no_such_overload("_[?_]", container, key)


def optional_select(operand: Any, field: str) -> Optional:
    """``operand.?field``, and ``.field`` on an optional."""
    if type(operand) is Optional:
        if not operand.present:
            return OPTIONAL_NONE
        operand = operand.value
    if type(operand) is dict:
        value = operand.get(field, _ABSENT)
        return OPTIONAL_NONE if value is _ABSENT else Optional(value)
    raise no_such_overload("_.?_", operand)


def select(operand: Any, field: str) -> Any:
    """``operand.field`` where the operand may be something other than a map."""
    if type(operand) is dict:
        try:
            return operand[field]
        except KeyError:
            raise NoSuchKeyError(f"no such key: {field}") from None
    if type(operand) is Optional:
        return optional_select(operand, field)
    raise EvalError(f"type '{_kind(operand)}' does not support field selection")


def has(operand: Any, field: str) -> bool:
    """``has(operand.field)``."""
    t = type(operand)
    if t is dict:
        return field in operand
    if t is Optional:
        return operand.present and has(operand.value, field)
    raise no_such_overload("has", operand)


def contains(container: Any, item: Any) -> bool:
    """``item in container``."""
    tc = type(container)
    if tc is list:
        ti = type(item)
        if ti is str:
            return item in container
        return any(equals(item, x) for x in container)
    if tc is dict:
        if type(item) not in (str, int, UInt, bool, float):
            return False
        return _lookup(container, item) is not _ABSENT
    raise no_such_overload("@in", item, container)


def size(value: Any) -> int:
    t = type(value)
    if t is str or t is bytes or t is list or t is dict:
        return len(value)
    raise no_such_overload("size", value)


def make_map(entries: list[tuple[Any, Any]]) -> dict[Any, Any]:
    """A map literal: keys must be int, uint, bool or string, and unique."""
    out: dict[Any, Any] = {}
    seen: set[tuple[type, Any]] = set()
    for key, value in entries:
        tk = type(key)
        if tk not in (str, int, UInt, bool):
            raise EvalError(f"unsupported key type: {_kind(key)}")
        marker = (bool if tk is bool else object, key)
        if marker in seen:
            raise EvalError(f"repeated key in map literal: {key!r}")
        seen.add(marker)
        out[map_key(key)] = value
    return out


def _kind(value: Any) -> str:
    return type_name(value)


Optional.equals = equals
Optional.index = optional_index
