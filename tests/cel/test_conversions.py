"""CEL's type conversions, called through the library table as generated code calls them.

Expected values come from the conformance suite (conversions.json) and from Go's
strconv behaviour, which cel-go's conversions inherit.
"""

from __future__ import annotations

import math
import struct
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.cel.types import conversions
from engine.cel.errors import EvalError, IntOverflowError, NoSuchOverloadError
from engine.cel.ext.formatting import go_format_g
from engine.cel.types.values import CelType, UInt, register_type

F = conversions.FUNCTIONS


class FakeTimestamp:
    """Stands in for a library class: conversions only need its hooks."""

    def cel_string(self) -> str:
        return "2004-09-16T23:59:59Z"

    def cel_int(self) -> int:
        return 1095379199


class NoHooks:
    pass


register_type(FakeTimestamp, "google.protobuf.Timestamp")
register_type(NoHooks, "kpe.test.NoHooks")


def same(actual: Any, expected: Any) -> bool:
    if type(actual) is not type(expected):
        return False
    if type(expected) is float:
        return (math.isnan(actual) and math.isnan(expected)) or (actual == expected and math.copysign(1, actual) == math.copysign(1, expected))
    return bool(actual == expected)


CONVERSION_CASES = [
    # bytes
    ("bytes", "", b""),
    ("bytes", "abc", b"abc"),
    ("bytes", "ÿ", b"\xc3\xbf"),
    ("bytes", b"abc", b"abc"),
    ("bytes", "lone \ud800", "lone \ufffd".encode()),
    # double
    ("double", 0, 0.0),
    ("double", 1000000000000, 1000000000000.0),
    ("double", -1000000000000000, -1000000000000000.0),
    ("double", -9007199254740992, -9007199254740992.0),
    ("double", 9223372036854775807, 9.223372036854776e18),
    ("double", UInt(0), 0.0),
    ("double", UInt(123), 123.0),
    ("double", UInt(18446744073709551615), 1.8446744073709552e19),
    ("double", 5.5, 5.5),
    ("double", "0", 0.0),
    ("double", "0.0", 0.0),
    ("double", "-0.0", -0.0),
    ("double", "123", 123.0),
    ("double", "123.456", 123.456),
    ("double", "-987.654", -987.654),
    ("double", "6.02214e23", 6.02214e23),
    ("double", "1.38e-23", 1.38e-23),
    ("double", "-84.32e7", -843200000.0),
    ("double", "-5.43e-21", -5.43e-21),
    ("double", ".5", 0.5),
    ("double", "5.", 5.0),
    ("double", "+1E3", 1000.0),
    ("double", "1_000.5", 1000.5),
    ("double", "0x1.8p1", 3.0),
    ("double", "-0x_1p-2", -0.25),
    ("double", "1e-400", 0.0),
    ("double", "NaN", math.nan),
    ("double", "nan", math.nan),
    ("double", "Infinity", math.inf),
    ("double", "+inf", math.inf),
    ("double", "-Infinity", -math.inf),
    ("double", "-INF", -math.inf),
    # dyn
    ("dyn", [1, "one"], [1, "one"]),
    ("dyn", None, None),
    # int
    ("int", 1, 1),
    ("int", UInt(42), 42),
    ("int", UInt(0), 0),
    ("int", UInt(9223372036854775807), 9223372036854775807),
    ("int", -123.456, -123),
    ("int", 1.9, 1),
    ("int", -7.9, -7),
    ("int", 11.5, 11),
    ("int", -3.5, -3),
    ("int", float(36028797018963968), 36028797018963968),
    ("int", float(36028797018963969), 36028797018963968),
    ("int", -9223372036854774784.0, -9223372036854774784),
    ("int", "987", 987),
    ("int", "-9223372036854775808", -9223372036854775808),
    ("int", "+42", 42),
    ("int", "007", 7),
    ("int", FakeTimestamp(), 1095379199),
    # string
    ("string", "hello", "hello"),
    ("string", 123, "123"),
    ("string", -456, "-456"),
    ("string", UInt(9876), "9876"),
    ("string", 123.456, "123.456"),
    ("string", -4.5e-3, "-0.0045"),
    ("string", 1.5, "1.5"),
    ("string", 1e100, "1e+100"),
    ("string", -0.0, "-0"),
    ("string", 0.0, "0"),
    ("string", 100.0, "100"),
    ("string", 123456.0, "123456"),
    ("string", 1234567.0, "1.234567e+06"),
    ("string", 1e6, "1e+06"),
    ("string", 0.0001, "0.0001"),
    ("string", 0.00001, "1e-05"),
    ("string", 5e-324, "5e-324"),
    ("string", 1.7976931348623157e308, "1.7976931348623157e+308"),
    ("string", math.nan, "NaN"),
    ("string", math.inf, "+Inf"),
    ("string", -math.inf, "-Inf"),
    ("string", True, "true"),
    ("string", False, "false"),
    ("string", b"abc", "abc"),
    ("string", b"\xc3\xbf", "ÿ"),
    ("string", FakeTimestamp(), "2004-09-16T23:59:59Z"),
    # uint
    ("uint", 1729, UInt(1729)),
    ("uint", 9223372036854775807, UInt(9223372036854775807)),
    ("uint", UInt(1), UInt(1)),
    ("uint", 3.14159265, UInt(3)),
    ("uint", 1.9, UInt(1)),
    ("uint", 25.5, UInt(25)),
    ("uint", -0.0, UInt(0)),
    ("uint", float(36028797018963968), UInt(36028797018963968)),
    ("uint", float(36028797018963969), UInt(36028797018963968)),
    ("uint", 18446744073709549568.0, UInt(18446744073709549568)),
    ("uint", "300", UInt(300)),
    ("uint", "18446744073709551615", UInt(18446744073709551615)),
    # bool
    ("bool", True, True),
    ("bool", "1", True),
    ("bool", "t", True),
    ("bool", "T", True),
    ("bool", "true", True),
    ("bool", "TRUE", True),
    ("bool", "True", True),
    ("bool", "0", False),
    ("bool", "f", False),
    ("bool", "F", False),
    ("bool", "false", False),
    ("bool", "FALSE", False),
    ("bool", "False", False),
]


