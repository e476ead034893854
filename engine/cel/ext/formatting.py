"""``<string>.format(<list>)`` of CEL's strings extension as Kubernetes runs it, and
Go's renderings of doubles that it and ``string(double)`` need.

Kubernetes 1.32 to 1.37 enable cel-go's strings extension at version 2, whose
formatter is cel-go's ``ext/formatting.go`` (the one kpe follows; cel-go's newer
``formatting_v2.go``, version 4, is what google/cel-spec's conformance suite
describes, and kpe does not follow it). In version 2:

- ``%s`` prints a value as ``string()`` converts it (a double as Go's ``%g``:
  ``1e+21``, ``+Inf``); inside a list or a map every item is written as a CEL
  literal: strings and bytes quoted as Go's ``%q`` (``"a"``, ``b"a"``), doubles as
  ``%.6f`` (``2.500000``; NaN and the infinities quoted: ``"NaN"``, ``"+Inf"``),
  ``timestamp("...")``, ``duration("...")``, map entries as ``key:value`` sorted by
  the key's text;
- ``%d``, ``%b``, ``%o`` take integers only (``%b`` also bools), ``%x``/``%X``
  integers, strings and bytes;
- ``%f`` and ``%e`` take doubles only, and the strings ``"NaN"``, ``"Infinity"`` and
  ``"-Infinity"``; they print with golang.org/x/text's en-US printer: ``%f`` groups
  the integer digits by thousands (``1,234,567.500000``); ``%e`` is
  ``"%<precision>e"``, so the precision is a width (padding on the left) and the
  mantissa always has six decimals, written ``3.140000 × 10⁰⁰`` (narrow no-break
  spaces around ``×``, a superscript exponent of at least two digits); NaN prints
  ``NaN`` and the infinities ``∞`` and ``-∞``.

Error messages are cel-go's. What cel-go finds wrong with a literal format string
and a list literal of arguments is found when the expression is checked
(``engine.cel.checker.types``, through ``check_literal_call``), as Kubernetes does.
One difference: the precision is capped at 100 (cel-go caps it only from version 5),
so that ``"%.999999999f"`` cannot fill the memory.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from engine.cel.errors import EvalError, no_such_overload
from engine.cel.limits import check_string
from engine.cel.types.values import CelType, UInt, plain_key, type_name

_DEFAULT_PRECISION: Final = 6
_MAX_PRECISION: Final = 100
_INT64_MAX: Final = 2**63 - 1

# The strings %f and %e take besides doubles (cel-go converts them to a double).
_NON_FINITE_NAMES: Final = frozenset(("NaN", "Infinity", "-Infinity"))

# cel-go's messages for an argument a clause does not take, by verb ({} is the type's name).
CLAUSE_MESSAGES: Final = {
    "s": "string clause can only be used on strings, bools, bytes, ints, doubles, maps, lists, types, "
    "durations, and timestamps, was given {}",
    "d": "decimal clause can only be used on integers, was given {}",
    "f": "fixed-point clause can only be used on doubles, was given {}",
    "e": "scientific clause can only be used on doubles, was given {}",
    "b": "only integers and bools can be formatted as binary, was given {}",
    "x": "only integers, byte buffers, and strings can be formatted as hex, was given {}",
    "o": "octal clause can only be used on integers, was given {}",
}
CLAUSE_MESSAGES["X"] = CLAUSE_MESSAGES["x"]


# -- Go's renderings ----------------------------------------------------------


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


_GO_ESCAPES: Final = {
    "\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v", "\\": "\\\\", '"': '\\"',
}


def go_quote(text: str) -> str:
    """Go's ``strconv.Quote`` (``%q``): printable characters as they are (Go's
    unicode.IsPrint and Python's isprintable() take the same categories), the C
    escapes, ``\\xNN`` below space, ``\\uNNNN``/``\\UNNNNNNNN`` above."""
    if text.isprintable() and '"' not in text and "\\" not in text:
        return f'"{text}"'
    out = ['"']
    for ch in text:
        escaped = _GO_ESCAPES.get(ch)
        if escaped is not None:
            out.append(escaped)
        elif ch.isprintable():
            out.append(ch)
        else:
            code = ord(ch)
            if code < 0x20 or code == 0x7F:
                out.append(f"\\x{code:02x}")
            elif 0xD800 <= code <= 0xDFFF:
                out.append("\ufffd")  # a lone surrogate: Go's decoder would have made it U+FFFD
            elif code < 0x10000:
                out.append(f"\\u{code:04x}")
            else:
                out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


# -- the clauses ------------------------------------------------------------------


class _ClauseError(Exception):
    """A value the clause does not take; becomes 'error during formatting: ...'."""


def _wrong(verb: str, value: Any) -> _ClauseError:
    return _ClauseError(CLAUSE_MESSAGES[verb].format(type_name(value)))


def _bytes_text(value: bytes) -> str:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        # cel-go's FormatString, handed the conversion's error value instead of a string.
        raise _ClauseError('could not convert argument "invalid UTF-8 in bytes, cannot convert to string" to string') from None


def _string(value: Any) -> str:
    """%s: the value as ``string()`` converts it; lists and maps item by item as literals."""
    t = type(value)
    if t is str:
        return value  # type: ignore[no-any-return]
    if t is int or t is UInt:
        return str(int(value))
    if t is float:
        return go_format_g(value)
    if t is bool:
        return "true" if value else "false"
    if value is None:
        return "null"
    if t is bytes:
        return _bytes_text(value)
    if t is list or t is tuple:
        return _list(value)
    if t is dict:
        return _map(value)
    if t is CelType:
        return value.name  # type: ignore[no-any-return]
    if type_name(value) in _TIME_TYPE_NAMES:
        return value.cel_string()  # type: ignore[no-any-return]
    raise _wrong("s", value)


_TIME_TYPE_NAMES: Final = {"google.protobuf.Timestamp": "timestamp", "google.protobuf.Duration": "duration"}


def _literal(value: Any) -> str:
    """An item of a list or map under %s, written as cel-go's clauseForType and quoteForCEL do."""
    t = type(value)
    if t is int or t is UInt:
        return str(int(value))
    if t is str:
        return go_quote(value)
    if t is float:
        if math.isnan(value):
            return '"NaN"'
        if math.isinf(value):
            return '"+Inf"' if value > 0 else '"-Inf"'
        return f"{value:.6f}"  # Go's %.6f: no grouping, the sign of zero kept
    if t is bool:
        return "true" if value else "false"
    if value is None:
        return "null"
    if t is bytes:
        return "b" + go_quote(_bytes_text(value))
    if t is list or t is tuple:
        return _list(value)
    if t is dict:
        return _map(value)
    if t is CelType:
        return value.name  # type: ignore[no-any-return]
    name = type_name(value)
    if name in _TIME_TYPE_NAMES:
        return f"{_TIME_TYPE_NAMES[name]}({go_quote(value.cel_string())})"
    raise _ClauseError(f"no formatting function for {name}")


