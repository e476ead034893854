"""The cache keeps bound pods cut to the served policy set's projection (server/cluster/cache.py),
against the fake API server: pending and gated pods and nodes stay whole; a reload that
reads a field the cache dropped relists pods before the new set serves (the old set
serving meanwhile, through failing lists too); one that reads less relists nothing."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from server.reload.store import PolicyStore
from tests.fakeapi import FakeApiServer
from tests.test_cache import api, cache_on, eventually, kubeconfig, list_requests, node, pod, run  # noqa: F401 - fixtures

COUNTS = """
apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: counts}
spec:
  filters:
  - {name: room, expression: "nodeInfo.podCount < 100"}
"""

READS_APP = """
apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: counts}
spec:
  filters:
  - {name: one-web, expression: "!nodeInfo.pods.exists(p, p.metadata.?labels[?'app'].orValue('') == 'web')"}
"""


def store_with(tmp_path: Path, text: str) -> PolicyStore:
    (tmp_path / "policies.yaml").write_text(text)
    store = PolicyStore(str(tmp_path), stable_interval_s=0.0, stable_checks=1)
    store.load_initial()
    return store


def labelled(name: str, **spec: Any) -> dict[str, Any]:
    obj = pod(name, **spec)
    obj["metadata"]["labels"] = {"app": "web", "team": "vision"}
    obj["metadata"]["annotations"] = {"note": "x" * 200}
    return obj


def pods_listed(api: FakeApiServer) -> int:
    return len(list_requests(api.state, "/api/v1/pods"))


def test_bound_pods_are_cut_and_pending_gated_pods_and_nodes_stay_whole(api: FakeApiServer, kubeconfig: str, tmp_path: Path) -> None:
    store = store_with(tmp_path, COUNTS)
    api.state.add_node(node("node-1", pool="cpu"))
    api.state.add_pod(labelled("bound", nodeName="node-1"))
    api.state.add_pod(labelled("pending"))
    api.state.add_pod(labelled("gated", schedulingGates=[{"name": "kpe.dev/x"}]))

    async def body() -> None:
        async with cache_on(kubeconfig, policies=store) as (_, cache):
            api.state.add_pod(labelled("watched", nodeName="node-1"))
            await eventually(lambda: len(cache.pods()) == 4, what="the watched pod")
            by_name = {p["metadata"]["name"]: p for p in cache.pods()}
            for name in ("bound", "watched"):
                kept = by_name[name]
                assert kept["metadata"]["labels"] == {} and "image" not in kept["spec"]["containers"][0]  # only reservations' labels would be kept
                assert kept["metadata"]["annotations"] == {}  # only kpe's own annotation would be kept
                assert kept["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "500m", "memory": "1Gi"}
            for name in ("pending", "gated"):
                assert by_name[name]["metadata"]["labels"] == {"app": "web", "team": "vision"}
                assert by_name[name]["spec"]["containers"][0]["image"] == "app:1"
            assert cache.node("node-1")["metadata"]["labels"]["pool"] == "cpu"  # type: ignore[index]
            assert cache.node_info["node-1"]["requested"] == {"cpu": "1", "memory": "2Gi"}

    run(body)


def test_a_reload_reading_a_dropped_field_relists_pods_before_the_new_set_serves(api: FakeApiServer, kubeconfig: str, tmp_path: Path) -> None:
    store = store_with(tmp_path, COUNTS)
    old = store.current
    api.state.add_node(node("node-1"))
    for i in range(3):
        api.state.add_pod(labelled(f"web-{i}", nodeName="node-1"))

    async def body() -> None:
        async with cache_on(kubeconfig, policies=store) as (_, cache):
            assert all(p["metadata"]["labels"] == {} for p in cache.pods())
            before = pods_listed(api)
            # The relist fails twice (after the watch is dropped for it): the reload waits, the old set serves.
            api.state.fail_next(2, 500, method="GET", path="/api/v1/pods")
            (tmp_path / "policies.yaml").write_text(READS_APP)
            reload = asyncio.create_task(asyncio.to_thread(store.reload))
            seen: list[tuple[bool, bool]] = []  # (the new set serves, every cached pod has its label)
            while not reload.done():
                seen.append((store.current is not old, all(p["metadata"].get("labels") for p in cache.pods())))
                await asyncio.sleep(0.002)
            outcome = await reload
            assert outcome.ok and store.current is not old
            assert (False, False) in seen, "the reload waited for the relist, the old set serving"
            assert all(relisted for new_set, relisted in seen if new_set), "the new set never served before the pods were relisted"
            assert pods_listed(api) > before
            assert api.state.take_fault("GET", "/api/v1/pods") is None, "both failures were met on the way"
            assert [p["metadata"]["labels"] for p in cache.node_info["node-1"]["pods"]] == [{"app": "web"}] * 3
            assert all(p["metadata"]["labels"] == {"app": "web"} for p in cache.pods())
            # And pods arriving later keep the new field too.
            api.state.add_pod(labelled("web-3", nodeName="node-1"))
            await eventually(lambda: len(cache.pods()) == 4, what="the watched pod")
            assert all(p["metadata"]["labels"] == {"app": "web"} for p in cache.pods())

    run(body, timeout=15)


def test_a_reload_reading_fewer_fields_relists_nothing_and_narrows_after_the_grace(api: FakeApiServer, kubeconfig: str, tmp_path: Path) -> None:
    store = store_with(tmp_path, READS_APP)
    api.state.add_node(node("node-1"))
    api.state.add_pod(labelled("web-0", nodeName="node-1"))

    async def body() -> None:
        async with cache_on(kubeconfig, policies=store, narrow_after_s=0.2) as (_, cache):
            before = pods_listed(api)
            (tmp_path / "policies.yaml").write_text(COUNTS)
            assert (await asyncio.to_thread(store.reload)).ok
            assert pods_listed(api) == before  # nothing relisted, so nothing to wait for
            api.state.add_pod(labelled("web-1", nodeName="node-1"))
            await eventually(lambda: len(cache.pods()) == 2, what="the watched pod")
            assert all(p["metadata"]["labels"] == {"app": "web"} for p in cache.pods()), "still the old set's fields within the grace"
            await eventually(lambda: cache.projection == store.current.pod_projection, what="the narrower projection")
            api.state.add_pod(labelled("web-2", nodeName="node-1"))
            await eventually(lambda: len(cache.pods()) == 3, what="the watched pod")
            by_name = {p["metadata"]["name"]: p for p in cache.pods()}
            assert by_name["web-2"]["metadata"]["labels"] == {} and by_name["web-0"]["metadata"]["labels"] == {"app": "web"}
            assert pods_listed(api) == before

    run(body)


def test_a_reload_after_the_cache_stopped_is_not_held_back(api: FakeApiServer, kubeconfig: str, tmp_path: Path) -> None:
    store = store_with(tmp_path, COUNTS)

    async def body() -> None:
        async with cache_on(kubeconfig, policies=store) as (_, cache):
            pass
        (tmp_path / "policies.yaml").write_text(READS_APP)
        assert (await asyncio.wait_for(asyncio.to_thread(store.reload), 3)).ok
        # Run again, it starts from the set serving then (nothing is cached before its first list).
        stop = asyncio.Event()
        task = asyncio.create_task(cache.run(stop))
        await eventually(lambda: cache.projection.covers(store.current.pod_projection), what="the served set's projection")
        stop.set()
        await task

    run(body)


def test_a_bound_pod_keeps_no_resource_version_and_a_relist_replaces_only_the_pods_whose_projection_changed(
        api: FakeApiServer, kubeconfig: str, tmp_path: Path) -> None:
    store = store_with(tmp_path, COUNTS)
    api.state.add_node(node("node-1"))
    for name in ("annotated", "finished"):
        api.state.add_pod(labelled(name, nodeName="node-1"))
    api.state.add_pod(labelled("pending"))
    events: list[tuple[str, str]] = []

    async def body() -> None:
        async with cache_on(kubeconfig, policies=store, on_event=lambda kind, type_, obj: events.append((type_, obj["metadata"]["name"]))) as (_, cache):
            by_name = {p["metadata"]["name"]: p for p in cache.pods()}
            assert "resourceVersion" not in by_name["annotated"]["metadata"]  # no policy reads it of a bound pod
            assert by_name["pending"]["metadata"]["resourceVersion"]  # the subject of decisions stays whole
            await asyncio.to_thread(api.state.wait_for_watches, 2)
            # The pod watch down while both change, and the history compacted: the cache relists.
            api.state.fail_next(2, 503, method="GET", path="/api/v1/pods")
            api.state.drop_watches()
            api.state.update("pods", "annotated", "demo", merge={"metadata": {"annotations": {"note": "changed"}}})
            api.state.update("pods", "finished", "demo", merge={"status": {"phase": "Succeeded"}})
            api.state.compact()
            events.clear()
            await eventually(lambda: cache.node_info["node-1"]["podCount"] == 1, what="the relist")
            # A new resourceVersion whose projection is unchanged is no change to anything kpe reads.
            assert events == [("MODIFIED", "finished")]

    run(body)


def test_a_status_update_of_a_bound_pod_that_changes_nothing_kpe_reads_leaves_its_node_as_it_was(
        api: FakeApiServer, kubeconfig: str, tmp_path: Path) -> None:
    store = store_with(tmp_path, COUNTS)
    api.state.add_node(node("node-1"))
    api.state.add_node(node("node-2"))
    for name, on in (("ready", "node-1"), ("done", "node-1"), ("other", "node-2")):
        api.state.add_pod(labelled(name, nodeName=on))
    api.state.update("pods", "ready", "demo", merge={"status": {"conditions": [{"type": "Ready", "status": "False"}]}})
    events: list[tuple[str, str]] = []

    async def body() -> None:
        async with cache_on(kubeconfig, policies=store, on_event=lambda kind, type_, obj: events.append((type_, obj["metadata"]["name"]))) as (_, cache):
            events.clear()  # the sync's
            # A kubelet's updates: no policy here reads a condition's status or the pod's IP, nor does kpe.
            api.state.update("pods", "ready", "demo", merge={"status": {"conditions": [{"type": "Ready", "status": "True"}], "podIP": "10.0.0.7"}})
            api.state.update("pods", "done", "demo", merge={"status": {"phase": "Succeeded"}})  # read: it leaves nodeInfo
            await eventually(lambda: cache.node_info["node-1"]["podCount"] == 1, what="the finished pod")
            assert events == [("MODIFIED", "done")]
            view = cache.node_info["node-1"]
            api.state.update("pods", "ready", "demo", merge={"status": {"podIP": "10.0.0.8"}})
            api.state.update("pods", "other", "demo", merge={"status": {"phase": "Succeeded"}})  # after it on the same watch
            await eventually(lambda: cache.node_info["node-2"]["podCount"] == 0, what="the pod on the other node")
            assert cache.node_info["node-1"] is view  # nothing of node-1 was made anew

    run(body)
