"""CEL's type conversion functions: ``int``, ``uint``, ``double``, ``string``,
``bytes``, ``bool`` and ``dyn``, with cel-go's semantics and error messages.

Strings are parsed as Go's strconv does (cel-go calls ParseInt/ParseUint base 10,
ParseFloat and ParseBool), which is stricter than Python's int()/float(): no
surrounding spaces, no Unicode digits, no '0x' for integers. Values of library
classes convert through their ``cel_string()`` / ``cel_int()`` methods, so
timestamps, durations and the Kubernetes types need nothing here.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any, Final

from engine.cel.errors import EvalError, IntOverflowError, no_such_overload
from engine.cel.ext.formatting import go_format_g
from engine.cel.types.values import INT64_MAX, INT64_MIN, UINT64_MAX, UInt

_TWO_TO_63: Final = 2.0**63
_TWO_TO_64: Final = 2.0**64

_SIGNED_DECIMAL: Final = re.compile(r"[+-]?[0-9]+")
_UNSIGNED_DECIMAL: Final = re.compile(r"[0-9]+")
# Go's strconv.ParseFloat special values: "inf"/"infinity" may be signed, "nan" may not.
_INFINITY: Final = re.compile(r"([+-]?)(?:inf|infinity)", re.IGNORECASE)
_NAN: Final = re.compile(r"nan", re.IGNORECASE)

_GO_BOOLS: Final = {
    "1": True, "t": True, "T": True, "TRUE": True, "true": True, "True": True,
    "0": False, "f": False, "F": False, "FALSE": False, "false": False, "False": False,
}


def _int_overflow() -> IntOverflowError:
    return IntOverflowError("integer overflow")


def _uint_overflow() -> IntOverflowError:
    return IntOverflowError("unsigned integer overflow")


def _one_argument(name: str, args: tuple[Any, ...]) -> Any:
    if len(args) != 1:
        raise no_such_overload(name, *args)
    return args[0]


def _strconv_error(func: str, text: str, reason: str) -> EvalError:
    # Go's *strconv.NumError text; json.dumps stands in for Go's %q.
    return EvalError(f"strconv.{func}: parsing {json.dumps(text, ensure_ascii=False)}: {reason}")


# -- Go strconv parsing -----------------------------------------------------


def parse_int(text: str) -> int:
    """Go's ``strconv.ParseInt(text, 10, 64)``."""
    if not _SIGNED_DECIMAL.fullmatch(text):
        raise _strconv_error("ParseInt", text, "invalid syntax")
    value = int(text)
    if not INT64_MIN <= value <= INT64_MAX:
        raise _strconv_error("ParseInt", text, "value out of range")
    return value


def parse_uint(text: str) -> UInt:
    """Go's ``strconv.ParseUint(text, 10, 64)``: digits only, not even a '+'."""
    if not _UNSIGNED_DECIMAL.fullmatch(text):
        raise _strconv_error("ParseUint", text, "invalid syntax")
    value = int(text)
    if value > UINT64_MAX:
        raise _strconv_error("ParseUint", text, "value out of range")
    return UInt(value)


def _underscores_ok(text: str) -> bool:
    """Go's strconv.underscoreOK: '_' only between digits, or after a base prefix."""
    if text[:1] in ("+", "-"):
        text = text[1:]
    saw = "^"  # ^ start, 0 digit or prefix, _ underscore, ! anything else
    i = 0
    hexadecimal = False
    if len(text) >= 2 and text[0] == "0" and text[1] in "bBoOxX":
        i, saw, hexadecimal = 2, "0", text[1] in "xX"
    digits = "0123456789abcdefABCDEF" if hexadecimal else "0123456789"
    for ch in text[i:]:
        if ch in digits:
            saw = "0"
        elif ch == "_":
            if saw != "0":
                return False
            saw = "_"
        elif saw == "_":
            return False
        else:
            saw = "!"
    return saw != "_"


def _float_literal(text: str) -> tuple[str, bool] | None:
    """Go's strconv.readFloat grammar over the whole of ``text``: the literal with
    its underscores removed and whether it is hexadecimal, or None if it is not one."""
    n = len(text)
    i = 1 if text[:1] in ("+", "-") else 0
    hexadecimal = i + 2 < n and text[i] == "0" and text[i + 1] in "xX"
    if hexadecimal:
        i += 2
    digits = "0123456789abcdefABCDEF" if hexadecimal else "0123456789"
    saw_dot = saw_digits = underscores = False
    while i < n:
        ch = text[i]
        if ch == "_":
            underscores = True
        elif ch == ".":
            if saw_dot:
                break
            saw_dot = True
        elif ch in digits:
            saw_digits = True
        else:
            break
        i += 1
    if not saw_digits:
        return None
    if i < n and text[i] in ("pP" if hexadecimal else "eE"):
        i += 1
        if i < n and text[i] in "+-":
            i += 1
        if i >= n or not "0" <= text[i] <= "9":
            return None
        while i < n and ("0" <= text[i] <= "9" or text[i] == "_"):
            underscores = underscores or text[i] == "_"
            i += 1
    elif hexadecimal:
        return None  # a hexadecimal mantissa needs a 'p' exponent
    if i != n or (underscores and not _underscores_ok(text)):
        return None
    return text.replace("_", ""), hexadecimal


