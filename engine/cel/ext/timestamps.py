"""CEL's ``google.protobuf.Timestamp`` and ``google.protobuf.Duration``, as cel-go
(which Kubernetes embeds) has them, so policies behave as in the API server.

Timestamps span 0001-01-01T00:00:00Z..9999-12-31T23:59:59.999999999Z. Durations
are int64 nanoseconds (about ±292 years) like Go's ``time.Duration``: protobuf
allows ±10000 years, but cel-go and the conformance case
``timestamp_range/sub_time_duration_over`` reject a 9998-year difference.
``timestamp(string)`` takes strict RFC 3339 as cel-go does; ``duration(string)``
is Go's ``time.ParseDuration``. As in cel-go, a timestamp parsed with an offset
keeps it (Go's ``time.Time`` keeps its location): ``string()`` prints it and the
getters without a time zone read the local time there; ``timestamp(int)`` and
timestamps with ``Z`` or a zero offset are UTC. Equality, ordering and hashing
compare instants only. The zero timestamp (``optional.ofNonZeroValue``) is Go's
zero ``time.Time``, 0001-01-01T00:00:00Z, as cel-go's ``IsZeroValue``.
"""

from __future__ import annotations

import json
import math
import operator
import re
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from functools import lru_cache, partial
from typing import Any, Callable, Final
from zoneinfo import ZoneInfo

from engine.cel.errors import EvalError, IntOverflowError, no_such_overload
from engine.cel.types.values import INT64_MAX, INT64_MIN, register_type

NANOS: Final = 1_000_000_000
MIN_TIMESTAMP_SECONDS: Final = -62135596800  # 0001-01-01T00:00:00Z
MAX_TIMESTAMP_SECONDS: Final = 253402300799  # 9999-12-31T23:59:59Z
_MIN_TS_NANOS: Final = MIN_TIMESTAMP_SECONDS * NANOS
_MAX_TS_NANOS: Final = MAX_TIMESTAMP_SECONDS * NANOS + NANOS - 1
MIN_DURATION_NANOS: Final = INT64_MIN
MAX_DURATION_NANOS: Final = INT64_MAX

_TS_RANGE = "timestamp overflow: out of range 0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999999999Z"
_DUR_RANGE = "duration overflow: out of range -2562047h47m16.854775808s to 2562047h47m16.854775807s"


_quote: Callable[[str], str] = partial(json.dumps, ensure_ascii=False)


def _trunc_div(a: int, b: int) -> int:  # toward zero, as Go's integer division
    return abs(a) // b if a >= 0 else -(abs(a) // b)


def _compare(op: Callable[[int, int], bool]) -> Callable[[Any, object], bool]:
    # Another type gives NotImplemented, which the operators make CEL's no-such-overload error.
    def method(self: Any, other: object) -> bool:
        return op(self._key(), other._key()) if type(other) is type(self) else NotImplemented  # type: ignore[attr-defined]

    return method


class _TimeValue:
    """Immutability, ordering and hashing for both types; ``_key()`` is the value in nanoseconds."""

    __slots__ = ()
    _key: Callable[[], int]
    cel_string: Callable[[], str]

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    __delattr__ = __setattr__  # type: ignore[assignment]
    __eq__ = _compare(operator.eq)
    __lt__ = _compare(operator.lt)
    __le__ = _compare(operator.le)
    __gt__ = _compare(operator.gt)
    __ge__ = _compare(operator.ge)

    def __hash__(self) -> int:
        return hash((type(self), self._key()))

    def is_zero(self) -> bool:
        """The zero value for ``optional.ofNonZeroValue``: a zero length (cel-go's Duration.IsZeroValue)."""
        return self._key() == 0

    def __str__(self) -> str:
        return self.cel_string()

    def __repr__(self) -> str:
        return f"{type(self).__name__.lower()}({self.cel_string()!r})"


