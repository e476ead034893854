"""Decision tables (cases/decisions.yaml): how the engine combines policies."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from engine.decisions.admission import admit
from engine.decisions.filtering import filter_nodes
from engine.policy.loader import load_text
from engine.cluster.nodeinfo import node_info_map
from engine.decisions.preemption import preempt
from engine.decisions.scoring import score_nodes

CASES: list[dict[str, Any]] = yaml.safe_load((Path(__file__).parent / "cases" / "decisions.yaml").read_text())


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_decision_table(case: dict[str, Any]) -> None:
    policies = load_text(case["policies"], file="case.yaml")
    pod, nodes = case["pod"], case.get("nodes", [])
    cluster = case.get("clusterPods", [])
    info = node_info_map(nodes, cluster)
    expect = case["expect"]
    if "filter" in expect:
        result = filter_nodes(policies, pod, nodes, node_info=info)
        assert {"pass": result.passed, "fail": result.failed, "unresolvable": result.unresolvable} == expect["filter"]
    if "score" in expect:
        assert score_nodes(policies, pod, nodes, node_info=info).scores == expect["score"]
    if "admission" in expect:
        decision = admit(policies, pod, nodes=nodes, pods=cluster)
        assert decision.gates == expect["admission"]["gates"]
        assert {d.gate: d.message for d in decision.pending} == expect["admission"]["pending"]
    if "preemption" in expect:
        result = preempt(policies, pod, case["victims"], nodes={n["metadata"]["name"]: n for n in nodes}, node_info=info)
        assert sorted(result.candidates) == expect["preemption"]["candidates"]
        assert result.rejected == expect["preemption"]["rejected"]


def test_explanation_records_value_error_time_and_audit_for_every_rule() -> None:
    policies = load_text(CASES[2]["policies"])
    result = filter_nodes(policies, {"metadata": {"name": "p"}}, [{"metadata": {"name": "n1"}}], explain=True)
    assert result.explanation is not None
    [verdict] = result.explanation
    [outcome] = verdict.outcomes
    assert (outcome.policy, outcome.rule, outcome.value, outcome.audit) == ("trial", "never", False, True)
    assert outcome.effect == "audit: would have rejected"
    assert outcome.message == result.audit_rejections[0].message and outcome.message.startswith("trial/never: ")
    assert outcome.to_dict()["message"] == outcome.message
    assert outcome.elapsed_us > 0
    assert verdict.verdict == "pass"
    assert [e.node for e in result.audit_rejections] == ["n1"]
