"""CEL timestamps and durations, called directly through the library tables.

Expected values come from the CEL conformance suite (tests/data/cel-conformance,
timestamps.json, conversions.json, string_ext.json), from cel-go's
common/types/{timestamp,duration}_test.go, and from Go's time package tests
(parseDurationTests); a few edge cases are worked out by hand in comments, and
the property tests use Python's datetime/zoneinfo as an independent oracle.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.cel.types import operators
from engine.cel.errors import EvalError, IntOverflowError, NoSuchOverloadError
from engine.cel.ext.timestamps import FUNCTIONS, METHODS, RESULT_TYPES, Duration, Timestamp
from engine.cel.types.values import type_name

timestamp = FUNCTIONS["timestamp"]
duration = FUNCTIONS["duration"]
SECOND = 1_000_000_000
MINUTE = 60 * SECOND
HOUR = 60 * MINUTE
MS = 1_000_000
US = 1_000


def call(method: str, recv: Any, *args: Any) -> Any:
    """``recv.method(args)`` the way the compiler dispatches it: by exact receiver type."""
    return METHODS[method][type(recv)](recv, *args)


def ids(table: list[tuple[Any, ...]]) -> list[str]:
    return [str(row[0]) for row in table]


# --- conformance: timestamp_selectors and timestamp_selectors_tz ----------------------------

SELECTORS = [
    ("getDate", "2009-02-13T23:31:30Z", None, 13),
    ("getDayOfMonth", "2009-02-13T23:31:30Z", None, 12),
    ("getDayOfWeek", "2009-02-13T23:31:30Z", None, 5),
    ("getDayOfYear", "2009-02-13T23:31:30Z", None, 43),
    ("getFullYear", "2009-02-13T23:31:30Z", None, 2009),
    ("getHours", "2009-02-13T23:31:30Z", None, 23),
    ("getMilliseconds", "2009-02-13T23:31:20.123456789Z", None, 123),
    ("getMinutes", "2009-02-13T23:31:30Z", None, 31),
    ("getMonth", "2009-02-13T23:31:30Z", None, 1),
    ("getSeconds", "2009-02-13T23:31:30Z", None, 30),
    ("getDate", "2009-02-13T23:31:30Z", "Australia/Sydney", 14),
    ("getDayOfMonth", "2009-02-13T23:31:30Z", "US/Central", 12),
    ("getDayOfMonth", "2009-02-13T23:31:30Z", "+11:00", 13),
    ("getDayOfMonth", "2009-02-13T02:00:00Z", "-02:30", 11),
    ("getDayOfMonth", "2009-02-13T02:00:00Z", "America/St_Johns", 11),
    ("getDayOfWeek", "2009-02-13T23:31:30Z", "UTC", 5),
    ("getDayOfYear", "2009-02-13T23:31:30Z", "US/Central", 43),
    ("getFullYear", "2009-02-13T23:31:30Z", "-09:30", 2009),
    ("getHours", "2009-02-13T23:31:30Z", "02:00", 1),
    ("getMinutes", "2009-02-13T23:31:30Z", "Asia/Kathmandu", 16),
    ("getMonth", "2009-02-13T23:31:30Z", "UTC", 1),
    ("getSeconds", "2009-02-13T23:31:30Z", "-00:00", 30),
]


@pytest.mark.parametrize("method, text, tz, expected", SELECTORS, ids=[f"{m}({tz or ''}) of {t}" for m, t, tz, _ in SELECTORS])
def test_timestamp_getters_agree_with_the_conformance_suite(method: str, text: str, tz: str | None, expected: int) -> None:
    args = () if tz is None else (tz,)
    assert call(method, timestamp(text), *args) == expected


# cel-go timestamp_test.go: 1970-01-01T02:05:06Z (7506 s) is 1969-12-31T19:05:06 in Phoenix (UTC-7, no DST).
CEL_GO_GETTERS = [
    ("getHours", None, 2), ("getHours", "America/Phoenix", 19),
    ("getMinutes", None, 5), ("getMinutes", "America/Phoenix", 5), ("getMinutes", "-08:30", 35),
    ("getSeconds", None, 6), ("getSeconds", "America/Phoenix", 6),
    ("getDayOfMonth", None, 0), ("getDayOfMonth", "America/Phoenix", 30), ("getDayOfMonth", "-07:00", 30),
    ("getDate", None, 1), ("getDate", "America/Phoenix", 31), ("getDate", "+23:00", 2),
    ("getDayOfYear", None, 0), ("getDayOfYear", "America/Phoenix", 364), ("getDayOfYear", "-07:00", 364),
    ("getFullYear", None, 1970), ("getFullYear", "America/Phoenix", 1969),
    ("getMonth", None, 0), ("getMonth", "America/Phoenix", 11),
    ("getDayOfWeek", None, 4), ("getDayOfWeek", "America/Phoenix", 3),
]


@pytest.mark.parametrize("method, tz, expected", CEL_GO_GETTERS, ids=[f"{m}({tz or ''})" for m, tz, _ in CEL_GO_GETTERS])
def test_timestamp_getters_agree_with_cel_go_around_the_epoch(method: str, tz: str | None, expected: int) -> None:
    args = () if tz is None else (tz,)
    assert call(method, Timestamp(7506), *args) == expected


def test_milliseconds_ignore_the_time_zone_as_in_cel_go() -> None:
    ts = Timestamp(7506, 1_000_000)
    assert call("getMilliseconds", ts) == 1
    assert call("getMilliseconds", ts, "America/Phoenix") == 1


# Worked by hand: a zone can move the range ends into year 0 or 10000, which Go's
# proleptic calendar represents. 0001-01-01 was a Monday, 9999-12-31 a Friday.
RANGE_END_GETTERS = [
    ("0001-01-01T00:00:00Z", "-01:00", {"getFullYear": 0, "getMonth": 11, "getDate": 31, "getHours": 23, "getDayOfWeek": 0, "getDayOfYear": 365}),
    ("9999-12-31T23:59:59Z", "+01:00", {"getFullYear": 10000, "getMonth": 0, "getDate": 1, "getHours": 0, "getDayOfWeek": 6, "getDayOfYear": 0}),
    ("9999-12-31T23:59:59Z", "Asia/Tokyo", {"getFullYear": 10000, "getHours": 8}),
    ("0001-01-01T00:00:00Z", "America/New_York", {"getFullYear": 0, "getHours": 19, "getMinutes": 3, "getSeconds": 58}),
]


@pytest.mark.parametrize("text, tz, fields", RANGE_END_GETTERS, ids=ids(RANGE_END_GETTERS))
def test_getters_at_the_range_ends_cross_into_year_zero_and_ten_thousand(text: str, tz: str, fields: dict[str, int]) -> None:
    # New York before 1883 is local mean time, -4:56:02 (tzdata), as Go uses too.
    ts = timestamp(text)
    assert {name: call(name, ts, tz) for name in fields} == fields


# --- conversions -------------------------------------------------------------------------------

def test_int_and_string_conversions_agree_with_the_conformance_suite() -> None:
    assert timestamp("2009-02-13T23:31:30Z").cel_int() == 1234567890
    assert timestamp("2004-09-16T23:59:59Z").cel_int() == 1095379199
    assert timestamp("2009-02-13T23:31:30Z").cel_string() == "2009-02-13T23:31:30Z"
    assert timestamp("9999-12-31T23:59:59.999999999Z").cel_string() == "9999-12-31T23:59:59.999999999Z"
    assert timestamp("2023-02-03T23:31:20+00:00").cel_string() == "2023-02-03T23:31:20Z"
    assert duration("1000000s").cel_string() == "1000000s"


DURATION_STRINGS = [
    ("1000000s", "1000000s"),  # conformance duration_conversions
    ("1h45m47s", "6347s"),  # conformance string_ext format
    ("2h", "7200s"),
    ("8747s", "8747s"),
    ("30m2s", "1802s"),
    ("7506.000001s", "7506.000001s"),  # cel-go TestDurationConvertToType_Identity
    ("1ns", "0.000000001s"),  # Go FormatFloat(1e-9, 'f', -1, 64)
    ("-1.5s", "-1.5s"),
    ("0s", "0s"),
    # Go formats d.Seconds() as a float64: the last digits of the largest duration are rounded away.
    ("9223372036854775807ns", "9223372036.854776s"),
]


@pytest.mark.parametrize("text, expected", DURATION_STRINGS, ids=ids(DURATION_STRINGS))
def test_durations_print_as_seconds_like_cel_go(text: str, expected: str) -> None:
    assert duration(text).cel_string() == expected


def test_cel_go_conversion_examples_hold() -> None:
    ts = Timestamp(7654, 321)
    assert (ts.cel_int(), ts.cel_string()) == (7654, "1970-01-01T02:07:34.000000321Z")
    d = Duration(7506 * SECOND + 1000)
    assert (d.cel_int(), d.cel_string()) == (7506000001000, "7506.000001s")


def test_identity_conversions_return_the_same_value() -> None:
    assert timestamp(timestamp(1000000000)) == timestamp(1000000000)
    assert duration(duration("100s")) == duration("100s")


def test_timestamp_from_int_counts_seconds_and_duration_from_int_counts_nanoseconds() -> None:
    assert timestamp(1234567890) == timestamp("2009-02-13T23:31:30Z")
    assert duration(1500) == Duration(1500)


def test_values_carry_the_cel_type_names() -> None:
    assert type_name(timestamp(0)) == "google.protobuf.Timestamp"
    assert type_name(duration("1s")) == "google.protobuf.Duration"
    assert repr(timestamp(0)) == "timestamp('1970-01-01T00:00:00Z')"
    assert str(duration("90s")) == "90s"


# --- equality, ordering, arithmetic --------------------------------------------------------------

ts, d = timestamp, duration
COMPARISONS: list[tuple[str, Callable[[], bool], bool]] = [
    ("eq_same", lambda: ts("2009-02-13T23:31:30Z") == ts("2009-02-13T23:31:30Z"), True),
    ("eq_diff", lambda: ts("2009-02-13T23:31:29Z") == ts("2009-02-13T23:31:30Z"), False),
    ("neq_same", lambda: ts("1945-05-07T02:41:00Z") != ts("1945-05-07T02:41:00Z"), False),
    ("neq_diff", lambda: ts("2000-01-01T00:00:00Z") != ts("2001-01-01T00:00:00Z"), True),
    ("duration eq_same", lambda: d("123s") == d("123s"), True),
    ("duration eq_diff", lambda: d("60s") == d("3600s"), False),
    ("duration neq_same", lambda: d("604800s") != d("604800s"), False),
    ("duration neq_diff", lambda: d("86400s") != d("86164s"), True),
    ("leq_timestamp_true", lambda: ts("2009-02-13T23:00:00Z") <= ts("2009-02-13T23:00:00Z"), True),
    ("leq_timestamp_false", lambda: ts("2009-02-13T23:00:00Z") <= ts("2009-02-13T22:59:59Z"), False),
    ("leq_duration_true", lambda: d("200s") <= d("200s"), True),
    ("leq_duration_false", lambda: d("300s") <= d("200s"), False),
    ("less_timestamp_true", lambda: ts("2009-02-13T23:00:00Z") < ts("2009-03-13T23:00:00Z"), True),
    ("less_duration_true", lambda: d("200s") < d("300s"), True),
    ("geq_timestamp_true", lambda: ts("2009-02-13T23:00:00Z") >= ts("2009-02-13T23:00:00Z"), True),
    ("geq_timestamp_false", lambda: ts("2009-02-13T22:58:00Z") >= ts("2009-02-13T23:00:00Z"), False),
    ("geq_duration_true", lambda: d("200s") >= d("200s"), True),
    ("geq_duration_false", lambda: d("120s") >= d("200s"), False),
    ("greater_timestamp_true", lambda: ts("2009-02-13T23:59:00Z") > ts("2009-02-13T23:00:00Z"), True),
    ("greater_duration_true", lambda: d("300s") > d("200s"), True),
    ("equal instants written with different offsets", lambda: ts("2009-02-14T00:31:30+01:00") == ts("2009-02-13T23:31:30Z"), True),
]


@pytest.mark.parametrize("name, compare, expected", COMPARISONS, ids=ids(COMPARISONS))
def test_equality_and_ordering_agree_with_the_conformance_suite(name: str, compare: Callable[[], bool], expected: bool) -> None:
    assert compare() is expected


ARITHMETIC: list[tuple[str, Callable[[], Any], Any]] = [
    # conformance timestamp_arithmetic
    ("add_duration_to_time", lambda: ts("2009-02-13T23:00:00Z") + d("240s"), ts("2009-02-13T23:04:00Z")),
    ("add_time_to_duration", lambda: d("120s") + ts("2009-02-13T23:01:00Z"), ts("2009-02-13T23:03:00Z")),
    ("add_duration_to_duration", lambda: d("600s") + d("50s"), d("650s")),
    ("add_time_to_duration_nanos_negative", lambda: ts("0001-01-01T00:00:01.000000001Z") + d("-999999999ns"), ts("0001-01-01T00:00:00.000000002Z")),
    ("add_time_to_duration_nanos_positive", lambda: ts("0001-01-01T00:00:01.999999999Z") + d("999999999ns"), ts("0001-01-01T00:00:02.999999998Z")),
    ("subtract_duration_from_time", lambda: ts("2009-02-13T23:10:00Z") - d("600s"), ts("2009-02-13T23:00:00Z")),
    ("subtract_time_from_time", lambda: ts("2009-02-13T23:31:00Z") - ts("2009-02-13T23:29:00Z"), d("120s")),
    ("subtract_duration_from_duration", lambda: d("900s") - d("42s"), d("858s")),
    # cel-go TestTimestampOperators / TestDurationOperators
    ("DateAddOneHourMinusOneMilli", lambda: Timestamp(3506) + Duration(HOUR - MS), Timestamp(7105, 999 * MS)),
    ("DateAddOneHourOneNano", lambda: Timestamp(3506) + Duration(HOUR + 1), Timestamp(7106, 1)),
    ("SecondsWithNanosNegative", lambda: Timestamp(1, 1) + Duration(-999_999_999), Timestamp(0, 2)),
    ("SecondsWithNanosPositive", lambda: Timestamp(1, 999_999_999) + Duration(999_999_999), Timestamp(2, 999_999_998)),
    ("TimeSubOneSecond", lambda: Timestamp(100) - Timestamp(1), Duration(99 * SECOND)),
    ("DateSubOneHour", lambda: Timestamp(3506) - Duration(HOUR), Timestamp(-94)),
    ("MinTimestampSubMinusOneViaNanos", lambda: Timestamp(-62135596800, 2) - Duration(-999_999_999), Timestamp(-62135596799, 1)),
    ("TimeWithNanosPositive", lambda: Timestamp(2, 1) - Timestamp(0, 999_999_999), Duration(SECOND + 2)),
    ("TimeWithNanosNegative", lambda: Timestamp(1, 1) - Timestamp(2, 999_999_999), Duration(-2 * SECOND + 2)),
    ("DurationAddSelf", lambda: Duration(7506 * SECOND + 567) + Duration(7506 * SECOND + 567), Duration(15012 * SECOND + 1134)),
    ("DurationSubSelf", lambda: Duration(7506 * SECOND + 567) - Duration(7506 * SECOND + 567), Duration(0)),
    ("DurationNegate", lambda: -Duration(1234 * SECOND + 1), Duration(-1234 * SECOND - 1)),
    ("DurationNegateMax", lambda: -Duration(2**63 - 1), Duration(-(2**63) + 1)),
]


@pytest.mark.parametrize("name, compute, expected", ARITHMETIC, ids=ids(ARITHMETIC))
def test_arithmetic_agrees_with_the_conformance_suite_and_cel_go(name: str, compute: Callable[[], Any], expected: Any) -> None:
    result = compute()
    assert type(result) is type(expected)
    assert result == expected


# --- ranges and overflow ---------------------------------------------------------------------------

RANGE_ERRORS: list[tuple[str, Callable[[], Any]]] = [
    # conformance timestamp_range / duration_range
    ("timestamp from string under", lambda: ts("0000-01-01T00:00:00Z")),
    ("timestamp from int under", lambda: ts(-62135596801)),
    ("timestamp from string over", lambda: ts("10000-01-01T00:00:00Z")),
    ("timestamp from int over", lambda: ts(253402300800)),
    ("add duration under", lambda: ts("0001-01-01T00:00:00Z") + d("-1s")),
    ("add duration over", lambda: ts("9999-12-31T23:59:59Z") + d("1s")),
    ("add duration nanos over", lambda: ts("9999-12-31T23:59:59.999999999Z") + d("1ns")),
    ("add duration nanos under", lambda: ts("0001-01-01T00:00:00Z") + d("-1ns")),
    ("sub time duration over", lambda: ts("9999-12-31T23:59:59Z") - ts("0001-01-01T00:00:00Z")),
    ("sub time duration under", lambda: ts("0001-01-01T00:00:00Z") - ts("9999-12-31T23:59:59Z")),
    ("duration from string under", lambda: d("-320000000000s")),
    ("duration from string over", lambda: d("320000000000s")),
    ("duration add under", lambda: d("-200000000000s") + d("-200000000000s")),
    ("duration add over", lambda: d("200000000000s") + d("200000000000s")),
    ("duration sub under", lambda: d("-200000000000s") - d("200000000000s")),
    ("duration sub over", lambda: d("200000000000s") - d("-200000000000s")),
    # cel-go TestTimestampOperators / TestDurationOperators / TestDurationNegate
    ("MaxTimestampAddOneSecond", lambda: Timestamp(253402300799) + Duration(SECOND)),
    ("MinTimestampSubOneSecond", lambda: Timestamp(-62135596800) - Duration(SECOND)),
    ("DateMinusDateDurationOverflow", lambda: Timestamp(253402300799) - Timestamp(-62135596800)),
    ("DateSubMinDuration", lambda: Timestamp(1) - Duration(-(2**63))),
    ("DurationMaxAddOneNanoOverflow", lambda: Duration(2**63 - 1) + Duration(1)),
    ("DurationMaxAddOneSecondOverflow", lambda: Duration(2**63 - 1) + Duration(SECOND)),
    ("DurationMinAddMinusOneOverflow", lambda: Duration(-(2**63)) + Duration(-SECOND)),
    ("DurationMaxSubMinusOneOverflow", lambda: Duration(2**63 - 1) - Duration(-1)),
    ("DurationMinSubOneOverflow", lambda: Duration(-(2**63)) - Duration(1)),
    ("negating the smallest duration", lambda: -Duration(-(2**63))),
    ("constructing a timestamp past the end", lambda: Timestamp(253402300800)),
    ("constructing a duration past int64", lambda: Duration(2**63)),
]


@pytest.mark.parametrize("name, compute", RANGE_ERRORS, ids=ids(RANGE_ERRORS))
def test_results_outside_the_cel_range_are_errors(name: str, compute: Callable[[], Any]) -> None:
    with pytest.raises(EvalError, match="range"):
        compute()


def test_arithmetic_overflow_is_an_int_overflow_error() -> None:
    with pytest.raises(IntOverflowError, match="timestamp overflow"):
        timestamp("9999-12-31T23:59:59Z") + duration("1s")
    with pytest.raises(IntOverflowError, match="duration overflow"):
        timestamp("9999-12-31T23:59:59Z") - timestamp("0001-01-01T00:00:00Z")


def test_the_range_ends_themselves_are_valid() -> None:
    assert timestamp(-62135596800).cel_string() == "0001-01-01T00:00:00Z"
    assert timestamp(253402300799).cel_string() == "9999-12-31T23:59:59Z"
    assert timestamp("0000-12-31T23:00:00-01:00") == timestamp("0001-01-01T00:00:00Z")
    assert duration("-2562047h47m16.854775808s") == Duration(-(2**63))


# --- duration getters --------------------------------------------------------------------------------

DURATION_GETTERS = [
    ("getHours", "10000s", 2),  # conformance duration_converters
    ("getMinutes", "3730s", 62),
    ("getSeconds", "3730s", 3730),
    ("getHours", "7506s", 2),  # cel-go TestDurationGet*: totals, not components
    ("getMinutes", "7506s", 125),
    ("getSeconds", "7506s", 7506),
    ("getMilliseconds", "7506s", 7506000),
    ("getMilliseconds", "123.321456789s", 123321),  # cel-go total ms; the spec's proto case wants 321
    ("getHours", "-1.5h", -1),  # Go's Int(float64) truncates toward zero
    ("getSeconds", "-1.5s", -1),
    ("getMilliseconds", "-1.5ms", -1),
]


@pytest.mark.parametrize("method, text, expected", DURATION_GETTERS, ids=[f"{m} of {t}" for m, t, _ in DURATION_GETTERS])
def test_duration_getters_return_truncated_totals_like_cel_go(method: str, text: str, expected: int) -> None:
    assert call(method, duration(text)) == expected


# --- parsing: Go's time.ParseDuration ------------------------------------------------------------------

GO_DURATIONS = [
    ("0", 0), ("5s", 5 * SECOND), ("30s", 30 * SECOND), ("1478s", 1478 * SECOND),
    ("-5s", -5 * SECOND), ("+5s", 5 * SECOND), ("-0", 0), ("+0", 0),
    ("5.0s", 5 * SECOND), ("5.6s", 5 * SECOND + 600 * MS), ("5.s", 5 * SECOND), (".5s", 500 * MS),
    ("1.0s", SECOND), ("1.00s", SECOND), ("1.004s", SECOND + 4 * MS), ("1.0040s", SECOND + 4 * MS),
    ("100.00100s", 100 * SECOND + MS),
    ("10ns", 10), ("11us", 11 * US), ("12\u00b5s", 12 * US), ("12\u03bcs", 12 * US), ("13ms", 13 * MS),
    ("14s", 14 * SECOND), ("15m", 15 * MINUTE), ("16h", 16 * HOUR),
    ("3h30m", 3 * HOUR + 30 * MINUTE), ("10.5s4m", 4 * MINUTE + 10 * SECOND + 500 * MS),
    ("-2m3.4s", -(2 * MINUTE + 3 * SECOND + 400 * MS)),
    ("1h2m3s4ms5us6ns", HOUR + 2 * MINUTE + 3 * SECOND + 4 * MS + 5 * US + 6),
    ("39h9m14.425s", 39 * HOUR + 9 * MINUTE + 14 * SECOND + 425 * MS),
    ("52763797000ns", 52763797000), ("0.3333333333333333333h", 20 * MINUTE),
    ("9007199254740993ns", 2**53 + 1), ("9223372036854775807ns", 2**63 - 1),
    ("9223372036854775.807us", 2**63 - 1), ("9223372036s854ms775us807ns", 2**63 - 1),
    ("-9223372036854775808ns", -(2**63)), ("-9223372036854775.808us", -(2**63)),
    ("-9223372036s854ms775us808ns", -(2**63)), ("-2562047h47m16.854775808s", -(2**63)),
    ("0.100000000000000000000h", 6 * MINUTE),
    ("0.830103483285477580700h", 49 * MINUTE + 48 * SECOND + 372539827),
    # examples from the brief
    ("1h2m3.5s", HOUR + 2 * MINUTE + 3 * SECOND + 500 * MS), ("-1.5h", -90 * MINUTE), ("300ms", 300 * MS),
    ("2us", 2 * US), ("1ns", 1),
]


@pytest.mark.parametrize("text, nanos", GO_DURATIONS, ids=ids(GO_DURATIONS))
def test_duration_strings_parse_as_go_parse_duration_does(text: str, nanos: int) -> None:
    assert duration(text) == Duration(nanos)


GO_BAD_DURATIONS = [
    "", "3", "-", "s", ".", "-.", ".s", "+.s", "1d", "\x85\x85", "\xffff", "hello \xffff world", "\ufffd",
    "9223372036854775810ns", "9223372036854775808ns", "-9223372036854775809ns", "9223372036854776us",
    "3000000h", "9223372036854775.808us", "9223372036854ms775us808ns",
    # Go rejects these too: spaces, doubled dots, units it does not know, non-ASCII digits.
    "1h 2m", " 1s", "1..5s", "1.5.5s", "1sec", "1H", "\u0663s", "1" + "0" * 5000 + "s",
]


@pytest.mark.parametrize("text", GO_BAD_DURATIONS, ids=[repr(t)[:40] for t in GO_BAD_DURATIONS])
def test_malformed_or_overflowing_duration_strings_are_errors(text: str) -> None:
    with pytest.raises(EvalError, match="invalid duration"):
        duration(text)


def test_duration_errors_say_what_is_wrong() -> None:
    with pytest.raises(EvalError, match=r'invalid duration "10": missing unit'):
        duration("10")
    with pytest.raises(EvalError, match=r'invalid duration "5x": unknown unit "x"'):
        duration("5x")


# --- parsing: RFC 3339 --------------------------------------------------------------------------------

GOOD_TIMESTAMPS = [
    ("2009-02-13T23:31:30Z", 1234567890, 0),
    ("2009-02-14T00:31:30+01:00", 1234567890, 0),
    ("2009-02-13T15:31:30-08:00", 1234567890, 0),
    ("2009-02-14T05:16:30+05:45", 1234567890, 0),
    ("2009-02-13T23:31:30-00:00", 1234567890, 0),
    ("2009-02-13T23:31:30.5Z", 1234567890, 500_000_000),
    ("2009-02-13T23:31:30.000000001Z", 1234567890, 1),
    ("2009-02-13T23:31:30.1234567891Z", 1234567890, 123456789),  # Go drops digits past nanoseconds
    ("1970-01-01T00:00:00Z", 0, 0),
    ("1969-12-31T23:59:59.999999999Z", -1, 999_999_999),
    ("2000-02-29T00:00:00Z", 951782400, 0),  # leap day of a 400-year leap year
    ("2026-08-10T12:00:00.500Z", 1786363200, 500_000_000),  # cel-go TestParseTimestamp (2026-08-10 is day 20675)
]


@pytest.mark.parametrize("text, seconds, nanos", GOOD_TIMESTAMPS, ids=ids(GOOD_TIMESTAMPS))
def test_rfc3339_strings_parse_to_the_instant_they_name(text: str, seconds: int, nanos: int) -> None:
    assert timestamp(text) == Timestamp(seconds, nanos)


# cel-go TestIsStrictRFC3339MatchesPattern's rejected forms, plus what Go's time.Parse refuses
# after that gate (lower-case t/z, leap seconds, impossible dates).
BAD_TIMESTAMPS = [
    "2025-00-01T12:34:56Z", "2025-13-01T12:34:56Z", "2025-01-00T12:34:56Z", "2025-01-32T12:34:56Z",
    "2025-01-01T12:34:56,123Z", "2025-01-01T1:34:56Z", "2025-01-01T12:3:56Z", "2025-01-01T12:34:5Z",
    "2025-01-01T24:00:00Z", "2025-01-01T12:60:00Z", "2025-01-01T12:34:61Z", "2025-01-01T12:34:56.Z",
    "2025-01-01T12:34:56+24:00", "2025-01-01T12:34:56+00:60", "2025-01-01T12:34:56+0530",
    "2025-01-01T12:34:56", "2025-01-01 12:34:56Z", "2025-1-01T12:34:56Z", "", "not-a-timestamp",
    "2025-01-01T12:34:56z", "2025-01-01t12:34:56Z", "2025-01-01T23:59:60-08:00",
    "2023-02-29T00:00:00Z", "1900-02-29T00:00:00Z", "2025-04-31T00:00:00Z", "2026-99-99T99:99:99Z",
    "2025-01-01T12:34:56Z\n", " 2025-01-01T12:34:56Z", "\u0662025-01-01T12:34:56Z",
]


@pytest.mark.parametrize("text", BAD_TIMESTAMPS, ids=[repr(t) for t in BAD_TIMESTAMPS])
def test_strings_that_are_not_strict_rfc3339_are_errors(text: str) -> None:
    with pytest.raises(EvalError, match="invalid RFC 3339 timestamp"):
        timestamp(text)


def test_a_bad_timestamp_string_gets_a_clear_message() -> None:
    with pytest.raises(EvalError) as info:
        timestamp("not a time")
    assert not isinstance(info.value, IntOverflowError)
    assert 'invalid RFC 3339 timestamp "not a time"' in info.value.message
    assert "2006-01-02T15:04:05Z" in info.value.message
    with pytest.raises(EvalError, match="day out of range"):
        timestamp("2023-02-29T00:00:00Z")


# --- time zone arguments ------------------------------------------------------------------------------

BAD_ZONES = [
    ("+24:00", "hours out of range"), ("-24:00", "hours out of range"), ("+99:00", "hours out of range"),
    ("-50:30", "hours out of range"), ("+00:99", "minutes out of range"), ("-00:90", "minutes out of range"),
    ("+05:-30", "minutes out of range"),  # cel-go TestTimestampGetMinutes
    ("Mars/Base", "unknown time zone Mars/Base"), ("Local", "unknown time zone"), ("America", "unknown time zone"),
    ("/etc/localtime", "unknown time zone"), ("../zoneinfo/UTC", "unknown time zone"),
    ("ab:00", "invalid time zone"), ("1:2:3", "invalid time zone"), ("+8 :00", "invalid time zone"),
]


@pytest.mark.parametrize("tz, message", BAD_ZONES, ids=ids(BAD_ZONES))
def test_bad_time_zone_arguments_are_errors(tz: str, message: str) -> None:
    for method in ("getHours", "getMilliseconds"):
        with pytest.raises(EvalError, match=message):
            call(method, Timestamp(7506), tz)


def test_empty_and_utc_zone_names_mean_utc() -> None:
    ts = timestamp("2009-02-13T23:31:30Z")
    assert call("getHours", ts, "") == call("getHours", ts, "UTC") == call("getHours", ts, "+00:00") == 23


def test_offsets_accept_single_digit_hours_and_apply_the_sign_to_minutes() -> None:
    ts = timestamp("2009-02-13T23:31:30Z")
    assert call("getHours", ts, "2:00") == 1  # Go's Atoi reads "2" like "02"
    assert call("getMinutes", ts, "-00:30") == 1  # -30 minutes, not +30


# --- dispatch contract ----------------------------------------------------------------------------------

WRONG_ARGUMENTS: list[tuple[str, Callable[[], Any], str]] = [
    ("timestamp of a double", lambda: timestamp(1.5), "timestamp(double)"),
    ("timestamp of a bool", lambda: timestamp(True), "timestamp(bool)"),
    ("timestamp of a duration", lambda: timestamp(Duration(1)), "timestamp(google.protobuf.Duration)"),
    ("timestamp with no argument", lambda: timestamp(), "timestamp()"),
    ("duration of a timestamp", lambda: duration(Timestamp(1)), "duration(google.protobuf.Timestamp)"),
    ("duration with two arguments", lambda: duration("1s", "2s"), "duration(string, string)"),
    ("getHours with an int zone", lambda: call("getHours", Timestamp(1), 3), "getHours(google.protobuf.Timestamp, int)"),
    ("getHours with two zones", lambda: call("getHours", Timestamp(1), "UTC", "UTC"), "getHours"),
    ("duration getHours with a zone", lambda: call("getHours", Duration(1), "UTC"), "getHours(google.protobuf.Duration, string)"),
]


@pytest.mark.parametrize("name, compute, signature", WRONG_ARGUMENTS, ids=ids(WRONG_ARGUMENTS))
def test_unsupported_argument_types_are_no_such_overload(name: str, compute: Callable[[], Any], signature: str) -> None:
    with pytest.raises(NoSuchOverloadError, match=f"no such overload: {signature.replace('(', '[(]').replace(')', '[)]')}"):
        compute()


def test_the_library_tables_cover_every_getter_for_the_right_types() -> None:
    timestamp_getters = {"getFullYear", "getMonth", "getDate", "getDayOfMonth", "getDayOfWeek", "getDayOfYear",
                         "getHours", "getMinutes", "getSeconds", "getMilliseconds"}
    assert {name for name, table in METHODS.items() if Timestamp in table} == timestamp_getters
    assert {name for name, table in METHODS.items() if Duration in table} == {"getHours", "getMinutes", "getSeconds", "getMilliseconds"}
    assert set(FUNCTIONS) == {"timestamp", "duration"}
    assert RESULT_TYPES["timestamp"] == "timestamp" and RESULT_TYPES["duration"] == "duration"
    assert all(RESULT_TYPES[name] == "int" for name in timestamp_getters)


def test_operators_on_mismatched_types_are_no_such_overload() -> None:
    assert operators.add(Timestamp(1), Duration(SECOND)) == Timestamp(2)
    assert operators.subtract(Timestamp(2), Timestamp(1)) == Duration(SECOND)
    assert operators.negate(Duration(5)) == Duration(-5)
    assert operators.less(Duration(1), Duration(2)) is True
    assert operators.equals(Timestamp(0), Duration(0)) is False
    for bad in (lambda: operators.add(Timestamp(1), Timestamp(1)), lambda: operators.subtract(Duration(1), Timestamp(1)),
                lambda: operators.add(Duration(1), 1), lambda: operators.less(Timestamp(1), Duration(1)),
                lambda: operators.negate(Timestamp(1))):
        with pytest.raises(NoSuchOverloadError):
            bad()


def test_values_are_immutable_hashable_and_picklable() -> None:
    t, dur = Timestamp(5, 6), Duration(7)
    with pytest.raises(AttributeError):
        t.seconds = 1
    with pytest.raises(AttributeError):
        dur.nanos = 1
    assert {t: 1}[Timestamp(5, 6)] == 1 and {dur: 1}[Duration(7)] == 1
    assert pickle.loads(pickle.dumps(t)) == t and pickle.loads(pickle.dumps(dur)) == dur
    assert Timestamp(0, -1) == Timestamp(-1, 999_999_999)  # nanos are normalised into [0, 1e9)


def test_zero_values_are_go_s_zero_time_and_the_empty_duration() -> None:
    # cel-go Timestamp.IsZeroValue is time.Time.IsZero: 0001-01-01T00:00:00Z, not the epoch.
    assert Timestamp(-62135596800).is_zero() and Duration(0).is_zero()
    assert not Timestamp(0).is_zero() and not Timestamp(-62135596800, 1).is_zero() and not Duration(-1).is_zero()


# --- properties against datetime/zoneinfo ------------------------------------------------------------------

ZONES = ["UTC", "America/Los_Angeles", "Europe/Berlin", "Australia/Lord_Howe", "Asia/Kathmandu", "America/St_Johns",
         "Pacific/Chatham", "+05:30", "-09:45", "+14:00", "-23:59"]
INSTANTS = st.integers(min_value=-62135596800 + 2 * 86400, max_value=253402300799 - 2 * 86400)


def _zoneinfo(tz: str) -> Any:
    if ":" not in tz:
        return ZoneInfo(tz)
    sign = -1 if tz[0] == "-" else 1
    hours, minutes = tz.lstrip("+-").split(":")
    return timezone(sign * timedelta(hours=int(hours), minutes=int(minutes)))


@settings(max_examples=300, deadline=None)
@given(seconds=INSTANTS, nanos=st.integers(0, 999_999_999), tz=st.sampled_from(ZONES))
def test_getters_match_python_datetime_in_every_zone(seconds: int, nanos: int, tz: str) -> None:
    local = (datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(seconds=seconds)).astimezone(_zoneinfo(tz))
    ts = Timestamp(seconds, nanos)
    expected = {
        "getFullYear": local.year, "getMonth": local.month - 1, "getDate": local.day, "getDayOfMonth": local.day - 1,
        "getDayOfWeek": local.isoweekday() % 7, "getDayOfYear": local.timetuple().tm_yday - 1,
        "getHours": local.hour, "getMinutes": local.minute, "getSeconds": local.second, "getMilliseconds": nanos // 1_000_000,
    }
    assert {name: call(name, ts, tz) for name in expected} == expected


@settings(max_examples=300, deadline=None)
@given(seconds=st.integers(-62135596800, 253402300799), nanos=st.integers(0, 999_999_999))
def test_printed_timestamps_match_datetime_and_parse_back(seconds: int, nanos: int) -> None:
    ts = Timestamp(seconds, nanos)
    text = ts.cel_string()
    when = datetime(1, 1, 1) + timedelta(seconds=seconds + 62135596800)
    assert text.startswith(when.isoformat(timespec="seconds")) and text.endswith("Z")
    assert timestamp(text) == ts


@settings(max_examples=300, deadline=None)
@given(whole=st.integers(0, 9_000_000_000), frac=st.text("0123456789", max_size=9), negative=st.booleans())
def test_decimal_seconds_parse_exactly(whole: int, frac: str, negative: bool) -> None:
    # With at most nine fraction digits Go's float64 step is exact, so plain decimal arithmetic is the oracle.
    text = f"{'-' if negative else ''}{whole}{'.' + frac if frac else ''}s"
    nanos = whole * SECOND + int(frac.ljust(9, "0") or "0")
    assert duration(text) == Duration(-nanos if negative else nanos)
