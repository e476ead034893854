"""A gang (a PodGroup with minCount, the Workload API of 1.37, beta behind GenericWorkload) through
kpe on the real kube-scheduler. kube-scheduler filters the group's pods one after the other against
each candidate placement's nodes, the earlier ones placed only in its own books, and binds them
only once every member has a node. kpe's filter calls are therefore no placements: a pod of the
group must not count in flight on the nodes it passed (engine.cluster.inflight), or a filter that
allows one such pod a node rejects the second member everywhere, and the gang never schedules."""

from __future__ import annotations

import pytest

from .conftest import Cluster
from .controlplane import wait_until

POLICY = """apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {{name: spread}}
spec:
  match:
    namespaces: [{ns}]
  filters:
  - name: one-per-node
    expression: "!nodeInfo.pods.exists(p, p.metadata.?labels[?'app'].orValue('') == 'train')"
    message: a training pod already runs here
"""


def test_a_gang_whose_members_each_pass_every_node_is_scheduled_whole(cluster: Cluster) -> None:
    if cluster.plane.binaries.version == "1.32":
        pytest.skip("pod groups (the Workload API, GenericWorkload) exist from 1.35; the e2e control plane enables them on 1.37")
    ns, api = cluster.namespace, cluster.api
    cluster.write_policy("spread.yaml", POLICY.format(ns=ns))
    for i in range(3):
        cluster.node(f"{ns}-n{i}")
    kpe = cluster.start_kpe()
    cluster.start_scheduler(kpe, flags=("--feature-gates=GenericWorkload=true",))
    api.create(f"/apis/scheduling.k8s.io/v1beta1/namespaces/{ns}/podgroups", {
        "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup", "metadata": {"name": "train", "namespace": ns},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 3}}},
    })
    filters = kpe.metric("kpe_requests_total", verb="filter", code="200")
    for i in range(3):
        created = api.pod(ns, f"train-{i}", labels={"app": "train"}, extra={"schedulingGroup": {"podGroupName": "train"}})
        assert created["spec"]["schedulingGroup"] == {"podGroupName": "train"}, "the API server kept the pod's group"
    bound = cluster.wait_bound([f"train-{i}" for i in range(3)], 60)
    assert kpe.metric("kpe_requests_total", verb="filter", code="200") - filters >= 3, "kube-scheduler asked kpe about each member"
    assert kpe.metric("kpe_requests_total", verb="preempt", code="200") == 0
    # kpe cannot see the group's tentative placements: its filter passed every member on every node, and
    # kube-scheduler alone chose where they go (they may share a node; docs/gangs.md).
    print(f"\n[e2e gangs] 3-pod gang bound to {sorted(bound.values())}")
