"""Kubernetes' CEL lists library, called through its METHODS table.

Cases come from the "stdlib list functions" cases of Kubernetes'
apiextensions-apiserver/pkg/apiserver/schema/cel/validation_test.go and lists.go's docs.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from engine.cel.ext import lists as lib
from engine.cel.errors import EvalError, IntOverflowError, NoSuchOverloadError
from engine.cel.types.values import UInt, register_type

INTS = [1, 2, 2, 3]
DOUBLES = [1.0, 2.0, 2.0, 3.0]
STRINGS = ["a", "b", "b", "c"]
OBJS = [{"f1": "a", "f2": "a"}, {"f1": "a", "f2": "b"}, {"f1": "a", "f2": "b"}, {"f1": "a", "f2": "c"}]


def call(name: str, recv: Any, *args: Any) -> Any:
    return lib.METHODS[name][type(recv)](recv, *args)


@pytest.mark.parametrize(
    ("name", "recv", "args", "expected"),
    [
        ("sum", INTS, (), 8),
        ("min", INTS, (), 1),
        ("max", INTS, (), 3),
        ("sum", [], (), 0),
        ("isSorted", INTS, (), True),
        ("isSorted", [], (), True),
        ("isSorted", [2, 1], (), False),
        ("indexOf", INTS, (2,), 1),
        ("lastIndexOf", INTS, (2,), 2),
        ("indexOf", INTS, (10,), -1),
        ("lastIndexOf", INTS, (10,), -1),
        ("sum", DOUBLES, (), 8.0),
        ("min", DOUBLES, (), 1.0),
        ("max", DOUBLES, (), 3.0),
        ("isSorted", DOUBLES, (), True),
        ("isSorted", [2.0, 1.0], (), False),
        ("indexOf", DOUBLES, (2.0,), 1),
        ("lastIndexOf", DOUBLES, (2.0,), 2),
        ("indexOf", DOUBLES, (10.0,), -1),
        ("min", STRINGS, (), "a"),
        ("max", STRINGS, (), "c"),
        ("isSorted", STRINGS, (), True),
        ("isSorted", ["b", "a"], (), False),
        ("indexOf", STRINGS, ("b",), 1),
        ("lastIndexOf", STRINGS, ("b",), 2),
        ("indexOf", STRINGS, ("x",), -1),
        # structural equality for lists, maps and objects
        ("indexOf", [[1], [2]], ([1],), 0),
        ("lastIndexOf", [{"a": 1}, {"b": 2}], ({"b": 2},), 1),
        ("indexOf", OBJS, (OBJS[1],), 1),
        ("lastIndexOf", OBJS, (OBJS[1],), 2),
        ("min", [0], (), 0),
        # lists.go docs
        ("sum", [1, 3], (), 4),
        ("sum", [1.0, 3.0], (), 4.0),
        ("min", [1, 3], (), 1),
        ("max", [1, 3], (), 3),
        ("isSorted", [1], (), True),
        ("isSorted", [1, 2, 3], (), True),
        ("indexOf", [1.0], (1.1,), -1),
        ("indexOf", [], ("string",), -1),
    ],
)
def test_list_functions_match_kubernetes_cases(name: str, recv: list[Any], args: tuple[Any, ...], expected: Any) -> None:
    result = call(name, recv, *args)
    assert result == expected
    assert type(result) is type(expected)


@pytest.mark.parametrize("name", ["min", "max"])
@pytest.mark.parametrize("empty", [[], ()])
def test_min_and_max_of_an_empty_list_are_errors(name: str, empty: Any) -> None:
    with pytest.raises(EvalError) as info:
        call(name, empty)
    assert info.value.message == f"{name} called on empty list"


def test_sum_of_ints_reports_int64_overflow() -> None:
    with pytest.raises(IntOverflowError):
        call("sum", [2**62, 2**62])
    assert call("sum", [2**62, 2**62 - 1]) == 2**63 - 1  # the largest int64 still fits
    assert call("sum", [-(2**62), -(2**62)]) == -(2**63)


def test_sum_of_uints_stays_uint_and_reports_overflow() -> None:
    total = call("sum", [UInt(1), UInt(2)])
    assert total == 3 and type(total) is UInt
    with pytest.raises(IntOverflowError):
        call("sum", [UInt(2**64 - 1), UInt(1)])


@pytest.mark.parametrize("recv", [["a", "b"], [[1], [2]], [True, False], [1, 2.0], [1, UInt(2)], [{"a": 1}]])
def test_sum_of_anything_but_one_numeric_type_is_no_such_overload(recv: list[Any]) -> None:
    with pytest.raises(NoSuchOverloadError):
        call("sum", recv)


@pytest.mark.parametrize("name", ["min", "max", "isSorted"])
@pytest.mark.parametrize("recv", [[[1], [2]], [{"a": 1}, {"b": 2}], [None], [1, "a"], ["a", b"a"]])
def test_ordering_needs_comparable_elements_of_one_kind(name: str, recv: list[Any]) -> None:
    with pytest.raises(NoSuchOverloadError):
        call(name, recv)


def test_numbers_of_different_types_compare_by_value() -> None:
    assert call("min", [3, 2.5, UInt(2)]) == UInt(2)
    assert call("max", [3, 2.5, UInt(2)]) == 3
    assert call("isSorted", [1, 1.5, UInt(2)]) is True
    assert call("isSorted", [UInt(2), 1.5]) is False


def test_min_and_max_keep_the_first_of_equal_elements() -> None:
    assert type(call("min", [1, 1.0])) is int
    assert type(call("max", [1.0, 1])) is float


def test_bools_and_bytes_are_ordered() -> None:
    assert call("min", [True, False]) is False
    assert call("isSorted", [False, True]) is True
    assert call("max", [b"a", b"b"]) == b"b"


def test_nan_is_skipped_by_comparisons_as_in_cel_go() -> None:
    # cel-go's Compare returns an error for NaN, which the Kubernetes functions ignore.
    assert call("isSorted", [1.0, math.nan, 0.5]) is True
    assert call("min", [1.0, math.nan]) == 1.0
    assert math.isnan(call("min", [math.nan, 1.0]))


def test_index_of_compares_numbers_across_types() -> None:
    assert call("indexOf", [1, 2.0, 3], 2) == 1
    assert call("lastIndexOf", [UInt(1), 1, 1.0], 1) == 2
    assert call("indexOf", [True, 1], 1) == 1  # a bool is not a number


def test_tuples_are_lists_too() -> None:
    assert call("sum", (1, 2)) == 3
    assert call("indexOf", ("a", "b"), "b") == 1


class _FakeDuration:
    """Stands in for the timestamps module's duration class: ordered and addable."""

    def __init__(self, seconds: int) -> None:
        self.seconds = seconds

    def __add__(self, other: "_FakeDuration") -> "_FakeDuration":
        return _FakeDuration(self.seconds + other.seconds)

    def __lt__(self, other: "_FakeDuration") -> bool:
        return self.seconds < other.seconds

    def __gt__(self, other: "_FakeDuration") -> bool:
        return self.seconds > other.seconds

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _FakeDuration) and other.seconds == self.seconds

    def __hash__(self) -> int:
        return self.seconds


register_type(_FakeDuration, "google.protobuf.Duration")


def test_durations_sum_and_order_like_numbers() -> None:
    # validation_test.go: durations ['1s', '1m', '1m', '1h'] sum to 1h2m1s, min 1s, max 1h
    durations = [_FakeDuration(1), _FakeDuration(60), _FakeDuration(60), _FakeDuration(3600)]
    assert call("sum", durations) == _FakeDuration(3721)
    assert call("min", durations) == _FakeDuration(1)
    assert call("max", durations) == _FakeDuration(3600)
    assert call("isSorted", durations) is True
    assert call("isSorted", [_FakeDuration(60), _FakeDuration(1)]) is False
    assert call("indexOf", durations, _FakeDuration(60)) == 1
    assert call("lastIndexOf", durations, _FakeDuration(60)) == 2
