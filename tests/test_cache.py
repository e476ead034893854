"""The Kubernetes client (server/cluster/kube.py) and the node/pod cache (server/cluster/cache.py)
against the in-process fake API server, over real HTTP, through a kubeconfig
with a bearer token (so kpe's own credential loading is the one exercised)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme

from server.cluster import informer
from server.cluster.informer import MIN_HEALTHY_WATCH_S, backoff
from server.cluster.cache import ClusterCache
from server.cluster.kube import ApiError, CredentialsError, Expired, KubeClient
from server.telemetry.metrics import Metrics
from tests.fakeapi import FakeApiServer, State

FIXTURES = Path(__file__).resolve().parent / "data" / "fixtures" / "kube-apiserver-wire"
TOKEN = "kpe-test-token"


def fixture(name: str) -> dict[str, Any]:
    captured: dict[str, Any] = json.loads((FIXTURES / name).read_text())
    return captured


def run(test: Callable[[], Awaitable[None]], timeout: float = 8.0) -> None:
    """Each test is one event loop, bounded in time."""
    asyncio.run(asyncio.wait_for(test(), timeout))


async def eventually(check: Callable[[], bool], timeout: float = 3.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


def node(name: str, **labels: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}},
        "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}, "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"}},
    }


def pod(name: str, cpu: str = "500m", memory: str = "1Gi", namespace: str = "demo", **spec: Any) -> dict[str, Any]:
    container = {"name": "c", "image": "app:1", "resources": {"requests": {"cpu": cpu, "memory": memory}}}
    return {"metadata": {"name": name, "namespace": namespace}, "spec": {"containers": [container], **spec}}


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        yield server


@pytest.fixture
def kubeconfig(api: FakeApiServer, tmp_path: Path) -> str:
    """A kubeconfig for the fake's plain-http URL with a bearer token (which the fake then requires)."""
    return api.write_kubeconfig(tmp_path / "kubeconfig", token=TOKEN)


def list_requests(state: State, path: str) -> list[dict[str, str]]:
    return [r.query for r in state.requests_to("GET", path) if r.path == path and "watch" not in r.query]


def watch_requests(state: State, path: str) -> list[dict[str, str]]:
    return [r.query for r in state.requests_to("GET", path) if r.path == path and "watch" in r.query]


@contextlib.asynccontextmanager
async def client_on(kubeconfig: str = "", **options: Any) -> AsyncIterator[KubeClient]:
    client = await KubeClient.connect(kubeconfig=kubeconfig, required=True, **options)
    assert client is not None
    try:
        yield client
    finally:
        await client.close()


@contextlib.asynccontextmanager
async def cache_on(kubeconfig: str, **options: Any) -> AsyncIterator[tuple[KubeClient, ClusterCache]]:
    """A synced cache over a real client; stopped (and its watches closed) at the end."""
    options.setdefault("backoff_max", 0.2)
    async with client_on(kubeconfig) as client:
        cache = ClusterCache(client, **options)
        stop = asyncio.Event()
        task = asyncio.create_task(cache.run(stop))
        try:
            await asyncio.wait_for(cache.synced.wait(), 5)
            yield client, cache
        finally:
            stop.set()
            await asyncio.wait_for(task, 5)


def test_the_first_sync_lists_every_page_and_then_watches_from_the_list_version(api: FakeApiServer, kubeconfig: str) -> None:
    for i in range(5):
        api.state.add_node(node(f"node-{i}"))
    api.state.add_pod(pod("web"))

    async def body() -> None:
        async with cache_on(kubeconfig, page_size=2) as (_, cache):
            assert sorted(n["metadata"]["name"] for n in cache.nodes()) == [f"node-{i}" for i in range(5)]
            assert [p["metadata"]["name"] for p in cache.pods()] == ["web"]
            await eventually(lambda: len(watch_requests(api.state, "/api/v1/nodes")) == 1, what="the node watch")
        pages = list_requests(api.state, "/api/v1/nodes")
        assert [p.get("limit") for p in pages] == ["2", "2", "2"]
        assert "continue" not in pages[0] and all(p.get("continue") for p in pages[1:])
        watch = watch_requests(api.state, "/api/v1/nodes")[0]
        assert watch["allowWatchBookmarks"] == "true" and watch["resourceVersion"] == api.state.resource_version

    run(body)


