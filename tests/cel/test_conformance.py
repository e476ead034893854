"""The official CEL conformance suite, every non-protobuf test of the files kpe
needs; failures kpe accepts are listed with a reason in conformance_known_failures.yaml."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import engine.cel as cel

from .conformance import Case, load_cases, same, suite_dir

KNOWN = yaml.safe_load((Path(__file__).parent / "conformance_known_failures.yaml").read_text()) or {}
CASES = load_cases()


def _param(case: Case) -> object:
    marks = []
    if case.id in KNOWN:
        marks.append(pytest.mark.xfail(strict=True, reason=KNOWN[case.id]))
    return pytest.param(case, id=case.id, marks=marks)


@pytest.mark.skipif(not CASES, reason=f"conformance suite not found at {suite_dir()}")
@pytest.mark.parametrize("case", [_param(c) for c in CASES])
def test_conformance_case_gives_the_expected_value_or_error(case: Case) -> None:
    try:
        program = cel.compile(case.expr, variables=case.declared, check=False)
        result = program.evaluate(case.bindings)
    except cel.CelError as exc:
        assert case.expect_error, f"{case.expr!r} raised {type(exc).__name__}: {exc}"
        return
    assert not case.expect_error, f"{case.expr!r} gave {result!r}, expected an error"
    assert same(result, case.expected), f"{case.expr!r} gave {result!r}, expected {case.expected!r}"


def test_known_failures_name_real_conformance_cases() -> None:
    ids = {c.id for c in CASES}
    assert not (set(KNOWN) - ids), "stale entries in conformance_known_failures.yaml"
    assert all(isinstance(reason, str) and reason.strip() for reason in KNOWN.values())
