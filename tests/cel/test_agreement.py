"""Answers an independent engine (cel-cpp through cel-expr-python) found kpe getting
wrong (issue 11), each checked through ``evaluate`` and through ``bind``, the path
the server takes on every request."""

from __future__ import annotations

import pytest

import engine.cel as cel
from engine.cel.types.values import Optional, UInt

POD = {"metadata": {"name": "p", "labels": {"team": "ml"}}, "spec": {"priority": 5, "containers": []}}
NODE = {"metadata": {"name": "n1", "labels": {}}}

_ERROR = object()


def both(text: str, pod: object = POD, node: object = NODE) -> object:
    """The value under evaluate() and under bind(pod=...); fails if they differ."""
    program = cel.compile(text, variables=["pod", "node"], check=False)
    answers = []
    for run in (lambda: program.evaluate({"pod": pod, "node": node}), lambda: program.bind(pod=pod)(node=node)):
        try:
            answers.append(run())
        except cel.CelError:
            answers.append(_ERROR)
    evaluated, bound = answers
    assert repr(evaluated) == repr(bound), f"{text!r}: evaluate gave {evaluated!r}, bind gave {bound!r}"
    return evaluated


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[pod, 1u + 2u, 5u + 7u]", [POD, UInt(3), UInt(12)]),
        ("[pod, type(1) == int, type('a') == string]", [POD, True, True]),
        ("[pod.metadata.name.matches('^p$'), 'x'.matches('^y$')]", [True, False]),
        ("[pod.metadata.name, 1u + 2u, 'x' + 'y', 5u + 7u, 2.5 * 2.0]", ["p", UInt(3), "xy", UInt(12), 5.0]),
    ],
)
def test_constants_of_different_precomputed_parts_keep_their_own_values(text: str, expected: object) -> None:
    assert both(text) == expected


def test_bind_and_evaluate_agree_on_two_precomputed_type_tests() -> None:
    text = (
        "(type(pod.metadata.name) == string || node.metadata.name == 'x') && "
        "(type(pod.spec.priority) == int || node.metadata.name == 'y')"
    )
    assert both(text) is True


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("optional.of(1).orValue(pod.x)", 1),
        ("optional.of(1).orValue(pod.x && pod.y)", 1),
        ("pod.?metadata.?name.orValue(pod.x)", "p"),
        ("pod.?metadata.?name.orValue(pod.x || pod.y)", "p"),
        ("optional.of(1).or(pod.x).value()", 1),
        ("optional.of(1).or(optional.of(pod.x && pod.y)).value()", 1),
        ("pod.metadata.labels[?'team'].or(optional.of(1 / 0)).value()", "ml"),
        ("optional.none().orValue(pod.x)", _ERROR),
        ("optional.none().orValue(pod.x || true)", True),
        ("pod.?nosuch.orValue(pod.x && true)", _ERROR),
        ("optional.none().or(optional.of(2)).value()", 2),
    ],
)
def test_or_and_or_value_evaluate_their_argument_only_when_the_optional_is_empty(text: str, expected: object) -> None:
    assert both(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("{false: 1u, 0u: 'a'}.size()", 2),
        ("{true: 1, 1: 2}[1]", 2),
        ("{true: 1, 1: 2}[true]", 1),
        ("{true: 1, 1: 2}[1u]", 2),
        ("{true: 1, 1: 2}[1.0]", 2),
        ("{true: 1}[?1].hasValue()", False),
        ("1 in {true: 'a'}", False),
        ("true in {1: 'a'}", False),
        ("{true: 1, 1: 2}.map(k, type(k))", [cel.CelType("bool"), cel.CelType("int")]),
        ("{true: 1, 1: 2}.exists(k, k == true)", True),
        ("{true: 1, 1: 2} == {1: 2, true: 1}", True),
        ("{true: 1} == {1: 1}", False),
        ("{true: 'x', 1: 'y'}.transformMap(k, v, v + 'z').size()", 2),
        ("'%s'.format([{true: 1, 1: 2}])", "{1:2, true:1}"),
    ],
)
def test_map_keys_true_and_one_or_false_and_zero_are_different_keys(text: str, expected: object) -> None:
    assert both(text) == expected


def test_a_map_with_bool_keys_still_equals_the_python_dict_it_stands_for() -> None:
    assert both("{true: 1, 'a': 2}") == {True: 1, "a": 2}


@pytest.mark.parametrize(
    ("text", "present"),
    [("optional.ofNonZeroValue(0u)", False), ("optional.ofNonZeroValue(1u)", True), ("optional.ofNonZeroValue(0)", False)],
)
def test_of_non_zero_value_treats_uint_zero_as_zero(text: str, present: bool) -> None:
    value = both(text)
    assert type(value) is Optional and value.present is present


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("9223372036854775807u in [9.223372036854775807e18]", True),
        ("dyn(9223372036854775807) == 9223372036854775808.0", True),
        ("dyn(9223372036854775807) != 9223372036854775808.0", False),
        ("dyn(9223372036854775807) < 9223372036854775808.0", False),
        ("dyn(18446744073709551615u) == 18446744073709551616.0", True),
        ("[dyn(9007199254740993)] == [9007199254740992.0]", True),
        ("dyn(1) == 1.5", False),
        ("dyn(1u) == 1", True),
    ],
)
def test_numeric_equality_across_types_agrees_with_the_ordering(text: str, expected: bool) -> None:
    assert both(text) is expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("'abc'.indexOf('a', 3)", -1),
        ("'abc'.indexOf('a', 30)", -1),
        ("'abc'.indexOf('c', 2)", 2),
        ("'abc'.indexOf('a', -1)", _ERROR),
        ("'abc'.lastIndexOf('a', 3)", -1),
        ("'abc'.lastIndexOf('a', 2)", 0),
        ("'abc'.lastIndexOf('a', -1)", _ERROR),
        ("'abc'.indexOf('', 5)", 5),
    ],
)
def test_index_of_past_the_end_is_minus_one_as_in_cel_go_0_22(text: str, expected: object) -> None:
    assert both(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[1, 2][?1u].value()", 2),
        ("[1, 2][?1.0].value()", 2),
        ("[1, 2][?4294967296u].hasValue()", False),
        ("[1, 2][?18446744073709551615u].hasValue()", _ERROR),
        ("[1, 2][?9223372036854775808u].hasValue()", _ERROR),
        ("[1, 2][?1.8446744073709552e19].hasValue()", _ERROR),
        ("[1, 2][?9.3e18].orValue(0)", _ERROR),
        ("[1, 2][?-9.3e18].orValue(0)", _ERROR),
        ("[1, 2][18446744073709551615u]", _ERROR),
    ],
)
def test_a_list_index_is_an_int64_as_in_cel_go_or_the_optional_index_is_an_error(text: str, expected: object) -> None:
    # cel-go's IndexOrError: a uint or double index must be exactly an int64; a larger
    # one is an error even under [?], where kpe used to answer optional.none().
    assert both(text) == expected