def test_a_relabelled_node_reaches_the_cache_through_the_watch(api: FakeApiServer, kubeconfig: str) -> None:
    api.state.add_node(node("node-1", pool="cpu"))

    async def body() -> None:
        changes = []
        async with cache_on(kubeconfig, on_event=lambda kind, type_, obj: changes.append((kind, type_, obj["metadata"]["name"]))) as (_, cache):
            changed = cache.subscribe()
            changed.clear()
            api.state.update("nodes", "node-1", merge={"metadata": {"labels": {"pool": "gpu"}}})
            await asyncio.wait_for(changed.wait(), 3)
            await eventually(lambda: (cache.node("node-1") or {}).get("metadata", {}).get("labels", {}).get("pool") == "gpu")
            assert cache.resource_version("node") == api.state.resource_version
            assert ("node", "MODIFIED", "node-1") in changes

    run(body)


def test_a_bound_pod_counts_in_its_node_info_until_it_is_deleted(api: FakeApiServer, kubeconfig: str) -> None:
    api.state.add_node(node("node-1"))
    api.state.add_node(node("node-2"))
    web = api.state.add_pod(pod("web", cpu="500m", memory="1Gi"))
    api.state.add_pod(pod("db", cpu="1", memory="2Gi"))

    async def body() -> None:
        async with cache_on(kubeconfig) as (client, cache):
            assert cache.node_info.get("node-1") == {"pods": [], "podCount": 0, "requested": {}}
            await client.bind("demo", "web", web["metadata"]["uid"], "node-1")
            await eventually(lambda: cache.node_info.get("node-1", {}).get("podCount") == 1, what="web on node-1")
            info = cache.node_info["node-1"]
            assert info["requested"] == {"cpu": "500m", "memory": "1Gi"}
            assert [p["metadata"]["name"] for p in info["pods"]] == ["web"]
            assert cache.node_info.get("node-1") is info, "the view is rebuilt only when the node's pods change"
            assert cache.pods_on("node-1")[0]["metadata"]["uid"] == web["metadata"]["uid"]

            api.state.bind("demo", "db", "node-1")
            await eventually(lambda: cache.node_info["node-1"]["podCount"] == 2, what="db on node-1")
            assert cache.node_info["node-1"]["requested"] == {"cpu": "1500m", "memory": "3Gi"}
            assert cache.node_info["node-2"]["podCount"] == 0 and set(cache.node_info) == {"node-1", "node-2"}

            api.state.delete("pods", "web", "demo")
            await eventually(lambda: cache.node_info["node-1"]["podCount"] == 1, what="web gone")
            assert cache.node_info["node-1"]["requested"] == {"cpu": "1", "memory": "2Gi"}
            assert cache.pod_by_uid(web["metadata"]["uid"]) is None

    run(body)


def test_a_pod_that_succeeds_leaves_node_info_but_stays_in_the_pod_cache(api: FakeApiServer, kubeconfig: str) -> None:
    api.state.add_node(node("node-1"))
    job = api.state.add_pod(pod("job", cpu="2", nodeName="node-1"))

    async def body() -> None:
        async with cache_on(kubeconfig) as (_, cache):
            assert cache.node_info["node-1"]["requested"]["cpu"] == "2"
            api.state.update("pods", "job", "demo", merge={"status": {"phase": "Succeeded"}})
            await eventually(lambda: cache.node_info["node-1"]["podCount"] == 0, what="the finished pod to leave")
            assert cache.node_info["node-1"]["requested"] == {}
            assert (cache.pod_by_uid(job["metadata"]["uid"]) or {})["status"]["phase"] == "Succeeded"

    run(body)


def test_a_deleted_node_disappears_from_the_next_lookup(api: FakeApiServer, kubeconfig: str) -> None:
    api.state.add_node(node("node-1"))
    api.state.add_node(node("node-2"))

    async def body() -> None:
        async with cache_on(kubeconfig) as (_, cache):
            api.state.delete("nodes", "node-2")
            await eventually(lambda: cache.node("node-2") is None, what="node-2 to go")
            assert cache.node_info.get("node-2") is None and "node-2" not in cache.node_info and len(cache.node_info) == 1

    run(body)


