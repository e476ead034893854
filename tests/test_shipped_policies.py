"""The shipped policy set (policies/): it loads, its PolicyTests pass, and together
the policies show every kind of decision kpe makes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from engine.policy.loader import load
from engine.policy.model import PolicySet
from engine.reports.policytest import CaseResult, run_test_files

ROOT = Path(__file__).resolve().parent.parent
POLICIES = ROOT / "policies"
TESTS = POLICIES / "tests"
MODELINE = "# yaml-language-server: $schema=../schemas/schedulingpolicy-v1alpha1.json"

# Run once at collection: the whole suite takes a fraction of a second.
RESULTS: list[CaseResult] = run_test_files([TESTS])


@pytest.fixture(scope="module")
def shipped() -> PolicySet:
    return load([POLICIES])


@pytest.mark.parametrize("result", RESULTS, ids=[r.case or f"{r.file} (file)" for r in RESULTS])
def test_shipped_policy_case_passes(result: CaseResult) -> None:
    assert result.passed, result.render()


def test_the_shipped_tests_have_many_cases_in_every_file() -> None:
    per_file: dict[str, int] = {}
    for r in RESULTS:
        per_file[Path(r.file).name] = per_file.get(Path(r.file).name, 0) + 1
    assert len(RESULTS) >= 30
    assert all(count >= 3 for count in per_file.values()), per_file


def test_every_shipped_policy_has_its_own_policy_test(shipped: PolicySet) -> None:
    tested: set[str] = set()
    for file in TESTS.glob("*.yaml"):
        for doc in yaml.safe_load_all(file.read_text()):
            if doc and doc.get("kind") == "PolicyTest":
                tested |= {(file.parent / p).resolve().name for p in doc["spec"]["policies"]}
    assert {Path(p.file).name for p in shipped.policies} <= tested


def test_every_shipped_policy_file_holds_one_policy_named_like_the_file_with_a_header(shipped: PolicySet) -> None:
    assert len(shipped) >= 8
    for policy in shipped.policies:
        file = Path(policy.file)
        assert file.parent == POLICIES and file.name == f"{policy.name}.yaml"
        text = file.read_text()
        assert text.startswith(MODELINE + "\n"), file
        header = [line for line in text.split("\n") if line.startswith("#")]
        assert sum(len(line) for line in header[1:]) > 100, f"{file} needs a comment saying what it does and why"
        assert len([d for d in yaml.safe_load_all(text) if d]) == 1


def test_the_shipped_set_uses_every_decision_kind(shipped: PolicySet) -> None:
    ps = shipped.policies
    filters = [r for p in ps for r in p.filters]
    kinds = {
        "filters": bool(filters),
        "unresolvable filters": any(r.unresolvable for r in filters),
        "resolvable filters": any(not r.unresolvable for r in filters),
        "messageExpression": any(r.message_expression for r in filters),
        "scores": any(p.scores for p in ps),
        "score weights": len({r.weight for p in ps for r in p.scores}) > 1,
        "admission": any(p.admission for p in ps),
        "admission messageExpression": any(p.admission and p.admission.message_expression for p in ps),
        "preemption victim": any(p.preemption and p.preemption.victim for p in ps),
        "preemption node": any(p.preemption and p.preemption.node for p in ps),
        "variables": any(p.variables for p in ps),
        "node-scoped variables": any(v.node_scoped for p in ps for v in p.variables),
        "params": any(p.params for p in ps),
        "match namespaces": any(p.match.namespaces for p in ps),
        "match podSelector": any(p.match.selector for p in ps),
        # match.resources is not among them: a GPU pod under DRA names no resource, so the GPU
        # policies match by kube.podRequests and kube.podDevices instead (docs/guides/dra.md).
        "dra": any("dra" in v.expression.program.free_variables for p in ps for v in p.variables),
        "match expression": any(p.match.expression for p in ps),
        "Audit mode": any(not p.enforce for p in ps),
        "failurePolicy Ignore": any(not p.fail_closed for p in ps),
        "now": any(re.search(r"\bnow\b", e.text) for p in ps for r in p.filters for e in [r.expression]),
        "nodeInfo": any("nodeInfo" in v.expression.text for p in ps for v in p.variables),
    }
    assert [k for k, used in kinds.items() if not used] == []


def test_the_shipped_tests_expect_every_decision_kind() -> None:
    expected: set[str] = set()
    for file in TESTS.glob("*.yaml"):
        for doc in yaml.safe_load_all(file.read_text()):
            for case in (doc or {}).get("spec", {}).get("cases", []):
                for kind, want in case["expect"].items():
                    expected.add(kind)
                    expected |= {f"{kind}.{k}" for k in want} if isinstance(want, dict) else set()
    assert {
        "matched", "filter.pass", "filter.fail", "filter.unresolvable", "filter.audit", "score.order", "score.values",
        "admission.admitted", "admission.gates", "admission.pending", "admission.messages",
        "preemption.victims", "preemption.candidates", "preemption.rejected",
    } <= expected
