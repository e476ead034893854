"""Kubernetes' CEL quantity library (k8s.io/apiserver/pkg/cel/library/quantity.go) over a
port of resource.Quantity (k8s.io/apimachinery/pkg/api/resource).

A Kubernetes Quantity is kept in one of two forms: an int64 mantissa with a base-10
scale (the fast path) or an arbitrary-precision inf.Dec. Which form a value is in
leaks into CEL: ``asInteger``/``isInteger`` only succeed on the int64 form with a
non-negative scale, so ``quantity('1000m').isInteger()`` is false in Kubernetes. To
give the same answers this module tracks the form too; arithmetic is exact Python
integers either way.
"""

from __future__ import annotations

from functools import lru_cache

import math
from typing import Any, Final

from engine.cel.errors import EvalError, no_such_overload
from engine.cel.types.values import INT64_MAX, INT64_MIN, register_type

DECIMAL_EXPONENT: Final = "DecimalExponent"
BINARY_SI: Final = "BinarySI"
DECIMAL_SI: Final = "DecimalSI"

_SPLIT_RE: Final = "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"
ERR_FORMAT: Final = f"quantities must match the regular expression '{_SPLIT_RE}'"
ERR_NUMERIC: Final = "unable to parse numeric part of quantity"
ERR_SUFFIX: Final = "unable to parse quantity's suffix"

_DECIMAL_SUFFIXES: Final = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_DECIMAL_NAMES: Final = {exp: name for name, exp in _DECIMAL_SUFFIXES.items()}
_BINARY_SUFFIXES: Final = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_BINARY_NAMES: Final = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]
_SUFFIX_CHARS: Final = frozenset("eEinumkKMGTP")
# Aligning two scales further apart than this would build numbers of that many digits;
# Kubernetes would try, we refuse rather than stall the scheduler on a hostile policy.
_MAX_ALIGN: Final = 1000


def _pow10(n: int) -> int:
    """10**n for n >= 0, typed as int (``int ** int`` is Any to mypy)."""
    return int(10**n)


def _fits(v: int) -> bool:
    return INT64_MIN <= v <= INT64_MAX


class Quantity:
    """A resource.Quantity: the value is ``mantissa * 10**exponent``; ``is_dec`` says
    whether Kubernetes would hold it as an inf.Dec rather than an int64Amount."""

    __slots__ = ("mantissa", "exponent", "is_dec", "format")

    def __init__(self, mantissa: int, exponent: int, is_dec: bool, fmt: str) -> None:
        self.mantissa = mantissa
        self.exponent = exponent
        self.is_dec = is_dec
        self.format = fmt

    def sign(self) -> int:
        return (self.mantissa > 0) - (self.mantissa < 0)

    def compare(self, other: Quantity) -> int:
        s1, s2 = self.sign(), other.sign()
        if s1 != s2 or s1 == 0:
            return (s1 > s2) - (s1 < s2)
        # Magnitudes first, so 1e2000000000 against 1 never builds a huge power of ten.
        # floor(bits * log10(2)) is the digit count or one less, so a gap of 2 decides.
        m1, m2 = self.mantissa, other.mantissa
        top1 = abs(m1).bit_length() * 30103 // 100000 + self.exponent
        top2 = abs(m2).bit_length() * 30103 // 100000 + other.exponent
        if abs(top1 - top2) >= 2:
            return s1 if top1 > top2 else -s1
        e = min(self.exponent, other.exponent)
        a, b = m1 * _pow10(self.exponent - e), m2 * _pow10(other.exponent - e)
        return (a > b) - (a < b)

    def _normal(self) -> tuple[int, int]:
        m, e = self.mantissa, self.exponent
        if m == 0:
            return 0, 0
        while m % 10 == 0:
            m, e = m // 10, e + 1
        return m, e

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self.compare(other) == 0

    def __hash__(self) -> int:
        return hash(("Quantity", self._normal()))

    def __repr__(self) -> str:
        return f"quantity({self.cel_string()!r})"

    def as_int64(self) -> int | None:
        """resource.Quantity.AsInt64: only the int64 form at a scale >= 0 converts."""
        if self.is_dec or self.exponent < 0:
            return None
        if self.exponent == 0 or self.mantissa == 0:
            return self.mantissa
        if self.exponent > 18:
            return None
        v = self.mantissa * _pow10(self.exponent)
        return v if _fits(v) else None

    def as_approximate_float(self) -> float:
        """resource.Quantity.AsApproximateFloat64: ±Inf past the double range, as big.Float.Float64."""
        try:
            base = float(self.mantissa)
        except OverflowError:
            base = math.inf if self.mantissa > 0 else -math.inf
        if self.exponent == 0:
            return base
        return base * _go_pow10(self.exponent)

    def cel_string(self) -> str:
        """resource.Quantity.String(): the canonical form, e.g. 1536Mi, 1500m, 12e6."""
        if self.mantissa == 0:
            return "0"
        fmt = self.format
        rounded = 0
        if fmt == BINARY_SI:
            if self.compare(_ONE_KI_NEG) > 0 and self.compare(_ONE_KI) < 0 or self.exponent > 100:
                fmt = DECIMAL_SI
            else:
                rounded, exact = _round_to_integer(self.mantissa, self.exponent)
                if not exact:
                    fmt = DECIMAL_SI
        if fmt == BINARY_SI:
            power = 0
            while power < 6 and rounded % 1024 == 0:
                rounded, power = rounded // 1024, power + 1
            return f"{rounded}{_BINARY_NAMES[power]}"
        m, e = self._normal()
        if e % 3 == 1:
            m, e = m * 10, e - 1
        elif e % 3 == 2:
            m, e = m * 100, e - 2
        if fmt == DECIMAL_SI and e in _DECIMAL_NAMES:
            return f"{m}{_DECIMAL_NAMES[e]}"
        # DecimalExponent, or (our choice) a DecimalSI value past the 'E' suffix, where
        # Kubernetes would print the mantissa with no suffix at all.
        return f"{m}e{e}" if e else str(m)