def test_after_history_is_compacted_while_the_watch_is_down_the_cache_relists(api: FakeApiServer, kubeconfig: str) -> None:
    api.state.add_node(node("node-1"))
    api.state.add_node(node("node-2"))
    metrics = Metrics()

    async def body() -> None:
        async with cache_on(kubeconfig, metrics=metrics) as (_, cache):
            await asyncio.to_thread(api.state.wait_for_watches, 2)
            # Keep the node watch down while the cluster changes and etcd compacts.
            api.state.fail_next(2, 503, method="GET", path="/api/v1/nodes")
            api.state.drop_watches()
            api.state.delete("nodes", "node-1")
            api.state.add_node(node("node-3"))
            api.state.compact()
            await eventually(lambda: cache.node("node-3") is not None and cache.node("node-1") is None, what="the relist")
            assert sorted(cache.node_info) == ["node-2", "node-3"]
        assert len(list_requests(api.state, "/api/v1/nodes")) == 2
        assert metrics.registry.get_sample_value("kpe_watch_restarts_total", {"kind": "node", "reason": "expired"}) == 1
        assert metrics.registry.get_sample_value("kpe_cache_objects", {"kind": "node"}) == 2

    run(body)


def test_a_dropped_watch_resumes_from_the_last_resource_version_without_a_relist(api: FakeApiServer, kubeconfig: str) -> None:
    api.state.add_node(node("node-1"))

    async def body() -> None:
        async with cache_on(kubeconfig) as (_, cache):
            await asyncio.to_thread(api.state.wait_for_watches, 2)
            api.state.update("nodes", "node-1", merge={"metadata": {"labels": {"step": "1"}}})
            await eventually(lambda: cache.resource_version("node") == api.state.resource_version, what="step 1")
            seen = cache.resource_version("node")
            assert api.state.drop_watches() == 2
            await asyncio.to_thread(api.state.wait_for_watches, 2)
            api.state.update("nodes", "node-1", merge={"metadata": {"labels": {"step": "2"}}})
            await eventually(lambda: (cache.node("node-1") or {})["metadata"]["labels"].get("step") == "2", what="step 2")
        assert len(list_requests(api.state, "/api/v1/nodes")) == 1
        watches = watch_requests(api.state, "/api/v1/nodes")
        assert len(watches) == 2 and watches[1]["resourceVersion"] == seen

    run(body)


def test_bookmarks_advance_the_resource_version_a_resumed_watch_starts_from(api: FakeApiServer, kubeconfig: str) -> None:
    api.state.add_node(node("node-1"))

    async def body() -> None:
        async with cache_on(kubeconfig) as (_, cache):
            await asyncio.to_thread(api.state.wait_for_watches, 2)
            listed = cache.resource_version("node")
            api.state.add_pod(pod("web"))  # moves the global version; the node watch has nothing to say
            api.state.send_bookmarks()
            await eventually(lambda: cache.resource_version("node") == api.state.resource_version, what="the bookmark")
            assert int(cache.resource_version("node")) > int(listed) and cache.lag_seconds("node") < 1
            api.state.drop_watches()
            await asyncio.to_thread(api.state.wait_for_watches, 2)
        assert watch_requests(api.state, "/api/v1/nodes")[-1]["resourceVersion"] == api.state.resource_version
        assert len(list_requests(api.state, "/api/v1/nodes")) == 1

    run(body)


def test_a_watch_break_disconnects_the_cache_until_its_resumed_watches_are_heard_from(api: FakeApiServer, kubeconfig: str) -> None:
    api.state.add_node(node("node-1"))

    async def body() -> None:
        async with cache_on(kubeconfig) as (_, cache):
            await asyncio.to_thread(api.state.wait_for_watches, 2)
            assert cache.connected and cache.disconnection() is None
            api.state.drop_watches()
            await eventually(lambda: not cache.connected, what="the break to show")
            await asyncio.to_thread(api.state.wait_for_watches, 2)
            # Resumed from where they were, and not heard from yet: they could be missing what changed.
            lost = cache.disconnection()
            assert not cache.connected and lost is not None and "nodes: its watch failed (ConnectionLost)" in lost[1]
            api.state.update("nodes", "node-1", merge={"metadata": {"labels": {"after": "break"}}})
            api.state.add_pod(pod("web"))
            await eventually(lambda: cache.connected, what="the resumed watches to say something")
            assert (cache.node("node-1") or {})["metadata"]["labels"]["after"] == "break"
        assert len([q for q in list_requests(api.state, "/api/v1/nodes") if q.get("limit") != "1"]) == 1  # caught up without a relist

    run(body)


