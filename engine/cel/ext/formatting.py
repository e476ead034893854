"""``<string>.format(<list>)`` of CEL's strings extension, and Go's renderings of
doubles that it and ``string(double)`` need.

The formatting follows cel-go's ``ext/formatting_v2.go`` (strings extension
version 4, the behaviour google/cel-spec's ``doc/extensions/strings.md`` and the
conformance suite describe): ``%s`` prints values plainly (``[abc, 3.14]``,
``{key: value}``), ``%d``/``%f``/``%e`` also take doubles and print NaN and the
infinities as ``NaN``/``Infinity``/``-Infinity``. Error messages are cel-go's.

Except ``%f`` and ``%e`` of finite numbers, which print what Kubernetes prints:
Kubernetes (1.32 to 1.37) runs strings extension version 2, whose formatter
(cel-go ``ext/formatting.go``) renders them with golang.org/x/text's en-US
printer: ``%f`` groups the integer digits by thousands (``1,234,567.500000``),
and ``%e`` is ``fmt.Sprintf("%<precision>e")``, so the precision is taken as a
width (padding on the left) and the mantissa always has six decimals, written
``3.140000 × 10⁰⁰`` (narrow no-break spaces around ``×``, a superscript exponent
of at least two digits).
"""

from __future__ import annotations

import math
import re
from typing import Any, Final

from engine.cel.errors import EvalError, no_such_overload
from engine.cel.limits import check_string
from engine.cel.types.values import CelType, UInt, plain_key, type_name

_DEFAULT_PRECISION: Final = 6
_MAX_PRECISION: Final = 100  # cel-go's limit; also keeps "%.999999999f" from eating memory.
_INT64_MAX: Final = 2**63 - 1

# Library classes %s may print (through their cel_string()): cel-go's formatter
# knows timestamps and durations and rejects every other object type.
_TIME_TYPE_NAMES: Final = frozenset(
    ("google.protobuf.Timestamp", "google.protobuf.Duration", "timestamp", "duration")
)

_INVALID_UTF8_RUN: Final = re.compile("[\udc80-\udcff]+")


# -- Go's float renderings --------------------------------------------------


def _shortest_digits(x: float) -> tuple[str, int]:
    """The shortest decimal digits that read back as |x| (no leading or trailing
    zeros) and the decimal point position: |x| == 0.<digits> * 10**point. Zero
    has no digits. Python's repr and Go's strconv both produce the shortest
    round-tripping digits, so they agree digit for digit."""
    mantissa, _, exponent = repr(abs(x)).partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = whole + fraction
    point = len(whole) + (int(exponent) if exponent else 0)
    stripped = digits.lstrip("0")
    point -= len(digits) - len(stripped)
    digits = stripped.rstrip("0")
    return (digits, point) if digits else ("", 0)


def _fixed(digits: str, point: int, decimals: int) -> str:
    whole = (digits[:point] + "0" * (point - len(digits))) if point > 0 else "0"
    if decimals <= 0:
        return whole
    frac = "".join(digits[i] if 0 <= i < len(digits) else "0" for i in range(point, point + decimals))
    return f"{whole}.{frac}"


def go_format_f(x: float) -> str:
    """Go's ``strconv.FormatFloat(x, 'f', -1, 64)`` for finite x: shortest digits,
    never an exponent (``1e21`` -> ``1000000000000000000000``, ``3.0`` -> ``3``)."""
    digits, point = _shortest_digits(x)
    sign = "-" if math.copysign(1.0, x) < 0 else ""
    return sign + _fixed(digits, point, len(digits) - point)


