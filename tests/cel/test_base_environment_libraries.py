"""The libraries of Kubernetes' CEL base environment kpe added for issue 27 (point 2):
cel-go's lists and sets extensions, the format library and the transformMapEntry macro,
beyond the cases of Kubernetes' own tests (test_kubernetes_library_cases.py)."""

from __future__ import annotations

import pytest

import engine.cel as cel
from engine.cel.checker.cost import estimate
from engine.cel.checker.shapes import Shape
from engine.cel.parser.parser import parse
from engine.cel.types.values import Optional


def value(text: str, **bindings: object) -> object:
    return cel.compile(text, variables=list(bindings)).evaluate(bindings)


def error(text: str, **bindings: object) -> str:
    with pytest.raises(cel.CelError) as info:
        value(text, **bindings)
    return str(info.value)


def test_sort_by_keeps_the_order_of_elements_with_equal_keys() -> None:
    assert value("['b1', 'a1', 'b2', 'a2', 'b3'].sortBy(e, e.substring(0, 1))") == ["a1", "a2", "b1", "b2", "b3"]


def test_sort_by_works_on_pod_objects_and_when_bound_per_node() -> None:
    pods = [{"metadata": {"name": n, "priority": p}} for n, p in (("x", 3), ("y", 1), ("z", 2))]
    program = cel.compile("pods.sortBy(p, p.metadata.priority).map(p, p.metadata.name) == [node, 'z', 'x']", variables=["pods", "node"])
    assert program.evaluate({"pods": pods, "node": "y"}) is True
    assert program.bind(pods=pods)(node="y") is True


def test_sort_refuses_elements_of_different_types_or_without_an_order() -> None:
    assert "list elements must have the same type" in error("[1, 2.0].sort()")
    assert "list elements must be comparable" in error("[[1], [2]].sort()")
    assert "list elements must have the same type" in error("[1, 2].sortBy(e, e == 1 ? 'a' : 0)")


def test_lists_range_is_bounded_like_cel_go() -> None:
    assert "lists.range: size must be non-negative, got -1" in error("lists.range(-1)")
    assert "lists.range: size 1000001 exceeds maximum allowed (1000000)" in error("lists.range(1000001)")


def test_the_new_list_functions_spend_the_run_time_budget() -> None:
    items = list(range(2000))
    with pytest.raises(cel.CostLimitError):
        cel.compile("x.distinct().size() > 0", variables=["x"], cost_limit=1_000_000).evaluate({"x": items})
    with pytest.raises(cel.CostLimitError):
        cel.compile("sets.contains(x, x)", variables=["x"], cost_limit=1_000_000).evaluate({"x": items})
    assert cel.compile("sets.contains(x, [1])", variables=["x"], cost_limit=1_000_000).evaluate({"x": items}) is True


def test_transform_map_entry_refuses_a_key_built_twice_with_cel_go_text() -> None:
    assert "insert failed: key 0 already exists" in error("[0, 0u].transformMapEntry(i, v, {v: i})")
    assert "insert failed: key a already exists" in error("['a', 'a'].transformMapEntry(i, v, {v: i})")


def test_transform_map_entry_takes_a_filter_and_reads_maps() -> None:
    assert value("{'a': 1, 'b': 2}.transformMapEntry(k, v, v > 1, {k + k: v})") == {"bb": 2}
    assert value("[3, 4].transformMapEntry(i, v, {'k' + string(i): v})") == {"k0": 3, "k1": 4}


def test_macro_argument_errors_name_the_macro_the_user_wrote() -> None:
    with pytest.raises(cel.CompileError, match=r"argument of transformMapEntry\(\) must be a simple name"):
        cel.compile("{}.transformMapEntry(a.b, v, {v: 1})")
    with pytest.raises(cel.CompileError, match=r"argument of sortBy\(\) must be a simple name"):
        cel.compile("[1].sortBy(a.b, 1)")


def test_format_prefix_checks_mask_the_trailing_dash_as_kubernetes_does() -> None:
    # apimachinery's maskTrailingDash replaces the last two bytes by 'a': 'a.-' is checked as 'a'.
    assert value("format.dns1123LabelPrefix().validate('a.-')") == Optional(None, False)
    assert value("format.dns1123LabelPrefix().validate('-')").value == [  # type: ignore[attr-defined]
        "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end "
        "with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
    ]


def test_format_checks_report_every_error_kubernetes_reports() -> None:
    long = "a" * 64 + "."
    assert value(f"format.dns1123Label().validate('{long}').value().size()") == 2
    assert value("format.qualifiedName().validate('/x').value()") == ["prefix part must be non-empty"]
    assert value("format.labelValue().validate('a\\n')").present  # type: ignore[attr-defined]
    assert value("format.datetime().validate('2021-01-01T24:00:00Z')").present  # type: ignore[attr-defined]
    assert not value("format.date().validate('2000-02-29')").present  # type: ignore[attr-defined]


def test_format_validate_takes_only_strings() -> None:
    assert "no such overload" in error("format.uuid().validate(1)")
    assert "no such overload" in error("format.named(1)")


@pytest.mark.parametrize(
    ("text", "bindings"),
    [
        ("sets.equivalent(x, x)", {"x": list(range(50))}),
        ("x.distinct().size()", {"x": list(range(50))}),
        # Not validate(): Kubernetes estimates it with a 128-character regex and charges the
        # format's own regex size at run time (its cost test shows the same).
        ("lists.range(1000).sort().size()", {}),
    ],
)
def test_the_static_estimate_covers_what_a_call_spends(text: str, bindings: dict[str, object]) -> None:
    roots = {k: Shape("list", items=64, item=Shape("scalar", chars=64)) if isinstance(v, list) else Shape("string", chars=4096) for k, v in bindings.items()}
    est, _ = estimate(parse(text), roots)
    cel.compile(text, variables=list(bindings), cost_limit=est.cost).evaluate(bindings)
    with pytest.raises(cel.CostLimitError):
        cel.compile(text, variables=list(bindings), cost_limit=max(est.cost // 10, 1) if "range" not in text else 100).evaluate(bindings)