def test_the_backoff_starts_over_after_each_outage_so_restarts_of_a_quiet_cluster_do_not_add_up_to_its_cap(
    api: FakeApiServer, kubeconfig: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A quiet watch delivers no event: were only events to reset the backoff, every outage
    would start where the last one ended, until retries came --relist-backoff-max-s apart."""
    api.state.add_node(node("node-1"))
    failures: list[int] = []

    def recorded(count: int, maximum: float) -> float:
        failures.append(count)
        return backoff(count, maximum)

    monkeypatch.setattr(informer, "backoff", recorded)
    worst: list[int] = []

    async def body() -> None:
        async with cache_on(kubeconfig, backoff_max=30.0) as (_, cache):
            for _ in range(3):
                await asyncio.sleep(MIN_HEALTHY_WATCH_S + 0.2)  # the quiet watches have worked a while
                failures.clear()
                api.state.fail_next(3, 500, path="/api/v1/")
                api.state.drop_watches()
                await eventually(lambda: not cache.connected, what="the outage to show")
                await eventually(lambda: cache.connected, timeout=20, what="the cache to catch up")
                worst.append(max(failures))

    run(body, timeout=40)
    assert worst == [min(w, 3) for w in worst] and len(worst) == 3  # three failed answers at most, each outage


def test_a_server_whose_watches_expire_at_once_after_each_list_gets_a_growing_backoff_not_a_relist_loop(
    api: FakeApiServer, kubeconfig: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each 410 Expired asks for a relist, and each list succeeds: were a successful list to
    reset the backoff outright, the informer would relist as fast as the server answers."""
    api.state.add_node(node("node-1"))
    api.state.fail_next(1_000_000, 410, path="/api/v1/nodes", watch=True)
    failures: list[int] = []

    def recorded(count: int, maximum: float) -> float:
        failures.append(count)
        return backoff(count, maximum)

    monkeypatch.setattr(informer, "backoff", recorded)

    async def body() -> None:
        async with cache_on(kubeconfig, backoff_max=30.0) as (_, cache):
            await eventually(lambda: len(list_requests(api.state, "/api/v1/nodes")) >= 3, timeout=20, what="two relists")
            assert cache._reachability.probes == 0  # the server answers: no probe cuts the backoff short

    run(body, timeout=30)
    # Each list succeeds and resets the failures, but not the flapping: the waits keep growing.
    assert failures[:2] == [2, 3]


def test_503_answers_are_retried_with_growing_backoff_until_the_cache_syncs(api: FakeApiServer, kubeconfig: str) -> None:
    api.state.add_node(node("node-1"))
    api.state.fail_next(4, 503, path="/api/v1/nodes")
    metrics = Metrics()

    async def body() -> None:
        started = time.monotonic()
        async with cache_on(kubeconfig, metrics=metrics, backoff_max=0.2) as (_, cache):
            # 4 failures: waits of at least 0.1 s each (half the 0.2 s cap is fixed, half jitter).
            assert time.monotonic() - started >= 0.4
            assert cache.node("node-1") is not None and cache.last_error is None
        assert len(list_requests(api.state, "/api/v1/nodes")) == 5
        assert metrics.registry.get_sample_value("kpe_watch_restarts_total", {"kind": "node", "reason": "failed"}) == 4

    run(body)


def test_a_429_with_retry_after_is_retried_no_sooner_than_the_server_asked(api: FakeApiServer, kubeconfig: str) -> None:
    api.state.add_node(node("node-1"))
    api.state.fail_next(2, 429, method="GET", path="/api/v1/nodes")  # Retry-After: 1, as API priority and fairness sends

    async def body() -> None:
        async with cache_on(kubeconfig, backoff_max=5.0) as (_, cache):
            assert cache.node("node-1") is not None
        lists = [r.at for r in api.state.requests_to("GET", "/api/v1/nodes") if "watch" not in r.query]
        assert len(lists) == 3
        # Without the header the first retry would come after 0.25-0.5 s.
        assert all(later - earlier >= 1.0 for earlier, later in zip(lists, lists[1:]))

    run(body)


def test_during_an_api_server_outage_the_cache_keeps_serving_and_its_lag_grows(api: FakeApiServer, kubeconfig: str) -> None:
    api.state.add_node(node("node-1"))

    async def body() -> None:
        async with cache_on(kubeconfig) as (_, cache):
            await asyncio.to_thread(api.state.wait_for_watches, 2)
            api.state.fail_next(1000, 503)
            api.state.drop_watches()
            await eventually(lambda: "503" in (cache.last_error or ""), what="the 503 to show")
            assert "unable to handle the request" in (cache.last_error or "")
            await asyncio.sleep(0.3)
            assert cache.lag_seconds("node") >= 0.3 and cache.node("node-1") is not None

    run(body)


def test_backoff_grows_exponentially_with_jitter_up_to_its_cap() -> None:
    assert backoff(0, 4.0) == 0
    for failures, ceiling in ((1, 0.5), (2, 1.0), (3, 2.0), (4, 4.0), (40, 4.0)):
        waits = [backoff(failures, 4.0) for _ in range(200)]
        assert all(ceiling / 2 <= w <= ceiling for w in waits) and len(set(waits)) > 1


def test_bind_posts_a_binding_with_the_uid_precondition(api: FakeApiServer, kubeconfig: str) -> None:
    created = api.state.add_pod(pod("web"))

    async def body() -> None:
        async with client_on(kubeconfig) as client:
            await client.bind("demo", "web", created["metadata"]["uid"], "node-1")
        sent = api.state.requests_to("POST", "/api/v1/namespaces/demo/pods/web/binding")[0].json()
        assert sent == {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "web", "namespace": "demo", "uid": created["metadata"]["uid"]},
                        "target": {"apiVersion": "v1", "kind": "Node", "name": "node-1"}}
        assert (api.state.get_pod("demo", "web") or {})["spec"]["nodeName"] == "node-1"

    run(body)


