"""Preemption through a real kube-scheduler: its dry run re-runs only its own filters, so
kpe's preempt verb must drop nodes where kpe's filters would still reject the pod."""

from __future__ import annotations

import time
from typing import Any

import pytest

from .conftest import Cluster
from .controlplane import wait_until
from .policies import ONE_PER_TEAM

ACCEL = """apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {{name: accel-only}}
spec:
  match: {{podSelector: {{matchLabels: {{needs: accel}}}}}}
  filters:
  - name: accelerated
    expression: "node.metadata.?labels[?'kpe.dev/accelerated'].orValue('') == 'true'"
    message: node is not accelerated{unresolvable}
"""

VARIANTS = {
    "filter-on-node-labels": (ACCEL.format(unresolvable=""), {"needs": "accel"}, "a"),
    "filter-marked-unresolvable": (ACCEL.format(unresolvable="\n    unresolvable: true"), {"needs": "accel"}, "a"),
    "filter-on-nodeInfo": (ONE_PER_TEAM, {"team": "a"}, "a"),
}


def fill(cluster: Cluster, node: str, team: str) -> None:
    """A 4-CPU node full of 1-CPU pods at priority 10."""
    cluster.node(node, cpu="4")
    for i in range(4):
        cluster.api.pod(cluster.namespace, f"low-{i}", cpu="1", priority_class="e2e-low", labels={"team": team}, node=node)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_preemption_evicts_nothing_where_kpe_would_still_reject_the_node(cluster: Cluster, variant: str) -> None:
    policy, labels, team = VARIANTS[variant]
    cluster.write_policy("policy.yaml", policy)
    fill(cluster, f"{cluster.namespace}-full", team)
    kpe = cluster.start_kpe()
    cluster.start_scheduler(kpe)
    assert "preemptVerb" in cluster.scheduler_config["extenders"][0]

    cluster.api.pod(cluster.namespace, "urgent", cpu="2", priority_class="e2e-high", labels=labels)
    # kube-scheduler's own resource check rejects the full node, its dry run picks victims, and asks kpe.
    wait_until(lambda: kpe.metric("kpe_requests_total", verb="preempt", code="200") >= 1, 30, "kube-scheduler to call kpe's preempt verb")
    time.sleep(1.0)  # evictions follow the preempt answer at once; give them time to show
    evicted = cluster.evicted()
    assert evicted == [], f"{len(evicted)} pods evicted in vain: {evicted}"
    assert "urgent" not in cluster.bound()
    assert kpe.metric("kpe_preemption_rejections_total") >= 1
    print(f"\n[e2e preemption {variant}] preempt calls {kpe.metric('kpe_requests_total', verb='preempt', code='200'):.0f}, evictions {len(evicted)}")


def test_preemption_goes_ahead_where_the_evictions_make_kpe_s_filter_pass(cluster: Cluster) -> None:
    cluster.write_policy("policy.yaml", ONE_PER_TEAM)
    fill(cluster, f"{cluster.namespace}-full", "b")
    kpe = cluster.start_kpe()
    cluster.start_scheduler(kpe)
    cluster.api.pod(cluster.namespace, "urgent", cpu="2", priority_class="e2e-high", labels={"team": "a"})
    # From 1.33 on kube-scheduler evicts asynchronously, one victim after the other.
    evicted = wait_until(lambda: len(cluster.evicted()) >= 2 and cluster.evicted(), 30, "the preemption's two evictions")
    assert len(evicted) == 2
    for name in evicted:  # what the kubelet would do once the containers stopped
        cluster.api.delete(f"/api/v1/namespaces/{cluster.namespace}/pods/{name}", grace=0)
    assert cluster.wait_bound(["urgent"])["urgent"] == f"{cluster.namespace}-full"


# -- whole-node mode without cluster access ------------------------------------------------


def fill_through_scheduler(cluster: Cluster, node: str, labels: dict[str, str] | None = None) -> None:
    """A 4-CPU node filled by kube-scheduler with four 1-CPU pods at priority 10: in whole-node
    mode each of their filter calls carries the node, which is how kpe without cluster access
    knows it when the preempt call (victims by node name, no node) comes."""
    cluster.node(node, cpu="4", labels=labels)
    for i in range(4):
        cluster.api.pod(cluster.namespace, f"low-{i}", cpu="1", priority_class="e2e-low")
    cluster.wait_bound([f"low-{i}" for i in range(4)])


