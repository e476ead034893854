"""Pods nominated to a node and not bound (a preemptor waiting for its victims to go, and from
1.35 a pod the scheduler nominates before it binds) count on that node for the pods of their
priority or lower, as kube-scheduler counts them: a per-node limit holds while they wait."""

from __future__ import annotations

from typing import Any

from .conftest import Cluster
from .controlplane import wait_until
from .policies import ONE_PER_TEAM
from .test_preemption import fill

BURST = 5


def nominated(cluster: Cluster, name: str) -> str:
    status: dict[str, Any] = cluster.api.get_pod(cluster.namespace, name).get("status") or {}
    return str(status.get("nominatedNodeName") or "")


def test_a_burst_stays_off_the_node_a_pod_of_its_team_is_nominated_to(cluster: Cluster) -> None:
    cluster.write_policy("policy.yaml", ONE_PER_TEAM)
    full = f"{cluster.namespace}-full"
    fill(cluster, full, "b")
    # Only the nomination can keep the burst off the node: no pod kpe passed counts as in flight.
    kpe = cluster.start_kpe(extra=("--in-flight-s", "0"))
    cluster.start_scheduler(kpe)
    cluster.api.pod(cluster.namespace, "urgent", cpu="2", priority_class="e2e-high", labels={"team": "a"})
    # Its victims keep their deletionTimestamp (no kubelet finishes them): urgent stays nominated.
    wait_until(lambda: nominated(cluster, "urgent") == full, 30, "the preemptor to be nominated to the full node")

    # Pods of the same team and lower priority that kube-scheduler's own filters let onto the node
    # (no CPU asked, the nominated pod counted): only kpe's rule keeps them off it.
    followers = [f"follower-{i}" for i in range(BURST)]
    for name in followers:
        cluster.api.pod(cluster.namespace, name, cpu="0", priority_class="e2e-low", labels={"team": "a"},
                        extra={"nodeSelector": {"kubernetes.io/hostname": full}})

    def settled() -> bool:
        """Every follower rejected by kpe counting urgent, or one bound (the limit broken)."""
        if set(followers) & set(cluster.bound()):
            return True
        for name in followers:
            decisions = kpe.http.get("/apis/v1/decisions", params={"pod": f"{cluster.namespace}/{name}", "verb": "filter"}).json()["decisions"]
            if not any(f"{cluster.namespace}/urgent" in str(d) for d in decisions):
                return False
        return True

    wait_until(settled, 30, "kpe to reject the full node for every follower, counting the nominated pod")
    decisions = kpe.http.get("/apis/v1/decisions", params={"pod": f"{cluster.namespace}/{followers[0]}", "verb": "filter"}).json()["decisions"]
    reasons = {reason for d in decisions for reason in {**(d.get("failed") or {}), **(d.get("unresolvable") or {})}.values()}
    # The room is the nominated pod's, and the rejection says so, naming it.
    assert any(r.endswith(f"(counting 1 pod nominated to this node ({cluster.namespace}/urgent), whose room kube-scheduler holds for it)") for r in reasons), reasons
    # A follower bound there would share the node with urgent once it binds: two pods of team a.
    assert not set(followers) & set(cluster.bound()), cluster.bound()

    for name in cluster.evicted():  # what the kubelet would do once the containers stopped
        cluster.api.delete(f"/api/v1/namespaces/{cluster.namespace}/pods/{name}", grace=0)
    assert cluster.wait_bound(["urgent"])["urgent"] == full
    assert not set(followers) & set(cluster.bound()), cluster.bound()