def parse_float(text: str) -> float:
    """Go's ``strconv.ParseFloat(text, 64)``: decimal and hexadecimal literals,
    'inf'/'infinity'/'nan' in any case; a finite literal too big for a double is
    an error rather than infinity."""
    special = _INFINITY.fullmatch(text)
    if special:
        return -math.inf if special.group(1) == "-" else math.inf
    if _NAN.fullmatch(text):
        return math.nan
    literal = _float_literal(text)
    if literal is None:
        raise _strconv_error("ParseFloat", text, "invalid syntax")
    cleaned, hexadecimal = literal
    try:
        value = float.fromhex(cleaned) if hexadecimal else float(cleaned)
    except OverflowError:
        value = math.inf
    if math.isinf(value):
        raise _strconv_error("ParseFloat", text, "value out of range")
    return value


def parse_bool(text: str) -> bool:
    """Go's ``strconv.ParseBool``: 1, t, T, TRUE, true, True and their false twins."""
    value = _GO_BOOLS.get(text)
    if value is None:
        raise _strconv_error("ParseBool", text, "invalid syntax")
    return value


# -- the conversions -------------------------------------------------------


def to_int(*args: Any) -> int:
    value = _one_argument("int", args)
    t = type(value)
    if t is int:
        return value  # type: ignore[no-any-return]
    if t is UInt:
        if value > INT64_MAX:
            raise _int_overflow()
        return int(value)
    if t is float:
        # Truncates toward zero; -2**63 itself is refused too, as in cel-go.
        if math.isnan(value) or not -_TWO_TO_63 < value < _TWO_TO_63:
            raise _int_overflow()
        return int(value)
    if t is str:
        return parse_int(value)
    hook = getattr(value, "cel_int", None) if t not in _PLAIN_TYPES else None
    if hook is not None:
        return hook()  # type: ignore[no-any-return]
    raise no_such_overload("int", value)


def to_uint(*args: Any) -> UInt:
    value = _one_argument("uint", args)
    t = type(value)
    if t is UInt:
        return value  # type: ignore[no-any-return]
    if t is int:
        if value < 0:
            raise _uint_overflow()
        return UInt(value)
    if t is float:
        # Any negative double is refused, even -0.5 whose truncation would be 0.
        if math.isnan(value) or not 0 <= value < _TWO_TO_64:
            raise _uint_overflow()
        return UInt(int(value))
    if t is str:
        return parse_uint(value)
    raise no_such_overload("uint", value)


def to_double(*args: Any) -> float:
    value = _one_argument("double", args)
    t = type(value)
    if t is float:
        return value  # type: ignore[no-any-return]
    if t is int or t is UInt:
        return float(value)  # rounds to nearest, ties to even, like Go's float64(x)
    if t is str:
        return parse_float(value)
    raise no_such_overload("double", value)


def to_string(*args: Any) -> str:
    value = _one_argument("string", args)
    t = type(value)
    if t is str:
        return value  # type: ignore[no-any-return]
    if t is int or t is UInt:
        return str(int(value))
    if t is float:
        return go_format_g(value)
    if t is bool:
        return "true" if value else "false"
    if t is bytes:
        try:
            return value.decode("utf-8")  # type: ignore[no-any-return]
        except UnicodeDecodeError:
            raise EvalError("invalid UTF-8 in bytes, cannot convert to string") from None
    hook = getattr(value, "cel_string", None) if t not in _PLAIN_TYPES else None
    if hook is not None:
        return hook()  # type: ignore[no-any-return]
    raise no_such_overload("string", value)


def to_bytes(*args: Any) -> bytes:
    value = _one_argument("bytes", args)
    t = type(value)
    if t is bytes:
        return value  # type: ignore[no-any-return]
    if t is str:
        try:
            return value.encode("utf-8")  # type: ignore[no-any-return]
        except UnicodeEncodeError:
            # Lone surrogates (JSON "\ud800"): Go's decoder would have made them U+FFFD.
            return "".join("\ufffd" if "\ud800" <= ch <= "\udfff" else ch for ch in value).encode("utf-8")
    raise no_such_overload("bytes", value)


def to_bool(*args: Any) -> bool:
    value = _one_argument("bool", args)
    t = type(value)
    if t is bool:
        return value  # type: ignore[no-any-return]
    if t is str:
        return parse_bool(value)
    raise no_such_overload("bool", value)


def dyn(*args: Any) -> Any:
    """``dyn(x)`` is x: only the type checker sees a difference."""
    return _one_argument("dyn", args)


# Plain run-time values never carry conversion hooks; skipping getattr for them is
# also what keeps a dict or list from being asked.
_PLAIN_TYPES: Final = frozenset((type(None), bool, int, UInt, float, str, bytes, list, tuple, dict))

FUNCTIONS: dict[str, Callable[..., Any]] = {
    "int": to_int,
    "uint": to_uint,
    "double": to_double,
    "string": to_string,
    "bytes": to_bytes,
    "bool": to_bool,
    "dyn": dyn,
}

METHODS: dict[str, dict[type, Callable[..., Any]]] = {}

RESULT_TYPES: dict[str, str] = {
    "int": "int",
    "uint": "uint",
    "double": "double",
    "string": "string",
    "bytes": "bytes",
    "bool": "bool",
}