def _list(value: Sequence[Any]) -> str:
    return "[" + ", ".join(_literal(v) for v in value) + "]"


def _map(value: dict[Any, Any]) -> str:
    entries = []
    for k, v in value.items():
        key = plain_key(k)
        t = type(key)
        if t is str:
            text = go_quote(key)
        elif t is bool:
            text = "true" if key else "false"
        elif t is int or t is UInt:
            text = str(int(key))
        else:
            raise _ClauseError(f"no formatting function for map key of type {type_name(key)}")
        entries.append((text, _literal(v)))
    entries.sort(key=lambda e: e[0])  # stable, as cel-go's sort.SliceStable
    return "{" + ", ".join(f"{k}:{v}" for k, v in entries) + "}"


def _decimal(value: Any) -> str:
    t = type(value)
    if t is int or t is UInt:
        return str(int(value))
    raise _wrong("d", value)


def _double(value: Any, verb: str) -> float:
    t = type(value)
    if t is float:
        return value  # type: ignore[no-any-return]
    if t is str and value in _NON_FINITE_NAMES:
        return float(value.lower().replace("infinity", "inf"))
    raise _wrong(verb, value)


def _printer_special(x: float) -> str | None:
    """How golang.org/x/text's printer writes NaN and the infinities."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "∞" if x > 0 else "-∞"
    return None


def _fixed_point(value: Any, precision: int) -> str:
    x = _double(value, "f")
    # Grouped by thousands as Kubernetes' en-US printer does; a zero prints without its sign.
    return _printer_special(x) or f"{abs(x) if x == 0 else x:,.{precision}f}"


_SUPERSCRIPT: Final = str.maketrans("0123456789-", "⁰¹²³⁴⁵⁶⁷⁸⁹⁻")


def _scientific(value: Any, width: int) -> str:
    """cel-go formats with ``"%<precision>e"``: a width, so six decimals always and the
    text padded on the left to ``width`` characters."""
    x = _double(value, "e")
    special = _printer_special(x)
    if special is not None:
        return special.rjust(width)
    mantissa, _, exponent = f"{abs(x) if x == 0 else x:.6e}".partition("e")
    power = int(exponent)
    text = f"{mantissa}\u202f\u00d7\u202f10" + f"{'-' if power < 0 else ''}{abs(power):02d}".translate(_SUPERSCRIPT)
    return text.rjust(width)


def _binary(value: Any) -> str:
    t = type(value)
    if t is bool:
        return "1" if value else "0"
    if t is int or t is UInt:
        return format(int(value), "b")
    raise _wrong("b", value)


def _hex(value: Any, upper: bool) -> str:
    t = type(value)
    if t is int or t is UInt:
        text = format(int(value), "x")
    elif t is str:
        text = value.encode("utf-8", "surrogatepass").hex()
    elif t is bytes:
        text = value.hex()
    else:
        raise _wrong("x", value)
    return text.upper() if upper else text


def _octal(value: Any) -> str:
    t = type(value)
    if t is int or t is UInt:
        return format(int(value), "o")
    raise _wrong("o", value)


def _render(value: Any, clause: Clause) -> str:
    verb = clause.verb
    if verb == "s":
        return _string(value)
    if verb == "d":
        return _decimal(value)
    if verb == "f":
        return _fixed_point(value, _DEFAULT_PRECISION if clause.precision is None else clause.precision)
    if verb == "e":
        return _scientific(value, _DEFAULT_PRECISION if clause.precision is None else clause.precision)
    if verb == "b":
        return _binary(value)
    if verb == "o":
        return _octal(value)
    return _hex(value, verb == "X")


# -- the format string ------------------------------------------------------------


@dataclass(frozen=True)
class Clause:
    verb: str  # one of s d f e b x X o
    precision: int | None  # None: none given


class FormatProblem(Exception):
    """What is wrong with a format string or an argument; ``argument`` is the index of
    the argument a clause refused, when it was one."""

    def __init__(self, message: str, argument: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.argument = argument


def _parse_error(message: str) -> FormatProblem:
    return FormatProblem(f"could not parse formatting clause: {message}")


def _parse_clause(fmt: str, i: int) -> tuple[Clause, int]:
    """The clause whose text starts at fmt[i] (after its '%') and the index after it."""
    precision: int | None = None
    if fmt[i] == ".":
        start = i = i + 1
        while True:
            if i >= len(fmt):
                raise _parse_error("error while parsing precision: could not find end of precision specifier")
            if not ("0" <= fmt[i] <= "9"):
                break
            i += 1
        text = fmt[start:i]
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
    verb = fmt[i]
    if verb not in CLAUSE_MESSAGES:
        # cel-go reads the verb as one byte: a multi-byte character shows as its first byte.
        shown = chr(verb.encode("utf-8", "surrogatepass")[0])
        raise _parse_error(f'unrecognized formatting clause "{shown}"')
    return Clause(verb, precision), i + 1


def interpolate(fmt: str, count: int, render: Callable[[int, Clause], str], *, checking: bool = False) -> tuple[str, int]:
    """Walk ``fmt`` as cel-go's parseFormatString: ``render(index, clause)`` gives the text
    of each clause's argument (of ``count``). Returns the text and how many arguments the
    clauses used. ``checking``: cel-go's static validator, whose argument lookup never
    fails, so a '%' at the end is reported before a missing argument."""
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
        if not checking and arg_index >= count:
            raise FormatProblem(f"index {arg_index} out of range")
        if i >= n:
            raise FormatProblem("unexpected end of string")
        if arg_index >= count:
            raise FormatProblem(f"index {arg_index} out of range")
        clause, i = _parse_clause(fmt, i)
        try:
            out.append(render(arg_index, clause))
        except _ClauseError as exc:
            raise FormatProblem(f"error during formatting: {exc}", arg_index) from None
        arg_index += 1
    return "".join(out), arg_index


def clause_error(message: str) -> Exception:
    """The exception a ``render`` passed to ``interpolate`` raises for an argument the
    clause refuses: reported as 'error during formatting: <message>'."""
    return _ClauseError(message)


def format_string(fmt: str, args: Sequence[Any]) -> str:
    """printf-style substitution of ``args`` into ``fmt`` (see the module doc)."""
    try:
        return interpolate(fmt, len(args), lambda index, clause: _render(args[index], clause))[0]
    except FormatProblem as exc:
        raise EvalError(exc.message) from None


def format_method(fmt: str, *args: Any) -> str:
    """``<string>.format(<list>)`` as a METHODS entry."""
    if len(args) != 1 or type(args[0]) not in (list, tuple):
        raise no_such_overload("format", fmt, *args)
    out = format_string(fmt, args[0])
    check_string("format", len(out))  # after: its pieces are each bounded, so the result is too
    return out
