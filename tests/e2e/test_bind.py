"""Binding through kpe (bindVerb) with a real kube-scheduler and API server, and a bind
to a node that no longer exists, which the API server itself would accept."""

from __future__ import annotations

from .controlplane import REPO, wait_until
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
    cluster.plane.apply_rbac(REPO / "deploy" / "bind" / "rbac.yaml")  # what the deploy/bind component adds
    kpe = cluster.start_kpe(extra=("--bind",))
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
    assert cluster.scheduler is not None
    cluster.scheduler.stop()  # nobody else binds the pod meanwhile
    pod = cluster.api.pod(ns, "web-1")
    answer = kpe.scheduler.post("/scheduler/bind", json={"PodName": "web-1", "PodNamespace": ns, "PodUID": pod["metadata"]["uid"], "Node": f"{ns}-gone"}).json()
    assert answer == {"Error": f"kpe: node {ns}-gone does not exist (the API server has no such node); not binding to it"}
    assert not cluster.api.get_pod(ns, "web-1")["spec"].get("nodeName")
    assert kpe.metric("kpe_binds_total", result="error") == 1


def test_a_bind_refused_for_a_wrong_uid_does_not_reveal_the_pod_s_uid(cluster: Cluster) -> None:
    ns = cluster.namespace
    cluster.write_policy("pool.yaml", POOL)
    cluster.node(f"{ns}-a", labels={"pool": "a"})
    cluster.plane.apply_rbac(REPO / "deploy" / "bind" / "rbac.yaml")  # what the deploy/bind component adds
    kpe = cluster.start_kpe(extra=("--bind",))
    pod = cluster.api.pod(ns, "web-0")  # no scheduler runs: the pod stays pending
    uid = pod["metadata"]["uid"]
    answer = kpe.scheduler.post("/scheduler/bind", json={"PodName": "web-0", "PodNamespace": ns, "PodUID": "00000000-0000-0000-0000-000000000000", "Node": f"{ns}-a"}).json()
    assert answer["Error"] and uid not in answer["Error"], answer  # the real API server's text carries the UID
    assert "<uid>" in answer["Error"]
    decisions = kpe.http.get("/apis/v1/decisions", params={"verb": "bind"}).text
    assert uid not in decisions
    assert not cluster.api.get_pod(ns, "web-0")["spec"].get("nodeName")


def test_the_bind_verb_is_not_served_unless_asked_for(cluster: Cluster) -> None:
    cluster.write_policy("pool.yaml", POOL)
    kpe = cluster.start_kpe()
    answer = kpe.scheduler.post("/scheduler/bind", json={"PodName": "x", "PodNamespace": cluster.namespace, "PodUID": "", "Node": "n"})
    assert answer.status_code == 404