def go_format_g(x: float) -> str:
    """Go's ``%g`` (``FormatFloat(x, 'g', -1, 64)``), which is how cel-go's
    ``string(double)`` renders: shortest digits, exponent form when the decimal
    exponent is below -4 or at least 6, a two-digit minimum exponent."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "+Inf" if x > 0 else "-Inf"
    digits, point = _shortest_digits(x)
    sign = "-" if math.copysign(1.0, x) < 0 else ""
    exp = point - 1
    if digits and (exp < -4 or exp >= 6):
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{sign}{mantissa}e{'-' if exp < 0 else '+'}{abs(exp):02d}"
    return sign + _fixed(digits, point, len(digits) - point)


def _non_finite(x: float) -> str | None:
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return None


# -- the clauses ------------------------------------------------------------


class _ClauseError(Exception):
    """A value the clause does not take; becomes 'error during formatting: ...'."""


def _format_value(value: Any) -> str:
    """%s: the value printed plainly, recursively for lists and maps."""
    t = type(value)
    if t is str:
        return value  # type: ignore[no-any-return]
    if t is bool:
        return "true" if value else "false"
    if t is int or t is UInt:
        return str(int(value))
    if t is float:
        return _non_finite(value) or go_format_f(value)
    if value is None:
        return "null"
    if t is bytes:
        # Invalid UTF-8 becomes U+FFFD, one per run of bad bytes (the cel-spec wording).
        return _INVALID_UTF8_RUN.sub("\ufffd", value.decode("utf-8", "surrogateescape"))
    if t is list or t is tuple:
        return "[" + ", ".join(_format_value(v) for v in value) + "]"
    if t is dict:
        # Stable, by key text only, as cel-go's sort.SliceStable: keys 1 and '1' print alike.
        entries = sorted(((_format_value(plain_key(k)), _format_value(v)) for k, v in value.items()), key=lambda e: e[0])
        return "{" + ", ".join(f"{k}: {v}" for k, v in entries) + "}"
    if t is CelType:
        return value.name  # type: ignore[no-any-return]
    if type_name(value) in _TIME_TYPE_NAMES and hasattr(value, "cel_string"):
        return value.cel_string()  # type: ignore[no-any-return]
    raise _ClauseError(
        "string clause can only be used on strings, bools, bytes, ints, doubles, maps, lists, types, "
        f"durations, and timestamps, was given {type_name(value)}"
    )


def _decimal(value: Any) -> str:
    t = type(value)
    if t is int or t is UInt:
        return str(int(value))
    if t is float:
        return _non_finite(value) or go_format_f(value)
    raise _ClauseError(f"decimal clause can only be used on ints, uints, and doubles, was given {type_name(value)}")


def _float_arg(value: Any, clause: str) -> float:
    t = type(value)
    if t is float:
        return value  # type: ignore[no-any-return]
    if t is int or t is UInt:
        return float(value)
    raise _ClauseError(f"{clause} clause can only be used on ints, uints, and doubles, was given {type_name(value)}")


def _fixed_point(value: Any, precision: int) -> str:
    x = _float_arg(value, "fixed-point")
    # Grouped by thousands as Kubernetes' en-US printer does; a zero prints without its sign.
    return _non_finite(x) or f"{abs(x) if x == 0 else x:,.{precision}f}"


_SUPERSCRIPT: Final = str.maketrans("0123456789-", "⁰¹²³⁴⁵⁶⁷⁸⁹⁻")


def _scientific(value: Any, precision: int) -> str:
    """Kubernetes' ``%e``: cel-go formats with ``"%<precision>e"``, a width, so six decimals
    always and the text padded on the left to ``precision`` characters."""
    x = _float_arg(value, "scientific")
    special = _non_finite(x)
    if special:
        return special
    mantissa, _, exponent = f"{abs(x) if x == 0 else x:.6e}".partition("e")
    power = int(exponent)
    text = f"{mantissa}\u202f\u00d7\u202f10" + f"{'-' if power < 0 else ''}{abs(power):02d}".translate(_SUPERSCRIPT)
    return text.rjust(precision)


def _binary(value: Any) -> str:
    t = type(value)
    if t is bool:
        return "1" if value else "0"
    if t is int or t is UInt:
        return format(int(value), "b")
    raise _ClauseError(f"only ints, uints, and bools can be formatted as binary, was given {type_name(value)}")


def _hex(value: Any, upper: bool) -> str:
    t = type(value)
    if t is int or t is UInt:
        text = format(int(value), "x")
    elif t is str:
        text = value.encode("utf-8", "surrogatepass").hex()
    elif t is bytes:
        text = value.hex()
    else:
        raise _ClauseError(
            f"only ints, uints, bytes, and strings can be formatted as hex, was given {type_name(value)}"
        )
    return text.upper() if upper else text


def _octal(value: Any) -> str:
    t = type(value)
    if t is int or t is UInt:
        return format(int(value), "o")
    raise _ClauseError(f"octal clause can only be used on ints and uints, was given {type_name(value)}")


def _parse_error(message: str) -> EvalError:
    return EvalError(f"could not parse formatting clause: {message}")


def _parse_precision(fmt: str, i: int) -> tuple[int, int]:
    """The precision of the clause whose text starts at fmt[i] and where its verb is."""
    if fmt[i] != ".":
        return _DEFAULT_PRECISION, i
    start = j = i + 1
    while True:
        if j >= len(fmt):
            raise _parse_error("error while parsing precision: could not find end of precision specifier")
        if not ("0" <= fmt[j] <= "9"):
            break
        j += 1
    text = fmt[start:j]
    if not text or int(text) > _INT64_MAX:
        reason = "invalid syntax" if not text else "value out of range"
        raise _parse_error(
            f'error while parsing precision: error while converting precision to integer: strconv.Atoi: parsing "{text}": {reason}'
        )
    precision = int(text)
    if precision > _MAX_PRECISION:
        raise _parse_error(
            f"error while parsing precision: precision {precision} exceeds maximum allowed precision {_MAX_PRECISION}"
        )
    return precision, j


def _format_clause(fmt: str, i: int, value: Any) -> tuple[str, int]:
    """Format ``value`` by the clause after the '%' at fmt[i-1]; the text and the index after the clause."""
    precision, j = _parse_precision(fmt, i)
    verb = fmt[j]
    try:
        if verb == "s":
            text = _format_value(value)
        elif verb == "d":
            text = _decimal(value)
        elif verb == "f":
            text = _fixed_point(value, precision)
        elif verb == "e":
            text = _scientific(value, precision)
        elif verb == "b":
            text = _binary(value)
        elif verb == "x" or verb == "X":
            text = _hex(value, verb == "X")
        elif verb == "o":
            text = _octal(value)
        else:
            raise _parse_error(f'unrecognized formatting clause "{verb}"')
    except _ClauseError as exc:
        raise EvalError(f"error during formatting: {exc}") from None
    return text, j + 1


def format_string(fmt: str, args: list[Any] | tuple[Any, ...]) -> str:
    """printf-style substitution of ``args`` into ``fmt`` (see the module doc)."""
    out: list[str] = []
    arg_index = 0
    i = 0
    n = len(fmt)
    while i < n:
        pct = fmt.find("%", i)
        if pct < 0:
            out.append(fmt[i:])
            break
        out.append(fmt[i:pct])
        i = pct + 1
        if i < n and fmt[i] == "%":
            out.append("%")
            i += 1
            continue
        # cel-go checks for a missing argument before a missing verb.
        if arg_index >= len(args):
            raise EvalError(f"index {arg_index} out of range")
        if i >= n:
            raise EvalError("unexpected end of string")
        text, i = _format_clause(fmt, i, args[arg_index])
        out.append(text)
        arg_index += 1
    return "".join(out)


def format_method(fmt: str, *args: Any) -> str:
    """``<string>.format(<list>)`` as a METHODS entry."""
    if len(args) != 1 or type(args[0]) not in (list, tuple):
        raise no_such_overload("format", fmt, *args)
    out = format_string(fmt, args[0])
    check_string("format", len(out))  # after: its pieces are each bounded, so the result is too
    return out
