"""Kubernetes' CEL quantity library, called through its FUNCTIONS/METHODS tables.

Cases come from Kubernetes: k8s.io/apiserver/pkg/cel/library/quantity_test.go (the CEL
library) and k8s.io/apimachinery/pkg/api/resource/quantity_test.go (TestQuantityParse,
TestQuantityString, TestQuantityParseEmit), plus the examples in quantity.go's docs.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import pytest

from engine.cel.ext import quantity as lib
from engine.cel.errors import EvalError, NoSuchOverloadError
from engine.cel.types.values import type_name

MAX_INT64 = 2**63 - 1


def q(text: str) -> lib.Quantity:
    result = lib.FUNCTIONS["quantity"](text)
    assert isinstance(result, lib.Quantity)
    return result


def call(name: str, recv: Any, *args: Any) -> Any:
    return lib.METHODS[name][type(recv)](recv, *args)


def value(quantity: lib.Quantity) -> Fraction:
    return Fraction(quantity.mantissa) * Fraction(10) ** quantity.exponent


# --- quantity_test.go (CEL library) -----------------------------------------------------


def test_quantity_parses_twelve_mebibytes() -> None:
    assert value(q("12Mi")) == 12 * 2**20


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("10Mo", "quantities must match the regular expression"),  # fails the format check
        ("10Mm", "unable to parse quantity's suffix"),  # passes the format, fails the suffix
        ("abc", "quantities must match the regular expression"),
        ("Three", "quantities must match the regular expression"),
        ("200K", "unable to parse quantity's suffix"),  # suffixes are case-sensitive
        ("", "quantities must match the regular expression"),
    ],
)
def test_quantity_rejects_text_that_is_not_a_quantity(text: str, message: str) -> None:
    with pytest.raises(EvalError, match=message):
        q(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("20", True),
        ("20M", True),
        ("20Mi", True),
        ("20Mo", False),
        ("10Mm", False),
        ("1.3G", True),
        ("1.3Gi", True),
        ("1,3G", False),
        ("10000k", True),
        ("200K", False),
        ("Three", False),
    ],
)
def test_is_quantity_says_whether_quantity_would_succeed(text: str, expected: bool) -> None:
    assert lib.FUNCTIONS["isQuantity"](text) is expected


def test_is_quantity_of_a_list_is_no_such_overload() -> None:
    with pytest.raises(NoSuchOverloadError):
        lib.FUNCTIONS["isQuantity"]([1, 2, 3])


def test_quantity_of_a_number_is_no_such_overload() -> None:
    with pytest.raises(NoSuchOverloadError):
        lib.FUNCTIONS["quantity"](5)


def test_a_suffix_without_a_number_parses_as_zero_as_in_apimachinery() -> None:
    # The CEL docs say quantity('Mi') is an error, but resource.ParseQuantity accepts a
    # bare suffix as 0 (kubernetes/apimachinery#165, closed unfixed); we follow the code.
    assert value(q("Mi")) == 0
    assert lib.FUNCTIONS["isQuantity"]("k") is True


@pytest.mark.parametrize(
    ("left", "right", "equal"),
    [
        ("200M", "200M", True),
        ("200M", "0.2G", True),
        ("0.2G", "200M", True),
        ("2M", "0.002G", True),
        ("2000k", "2M", True),
        ("0.002G", "2000k", True),
        ("200M", "0.3G", False),
        ("1k", "1000", True),
        ("1Ki", "1024", True),
        ("1Ki", "1k", False),
    ],
)
def test_quantities_are_equal_when_their_values_are(left: str, right: str, equal: bool) -> None:
    assert (q(left) == q(right)) is equal
    assert (hash(q(left)) == hash(q(right))) or not equal


@pytest.mark.parametrize(
    ("method", "left", "right", "expected"),
    [
        ("isLessThan", "50M", "50Mi", True),
        ("isLessThan", "50M", "100M", True),
        ("isLessThan", "100M", "50M", False),
        ("isGreaterThan", "50Mi", "50M", True),
        ("isGreaterThan", "150Mi", "100Mi", True),
        ("isGreaterThan", "50M", "100M", False),
        ("isGreaterThan", "50Mi", "100Mi", False),
        ("compareTo", "200M", "0.2G", 0),
        ("compareTo", "50M", "50Mi", -1),
        ("compareTo", "50Mi", "50M", 1),
        # resource/quantity_test.go TestQuantityCmp
        ("compareTo", "0", "0", 0),
        ("compareTo", "100m", "50m", 1),
        ("compareTo", "50m", "100m", -1),
        ("compareTo", "10000T", "100Gi", 1),
    ],
)
def test_quantities_compare_by_value(method: str, left: str, right: str, expected: Any) -> None:
    assert call(method, q(left), q(right)) == expected


def test_comparing_a_quantity_with_a_string_is_no_such_overload() -> None:
    with pytest.raises(NoSuchOverloadError):
        call("compareTo", q("1"), "1")


def test_add_and_sub_take_quantities_or_ints() -> None:
    assert call("add", q("50k"), q("20")) == q("50.02k")
    assert call("isLessThan", call("add", q("50k"), 20), q("50020")) is False
    assert call("sub", q("50k"), q("20")) == q("49.98k")
    assert call("sub", q("50k"), 20) == q("49980")
    assert call("add", q("50k"), q("20k")) == q("70k")
    assert call("sub", q("50k"), 20000) == q("30k")
    chain = call("sub", call("sub", call("add", q("50k"), 20), q("100k")), -50000)
    assert chain == q("20")


def test_arithmetic_chains_convert_back_to_integers() -> None:
    assert call("asInteger", call("sub", call("add", q("50k"), 20), q("100k"))) == -49980
    chain = call("sub", call("sub", call("add", q("50k"), 20), q("100k")), -50000)
    assert call("asInteger", chain) == 20


def test_add_with_a_double_is_no_such_overload() -> None:
    with pytest.raises(NoSuchOverloadError):
        call("add", q("1"), 1.5)


@pytest.mark.parametrize(
    ("text", "integer"),
    [
        ("50k", 50000),
        ("50", 50),
        ("50000000G", 50000000 * 10**9),
        ("-7Ki", -7168),
        ("999999999999999999", 10**18 - 1),  # 18 digits: the most ParseQuantity keeps in int64
    ],
)
def test_as_integer_returns_quantities_held_as_int64(text: str, integer: int) -> None:
    assert call("isInteger", q(text)) is True
    assert call("asInteger", q(text)) == integer


@pytest.mark.parametrize(
    "text",
    [
        "9999999999999999999999999999999999999G",  # beyond int64
        "1.5",  # fractional
        # Kubernetes' AsInt64 fails for an int64 mantissa with a negative scale, even a
        # whole one, and for anything held as an inf.Dec (1Ei takes that path in parsing).
        "1000m",
        "1Ei",
        "9223372036854775807",  # 19 digits parse to an inf.Dec
    ],
)
def test_as_integer_fails_where_kubernetes_as_int64_does(text: str) -> None:
    assert call("isInteger", q(text)) is False
    with pytest.raises(EvalError, match="cannot convert value to integer"):
        call("asInteger", q(text))


def test_adding_past_int64_keeps_the_exact_value_but_is_no_integer() -> None:
    total = call("add", q("9223372036854775807"), 1)
    assert value(total) == 2**63
    assert call("isInteger", total) is False


@pytest.mark.parametrize(
    ("text", "expected"),
    [("50.703k", 50703.0), ("1.5Gi", 1610612736.0), ("-250m", -0.25), ("12e6", 12e6)],
)
def test_as_approximate_float_gives_the_value_as_a_double(text: str, expected: float) -> None:
    assert call("asApproximateFloat", q(text)) == expected


def test_as_approximate_float_after_sub() -> None:
    assert call("asApproximateFloat", call("sub", q("50k"), 20000)) == 30000.0


def test_as_approximate_float_of_a_huge_quantity_is_close() -> None:
    got = call("asApproximateFloat", q("9999999999999999999999999999999999999G"))
    assert math.isclose(got, 1e46, rel_tol=1e-12)


@pytest.mark.parametrize(("text", "sign"), [("5", 1), ("-5m", -1), ("0", 0), ("0Ki", 0), ("-0.0001n", -1)])
def test_sign_is_minus_one_zero_or_one(text: str, sign: int) -> None:
    assert call("sign", q(text)) == sign
    assert lib.FUNCTIONS["sign"](q(text)) == sign


def test_the_cel_type_is_named_kubernetes_quantity() -> None:
    assert type_name(q("1")) == "kubernetes.Quantity"


# --- resource/quantity_test.go: TestQuantityParse --------------------------------------


@pytest.mark.parametrize(
    ("text", "expected", "fmt"),
    [
        ("0", 0, lib.DECIMAL_SI),
        ("0n", 0, lib.DECIMAL_SI),
        ("0Ki", 0, lib.BINARY_SI),
        ("0Ti", 0, lib.BINARY_SI),
        ("1", 1, lib.DECIMAL_SI),
        ("8Ki", 8 * 1024, lib.BINARY_SI),
        ("5Ti", 5 * 1024**4, lib.BINARY_SI),
        ("4Pi", 4 * 1024**5, lib.BINARY_SI),
        ("3Ei", 3 * 1024**6, lib.BINARY_SI),
        ("100Ti", 100 * 1024**4, lib.BINARY_SI),
        ("5n", Fraction(5, 10**9), lib.DECIMAL_SI),
        ("4u", Fraction(4, 10**6), lib.DECIMAL_SI),
        ("3m", Fraction(3, 1000), lib.DECIMAL_SI),
        ("50k", 50000, lib.DECIMAL_SI),
        ("300T", 300 * 10**12, lib.DECIMAL_SI),
        ("1E", 10**18, lib.DECIMAL_SI),
        ("1E-3", Fraction(1, 1000), lib.DECIMAL_EXPONENT),
        ("1e3", 1000, lib.DECIMAL_EXPONENT),
        ("1E18", 10**18, lib.DECIMAL_EXPONENT),
        ("100.035k", 100035, lib.DECIMAL_SI),
        ("0.0005k", Fraction(1, 2), lib.DECIMAL_SI),
        ("0.00050k", Fraction(1, 2), lib.DECIMAL_SI),
        ("0.5e-2", Fraction(5, 1000), lib.DECIMAL_EXPONENT),
        ("10.035M", 10035000, lib.DECIMAL_SI),
        ("1.3E+6", 1300000, lib.DECIMAL_EXPONENT),
        ("1.7E18", 17 * 10**17, lib.DECIMAL_EXPONENT),
        ("6.987654321G", 6987654321, lib.DECIMAL_SI),
        ("1.01E", 101 * 10**16, lib.DECIMAL_SI),
        # rounded up to whole nano units
        ("3.001n", Fraction(4, 10**9), lib.DECIMAL_SI),
        ("1.1E-9", Fraction(2, 10**9), lib.DECIMAL_EXPONENT),
        ("0.0000000005", Fraction(1, 10**9), lib.DECIMAL_SI),
        ("0.9n", Fraction(1, 10**9), lib.DECIMAL_SI),
        ("0.00000012345", Fraction(124, 10**9), lib.DECIMAL_SI),
        # binary quantities are capped at the largest int64
        ("9Ei", MAX_INT64, lib.BINARY_SI),
        ("9223372036854775807Ki", MAX_INT64, lib.BINARY_SI),
        ("12E", 12 * 10**18, lib.DECIMAL_SI),
        ("100.035Ki", Fraction(10243584, 100), lib.BINARY_SI),
        ("0.5Mi", 512 * 1024, lib.BINARY_SI),
        ("0.05Gi", Fraction(536870912, 10), lib.BINARY_SI),
        ("0.025Ti", Fraction(274877906944, 10), lib.BINARY_SI),
        ("0.000000000001Ki", Fraction(2, 10**9), lib.DECIMAL_SI),  # rounds up, changes format
        (".001", Fraction(1, 1000), lib.DECIMAL_SI),
        (".0001k", Fraction(1, 10), lib.DECIMAL_SI),
        ("1.", 1, lib.DECIMAL_SI),
        ("1.G", 10**9, lib.DECIMAL_SI),
    ],
)
def test_quantity_parses_kubernetes_parse_table(text: str, expected: Fraction | int, fmt: str) -> None:
    for sign, prefix in ((1, ""), (1, "+"), (-1, "-")):
        parsed = q(prefix + text)
        assert value(parsed) == sign * expected, prefix + text
        assert parsed.format == fmt, prefix + text


@pytest.mark.parametrize(
    "text", ["1.1.M", "1+1.0M", "0.1mi", "0.1am", "aoeu", ".5i", "1i", "-3.01i", "-3.01e-", " 1", "1 "]
)
def test_quantity_rejects_kubernetes_invalid_table(text: str) -> None:
    with pytest.raises(EvalError):
        q(text)
    assert lib.FUNCTIONS["isQuantity"](text) is False


# --- resource/quantity_test.go: TestQuantityString and TestQuantityParseEmit -----------


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("1024Mi", "1Gi"),
        ("307200Ki", "300Mi"),
        ("6Ki", "6Ki"),
        ("1025024Mi", "1001Gi"),
        ("1024Gi", "1Ti"),
        ("5000m", "5"),
        ("0.5", "500m"),
        ("1000M", "1G"),
        ("0.001T", "1G"),
        ("1000u", "1m"),
        ("80m", "80m"),
        ("1.08", "1080m"),
        ("1080000000n", "1080m"),
        ("300M", "300M"),
        ("1T", "1T"),
        ("1234567M", "1234567M"),
        ("1234567m", "1234567m"),
        ("3k", "3k"),
        ("1025", "1025"),
        ("00", "0"),
        (".001e12", "1e9"),
        ("0.001e0", "1e-3"),
        ("1000e-12", "1e-9"),
        ("80e-3", "80e-3"),
        ("300e6", "300e6"),
        ("3e3", "3e3"),
        ("1n", "1n"),
        ("1080n", "1080n"),
        ("80u", "80u"),
        ("1080u", "1080u"),
        ("1Ki", "1Ki"),
        ("1Mi", "1Mi"),
        ("1Gi", "1Gi"),
        (".001Ki", "1024m"),
        (".000001Ki", "1024u"),
        (".000000001Ki", "1024n"),
        (".000000000001Ki", "2n"),
        ("1.5Gi", "1536Mi"),
        ("1000m", "1"),
        ("1536Mi", "1536Mi"),
    ],
)
def test_cel_string_is_kubernetes_canonical_form(text: str, canonical: str) -> None:
    assert q(text).cel_string() == canonical
    if canonical != "0":
        assert q("-" + text).cel_string() == "-" + canonical


def test_adding_or_subtracting_zero_keeps_the_suffix() -> None:
    # TestQuantityAddZeroPreservesSuffix / TestQuantitySubZeroPreservesSuffix
    for text in ("100m", "1Gi"):
        assert call("add", q(text), q("0")).cel_string() == text
        assert call("add", q("0"), q(text)).cel_string() == text
        assert call("sub", q(text), q("0")).cel_string() == text
        assert call("sub", q("0"), q(text)).cel_string() == "-" + text


def test_a_sum_of_ints_prints_in_the_receivers_format() -> None:
    assert call("add", q("50k"), 20).cel_string() == "50020"
    assert call("add", q("1Ki"), 1024).cel_string() == "2Ki"
    # a zero receiver takes the format of what is added: NewQuantity(i, DecimalExponent)
    assert call("add", q("0"), 5000).cel_string() == "5e3"
