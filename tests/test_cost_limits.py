"""Bounded CEL work per request: `kpe check` and the server refuse policies whose
estimated worst-case cost is over the limit (KPE306), the limits are settings the
two share, and what only run time can see fails fast under the policy's failurePolicy."""

from __future__ import annotations

import io
import time
from pathlib import Path

import pytest

from engine.policy.compiler import CostLimits
from engine.errors import PolicyLoadError
from engine.decisions.filtering import filter_nodes
from engine.policy.loader import load, load_text
from server.cli.main import main
from server.reload.store import PolicyStore

ROOT = Path(__file__).resolve().parent.parent
NESTED = """apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: nested}
spec:
  params:
    xs: [%s]
  filters:
  - name: slow
    expression: "params.xs.all(a, params.xs.all(b, a + b >= 0))"
""" % ", ".join(str(i) for i in range(900))
FIND_ALL = """apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: scan}
spec:
  filters:
  - name: scan
    expression: "pod.metadata.annotations['blob'].findAll('.').size() > 0"
"""
ANNOTATION_SCAN = """apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: scan}
spec:
  filters:
  - name: scan
    expression: "pod.metadata.annotations.all(k, !pod.metadata.annotations[k].contains('secret'))"
"""
# A pattern of 39 characters: Kubernetes charges each tenth of a character scanned 10 times.
LONG_PATTERN = "(a|b|c|d|e|f|g|h|i|j|k|l|m|n|o|p|q|r|s)"
DOUBLING = """apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: doubling}
spec:
  variables:
  - {name: s0, expression: "'0123456789abcdef'"}
%s
  filters:
  - {name: big, expression: "variables.s24.size() > 0"}
""" % "\n".join(f"  - {{name: s{i}, expression: \"variables.s{i - 1} + variables.s{i - 1}\"}}" for i in range(1, 25))


def check(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(["check", *argv], out=out)
    return code, out.getvalue()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (NESTED, "error[KPE306] nested: spec.filters[0].expression: estimated worst-case cost 5,675,403 exceeds the limit 1,000,000 (nested all() over 900 x 900 items)"),
        (
            ANNOTATION_SCAN,
            "error[KPE306] scan: spec.filters[0].expression: estimated worst-case cost 3,356,676 exceeds the limit 1,000,000 "
            "(all() over 128 items, each with contains() over a string of up to 262,144 characters)",
        ),
        (DOUBLING, "error[KPE306] doubling: spec.variables[19].expression: estimated worst-case cost 1,677,766 exceeds the limit 1,000,000 (_+_ building a string of up to 8,388,608 characters)"),
    ],
    ids=["900x900 nested all", "contains over every annotation", "24 doubling variables"],
)
def test_kpe_check_refuses_the_known_abusive_policies_with_the_estimate(tmp_path: Path, text: str, expected: str) -> None:
    (tmp_path / "p.yaml").write_text(text)
    code, out = check(str(tmp_path))
    assert code == 1
    assert expected in out


def test_the_cost_limit_flag_raises_the_limit_for_kpe_check(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text(NESTED)
    code, out = check("--cel-cost-limit", "6000000", str(tmp_path))
    assert code == 0, out


def test_kpe_check_reads_the_limit_from_the_same_environment_variable_as_kpe_serve(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "p.yaml").write_text(NESTED)
    monkeypatch.setenv("KPE_CEL_COST_LIMIT", "6000000")
    assert check(str(tmp_path))[0] == 0
    monkeypatch.setenv("KPE_CEL_COST_LIMIT", "1000")
    code, out = check(str(ROOT / "policies"))
    assert code == 1
    assert "exceeds the limit 1,000" in out


def test_a_limit_that_is_not_a_positive_number_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "p.yaml").write_text(NESTED)
    assert check("--cel-cost-limit", "lots", str(tmp_path))[0] == 2
    assert check("--cel-cost-limit", "0", str(tmp_path))[0] == 2


def test_shipped_policies_and_doc_examples_are_within_the_default_limits() -> None:
    examples = sorted((ROOT / "docs" / "examples").glob("*/polic*.yaml"))
    assert len(examples) == 5
    load([ROOT / "policies", *examples])


def test_the_server_refuses_a_costly_policy_at_start_up_and_keeps_the_last_good_set_on_reload(tmp_path: Path) -> None:
    file = tmp_path / "p.yaml"
    file.write_text(NESTED)
    with pytest.raises(PolicyLoadError) as info:
        PolicyStore(str(tmp_path), cost_limits=CostLimits()).load_initial()
    assert [e.code for e in info.value.errors] == ["KPE306"]
    store = PolicyStore(str(tmp_path), cost_limits=CostLimits(per_call=6_000_000), stable_interval_s=0, stable_checks=1)
    good = store.load_initial()
    file.write_text(NESTED.replace("a + b >= 0", "params.xs.all(c, a + b + c >= 0)"))
    outcome = store.reload()
    assert not outcome.ok
    assert outcome.errors[0].code == "KPE306"
    assert store.current is good


def test_the_limit_is_also_each_evaluations_run_time_budget() -> None:
    policies = load_text(FIND_ALL.replace("findAll('.')", "findAll('.', 1000)"), cost_limits=CostLimits(per_call=50_000))
    program = policies.policies[0].filters[0].expression.program
    assert program.cost_limit == 50_000


def test_what_only_run_time_sees_fails_fast_under_the_policys_failure_policy() -> None:
    # The estimate assumes annotation values within Kubernetes' 256 KiB (262,150 units for
    # this scan); a request can carry more. Scanning 1 MiB with a 39-character pattern is
    # 104,858 x 10 units, charged before the scan, so the findAll fails on its budget.
    text = FIND_ALL.replace("findAll('.')", f"findAll('{LONG_PATTERN}', 90000)").replace("  filters:", "  failurePolicy: Ignore\n  filters:")
    policies = load_text(text)
    pod = {"metadata": {"name": "p", "namespace": "d", "annotations": {"blob": "a" * (1 << 20)}}, "spec": {"containers": []}}
    result = filter_nodes(policies, pod, [{"metadata": {"name": "n0"}}], explain=True)
    assert result.passed == ["n0"]
    assert [e.message for e in result.errors] == [
        "cost limit of 1000000 exceeded by findAll() in expression: pod.metadata.annotations['blob'].findAll('(a|b|c|d|e|f|g|h|i|j|k|l|m|n|o|p|q|..."
    ]
