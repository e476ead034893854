"""The cases of Kubernetes' CEL library tests (k8s.io/apiserver/pkg/cel/library) and of
the cel-go extensions Kubernetes' base environment enables (sets, lists, two-variable
comprehensions), extracted as data by tests/data/kubernetes-cel/extract.py, run through
kpe. Every case kpe does not agree with is listed with its reason in
kubernetes_known_differences.yaml; the table of counts per library prints with
``python -m tests.cel.kubernetes_cases`` (``--all`` lists each difference)."""

from __future__ import annotations

import pytest

from .kubernetes_cases import Case, load_cases, load_known, render, run, summary

CASES = load_cases()
KNOWN = load_known()


def _param(case: Case) -> object:
    marks = []
    if case.key in KNOWN:
        marks.append(pytest.mark.xfail(strict=True, reason=KNOWN[case.key]))
    return pytest.param(case, id=case.key, marks=marks)


@pytest.mark.parametrize("case", [_param(c) for c in CASES])
def test_kpe_gives_what_kubernetes_own_test_expects(case: Case) -> None:
    outcome = run(case)
    assert outcome is None, f"{case.expr!r} {outcome}"


def test_every_known_difference_names_a_real_case_and_gives_its_reason() -> None:
    keys = {c.key for c in CASES}
    assert sorted(set(KNOWN) - keys) == [], "stale entries in kubernetes_known_differences.yaml"
    assert [k for k, reason in KNOWN.items() if not (isinstance(reason, str) and reason.strip())] == []


def test_the_cases_of_every_library_kubernetes_tests_are_extracted() -> None:
    libraries = {c.library for c in CASES}
    assert {"format", "sets", "lists", "comprehensions", "quantity", "ip", "cidr", "semver"} <= libraries


def test_agreement_per_library_has_no_unexplained_difference(capsys: pytest.CaptureFixture[str]) -> None:
    table, unexplained = summary(CASES, KNOWN)
    with capsys.disabled():
        print("\n" + render(table))
    assert unexplained == []