def test_a_refused_binding_raises_the_api_servers_409_status_and_message(api: FakeApiServer, kubeconfig: str) -> None:
    created = api.state.add_pod(pod("plain"))
    api.state.refuse_binding("demo", "plain")
    captured = fixture("binding-conflict-409.json")

    async def body() -> None:
        async with client_on(kubeconfig) as client:
            with pytest.raises(ApiError) as refused:
                await client.bind("demo", "plain", created["metadata"]["uid"], "node-1")
            assert (refused.value.status, refused.value.reason, refused.value.message) == (409, "Conflict", captured["message"])
            assert refused.value.body == captured
            with pytest.raises(ApiError) as wrong_uid:
                await client.bind("demo", "plain", "another-uid", "node-1")
            assert wrong_uid.value.status == 409 and "Precondition failed: UID in precondition: another-uid" in wrong_uid.value.message
            with pytest.raises(ApiError) as missing:
                await client.bind("demo", "nobody", "", "node-1")
            assert missing.value.status == 404 and missing.value.message == 'pods "nobody" not found'

    run(body)


def test_a_json_patch_whose_test_op_fails_raises_422(api: FakeApiServer, kubeconfig: str) -> None:
    api.state.add_pod(pod("gated", schedulingGates=[{"name": "kpe.dev/quota"}]))
    captured = fixture("jsonpatch-test-failed.json")

    async def body() -> None:
        async with client_on(kubeconfig) as client:
            stale = [{"op": "test", "path": "/spec/schedulingGates/0/name", "value": "someone-else"}, {"op": "remove", "path": "/spec/schedulingGates/0"}]
            with pytest.raises(ApiError) as failed:
                await client.patch_pod("demo", "gated", stale)
            assert (failed.value.status, failed.value.reason, failed.value.message) == (422, "Invalid", captured["message"])
            fresh = [{"op": "test", "path": "/spec/schedulingGates/0/name", "value": "kpe.dev/quota"}, {"op": "remove", "path": "/spec/schedulingGates/0"}]
            patched = await client.patch_pod("demo", "gated", fresh)
            assert not patched["spec"].get("schedulingGates")
            assert (await client.get_pod("demo", "gated"))["metadata"]["resourceVersion"] == patched["metadata"]["resourceVersion"]

    run(body)


