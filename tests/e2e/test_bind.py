"""Binding through kpe (bindVerb) with a real kube-scheduler and API server, and a bind
to a node that no longer exists, which the API server itself would accept."""

from __future__ import annotations

from .controlplane import wait_until
from .conftest import Cluster

POOL = """apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: pool}
spec:
  filters:
  - {name: pool, expression: "node.metadata.?labels[?'pool'].orValue('') == 'a'", message: not in pool a}
"""


def test_kube_scheduler_binds_through_kpe_and_a_bind_to_a_vanished_node_is_refused(cluster: Cluster) -> None:
    ns = cluster.namespace
    cluster.write_policy("pool.yaml", POOL)
    cluster.node(f"{ns}-a", labels={"pool": "a"})
    cluster.node(f"{ns}-gone", labels={"pool": "a"})
    kpe = cluster.start_kpe()
    cluster.start_scheduler(kpe, bind=True)
    assert cluster.scheduler_config["extenders"][0]["bindVerb"] == "bind"

    cluster.api.pod(ns, "web-0")
    cluster.wait_bound(["web-0"])
    assert kpe.metric("kpe_binds_total", result="bound") == 1

    # The node goes; kube-scheduler's cache may still offer it for a moment. The API
    # server accepts a Binding to any name, so kpe must be the one that says no.
    cluster.api.delete(f"/api/v1/nodes/{ns}-gone")
    cluster.nodes.remove(f"{ns}-gone")
    wait_until(lambda: kpe.http.get(f"/apis/v1/nodes/{ns}-gone").status_code == 404, 10, "kpe's cache to drop the node")
    cluster.scheduler.stop()  # nobody else binds the pod meanwhile
    pod = cluster.api.pod(ns, "web-1")
    answer = kpe.http.post("/scheduler/bind", json={"PodName": "web-1", "PodNamespace": ns, "PodUID": pod["metadata"]["uid"], "Node": f"{ns}-gone"}).json()
    assert answer == {"Error": f"kpe: node {ns}-gone does not exist (the API server has no such node); not binding to it"}
    assert not cluster.api.get_pod(ns, "web-1")["spec"].get("nodeName")
    assert kpe.metric("kpe_binds_total", result="error") == 1
