"""kpe's node and pod cache against a real API server: changes made through it show
up in kpe's cache (its introspection, its metrics and its filter verb), and when
etcd's history is compacted under a broken watch kpe gets 410 Expired, relists,
and ends up with exactly what the API server holds."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .conftest import Cluster, Kpe
from .controlplane import Binaries, ControlPlane, control_plane, wait_until
from .policies import ONE_PER_TEAM

def cached(kpe: Kpe, node: str) -> dict[str, Any] | None:
    """kpe's cached node and its nodeInfo summary (None when kpe does not know the node)."""
    answer = kpe.http.get(f"/apis/v1/nodes/{node}")
    if answer.status_code == 404:
        return None
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def filter_passes(kpe: Kpe, namespace: str, node: str, team: str) -> bool:
    """Whether kpe's filter verb lets a new pod of ``team`` onto ``node`` (kpe's cache decides)."""
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe", "namespace": namespace, "uid": f"probe-{team}", "labels": {"team": team}},
           "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}
    # The verbs' own client where kpe serves them on a listener of their own (with kube-scheduler's certificate).
    client = kpe.scheduler
    answer = client.post("/scheduler/filter", json={"Pod": pod, "NodeNames": [node]})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body.get("Error", "") == "", body
    return node in (body.get("NodeNames") or [])


def timed(check: Any, what: str, timeout: float = 10) -> float:
    started = time.monotonic()
    wait_until(check, timeout, what)
    return time.monotonic() - started


def test_nodes_and_pods_changed_through_the_api_server_show_up_in_kpe_s_cache(cluster: Cluster) -> None:
    ns, api = cluster.namespace, cluster.api
    cluster.write_policy("policy.yaml", ONE_PER_TEAM)
    kpe = cluster.start_kpe()
    node = f"{ns}-n1"
    times: dict[str, float] = {}

    cluster.node(node, labels={"pool": "blue"})
    times["node created"] = timed(lambda: (c := cached(kpe, node)) and c["node"]["metadata"]["labels"].get("pool") == "blue", "the new node in kpe's cache")
    api.patch(f"/api/v1/nodes/{node}", {"metadata": {"labels": {"pool": "green"}}})
    times["node relabelled"] = timed(lambda: cached(kpe, node)["node"]["metadata"]["labels"].get("pool") == "green", "the node's new label in kpe's cache")  # type: ignore[index]

    api.pod(ns, "resident", labels={"team": "a"}, node=node)
    times["bound pod created"] = timed(lambda: cached(kpe, node)["nodeInfo"]["pods"] == [f"{ns}/resident"], "the bound pod in the node's nodeInfo")  # type: ignore[index]
    assert not filter_passes(kpe, ns, node, "a"), "kpe's filter does not see team a's pod on the node"
    assert filter_passes(kpe, ns, node, "b")

    api.patch(f"/api/v1/namespaces/{ns}/pods/resident", {"metadata": {"labels": {"team": "b"}}})
    times["pod relabelled"] = timed(lambda: filter_passes(kpe, ns, node, "a") and not filter_passes(kpe, ns, node, "b"), "the pod's new label in kpe's nodeInfo")

    api.pod(ns, "pending")  # unbound: in the pod count, in no node's nodeInfo
    times["unbound pod created"] = timed(lambda: kpe.metric("kpe_cache_objects", kind="pod") == len(api.get("/api/v1/pods")["items"]), "kpe's pod count to match the API server's")
    assert cached(kpe, node)["nodeInfo"]["podCount"] == 1  # type: ignore[index]

    api.delete(f"/api/v1/namespaces/{ns}/pods/resident", grace=0)
    times["bound pod deleted"] = timed(lambda: cached(kpe, node)["nodeInfo"]["pods"] == [], "the deleted pod to leave the node's nodeInfo")  # type: ignore[index]
    assert filter_passes(kpe, ns, node, "b")

    api.delete(f"/api/v1/nodes/{node}")
    times["node deleted"] = timed(lambda: cached(kpe, node) is None, "the deleted node to leave kpe's cache")
    wait_until(lambda: kpe.metric("kpe_cache_objects", kind="node") == len(api.get("/api/v1/nodes")["items"]), 10, "kpe's node count to match the API server's")
    assert kpe.metric("kpe_watch_restarts_total") == 0, "the watches should not have restarted"
    print("\n[e2e cache] time until kpe's cache showed it: " + ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in times.items()))


# -- compaction --------------------------------------------------------------------


@pytest.fixture
def private(binaries: Binaries, tmp_path: Path, ca: Any, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """A scenario on a control plane of its own: restarting its API server and
    compacting its etcd leaves the session's control plane alone."""
    (tmp_path / "plane").mkdir()
    (tmp_path / "scenario").mkdir()
    with control_plane(tmp_path / "plane", binaries) as plane:
        c = Cluster(plane, tmp_path / "scenario", ca, "e2e-compaction")
        try:
            yield c
        finally:
            if getattr(request.node, "rep_call", None) is not None and request.node.rep_call.failed:
                for kpe in c.kpes:
                    print(f"\n--- {kpe.process.name} log ---\n" + kpe.process.tail(80))
            c.close()


def bump_revision(plane: ControlPlane, namespace: str, writes: int) -> None:
    """Move etcd's revision on with writes kpe's informers do not watch."""
    path = f"/api/v1/namespaces/{namespace}/configmaps"
    plane.api.create(path, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "churn"}, "data": {"n": "0"}})
    for i in range(1, writes):
        plane.api.patch(f"{path}/churn", {"data": {"n": str(i)}})