class Timestamp(_TimeValue):
    cel_ordered = True  # CEL defines <, <=, >, >= on timestamps
    """An instant with nanosecond precision: ``seconds`` since the Unix epoch and
    ``nanos`` in [0, 1e9). Construction normalises nanos and checks the range."""

    __slots__ = ("seconds", "nanos", "offset")
    seconds: int
    nanos: int
    offset: int  # seconds east of UTC the timestamp was written with (Go's location), 0 for UTC

    def __init__(self, seconds: int, nanos: int = 0, offset: int = 0) -> None:
        total = seconds * NANOS + nanos
        if not _MIN_TS_NANOS <= total <= _MAX_TS_NANOS:
            raise IntOverflowError(_TS_RANGE)
        s, n = divmod(total, NANOS)
        object.__setattr__(self, "seconds", s)
        object.__setattr__(self, "nanos", n)
        object.__setattr__(self, "offset", offset)

    def _key(self) -> int:
        return self.seconds * NANOS + self.nanos

    def is_zero(self) -> bool:
        """Go's zero ``time.Time`` (0001-01-01T00:00:00Z), cel-go's Timestamp.IsZeroValue."""
        return self._key() == _MIN_TS_NANOS

    def __reduce__(self) -> tuple[type, tuple[int, int, int]]:  # default pickling would hit __setattr__
        return (Timestamp, (self.seconds, self.nanos, self.offset))

    def __add__(self, other: object) -> Timestamp:
        if type(other) is Duration:
            return Timestamp(0, self._key() + other.nanos, self.offset)  # time.Add keeps the location
        return NotImplemented

    __radd__ = __add__

    def __sub__(self, other: object) -> Timestamp | Duration:
        if type(other) is Duration:
            return self + -other  # as cel-go, so subtracting the smallest duration overflows (keeps the offset)
        if type(other) is Timestamp:
            return Duration(self._key() - other._key())
        return NotImplemented

    def cel_int(self) -> int:
        """``int(timestamp)``: whole seconds since the epoch."""
        return self.seconds

    def cel_string(self) -> str:
        """``string(timestamp)``: Go's ``Format(time.RFC3339Nano)``, in the offset the timestamp
        was written with (``Z`` for UTC), fraction digits as needed."""
        days, sod = divmod(self.seconds + self.offset, 86400)
        y, m, d = _civil_from_days(days)
        frac = f".{self.nanos:09d}".rstrip("0") if self.nanos else ""
        zone = "Z"
        if self.offset:
            sign = "+" if self.offset > 0 else "-"
            minutes = abs(self.offset) // 60
            zone = f"{sign}{minutes // 60:02d}:{minutes % 60:02d}"
        return f"{y:04d}-{m:02d}-{d:02d}T{sod // 3600:02d}:{sod // 60 % 60:02d}:{sod % 60:02d}{frac}{zone}"


class Duration(_TimeValue):
    cel_ordered = True  # and on durations
    """A signed span of time in nanoseconds, within int64 like Go's ``time.Duration``."""

    __slots__ = ("nanos",)
    nanos: int

    def __init__(self, nanos: int) -> None:
        if not MIN_DURATION_NANOS <= nanos <= MAX_DURATION_NANOS:
            raise IntOverflowError(_DUR_RANGE)
        object.__setattr__(self, "nanos", nanos)

    def _key(self) -> int:
        return self.nanos

    def __reduce__(self) -> tuple[type, tuple[int]]:
        return (Duration, (self.nanos,))

    def __add__(self, other: object) -> Duration | Timestamp:
        if type(other) is Duration:
            return Duration(self.nanos + other.nanos)
        if type(other) is Timestamp:
            return Timestamp(0, other._key() + self.nanos, other.offset)
        return NotImplemented

    __radd__ = __add__

    def __sub__(self, other: object) -> Duration:
        if type(other) is Duration:
            return Duration(self.nanos - other.nanos)
        return NotImplemented

    def __neg__(self) -> Duration:
        return Duration(-self.nanos)

    def cel_int(self) -> int:
        """``int(duration)``: nanoseconds, as cel-go."""
        return self.nanos

    def cel_string(self) -> str:
        """``string(duration)`` as cel-go: ``FormatFloat(d.Seconds(), 'f', -1, 64) + "s"``. Going
        through a double drops nanoseconds past ~16 significant digits exactly where cel-go does."""
        whole = _trunc_div(self.nanos, NANOS)
        seconds = float(whole) + float(self.nanos - whole * NANOS) / 1e9
        return format(Decimal(repr(seconds)).normalize(), "f") + "s"


