"""Classes filled ahead of the scheduler (server/verbs/warming.py) against the real API server and
kube-scheduler: a pod waiting for a node when kpe starts, or the next pod of the workload that
placed pods last, has its class filled from kpe's cache, and kube-scheduler's filter for it is
then answered from memory."""

from __future__ import annotations

from .conftest import Cluster, Kpe
from .controlplane import wait_until

POLICY = """
apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {{name: keep-off-d}}
spec:
  match:
    namespaces: [{ns}]
  filters:
  - name: not-d
    expression: "!node.metadata.name.endsWith('-d'){also}"
    message: closed
"""
# A rule that also reads the pod's labels, all of them: the pod's class is its labels.
BY_LABELS = " || pod.metadata.labels.size() > 9"


def scheduled_from_memory(cluster: Cluster, kpe: Kpe, pod: str) -> None:
    """Start kube-scheduler on kpe; ``pod`` is placed off node -d, its filter answered from what was filled ahead."""
    cluster.start_scheduler(kpe, node_cache_capable=True)
    bound = cluster.wait_bound([pod])
    assert bound[pod] != f"{cluster.namespace}-d"
    assert kpe.metric("kpe_requests_total", verb="filter", code="200") >= 1
    assert kpe.metric("kpe_equivalence_cache_nodes_total", verb="filter", result="miss") == 0, "every node was filled ahead"
    assert kpe.metric("kpe_equivalence_cache_nodes_total", verb="filter", result="hit") >= 3


def test_a_pod_waiting_when_kpe_starts_has_its_class_filled_before_kube_scheduler_asks(cluster: Cluster) -> None:
    ns = cluster.namespace
    cluster.write_policy("keep-off-d.yaml", POLICY.format(ns=ns, also=""))
    for suffix in "abcd":
        cluster.node(f"{ns}-{suffix}")
    cluster.api.pod(ns, "waiting")  # no scheduler yet: it waits for a node
    kpe = cluster.start_kpe()
    wait_until(lambda: kpe.metric("kpe_equivalence_warmed_nodes_total") >= 4, 30, "kpe to fill the waiting pod's class")
    scheduled_from_memory(cluster, kpe, "waiting")


def test_after_a_restart_the_class_of_the_workload_that_placed_pods_last_is_filled_before_its_next_pod(cluster: Cluster) -> None:
    ns = cluster.namespace
    cluster.write_policy("keep-off-d.yaml", POLICY.format(ns=ns, also=BY_LABELS))
    for suffix in "abcd":
        cluster.node(f"{ns}-{suffix}", labels={"topology.kubernetes.io/zone": f"zone-{suffix}", "topology.kubernetes.io/region": "region-1"})
    # What a restarted kpe finds: the workload's pods placed before it stopped, none waiting. From
    # 1.35 the API server copies the node's zone and region labels onto a pod it binds.
    cluster.api.pod(ns, "web-1", labels={"app": "web"}, node=f"{ns}-a")
    kpe = cluster.start_kpe()
    wait_until(lambda: kpe.metric("kpe_equivalence_warmed_nodes_total") >= 4, 30, "kpe to fill the class of the workload's newest pod")
    cluster.api.pod(ns, "web-2", labels={"app": "web"})
    scheduled_from_memory(cluster, kpe, "web-2")
