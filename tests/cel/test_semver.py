"""Kubernetes' CEL semver library, called through its FUNCTIONS/METHODS tables.

Cases come from k8s.io/apiserver/pkg/cel/library/semver_test.go and semverlib.go's
docs; ordering cases from the semver.org 2.0.0 precedence rules blang/semver v4 follows;
error texts from blang/semver v4's Parse.
"""

from __future__ import annotations

from typing import Any

import pytest

from engine.cel.ext import semver as lib
from engine.cel.errors import EvalError, NoSuchOverloadError
from engine.cel.types.values import type_name


def sv(text: str, *normalize: bool) -> lib.Semver:
    result = lib.FUNCTIONS["semver"](text, *normalize)
    assert isinstance(result, lib.Semver)
    return result


def call(name: str, recv: Any, *args: Any) -> Any:
    return lib.METHODS[name][type(recv)](recv, *args)


def is_semver(text: Any, *normalize: Any) -> Any:
    return lib.FUNCTIONS["isSemver"](text, *normalize)


def test_semver_parses_major_minor_patch() -> None:
    v = sv("1.2.3")
    assert (call("major", v), call("minor", v), call("patch", v)) == (1, 2, 3)


def test_semver_without_normalization_rejects_a_v_prefix_and_short_form() -> None:
    with pytest.raises(EvalError, match="No Major.Minor.Patch elements found"):
        sv("v1.0")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1.2.3-beta.1+build.1", True),
        ("", False),
        ("v1.0.0", False),
        (" 1.0.0", False),
        ("1. 0.0", False),
        ("1.0.0 ", False),
        ("01.01.01", False),
        ("1", False),
        ("1.1", False),
        ("1.0.0", True),
        ("hello", False),
        ("v1.0", False),
    ],
)
def test_is_semver_is_strict_by_default(text: str, expected: bool) -> None:
    assert is_semver(text) is expected
    assert is_semver(text, False) is expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", False),
        (" 1.0.0", False),
        ("1. 0.0", False),
        ("1.0.0 ", False),
        ("v1.0.0", True),
        ("01.01.01", True),
        ("1", True),
        ("1.1", True),
        ("v1.0", True),
    ],
)
def test_is_semver_with_normalization_accepts_v_prefix_zeros_and_short_forms(text: str, expected: bool) -> None:
    assert is_semver(text, True) is expected


def test_normalization_makes_short_versions_full() -> None:
    assert sv("v01.01", True) == sv("1.1.0")
    assert sv("v1.0.0", True) == sv("1.0.0")
    assert sv("1.0", True) == sv("1.0.0")
    assert sv("01.01.01", True) == sv("1.1.1")


def test_normalization_refuses_prerelease_on_a_short_version() -> None:
    with pytest.raises(EvalError, match="short version cannot contain PreRelease/Build meta data"):
        sv("1.0-alpha", True)


def test_is_semver_of_a_list_is_no_such_overload() -> None:
    with pytest.raises(NoSuchOverloadError):
        is_semver([1, 2, 3])


def test_semver_with_a_non_bool_flag_is_no_such_overload() -> None:
    with pytest.raises(NoSuchOverloadError):
        lib.FUNCTIONS["semver"]("1.0.0", 1)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "Version string empty"),
        ("1.2", "No Major.Minor.Patch elements found"),
        ("a.0.0", 'Invalid character(s) found in major number "a"'),
        ("01.0.0", 'Major number must not contain leading zeroes "01"'),
        ("1.01.0", 'Minor number must not contain leading zeroes "01"'),
        ("1.0.01", 'Patch number must not contain leading zeroes "01"'),
        ("1.0.x", 'Invalid character(s) found in patch number "x"'),
        ("1.0.", 'strconv.ParseUint: parsing "": invalid syntax'),
        ("1.0.0-", "Prerelease is empty"),
        ("1.0.0-01", 'Numeric PreRelease version must not contain leading zeroes "01"'),
        ("1.0.0-a_b", 'Invalid character(s) found in prerelease "a_b"'),
        ("1.0.0+", "Build meta data is empty"),
        ("1.0.0+a_b", 'Invalid character(s) found in build meta data "a_b"'),
        ("99999999999999999999.0.0", 'strconv.ParseUint: parsing "99999999999999999999": value out of range'),
    ],
)
def test_semver_errors_name_the_part_that_is_wrong(text: str, message: str) -> None:
    with pytest.raises(EvalError) as info:
        sv(text)
    assert info.value.message == message


@pytest.mark.parametrize(
    ("left", "right", "equal"),
    [
        ("1.2.3", "1.2.3", True),
        ("1.2.3", "1.0.0", False),
        ("1.0.0+build.1", "1.0.0+build.2", True),  # build metadata does not take part
        ("1.0.0-alpha", "1.0.0", False),
    ],
)
def test_semvers_are_equal_when_they_order_equal(left: str, right: str, equal: bool) -> None:
    assert (sv(left) == sv(right)) is equal
    if equal:
        assert hash(sv(left)) == hash(sv(right))


@pytest.mark.parametrize(
    ("method", "left", "right", "expected"),
    [
        ("isLessThan", "1.0.0", "1.2.3", True),
        ("isLessThan", "1.0.0", "1.0.0", False),
        ("isGreaterThan", "1.2.3", "1.0.0", True),
        ("isGreaterThan", "1.0.0", "1.0.0", False),
        ("compareTo", "1.2.3", "1.2.3", 0),
        ("compareTo", "1.0.0", "1.2.3", -1),
        ("compareTo", "1.2.3", "1.0.0", 1),
        ("compareTo", "1.2.3", "2.0.0", -1),
        ("compareTo", "1.2.3", "0.1.2", 1),
        ("compareTo", "1.10.0", "1.9.0", 1),  # numeric, not textual
    ],
)
def test_semvers_compare(method: str, left: str, right: str, expected: Any) -> None:
    assert call(method, sv(left), sv(right)) == expected


def test_prereleases_follow_semver_precedence() -> None:
    ordered = [
        "1.0.0-alpha",
        "1.0.0-alpha.1",
        "1.0.0-alpha.beta",
        "1.0.0-beta",
        "1.0.0-beta.2",
        "1.0.0-beta.11",
        "1.0.0-rc.1",
        "1.0.0",
    ]
    for lower, higher in zip(ordered, ordered[1:]):
        assert call("compareTo", sv(lower), sv(higher)) == -1, (lower, higher)
        assert call("compareTo", sv(higher), sv(lower)) == 1, (higher, lower)


def test_comparing_with_a_string_is_no_such_overload() -> None:
    with pytest.raises(NoSuchOverloadError):
        call("isLessThan", sv("1.0.0"), "2.0.0")


def test_the_cel_type_is_named_kubernetes_semver() -> None:
    assert type_name(sv("1.0.0")) == "kubernetes.Semver"