register_type(Timestamp, "google.protobuf.Timestamp")
register_type(Duration, "google.protobuf.Duration")


# Proleptic Gregorian day counts (H. Hinnant's algorithms): unlike datetime they
# work for year 0 and 10000, which a time zone can shift the range ends into.
def _days_from_civil(y: int, m: int, d: int) -> int:
    y -= m <= 2
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (m - 3 if m > 2 else m + 9) + 2) // 5 + d - 1
    return era * 146097 + yoe * 365 + yoe // 4 - yoe // 100 + doy - 719468


def _civil_from_days(z: int) -> tuple[int, int, int]:
    z += 719468
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    d = doy - (153 * mp + 2) // 5 + 1
    m = mp + 3 if mp < 10 else mp - 9
    return yoe + era * 400 + (m <= 2), m, d


# Years past four digits are let through so that they fail the range check, a clearer message.
_RFC3339 = re.compile(
    r"([0-9]{4,19})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]+))?(?:Z|([+-])([0-9]{2}):([0-9]{2}))"
)


@lru_cache(maxsize=1024)
def parse_timestamp(text: str) -> Timestamp:
    """``timestamp(string)``. Cached: policies parse the same object fields again and again."""
    match = _RFC3339.fullmatch(text)
    if match is None:
        raise EvalError(f"invalid RFC 3339 timestamp {_quote(text)}: want a form like 2006-01-02T15:04:05Z or 2006-01-02T15:04:05.999+07:00")
    y, mo, d, h, mi, s = (int(g) for g in match.group(1, 2, 3, 4, 5, 6))
    frac, sign, oh, om = match.group(7, 8, 9, 10)
    problem = (
        "month out of range" if not 1 <= mo <= 12
        else "day out of range" if not 1 <= d <= (_days_from_civil(y + mo // 12, mo % 12 + 1, 1) - _days_from_civil(y, mo, 1))
        else "hour out of range" if h > 23
        else "minute out of range" if mi > 59
        else "second out of range" if s > 59
        else "time zone offset out of range" if sign and (int(oh) > 23 or int(om) > 59)
        else None
    )
    if problem:
        raise EvalError(f"invalid RFC 3339 timestamp {_quote(text)}: {problem}")
    offset = 0 if sign is None else (1 if sign == "+" else -1) * (int(oh) * 3600 + int(om) * 60)
    seconds = _days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + s - offset
    nanos = int(frac[:9].ljust(9, "0")) if frac else 0  # Go truncates digits past nanoseconds
    if not MIN_TIMESTAMP_SECONDS <= seconds <= MAX_TIMESTAMP_SECONDS:
        raise IntOverflowError(f"{_TS_RANGE}: {_quote(text)}")
    return Timestamp(seconds, nanos, offset)


_UNITS: Final = {"ns": 1, "us": 1000, "\u00b5s": 1000, "\u03bcs": 1000, "ms": 10**6, "s": NANOS, "m": 60 * NANOS, "h": 3600 * NANOS}
# One component of a Go duration: digits, optional fraction, then the unit (any run of non-digits).
_DURATION_PART = re.compile(r"([0-9]*)(?:\.([0-9]*))?([^0-9.]*)")


@lru_cache(maxsize=1024)
def parse_duration(text: str) -> Duration:
    """``duration(string)``: Go's ``time.ParseDuration``, step for step, including
    its float64 arithmetic for fractions, so results agree to the nanosecond."""

    def fail(why: str = "") -> EvalError:
        return EvalError(f"invalid duration {_quote(text)}{': ' + why if why else ''}")

    neg = text[:1] == "-"
    s = text[1:] if text[:1] in ("-", "+") else text
    if s == "0":
        return Duration(0)
    if not s:
        raise fail()
    pos, total = 0, 0
    while pos < len(s):
        match = _DURATION_PART.match(s, pos)  # always matches: every part is optional
        if match is None:
            raise fail()
        whole, digits, unit_name = match.group(1), match.group(2) or "", match.group(3)
        if not whole and not digits:
            raise fail()
        if not unit_name:
            raise fail("missing unit (ns, us, ms, s, m or h)")
        unit = _UNITS.get(unit_name)
        if unit is None:
            raise fail(f"unknown unit {_quote(unit_name)}")
        whole = whole.lstrip("0")
        if len(whole) > 19:  # more than 2**63 whatever the unit; also keeps int() off huge strings
            raise fail("out of range")
        value = int(whole or "0") * unit
        # Go keeps the longest prefix of the fraction that fits in 2**63 (leading zeros
        # included) and divides by a float64 power of ten built by repeated * 10.
        lead = len(digits) - len(digits.lstrip("0"))
        significant = digits[lead : lead + 19]
        while significant and int(significant) > 1 << 63:
            significant = significant[:-1]
        frac, scale = int(significant or "0"), 1.0
        for _ in range(lead + len(significant)):
            scale *= 10
            if scale == math.inf:
                break
        if frac:
            value += int(float(frac) * (float(unit) / scale))
        total += value
        if total > 1 << 63:
            raise fail("out of range")
        pos = match.end()
    if not neg and total > INT64_MAX:
        raise fail("out of range")
    return Duration(-total if neg else total)


_EPOCH: Final = datetime(1970, 1, 1, tzinfo=timezone.utc)
_OFFSET = re.compile(r"([+-]?[0-9]{1,18}):([+-]?[0-9]{1,18})")  # Go Atoi syntax; the bound keeps int() small


@lru_cache(maxsize=256)
def _zone(tz: str) -> int | ZoneInfo:
    """A time zone argument as cel-go reads it: with a colon, a fixed offset ``[+-]hh:mm``
    (the hours' sign applies to the minutes), in seconds; otherwise an IANA zone name."""
    if tz in ("", "UTC"):
        return 0
    if ":" in tz:
        match = _OFFSET.fullmatch(tz)
        if match is None:
            raise EvalError(f"invalid time zone {_quote(tz)}: want an IANA name like America/Los_Angeles or an offset like +08:00")
        hours, minutes = int(match.group(1)), int(match.group(2))
        if not -23 <= hours <= 23:
            raise EvalError(f"timezone offset hours out of range [-23, 23]: {tz}")
        if not 0 <= minutes <= 59:
            raise EvalError(f"timezone offset minutes out of range [0, 59]: {tz}")
        return (hours * 60 - minutes if tz[0] == "-" else hours * 60 + minutes) * 60
    try:
        return ZoneInfo(tz)
    except (ValueError, KeyError, OSError):
        raise EvalError(f"unknown time zone {tz}") from None


def _offset_at(seconds: int, tz: str | None) -> int:
    zone = 0 if tz is None else _zone(tz)
    if isinstance(zone, int):
        return zone
    # datetime cannot hold local times outside years 1..9999. No zone changes offset in
    # the first or last two days of the range (local mean time; no late-December rules).
    seconds = min(max(seconds, MIN_TIMESTAMP_SECONDS + 172800), MAX_TIMESTAMP_SECONDS - 172800)
    local = (_EPOCH + timedelta(seconds=seconds)).astimezone(zone)
    return local.utcoffset() // timedelta(seconds=1)  # type: ignore[operator]


def _timestamp_getter(name: str, field: Callable[[int, int, int, int, int, int], int]) -> Callable[..., int]:
    """``ts.name()`` / ``ts.name(tz)``; ``field`` gets the local (days, second of day, y, m, d, nanos)."""

    def getter(ts: Timestamp, *tz: Any) -> int:
        if len(tz) > 1 or (tz and type(tz[0]) is not str):
            raise no_such_overload(name, ts, *tz)
        # Without a time zone, the local time where the timestamp was written (cel-go's t.Year() etc.).
        shift = _offset_at(ts.seconds, tz[0]) if tz else ts.offset
        days, sod = divmod(ts.seconds + shift, 86400)
        return field(days, sod, *_civil_from_days(days), ts.nanos)

    return getter


def _duration_getter(name: str, unit: int) -> Callable[..., int]:
    # Totals, truncated toward zero, as cel-go's Int(d.Hours()), d.Milliseconds() and so on.
    def getter(d: Duration, *extra: Any) -> int:
        if extra:
            raise no_such_overload(name, d, *extra)
        return _trunc_div(d.nanos, unit)

    return getter


def timestamp(*args: Any) -> Timestamp:
    """``timestamp(string)``, ``timestamp(int)`` (epoch seconds), ``timestamp(timestamp)``."""
    kind = type(args[0]) if len(args) == 1 else None
    if kind is str:
        return parse_timestamp(args[0])
    if kind is int:
        if not MIN_TIMESTAMP_SECONDS <= args[0] <= MAX_TIMESTAMP_SECONDS:
            raise IntOverflowError(f"{_TS_RANGE}: {args[0]} seconds")
        return Timestamp(args[0])
    if kind is Timestamp:
        return args[0]  # type: ignore[no-any-return]
    raise no_such_overload("timestamp", *args)


def duration(*args: Any) -> Duration:
    """``duration(string)``, ``duration(int)`` (nanoseconds, as cel-go), ``duration(duration)``."""
    kind = type(args[0]) if len(args) == 1 else None
    if kind is str:
        return parse_duration(args[0])
    if kind is int:
        return Duration(args[0])
    if kind is Duration:
        return args[0]  # type: ignore[no-any-return]
    raise no_such_overload("duration", *args)


_TIMESTAMP_FIELDS: dict[str, Callable[[int, int, int, int, int, int], int]] = {
    "getFullYear": lambda days, sod, y, m, d, ns: y,
    "getMonth": lambda days, sod, y, m, d, ns: m - 1,
    "getDate": lambda days, sod, y, m, d, ns: d,
    "getDayOfMonth": lambda days, sod, y, m, d, ns: d - 1,
    "getDayOfWeek": lambda days, sod, y, m, d, ns: (days + 4) % 7,  # 1970-01-01 was a Thursday
    "getDayOfYear": lambda days, sod, y, m, d, ns: days - _days_from_civil(y, 1, 1),
    "getHours": lambda days, sod, y, m, d, ns: sod // 3600,
    "getMinutes": lambda days, sod, y, m, d, ns: sod // 60 % 60,
    "getSeconds": lambda days, sod, y, m, d, ns: sod % 60,
    "getMilliseconds": lambda days, sod, y, m, d, ns: ns // 10**6,
}
_DURATION_UNITS = {"getHours": 3600 * NANOS, "getMinutes": 60 * NANOS, "getSeconds": NANOS, "getMilliseconds": 10**6}

FUNCTIONS: dict[str, Callable[..., Any]] = {"timestamp": timestamp, "duration": duration}
METHODS: dict[str, dict[type, Callable[..., Any]]] = {
    name: {Timestamp: _timestamp_getter(name, field)} for name, field in _TIMESTAMP_FIELDS.items()
}
for _name, _unit in _DURATION_UNITS.items():
    METHODS[_name][Duration] = _duration_getter(_name, _unit)
RESULT_TYPES: dict[str, str] = {"timestamp": "timestamp", "duration": "duration", **{name: "int" for name in METHODS}}

__all__ = ["Duration", "FUNCTIONS", "METHODS", "RESULT_TYPES", "Timestamp", "duration", "parse_duration", "parse_timestamp", "timestamp"]