@pytest.mark.parametrize("accelerated", [True, False], ids=["filter-passes-after-evictions", "filter-still-rejects"])
def test_whole_node_mode_without_cluster_access_preempts_on_the_nodes_kpe_was_sent(cluster: Cluster, accelerated: bool) -> None:
    cluster.write_policy("policy.yaml", ACCEL.format(unresolvable=""))  # a node label: no nodeInfo needed
    kpe = cluster.start_kpe(extra=("--cluster", "off", "--controllers", ""))
    cluster.start_scheduler(kpe, node_cache_capable=False)
    assert cluster.scheduler_config["extenders"][0]["nodeCacheCapable"] is False
    full = f"{cluster.namespace}-full"
    fill_through_scheduler(cluster, full, {"kpe.dev/accelerated": "true"} if accelerated else None)
    assert kpe.metric("kpe_requests_total", verb="filter", code="200") >= 4

    cluster.api.pod(cluster.namespace, "urgent", cpu="1", priority_class="e2e-high", labels={"needs": "accel"})
    wait_until(lambda: kpe.metric("kpe_requests_total", verb="preempt", code="200") >= 1, 30, "kube-scheduler to call kpe's preempt verb")
    decision = wait_until(lambda: kpe.http.get("/apis/v1/decisions", params={"verb": "preempt"}).json()["decisions"], 10, "the preempt decision")[0]
    if accelerated:
        evicted = wait_until(cluster.evicted, 30, "the preemption's evictions")
        assert len(evicted) == 1, evicted  # exactly one 1-CPU pod makes room for the 1-CPU preemptor
        assert decision["candidates"] == [full] and decision["rejected"] == {}
        cluster.api.delete(f"/api/v1/namespaces/{cluster.namespace}/pods/{evicted[0]}", grace=0)  # the kubelet's part
        assert cluster.wait_bound(["urgent"])["urgent"] == full
    else:
        time.sleep(1.0)  # evictions follow the preempt answer at once; give them time to show
        assert cluster.evicted() == []
        assert "urgent" not in cluster.bound()
        assert decision["rejected"] == {full: "still rejected with the victims evicted: accel-only/accelerated: node is not accelerated"}
    print(f"\n[e2e whole-node preemption accelerated={accelerated}] decision {decision}")


# -- the veto made visible -----------------------------------------------------------------


def test_a_vetoed_preemption_leaves_an_event_on_the_pod_naming_the_policy_and_rule(cluster: Cluster) -> None:
    cluster.write_policy("policy.yaml", ACCEL.format(unresolvable=""))
    full = f"{cluster.namespace}-full"
    fill(cluster, full, "a")
    kpe = cluster.start_kpe()
    cluster.start_scheduler(kpe)
    cluster.api.pod(cluster.namespace, "urgent", cpu="2", priority_class="e2e-high", labels={"needs": "accel"})

    def vetoed() -> list[dict[str, Any]]:
        events = cluster.api.get(f"/api/v1/namespaces/{cluster.namespace}/events", params={"fieldSelector": "involvedObject.name=urgent,reason=PreemptionVetoed"})
        return list(events["items"])

    events = wait_until(vetoed, 30, "the PreemptionVetoed event on the pod")
    assert [e["message"] for e in events] == [f"kpe kept node {full} out of preemption: accel-only/accelerated: node is not accelerated"]
    assert events[0]["involvedObject"]["uid"] == cluster.api.get_pod(cluster.namespace, "urgent")["metadata"]["uid"]
    assert cluster.evicted() == []
    # The scheduler's next attempts (here: the same call again) within a minute add no Event.
    victim = cluster.api.get_pod(cluster.namespace, "low-0")["metadata"]["uid"]
    request = {"Pod": cluster.api.get_pod(cluster.namespace, "urgent"), "NodeNameToMetaVictims": {full: {"Pods": [{"UID": victim}], "NumPDBViolations": 0}}}
    for _ in range(2):
        assert kpe.scheduler.post("/scheduler/preempt", json=request).json() == {"NodeNameToMetaVictims": {}}
    time.sleep(0.5)
    assert len(vetoed()) == 1
