"""Run-time bounds: strings and lists never grow past the size limits, and the
functions that scan strings spend the per-evaluation cost budget (engine/cel/limits.py)."""

from __future__ import annotations


import pytest

from engine import cel
from engine.cel.limits import MAX_STRING_SIZE, SizeLimitError

MIB = "a" * MAX_STRING_SIZE
# 39 characters: Kubernetes multiplies a regular expression's scan by ceil(39 x 0.25) = 10.
LONG_PATTERN = "(a|b|c|d|e|f|g|h|i|j|k|l|m|n|o|p|q|r|s)"


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
    with pytest.raises(SizeLimitError) as info:
        run(text, s="0123456789abcdef")
    assert info.value.message == "_+_ would build a string of 2,097,152 characters, over the limit of 1,048,576"


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


def test_find_all_over_a_one_mib_string_is_within_kubernetes_budget_and_stops_at_the_list_size_limit() -> None:
    # Kubernetes charges findAll its scan (104,858 units for 1 MiB and a 1-character
    # pattern), not its results: the expression keeps no budget; the size limit stops it.
    program = cel.compile("s.findAll('.').size()", variables=["s"])
    assert not program.accounting
    with pytest.raises(SizeLimitError) as info:
        program.evaluate({"s": MIB})
    # It stops at the first item over the limit rather than building all 1,048,576.
    assert info.value.message == "findAll would build a list of 1,000,001 items, over the limit of 1,000,000"


def test_find_all_with_a_long_pattern_over_a_one_mib_string_fails_on_its_budget_before_scanning() -> None:
    with pytest.raises(cel.CostLimitError) as info:
        run(f"s.findAll('{LONG_PATTERN}').size()", s=MIB)
    assert info.value.message == "cost limit of 1000000 exceeded by findAll() in expression: s.findAll('(a|b|c|d|e|f|g|h|i|j|k|l|m|n|o|p|q|r|s)').size()"


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
        run(f"s.findAll('{LONG_PATTERN}').size() > 0 || true", s=MIB)


def test_an_expression_that_cannot_exceed_its_limit_on_any_admitted_object_keeps_no_budget() -> None:
    program = cel.compile("node.metadata.labels['zone'] == 'a' && pod.metadata.name.startsWith('web-')", variables=["pod", "node"])
    assert not program.accounting
    assert "_c = [" not in program.source and "_c[0]" not in program.source


def test_a_loop_over_an_unbounded_list_keeps_one_budget_charged_in_kubernetes_units_per_item() -> None:
    # per item: cel-go's loop condition (2), step (1), and x > 0 (x, >: 2)
    program = cel.compile("xs.all(x, x > 0)", variables=["xs"], cost_limit=5 * 1000 + 2)
    assert program.accounting
    assert "_c[0] -= len(_it2) * 5" in program.source
    assert program.evaluate({"xs": [1] * 1000}) is True  # 2 up front: xs and the result
    with pytest.raises(cel.CostLimitError) as info:
        program.evaluate({"xs": [1] * 1001})
    assert info.value.message == "cost limit of 5002 exceeded by all() in expression: xs.all(x, x > 0)"


def test_every_call_of_an_evaluation_spends_the_same_budget() -> None:
    # Each scan is 104,858 x 10 / 2 units with a limit of 600,000 per call site; together
    # they are over it. Before, each call site had a budget of its own.
    half = "z" * (MAX_STRING_SIZE // 2)
    text = f"s.matches('{LONG_PATTERN}') || t.matches('{LONG_PATTERN}')"
    program = cel.compile(text, variables=["s", "t"], cost_limit=600_000)
    assert program.evaluate({"s": "xyz", "t": "zyx"}) is False
    with pytest.raises(cel.CostLimitError):
        program.evaluate({"s": half, "t": half + "b"})