_ONE_KI: Final = Quantity(1024, 0, False, DECIMAL_SI)
_ONE_KI_NEG: Final = Quantity(-1024, 0, False, DECIMAL_SI)

_POW10_SMALL: Final = [float(f"1e{i}") for i in range(32)]
_POW10_POS32: Final = [float(f"1e{32 * i}") for i in range(10)]
_POW10_NEG32: Final = [float(f"1e-{32 * i}") for i in range(11)]


def _go_pow10(n: int) -> float:
    """Go's math.Pow10, table for table, so float results round as they do in Kubernetes."""
    if 0 <= n <= 308:
        return _POW10_POS32[n // 32] * _POW10_SMALL[n % 32]
    if -323 <= n < 0:
        return _POW10_NEG32[-n // 32] / _POW10_SMALL[-n % 32]
    return math.inf if n > 0 else 0.0


def _round_to_integer(m: int, e: int) -> tuple[int, bool]:
    """The value as an integer rounded away from zero, and whether that was exact."""
    if e >= 0:
        return m * _pow10(e), True
    q, r = divmod(abs(m), _pow10(-e))
    q += r != 0
    return (q if m > 0 else -q), r == 0


def _scan(s: str) -> tuple[bool, str, str, str, str]:
    """parseQuantityString: (positive, value, num, denom, suffix), or ERR_FORMAT."""
    positive, pos, end = True, 0, len(s)
    if end and s[0] in "+-":
        positive, pos = s[0] == "+", 1
    while pos < end and s[pos] == "0":
        pos += 1
    if pos >= end:
        return positive, "0", "0", "", ""
    start = pos
    while pos < end and s[pos] in "0123456789":
        pos += 1
    if pos >= end:
        return positive, s, s[start:], "", ""
    num, denom = s[start:pos] or "0", ""
    if s[pos] == ".":
        pos += 1
        dstart = pos
        while pos < end and s[pos] in "0123456789":
            pos += 1
        denom = s[dstart:pos]
        if pos >= end:
            return positive, s, num, denom, ""
    value, suffix_start = s[:pos], pos
    while pos < end and s[pos] in _SUFFIX_CHARS:
        pos += 1
    if pos < end and s[pos] in "+-":
        pos += 1
    while pos < end and s[pos] in "0123456789":
        pos += 1
    if pos < end:
        raise EvalError(ERR_FORMAT)
    return positive, value, num, denom, s[suffix_start:]


def _interpret(suffix: str) -> tuple[int, int, str] | None:
    if suffix in _DECIMAL_SUFFIXES:
        return 10, _DECIMAL_SUFFIXES[suffix], DECIMAL_SI
    if suffix in _BINARY_SUFFIXES:
        return 2, _BINARY_SUFFIXES[suffix], BINARY_SI
    if len(suffix) > 1 and suffix[0] in "eE":
        digits = suffix[1:]
        unsigned = digits.lstrip("+-")
        if not unsigned.isdigit() or len(digits) - len(unsigned) > 1 or len(unsigned.lstrip("0")) > 19:
            return None
        parsed = int(digits)
        if not _fits(parsed):
            return None
        exponent = (parsed + 2**31) % 2**32 - 2**31  # Go's int32(parsed) wraps
        return 10, exponent, DECIMAL_EXPONENT
    return None


@lru_cache(maxsize=4096)
def parse_quantity(s: str) -> Quantity:
    """resource.ParseQuantity; raises EvalError with Kubernetes' message.

    Cached: quantities are immutable, and a policy parses the same allocatable
    and request strings ("64", "256Gi") on thousands of nodes."""
    if not s:
        raise EvalError(ERR_FORMAT)
    if s == "0":
        return Quantity(0, 0, False, DECIMAL_SI)
    positive, value, num, denom, suffix = _scan(s)
    found = _interpret(suffix)
    if found is None:
        raise EvalError(ERR_SUFFIX)
    base, exponent, fmt = found
    scale, mantissa = 0, 1
    if fmt != BINARY_SI:
        scale, precision = exponent, 18 - (len(num) + len(denom))
    elif not denom:
        mantissa = 1 << exponent
        precision = 15 - len(num) - exponent * 3 // 10 - 1
    else:
        precision = -1
    if precision >= 0:
        scale -= len(denom)
        if scale >= -9:
            result = int(num + denom) * mantissa
            if _fits(result):
                return Quantity(result if positive else -result, scale, False, fmt)
    return _parse_dec(value, base, exponent, fmt)


def _parse_dec(value: str, base: int, exponent: int, fmt: str) -> Quantity:
    # inf.Dec.SetString: an optional sign, digits with at most one '.', at least one digit.
    sign = -1 if value.startswith("-") else 1
    body = value.lstrip("+-")
    whole, _, frac = body.partition(".")
    if not (whole + frac).isdigit():
        raise EvalError(ERR_NUMERIC)
    if len(whole + frac) > _MAX_ALIGN:
        raise EvalError(f"{ERR_NUMERIC}: more than {_MAX_ALIGN} digits")
    unscaled, exp = int(whole + frac), -len(frac)
    if base == 10:
        exp += exponent
    else:
        unscaled <<= exponent
    # Round away from zero to nano units: asking for a sliver of a resource gets some.
    if unscaled and exp < -9:
        q, r = divmod(unscaled, _pow10(-9 - exp))
        unscaled, exp = q + (r != 0), -9
    elif unscaled and -9 - exp > -_MAX_ALIGN:
        unscaled, exp = unscaled * _pow10(exp + 9), -9
    if fmt == BINARY_SI and Quantity(unscaled, exp, True, fmt).compare(_MAX_INT64) > 0:
        unscaled, exp = INT64_MAX, 0
    if fmt == BINARY_SI and 0 < unscaled and Quantity(unscaled, exp, True, fmt).compare(_ONE) < 0:
        fmt = DECIMAL_SI
    return Quantity(sign * unscaled, exp, True, fmt)


_ONE: Final = Quantity(1, 0, False, DECIMAL_SI)
_MAX_INT64: Final = Quantity(INT64_MAX, 0, False, DECIMAL_SI)


def _int_add(a: Quantity, b: Quantity) -> Quantity | None:
    """int64Amount.Add: the sum in int64 form, or None where Kubernetes falls back to inf.Dec."""
    if b.mantissa == 0:
        return Quantity(a.mantissa, a.exponent, False, a.format)
    if a.mantissa == 0:
        return Quantity(b.mantissa, b.exponent, False, a.format)
    diff = abs(a.exponent - b.exponent)
    if diff > 18:
        return None
    hi, lo = (a, b) if a.exponent >= b.exponent else (b, a)
    shifted = hi.mantissa * _pow10(diff)
    total = shifted + lo.mantissa
    if not _fits(shifted) or not _fits(total):
        return None
    return Quantity(total, lo.exponent, False, a.format)


def _add(q: Quantity, y: Quantity) -> Quantity:
    """resource.Quantity.Add on a copy of q; a zero q takes y's format."""
    fmt = y.format if q.mantissa == 0 else q.format
    if not q.is_dec and not y.is_dec and _fits(y.mantissa):
        result = _int_add(Quantity(q.mantissa, q.exponent, False, fmt), y)
        if result is not None:
            return result
    e = min(q.exponent, y.exponent)
    if max(q.exponent, y.exponent) - e > _MAX_ALIGN and q.mantissa and y.mantissa:
        raise EvalError("quantity arithmetic out of range: the operands' scales are too far apart")
    total = q.mantissa * _pow10(q.exponent - e) + y.mantissa * _pow10(y.exponent - e)
    return Quantity(total, e, True, fmt)


def scaled_value(q: Quantity, exponent: int) -> int:
    """resource.Quantity.ScaledValue(exponent): the value in units of 10**exponent, rounded away
    from zero (``Value()`` is exponent 0, ``MilliValue()`` -3), as an exact integer."""
    if q.exponent >= exponent:
        if q.exponent - exponent > _MAX_ALIGN:
            raise EvalError("quantity out of range: too large to count in whole units")
        return q.mantissa * _pow10(q.exponent - exponent)
    return _round_to_integer(q.mantissa, q.exponent - exponent)[0]


def round_up(q: Quantity, exponent: int) -> Quantity:
    """resource.Quantity.RoundUp(exponent): q unchanged when it has no digits below 10**exponent,
    else rounded away from zero to that scale (the API server stores requests and limits so,
    at exponent -3: ``1n`` becomes ``1m``)."""
    if q.exponent >= exponent or q.mantissa == 0:
        return q
    return Quantity(scaled_value(q, exponent), exponent, q.is_dec, q.format)


def _negated(y: Quantity) -> Quantity:
    return Quantity(-y.mantissa, y.exponent, y.is_dec, y.format)


def _as_quantity(name: str, q: Any, other: Any) -> Quantity:
    if type(other) is Quantity:
        return other
    if type(other) is int:
        return Quantity(other, 0, False, DECIMAL_EXPONENT)  # resource.NewQuantity(i, DecimalExponent)
    raise no_such_overload(name, q, other)


def _other(name: str, q: Quantity, other: Any) -> Quantity:
    if type(other) is not Quantity:
        raise no_such_overload(name, q, other)
    return other


def quantity(s: Any) -> Quantity:
    if type(s) is not str:
        raise no_such_overload("quantity", s)
    return parse_quantity(s)


def is_quantity(s: Any) -> bool:
    if type(s) is not str:
        raise no_such_overload("isQuantity", s)
    try:
        parse_quantity(s)
    except EvalError:
        return False
    return True


def as_integer(q: Quantity) -> int:
    v = q.as_int64()
    if v is None:
        raise EvalError("cannot convert value to integer")
    return v


register_type(Quantity, "kubernetes.Quantity")

def _sign(q: Any) -> int:
    if type(q) is not Quantity:
        raise no_such_overload("sign", q)
    return q.sign()


# Kubernetes declares sign as a global overload while documenting q.sign(); both work here.
FUNCTIONS: dict[str, Any] = {"quantity": quantity, "isQuantity": is_quantity, "sign": _sign}

METHODS: dict[str, dict[type, Any]] = {
    "sign": {Quantity: lambda q: q.sign()},
    "isGreaterThan": {Quantity: lambda q, o: q.compare(_other("isGreaterThan", q, o)) == 1},
    "isLessThan": {Quantity: lambda q, o: q.compare(_other("isLessThan", q, o)) == -1},
    "compareTo": {Quantity: lambda q, o: q.compare(_other("compareTo", q, o))},
    "asApproximateFloat": {Quantity: lambda q: q.as_approximate_float()},
    "asInteger": {Quantity: as_integer},
    "isInteger": {Quantity: lambda q: q.as_int64() is not None},
    "add": {Quantity: lambda q, o: _add(q, _as_quantity("add", q, o))},
    "sub": {Quantity: lambda q, o: _add(q, _negated(_as_quantity("sub", q, o)))},
}

RESULT_TYPES: dict[str, str] = {
    "quantity": "kubernetes.Quantity",
    "isQuantity": "bool",
    "sign": "int",
    "isGreaterThan": "bool",
    "isLessThan": "bool",
    "compareTo": "int",
    "asApproximateFloat": "double",
    "asInteger": "int",
    "isInteger": "bool",
    "add": "kubernetes.Quantity",
    "sub": "kubernetes.Quantity",
}
