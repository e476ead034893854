"""Run-time bounds: strings and lists never grow past the size limits, and the
functions that scan strings spend the per-evaluation cost budget (engine/cel/limits.py)."""

from __future__ import annotations

import time

import pytest

from engine import cel
from engine.cel.limits import MAX_STRING_SIZE, SizeLimitError

MIB = "a" * MAX_STRING_SIZE


def run(text: str, **activation: object) -> object:
    return cel.compile(text, variables=list(activation)).evaluate(activation)


def test_concatenating_strings_past_one_mib_is_a_size_error_before_the_string_is_built() -> None:
    with pytest.raises(SizeLimitError) as info:
        run("s + 'x'", s=MIB)
    assert info.value.message == "_+_ would build a string of 1,048,577 characters, over the limit of 1,048,576"


def test_a_string_of_exactly_one_mib_can_still_be_built() -> None:
    assert run("(s + 'a').size()", s=MIB[:-1]) == MAX_STRING_SIZE


def test_concatenating_lists_past_the_list_limit_is_a_size_error() -> None:
    with pytest.raises(SizeLimitError) as info:
        run("l + l", l=list(range(600_000)))
    assert info.value.message == "_+_ would build a list of 1,200,000 items, over the limit of 1,000,000"


def test_doubling_a_string_in_a_chain_stops_at_the_limit_instead_of_allocating_256_mib() -> None:
    text = "s"
    for _ in range(24):
        text = f"[{text}].map(x, x + x)[0]"
    started = time.perf_counter()
    with pytest.raises(SizeLimitError):
        run(text, s="0123456789abcdef")
    assert time.perf_counter() - started < 1.0


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("s.replace('a', 'bb')", "replace would build a string of 2,097,152 characters, over the limit of 1,048,576"),
        ("[s, s].join(',')", "join would build a string of 2,097,153 characters, over the limit of 1,048,576"),
        ("'%s%s'.format([s, s])", "format would build a string of 2,097,152 characters, over the limit of 1,048,576"),
        ("strings.quote(s + s.substring(1))", "_+_ would build a string of 2,097,151 characters, over the limit of 1,048,576"),
    ],
)
def test_string_functions_that_grow_their_input_refuse_results_over_one_mib(text: str, message: str) -> None:
    with pytest.raises(SizeLimitError) as info:
        run(text, s=MIB)
    assert info.value.message == message


def test_a_size_error_is_an_evaluation_error_so_failure_policy_applies() -> None:
    assert issubclass(SizeLimitError, cel.EvalError)


def test_find_all_over_a_one_mib_string_fails_fast_with_a_cost_error() -> None:
    started = time.perf_counter()
    with pytest.raises(cel.CostLimitError) as info:
        run("s.findAll('.').size()", s=MIB)
    assert time.perf_counter() - started < 1.0
    assert info.value.message == "cost limit of 1000000 exceeded by findAll() in expression: s.findAll('.').size()"


def test_find_all_with_a_limit_over_a_one_mib_string_is_cheap() -> None:
    assert run("s.findAll('a', 3)", s=MIB) == ["a", "a", "a"]


def test_scanning_a_long_string_in_a_loop_spends_the_budget_by_its_length() -> None:
    # 20 scans of 1 MiB: 20 x 104,858 units is over the 1,000,000 budget.
    with pytest.raises(cel.CostLimitError) as info:
        run("l.all(x, s.indexOf(x) < 0)", s=MIB, l=[str(i) for i in range(20)])
    assert info.value.message.startswith("cost limit of 1000000 exceeded by indexOf()")


def test_contains_and_matches_on_long_strings_are_charged_and_on_short_ones_take_the_fast_path() -> None:
    assert run("l.all(x, s.contains('b') == false)", s=MIB, l=[1] * 9) is True
    with pytest.raises(cel.CostLimitError):
        run("l.all(x, s.contains('b') == false)", s=MIB, l=[1] * 10)
    # A literal pattern's answers are remembered: the same long string is scanned (and charged) once...
    assert run("l.all(x, !s.matches('^b+c'))", s=MIB, l=[1] * 10) is True
    # ...ten different ones are ten scans.
    with pytest.raises(cel.CostLimitError):
        run("l.all(x, !x.matches('^b+c'))", l=[MIB[i:] for i in range(10)])
    assert run("l.all(x, x.matches('^a+$'))", l=["a" * 100] * 1000) is True


def test_a_cost_error_in_a_scan_is_not_absorbed_by_a_logical_operator() -> None:
    with pytest.raises(cel.CostLimitError):
        run("s.findAll('.').size() > 0 || true", s=MIB)