@pytest.mark.parametrize(("name", "value", "expected"), CONVERSION_CASES)
def test_conversion_gives_the_cel_value(name: str, value: Any, expected: Any) -> None:
    result = F[name](value)
    assert same(result, expected), f"{name}({value!r}) gave {result!r}"


RANGE_ERROR_CASES = [
    ("int", UInt(18446744073709551615), "integer overflow"),
    ("int", UInt(9223372036854775808), "integer overflow"),
    ("int", 9223372036854775807.0, "integer overflow"),
    ("int", -9223372036854775808.0, "integer overflow"),
    ("int", 1e99, "integer overflow"),
    ("int", 18446744073709551615.0, "integer overflow"),
    ("int", math.inf, "integer overflow"),
    ("int", -math.inf, "integer overflow"),
    ("int", math.nan, "integer overflow"),
    ("uint", -1, "unsigned integer overflow"),
    ("uint", 6.022e23, "unsigned integer overflow"),
    ("uint", 18446744073709551616.0, "unsigned integer overflow"),
    ("uint", -0.5, "unsigned integer overflow"),
    ("uint", math.nan, "unsigned integer overflow"),
    ("uint", math.inf, "unsigned integer overflow"),
]


@pytest.mark.parametrize(("name", "value", "message"), RANGE_ERROR_CASES)
def test_conversion_out_of_range_is_an_overflow_error(name: str, value: Any, message: str) -> None:
    with pytest.raises(IntOverflowError) as info:
        F[name](value)
    assert info.value.message == message


