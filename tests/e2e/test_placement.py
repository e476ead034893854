"""Placement with the shipped policies, through a real kube-scheduler, in both extender modes."""

from __future__ import annotations

import pytest

from .conftest import Cluster

SHIPPED = ("keep-general-off-gpu.yaml", "team-node-pools.yaml", "maintenance-drain.yaml", "gpu-placement.yaml", "zone-affinity.yaml")


@pytest.mark.parametrize("node_cache_capable", [True, False], ids=["node-names", "whole-nodes"])
def test_the_shipped_policies_place_pods_where_they_say(cluster: Cluster, node_cache_capable: bool) -> None:
    cluster.copy_shipped(*SHIPPED)
    ns = cluster.namespace
    cluster.node(f"{ns}-cpu")
    cluster.node(f"{ns}-gpu", extra={"nvidia.com/gpu": "8"}, taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}])
    cluster.node(f"{ns}-vision", labels={"node.kpe.dev/team": "vision"})
    cluster.node(f"{ns}-maint", labels={"kpe.dev/maintenance": "draining"})
    kpe = cluster.start_kpe()
    cluster.start_scheduler(kpe, node_cache_capable=node_cache_capable)

    for i in range(3):
        cluster.api.pod(ns, f"web-{i}")
    cluster.api.pod(ns, "vision-0", labels={"team": "vision"})
    cluster.api.pod(ns, "train-0", limits={"nvidia.com/gpu": "2"},
                    extra={"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]})
    bound = cluster.wait_bound(["web-0", "web-1", "web-2", "vision-0", "train-0"])

    # General pods: off the GPU node (keep-general-off-gpu), off the team pool (team-node-pools),
    # off the node in maintenance (maintenance-drain): only the plain node is left.
    assert {bound[f"web-{i}"] for i in range(3)} == {f"{ns}-cpu"}
    assert bound["vision-0"] in (f"{ns}-cpu", f"{ns}-vision")
    assert bound["train-0"] == f"{ns}-gpu"
    assert kpe.metric("kpe_requests_total", verb="filter", code="200") >= 5
    mode = "whole-nodes" if not node_cache_capable else "node-names"
    print(f"\n[e2e placement {mode}] bound: {sorted(bound.items())}")