def test_a_list_or_watch_at_a_compacted_version_raises_expired(api: FakeApiServer, kubeconfig: str) -> None:
    api.state.add_node(node("node-1"))
    old = api.state.resource_version
    api.state.add_node(node("node-2"))
    api.state.compact()

    async def body() -> None:
        async with client_on(kubeconfig) as client:
            with pytest.raises(Expired) as listed:
                await client.list("/api/v1/nodes", params={"resourceVersion": old, "resourceVersionMatch": "Exact"})
            assert listed.value.body == fixture("list-expired-410.json")
            with pytest.raises(Expired) as watched:
                async for _ in client.watch("/api/v1/nodes", resource_version=old):
                    pass
            assert watched.value.status == 410 and watched.value.reason == "Expired"

    run(body)


def test_events_and_leases_round_trip_with_optimistic_concurrency(api: FakeApiServer, kubeconfig: str) -> None:
    async def body() -> None:
        async with client_on(kubeconfig) as client:
            lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "kpe", "namespace": "kpe-system"},
                     "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}}
            made = await client.create_lease("kpe-system", lease)
            got = await client.get_lease("kpe-system", "kpe")
            assert got["metadata"]["resourceVersion"] == made["metadata"]["resourceVersion"]
            got["spec"]["holderIdentity"] = "b"
            await client.replace_lease("kpe-system", "kpe", got)
            with pytest.raises(ApiError) as stale:
                await client.replace_lease("kpe-system", "kpe", made)
            assert stale.value.status == 409 and "the object has been modified" in stale.value.message
            with pytest.raises(ApiError) as missing:
                await client.get_lease("kpe-system", "other")
            assert missing.value.status == 404
            event = {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "web.1", "namespace": "demo"}, "reason": "Gated", "message": "waiting",
                     "type": "Normal", "involvedObject": {"kind": "Pod", "namespace": "demo", "name": "web"}, "source": {"component": "kpe"}}
            await client.create_event("demo", event)
            assert [e["reason"] for e in api.state.events] == ["Gated"]

    run(body)


