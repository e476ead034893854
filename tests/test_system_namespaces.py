"""System namespaces are out of reach by default: a policy without ``match`` decides nothing
for pods in kube-system, kube-public, kube-node-lease or kpe-system, whatever the decision,
unless the set is loaded with another list (``--excluded-namespaces``)."""

from __future__ import annotations

from typing import Any

import pytest

from engine.decisions.admission import admit
from engine.decisions.filtering import filter_nodes
from engine.decisions.preemption import preempt
from engine.decisions.scoring import score_nodes
from engine.policy.loader import load_text
from engine.policy.model import SYSTEM_NAMESPACES

# Every decision a policy can make, and no match: it applies to every pod it is allowed to.
EVERYWHERE = """
apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: everywhere}
spec:
  filters:
  - {name: never, expression: "false", message: no node for anyone}
  scores:
  - {name: low, expression: "0"}
  admission:
    gate: kpe.dev/hold
    expression: "false"
    message: held
  preemption:
    victim: "false"
"""
NODES = [{"metadata": {"name": f"n{i}", "labels": {}}, "status": {"allocatable": {"cpu": "4"}}} for i in range(2)]


def pod(namespace: str) -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": namespace, "uid": "u"}, "spec": {"containers": [{"name": "c"}]}}


@pytest.mark.parametrize("namespace", SYSTEM_NAMESPACES)
def test_a_policy_without_match_decides_nothing_for_pods_in_a_system_namespace(namespace: str) -> None:
    policies = load_text(EVERYWHERE)
    filtered = filter_nodes(policies, pod(namespace), NODES)
    assert (filtered.matched, filtered.passed, filtered.failed) == ([], ["n0", "n1"], {})
    assert score_nodes(policies, pod(namespace), NODES).scores == {"n0": 0, "n1": 0}
    assert admit(policies, pod(namespace), nodes=NODES, pods=[]).gates == []
    victims = {"n0": [pod("team-a")]}
    assert preempt(policies, pod(namespace), victims, nodes={"n0": NODES[0]}).candidates == victims


def test_the_same_policy_decides_for_every_other_namespace() -> None:
    policies = load_text(EVERYWHERE)
    filtered = filter_nodes(policies, pod("team-a"), NODES)
    assert filtered.matched == ["everywhere"] and filtered.passed == []
    assert admit(policies, pod("team-a"), nodes=NODES, pods=[]).gates == ["kpe.dev/hold"]
    assert preempt(policies, pod("team-a"), {"n0": [pod("team-b")]}, nodes={"n0": NODES[0]}).candidates == {}


def test_a_set_loaded_with_no_excluded_namespace_reaches_kube_system_too() -> None:
    policies = load_text(EVERYWHERE, excluded_namespaces=())
    assert filter_nodes(policies, pod("kube-system"), NODES).matched == ["everywhere"]
    assert load_text(EVERYWHERE, excluded_namespaces=("infra",)).excluded_namespaces == {"infra"}
    assert filter_nodes(load_text(EVERYWHERE, excluded_namespaces=("infra",)), pod("infra"), NODES).matched == []


def test_kpe_explain_pod_says_plainly_that_a_kube_system_pod_is_not_kpe_s_to_decide() -> None:
    from engine.reports.diagnosis.diagnose import diagnose

    state = diagnose(load_text(EVERYWHERE), pod("kube-system"), NODES).to_dict()["status"]
    assert state["kpeDecides"] is False and state["notes"] == [
        "Not kpe's to decide: no policy matches pods in kube-system, one of the namespaces kpe leaves alone "
        "(--excluded-namespaces). kpe keeps every node and scores them all 0; kube-scheduler's own plugins decide."
    ]