def exact(kpe: Kpe, plane: ControlPlane) -> list[str]:
    """How kpe's cache differs from the API server's nodes and pods (empty when it holds exactly the same)."""
    nodes = plane.api.get("/api/v1/nodes")["items"]
    pods = plane.api.get("/api/v1/pods")["items"]
    problems = []
    if (n := kpe.metric("kpe_cache_objects", kind="node")) != len(nodes):
        problems.append(f"kpe caches {n:.0f} nodes, the API server has {len(nodes)}")
    if (n := kpe.metric("kpe_cache_objects", kind="pod")) != len(pods):
        problems.append(f"kpe caches {n:.0f} pods, the API server has {len(pods)}")
    for node in nodes:
        name = node["metadata"]["name"]
        mine = cached(kpe, name)
        if mine is None:
            problems.append(f"node {name} is missing")
            continue
        if mine["node"]["metadata"]["resourceVersion"] != node["metadata"]["resourceVersion"]:
            problems.append(f"node {name} is stale")
        on_node = sorted(f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in pods if p["spec"].get("nodeName") == name)
        if sorted(mine["nodeInfo"]["pods"]) != on_node:
            problems.append(f"nodeInfo of {name} holds {sorted(mine['nodeInfo']['pods'])}, the API server binds {on_node} there")
    return problems


@contextlib.contextmanager
def paused(kpe: Kpe) -> Iterator[None]:
    """kpe's process stopped (SIGSTOP): it reads nothing from its watches until resumed,
    as if the network between it and the API server were cut."""
    os.kill(kpe.process.popen.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(kpe.process.popen.pid, signal.SIGCONT)


def test_a_compacted_history_under_a_broken_watch_makes_kpe_relist_to_exactly_what_the_api_server_holds(private: Cluster) -> None:
    cluster, plane = private, private.plane
    ns, api = cluster.namespace, cluster.api
    cluster.write_policy("policy.yaml", ONE_PER_TEAM)
    for name in ("stays", "goes"):
        cluster.node(f"n-{name}")
        api.pod(ns, f"on-{name}", labels={"team": name}, node=f"n-{name}")
    api.pod(ns, "pending-goes")
    kpe = cluster.start_kpe()
    wait_until(lambda: not exact(kpe, plane), 10, "kpe's cache to match the API server")
    assert kpe.metric("kpe_watch_restarts_total") == 0

    with paused(kpe):
        # The API server restarts under kpe's watches, and while kpe cannot watch, the
        # cluster changes, etcd's revision moves on with writes kpe does not watch
        # (ConfigMaps) and the history is compacted: kpe's watches can resume only from
        # versions etcd no longer has, and only a new list shows the changes.
        started = time.monotonic()
        plane.restart_apiserver()
        restarted = time.monotonic()
        cluster.node("n-new")
        api.pod(ns, "on-new", labels={"team": "new"}, node="n-new")
        api.delete(f"/api/v1/namespaces/{ns}/pods/on-goes", grace=0)
        api.delete("/api/v1/nodes/n-goes")
        api.delete(f"/api/v1/namespaces/{ns}/pods/pending-goes", grace=0)
        api.patch(f"/api/v1/namespaces/{ns}/pods/on-stays", {"metadata": {"labels": {"team": "moved"}}})
        bump_revision(plane, ns, 30)
        compacted = plane.compact()
    resumed = time.monotonic()

    def correct() -> bool:
        return not exact(kpe, plane) and cached(kpe, "n-goes") is None
    try:
        wait_until(correct, 20, "kpe's cache to match the API server after the restart")
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {exact(kpe, plane)}") from None
    done = time.monotonic()

    assert kpe.metric("kpe_watch_restarts_total", reason="expired") >= 1, "kpe never got 410 Expired: it did not resume from a compacted resourceVersion"
    assert "410 Expired" in kpe.process.log.read_text(errors="replace")
    assert cached(kpe, "n-new")["nodeInfo"]["pods"] == [f"{ns}/on-new"]  # type: ignore[index]
    # kpe's filter reads the relabelled pod from its nodeInfo: team "moved" is on n-stays now, "stays" is not.
    assert not filter_passes(kpe, ns, "n-stays", "moved") and filter_passes(kpe, ns, "n-stays", "stays")
    assert not filter_passes(kpe, ns, "n-new", "new")
    restarts = {reason: kpe.metric("kpe_watch_restarts_total", reason=reason) for reason in ("closed", "dropped", "failed", "expired", "error-event", "internal")}
    print(f"\n[e2e compaction] API server restart {restarted - started:.2f}s; compacted at revision {compacted}; "
          f"kpe's cache exact {done - resumed:.2f}s after kpe resumed ({done - started:.2f}s after the restart began); "
          f"watch restarts {({k: int(v) for k, v in restarts.items() if v})}")
