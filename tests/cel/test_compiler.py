"""The compiler's own promises: CEL error semantics, exact compile errors,
partial evaluation, the cost bound, and safe code generation."""

from __future__ import annotations

import pytest

import engine.cel as cel
from engine.cel.interpreter.program import hoisting_candidates

POD = {"metadata": {"name": "p", "labels": {"team": "ml", "zone": "a"}}, "spec": {"containers": [{"name": "c"}]}}
NODE = {"metadata": {"name": "n1", "labels": {"topology.kubernetes.io/zone": "a"}}}


def run(text: str, **activation: object) -> object:
    return cel.compile(text, variables=list(activation)).evaluate(activation)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a +", "ERROR: <input>:1:4: unexpected end of expression\n | a +\n |    ^"),
        ("pod.spec.\n  containers[", "ERROR: <input>:2:14: unexpected end of expression\n |   containers[\n |              ^"),
        ("'unterminated", "ERROR: <input>:1:1: unterminated string literal\n | 'unterminated\n | ^"),
        ("podd.metadata", "ERROR: <input>:1:1: undeclared reference to 'podd'\n | podd.metadata\n | ^"),
        ("pod.name.nosuch(1)", "ERROR: <input>:1:9: undeclared reference to 'nosuch'\n | pod.name.nosuch(1)\n |         ^"),
        ("1 + 'a'", "ERROR: <input>:1:3: found no matching overload for '_+_' applied to '(int, string)'\n | 1 + 'a'\n |   ^"),
        ("'\\q'", "ERROR: <input>:1:2: invalid escape sequence \\q\n | '\\q'\n |  ^"),
        ("9223372036854775808", "ERROR: <input>:1:1: int literal out of range\n | 9223372036854775808\n | ^"),
        ("Message{a: 1}", "ERROR: <input>:1:1: message literals are not supported: Message\n | Message{a: 1}\n | ^"),
    ],
)
def test_compile_errors_name_line_column_and_show_a_caret(text: str, message: str) -> None:
    with pytest.raises(cel.CompileError) as info:
        cel.compile(text, variables=["pod"])
    assert str(info.value) == message


def test_compile_error_exposes_line_and_column() -> None:
    with pytest.raises(cel.CompileError) as info:
        cel.compile("pod.a &&\n   nope", variables=["pod"])
    assert (info.value.line, info.value.column) == (2, 4)


@pytest.mark.parametrize(
    "text",
    [
        "pod.missing == 1 && false",
        "false && pod.missing == 1",
        "pod.missing == 1 || true",
        "true || pod.missing == 1",
        "[1, 0].all(x, 1 / x == 1) == false || true",
        "[0, 1].exists(x, 1 / x == 1)",
        "[1, 0].exists(x, 1 / x == 1)",
    ],
)
def test_errors_are_absorbed_by_logical_operators_in_either_order(text: str) -> None:
    assert run(text, pod=POD) is True or run(text, pod=POD) is False


def test_absorbed_errors_give_the_deciding_value() -> None:
    assert run("pod.missing == 1 && false", pod=POD) is False
    assert run("pod.missing == 1 || true", pod=POD) is True
    assert run("[0, 1].exists(x, 1 / x == 1)") is True


def test_unabsorbed_errors_raise_eval_error_with_a_cel_message() -> None:
    with pytest.raises(cel.NoSuchKeyError, match="no such key: missing"):
        run("pod.missing == 1 && true", pod=POD)
    with pytest.raises(cel.DivisionByZeroError):
        run("1 / 0 == 1")
    with pytest.raises(cel.EvalError, match="no such overload"):
        run("pod.metadata.name.size() + pod.metadata.name", pod=POD)


def test_has_in_boolean_context_is_a_presence_test() -> None:
    assert run("has(pod.metadata.labels) && has(pod.metadata.labels.team)", pod=POD) is True
    assert run("!has(pod.spec.nodeName) && has(pod.spec.containers)", pod=POD) is True
    assert run("has(pod.metadata.annotations) || pod.metadata.name == 'p'", pod=POD) is True


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("9223372036854775807 + 1", cel.IntOverflowError),
        ("-9223372036854775808 - 1", cel.IntOverflowError),
        ("0u - 1u", cel.IntOverflowError),
        ("-9223372036854775808 / -1", cel.IntOverflowError),
        ("18446744073709551615u + 1u", cel.IntOverflowError),
    ],
)
def test_integer_overflow_is_an_error(text: str, error: type[Exception]) -> None:
    with pytest.raises(error):
        run(text)


def test_int_uint_and_double_are_distinct_but_compare_numerically() -> None:
    assert run("type(1) != type(1u) && type(1u) != type(1.0)") is True
    assert run("1 == 1u && 1u == 1.0 && 2 > 1.5 && 1u < 2") is True
    assert run("dyn(true) == 1") is False
    with pytest.raises(cel.EvalError):
        run("dyn(1) + 1u")
    with pytest.raises(cel.CompileError, match="no matching overload for '_==_' applied to '.bool, int.'"):
        run("true == 1")


def test_strings_are_sized_and_indexed_in_code_points() -> None:
    assert run("'héllo'.size() == 5 && size('🐱') == 1") is True


def test_bound_program_gives_the_same_answers_as_evaluate() -> None:
    text = "node.metadata.labels['topology.kubernetes.io/zone'] == pod.metadata.labels.zone && pod.spec.containers.size() == 1"
    program = cel.compile(text, variables=["pod", "node"])
    per_node = program.bind(pod=POD)
    other = {"metadata": {"name": "n2", "labels": {"topology.kubernetes.io/zone": "b"}}}
    for node in (NODE, other):
        assert per_node(node=node) == program.evaluate({"pod": POD, "node": node})


