"""``string.format`` against cel-go's own formatter as Kubernetes configures it (the
strings extension at version 2): tests/data/kubernetes-format/cases.json holds what
cel-go gives for each expression of expressions.txt, written by the Go program beside
them. A value must be kpe's value; an error cel-go finds when compiling must be one of
the problems kpe's typed check reports (what ``kpe check`` shows); an error at
evaluation must be kpe's evaluation error, word for word."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import engine.cel as cel
from engine.cel.checker import types as cel_types
from engine.cel.parser.parser import parse

DATA = Path(__file__).resolve().parents[1] / "data" / "kubernetes-format" / "cases.json"
CASES: list[dict[str, Any]] = json.loads(DATA.read_text(encoding="utf-8"))["cases"]


def _by(stage: str) -> list[Any]:
    return [pytest.param(c, id=c["expr"]) for c in CASES if c["stage"] == stage]


@pytest.mark.parametrize("case", _by("value"))
def test_format_gives_the_text_kubernetes_gives(case: dict[str, Any]) -> None:
    assert cel.compile(case["expr"]).evaluate({}) == case["value"]


@pytest.mark.parametrize("case", _by("compile"))
def test_format_calls_kubernetes_refuses_when_compiling_are_refused_by_the_check(case: dict[str, Any]) -> None:
    checked = cel_types.check(parse(case["expr"]), {})
    assert case["message"] in [p.message for p in checked.problems]


@pytest.mark.parametrize("case", _by("eval"))
def test_format_errors_kubernetes_finds_when_evaluating_have_its_words(case: dict[str, Any]) -> None:
    with pytest.raises(cel.EvalError) as info:
        cel.compile(case["expr"]).evaluate({})
    assert info.value.message == case["message"]


def test_the_reference_covers_every_verb_and_all_three_outcomes() -> None:
    expressions = " ".join(c["expr"] for c in CASES)
    assert all(f"%{verb}" in expressions for verb in "sdfebxXo")
    assert {c["stage"] for c in CASES} == {"value", "compile", "eval"}