def test_connect_finds_no_credentials_or_fails_clearly_when_they_are_required(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    broken = tmp_path / "broken"
    broken.write_text("apiVersion: v1\nkind: Config\ncontexts: []\n")

    async def body() -> None:
        assert await KubeClient.connect() is None
        with pytest.raises(CredentialsError, match="no credentials were found"):
            await KubeClient.connect(required=True)
        with pytest.raises(CredentialsError, match="does not exist"):
            await KubeClient.connect(kubeconfig=str(tmp_path / "missing"))
        with pytest.raises(CredentialsError, match="cannot load Kubernetes credentials"):
            await KubeClient.connect(kubeconfig=str(broken))

    run(body)


def test_kubeconfig_from_the_environment_is_used_and_a_wrong_token_is_refused(api: FakeApiServer, kubeconfig: str, tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", kubeconfig)
    wrong = tmp_path / "wrong"
    wrong.write_text(Path(kubeconfig).read_text().replace(TOKEN, "wrong-token"))

    async def body() -> None:
        async with client_on() as client:
            assert client.server == api.url and client.source.startswith("$KUBECONFIG")
            assert (await client.list("/api/v1/nodes"))["kind"] == "NodeList"
        async with client_on(str(wrong)) as refused:
            with pytest.raises(ApiError) as unauthorized:
                await refused.list("/api/v1/nodes")
            assert unauthorized.value.status == 401

    run(body)


def test_in_cluster_the_service_account_is_used_over_https_before_the_home_kubeconfig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert.private_key_pem.write_to_path(str(tmp_path / "tls.key"))
    cert.cert_chain_pems[0].write_to_path(str(tmp_path / "tls.crt"))
    account = tmp_path / "serviceaccount"
    account.mkdir()
    ca.cert_pem.write_to_path(str(account / "ca.crt"))
    (account / "token").write_text(TOKEN)
    (account / "namespace").write_text("kpe-system")
    (tmp_path / ".kube").mkdir()
    (tmp_path / ".kube" / "config").write_text("this kubeconfig must not be read in a pod\n")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    tls = {"ssl_keyfile": str(tmp_path / "tls.key"), "ssl_certfile": str(tmp_path / "tls.crt")}

    with FakeApiServer(uvicorn_options=tls) as api:
        api.state.token = TOKEN
        api.state.add_node(node("node-1"))
        monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
        monkeypatch.setenv("KUBERNETES_SERVICE_PORT", api.url.rsplit(":", 1)[1])

        async def body() -> None:
            async with client_on(serviceaccount=str(account)) as client:
                assert client.source == "in-cluster service account" and client.server == api.url
                items, _ = await client.list_all("/api/v1/nodes")
                assert [n["metadata"]["name"] for n in items] == ["node-1"]

        run(body)


def test_an_unreachable_api_server_is_an_api_error_with_status_0(tmp_path: Path) -> None:
    config = tmp_path / "kubeconfig"
    config.write_text("apiVersion: v1\nkind: Config\ncurrent-context: x\nclusters: [{name: c, cluster: {server: 'http://127.0.0.1:9'}}]\n"
                      "users: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n")

    async def body() -> None:
        async with client_on(str(config)) as client:
            with pytest.raises(ApiError) as failed:
                await client.get_pod("demo", "web")
            assert failed.value.status == 0 and failed.value.reason == "Unreachable"

    run(body)


def test_watch_events_cut_anywhere_by_the_stream_reach_the_cache_whole_and_in_order(api: FakeApiServer, kubeconfig: str) -> None:
    # Chunks of a chunked response need not follow event boundaries: one may end mid-event,
    # the next hold the rest and several more events (a burst after a relist does that).
    api.state.add_node(node("node-1"))
    api.state.watch_chunk_bytes = 333
    metrics = Metrics()

    async def body() -> None:
        async with cache_on(kubeconfig, metrics=metrics) as (_client, cache):
            for i in range(30):
                api.state.add_pod(pod(f"web-{i:02d}", cpu=f"{i + 1}m", nodeName="node-1"))
            api.state.delete("pods", "web-07", "demo")
            # 29 pods are also on the node for a moment before web-29 arrives and web-07 goes:
            # wait for the end state itself, not a count that passes through it.
            expected = [f"web-{i:02d}" for i in range(30) if i != 7]
            await eventually(lambda: sorted(p["metadata"]["name"] for p in cache.pods()) == expected, what="web-00 to web-29 without web-07")
            await eventually(lambda: cache.node_info.get("node-1", {}).get("podCount") == 29, what="29 pods on node-1")
            cached = {p["metadata"]["name"]: p for p in cache.pods()}
            assert sorted(cached) == expected
            assert all(p["spec"]["containers"][0]["resources"]["requests"]["cpu"] == f"{int(name[4:]) + 1}m" for name, p in cached.items())
            assert cache.node_info["node-1"]["requested"]["cpu"] == f"{sum(range(1, 31)) - 8}m"

    run(body)
    # Each event applied is counted with the time it took (31 pod events: 30 added, 1 deleted).
    assert metrics.registry.get_sample_value("kpe_cache_events_total", {"kind": "pod"}) == 31
    assert (metrics.registry.get_sample_value("kpe_cache_event_seconds_total", {"kind": "pod"}) or 0) > 0


def test_an_idle_connection_outlives_a_lease_renewal_period_so_each_renewal_reuses_it(kubeconfig: str) -> None:
    from server.cluster.kube import IDLE_CONNECTION_S
    from server.settings import Settings

    async def body() -> None:
        async with client_on(kubeconfig) as client:
            pool = client._session.http._transport._pool  # httpx's connection pool (httpcore)
            # httpx's default (5 s) is the renewal period of the default Lease (15 s / 3): every
            # renewal found its connection just expired, and opened a new TLS connection.
            assert pool._keepalive_expiry == IDLE_CONNECTION_S > Settings().lease_duration_s / 3
            assert IDLE_CONNECTION_S < 90  # kube-apiserver's own idle timeout: it must not close first

    asyncio.run(body())
