"""Preemption through a real kube-scheduler: its dry run re-runs only its own filters, so
kpe's preempt verb must drop nodes where kpe's filters would still reject the pod."""

from __future__ import annotations

import time

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
    evicted = wait_until(cluster.evicted, 30, "the preemption's evictions")
    assert len(evicted) == 2
    for name in evicted:  # what the kubelet would do once the containers stopped
        cluster.api.delete(f"/api/v1/namespaces/{cluster.namespace}/pods/{name}", grace=0)
    assert cluster.wait_bound(["urgent"])["urgent"] == f"{cluster.namespace}-full"