def test_bind_hoists_the_pod_only_sub_expressions() -> None:
    program = cel.compile("node.metadata.name.startsWith(pod.metadata.labels.team + '-') || pod.spec.containers.all(c, c.name == 'c')", variables=["pod", "node"])
    hoisted = hoisting_candidates(program.root, frozenset({"pod"}), program.variables)
    assert len(hoisted) == 2  # the prefix and the whole containers check


def test_bind_keeps_error_semantics_when_a_pod_only_part_fails() -> None:
    program = cel.compile("!has(pod.metadata.labels.gpu) || node.metadata.labels[pod.metadata.labels.gpu] == 'yes'", variables=["pod", "node"])
    per_node = program.bind(pod=POD)
    assert per_node(node=NODE) is True
    strict = cel.compile("node.metadata.labels[pod.metadata.labels.gpu] == 'yes' || pod.metadata.name == 'p'", variables=["pod", "node"])
    assert strict.bind(pod=POD)(node=NODE) is True
    with pytest.raises(cel.NoSuchKeyError):
        cel.compile("node.metadata.labels[pod.metadata.labels.gpu] == 'yes'", variables=["pod", "node"]).bind(pod=POD)(node=NODE)


def test_constant_sub_expressions_are_folded_at_compile_time() -> None:
    program = cel.compile("x in [1, 2, 3].map(i, i * 10)", variables=["x"])
    assert "_range(" not in program.source
    assert program.evaluate({"x": 20}) is True


def test_nested_comprehensions_hit_the_cost_limit_and_name_the_expression() -> None:
    program = cel.compile("xs.all(a, xs.all(b, xs.all(c, a + b + c >= 0)))", variables=["xs"], cost_limit=100_000)
    with pytest.raises(cel.CostLimitError, match=r"cost limit of 100000 exceeded by all\(\) in expression: xs.all"):
        program.evaluate({"xs": list(range(100))})
    assert program.evaluate({"xs": list(range(10))}) is True


def test_cost_limit_is_not_absorbed_by_logical_operators() -> None:
    program = cel.compile("true || xs.all(a, xs.all(b, a == b))", variables=["xs"], cost_limit=10)
    assert program.evaluate({"xs": list(range(100))}) is True
    program = cel.compile("xs.all(a, xs.all(b, a == b)) || true", variables=["xs"], cost_limit=10)
    with pytest.raises(cel.CostLimitError):
        program.evaluate({"xs": list(range(100))})


def test_deeply_nested_expressions_compile_and_evaluate() -> None:
    text = "(x.a && " * 60 + "true" + ")" * 60
    assert run(text, x={"a": True}) is True
    assert run(" || ".join(["x.b"] * 300) + " || x.a", x={"a": True}) is True
    assert run("x.a ? 1 : " * 80 + "2", x={"a": False}) == 2


def test_policy_text_reaches_generated_code_only_as_literals() -> None:
    payload = """'); import os; os.system("false"); ('"""
    program = cel.compile("pod.metadata.name + " + repr(payload), variables=["pod"])
    assert program.evaluate({"pod": POD}) == "p" + payload
    assert "import os" not in program.source.replace(repr(payload), "")


def test_missing_variable_in_the_activation_is_an_evaluation_error() -> None:
    program = cel.compile("pod.metadata.name == 'p'", variables=["pod"])
    with pytest.raises(cel.EvalError, match="pod"):
        program.evaluate({})


def test_optional_syntax_as_kubernetes_uses_it() -> None:
    assert run("pod.metadata.?annotations.orValue({}).size() == 0", pod=POD) is True
    assert run("pod.metadata.labels[?'team'].orValue('none') == 'ml'", pod=POD) is True
    assert run("pod.metadata.?annotations['x'].hasValue()", pod=POD) is False
    assert run("{?'a': optional.none(), 'b': 1}", pod=POD) == {"b": 1}


def test_cost_limit_applies_to_each_call_of_a_bound_program_and_to_bind_itself() -> None:
    # Work done once at bind() is spent against bind()'s own budget; each per-node call
    # gets a full budget for the rest. A bound program therefore never does more than
    # the limit per call, even where evaluate() (both parts in one call) would exceed it.
    # Each all() costs 3 (its range, its result) and 5 per item (loop condition, step, i >= 0).
    text = "pod.items.all(i, i >= 0) && node.items.all(j, j >= 0)"
    program = cel.compile(text, variables=["pod", "node"], cost_limit=40)
    pod, node = {"items": list(range(6))}, {"items": list(range(6))}
    with pytest.raises(cel.CostLimitError):
        program.evaluate({"pod": pod, "node": node})
    assert program.bind(pod=pod)(node=node) is True
    with pytest.raises(cel.CostLimitError):
        program.bind(pod=pod)(node={"items": list(range(9))})
    # A pod-only part over the limit is not computed at bind(); it fails when a call needs it.
    with pytest.raises(cel.CostLimitError):
        program.bind(pod={"items": list(range(20))})(node=node)


@pytest.mark.parametrize("text", ["(" * 400 + "1" + ")" * 400, "[" * 400 + "]" * 400, " + ".join(["1"] * 3000), "!" * 3000 + "true"])
def test_an_expression_nested_too_deeply_is_a_compile_error_not_a_crash(text: str) -> None:
    with pytest.raises(cel.CompileError) as info:
        cel.compile(text)
    assert info.value.message == (
        "expression is nested too deeply to compile (parentheses, lists, maps, calls or operators "
        "inside each other a few hundred levels deep); split it into variables"
    )