PARSE_ERROR_CASES = [
    ("int", "0x10", 'strconv.ParseInt: parsing "0x10": invalid syntax'),
    ("int", "1e3", 'strconv.ParseInt: parsing "1e3": invalid syntax'),
    ("int", "", 'strconv.ParseInt: parsing "": invalid syntax'),
    ("int", " 1", 'strconv.ParseInt: parsing " 1": invalid syntax'),
    ("int", "1_000", 'strconv.ParseInt: parsing "1_000": invalid syntax'),
    ("int", "١٢", 'strconv.ParseInt: parsing "١٢": invalid syntax'),
    ("int", "9223372036854775808", 'strconv.ParseInt: parsing "9223372036854775808": value out of range'),
    ("int", "-9223372036854775809", 'strconv.ParseInt: parsing "-9223372036854775809": value out of range'),
    ("uint", "-1", 'strconv.ParseUint: parsing "-1": invalid syntax'),
    ("uint", "+1", 'strconv.ParseUint: parsing "+1": invalid syntax'),
    ("uint", "18446744073709551616", 'strconv.ParseUint: parsing "18446744073709551616": value out of range'),
    ("double", "", 'strconv.ParseFloat: parsing "": invalid syntax'),
    ("double", "abc", 'strconv.ParseFloat: parsing "abc": invalid syntax'),
    ("double", " 1.5", 'strconv.ParseFloat: parsing " 1.5": invalid syntax'),
    ("double", "1e", 'strconv.ParseFloat: parsing "1e": invalid syntax'),
    ("double", ".", 'strconv.ParseFloat: parsing ".": invalid syntax'),
    ("double", "1.2.3", 'strconv.ParseFloat: parsing "1.2.3": invalid syntax'),
    ("double", "0x10", 'strconv.ParseFloat: parsing "0x10": invalid syntax'),
    ("double", "1__0", 'strconv.ParseFloat: parsing "1__0": invalid syntax'),
    ("double", "_1", 'strconv.ParseFloat: parsing "_1": invalid syntax'),
    ("double", "1_", 'strconv.ParseFloat: parsing "1_": invalid syntax'),
    ("double", "+nan", 'strconv.ParseFloat: parsing "+nan": invalid syntax'),
    ("double", "infin", 'strconv.ParseFloat: parsing "infin": invalid syntax'),
    ("double", "1e400", 'strconv.ParseFloat: parsing "1e400": value out of range'),
    ("double", "-0x1p2000", 'strconv.ParseFloat: parsing "-0x1p2000": value out of range'),
    ("bool", "TrUe", 'strconv.ParseBool: parsing "TrUe": invalid syntax'),
    ("bool", "FaLsE", 'strconv.ParseBool: parsing "FaLsE": invalid syntax'),
    ("bool", "yes", 'strconv.ParseBool: parsing "yes": invalid syntax'),
    ("string", b"\x00\xff", "invalid UTF-8 in bytes, cannot convert to string"),
    ("string", b"\xed\xa0\x80", "invalid UTF-8 in bytes, cannot convert to string"),
]


@pytest.mark.parametrize(("name", "value", "message"), PARSE_ERROR_CASES)
def test_conversion_of_a_malformed_string_is_an_error_with_go_message(name: str, value: Any, message: str) -> None:
    with pytest.raises(EvalError) as info:
        F[name](value)
    assert not isinstance(info.value, (IntOverflowError, NoSuchOverloadError))
    assert info.value.message == message


OVERLOAD_ERROR_CASES = [
    ("int", (True,)),
    ("int", (None,)),
    ("int", ([1],)),
    ("int", (NoHooks(),)),
    ("int", ()),
    ("int", (1, 2)),
    ("uint", (False,)),
    ("uint", (FakeTimestamp(),)),
    ("double", (True,)),
    ("double", (b"1",)),
    ("string", (None,)),
    ("string", ([1],)),
    ("string", ({"a": 1},)),
    ("string", (CelType("int"),)),
    ("string", (NoHooks(),)),
    ("bytes", (1,)),
    ("bytes", (None,)),
    ("bool", (1,)),
    ("bool", (None,)),
    ("dyn", ()),
    ("dyn", (1, 2)),
]


@pytest.mark.parametrize(("name", "args"), OVERLOAD_ERROR_CASES)
def test_conversion_of_an_unsupported_type_is_no_such_overload(name: str, args: tuple[Any, ...]) -> None:
    with pytest.raises(NoSuchOverloadError, match=f"no such overload: {name}"):
        F[name](*args)


def test_conversion_error_names_the_cel_type_it_was_given() -> None:
    with pytest.raises(NoSuchOverloadError) as info:
        F["int"](NoHooks())
    assert info.value.message == "no such overload: int(kpe.test.NoHooks)"


def test_conversions_declare_their_result_types() -> None:
    assert conversions.RESULT_TYPES == {
        "int": "int", "uint": "uint", "double": "double", "string": "string", "bytes": "bytes", "bool": "bool",
    }


# -- Go float renderings: properties over all doubles ------------------------

finite_doubles = st.floats(allow_nan=False, allow_infinity=False)


@given(finite_doubles)
def test_string_of_a_double_reads_back_as_the_same_double(x: float) -> None:
    text = go_format_g(x)
    assert struct.pack("<d", float(text)) == struct.pack("<d", x)


@given(finite_doubles)
def test_string_of_a_double_uses_an_exponent_exactly_when_go_does(x: float) -> None:
    text = go_format_g(x)
    # Go's %g decides on the decimal exponent of the shortest digits: %e below -4 or from 6.
    exponent = Decimal(repr(x)).adjusted() if x else 0
    assert ("e" in text) == (exponent < -4 or exponent >= 6)
    if "e" in text:
        mantissa, _, exp = text.partition("e")
        assert exp[0] in "+-" and len(exp) >= 3 and int(exp) == exponent
        assert 1 <= abs(float(mantissa)) < 10
