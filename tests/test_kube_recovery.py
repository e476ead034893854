"""kpe's API access survives its API server: whatever the server answers while it restarts
(403 while it loads RBAC, 401, 500, connection refused, half-written answers), and however
many of kpe's requests get those answers at once, the client, the node and pod cache and the
Lease recover by themselves once the server is well. Against the fake API server."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from server.cluster.cache import ClusterCache
from server.cluster.informer import MIN_HEALTHY_WATCH_S
from server.cluster.kube import ApiError, KubeClient
from server.cluster.leader import LeaderElector, parse_micro_time
from server.telemetry.metrics import Metrics
from tests.fakeapi import FakeApiServer

TOKEN = "kpe-recovery-token"
LEASE = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "kpe", "namespace": "kpe-system"},
         "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}}
# Answers that mean the client or the server is not well; a 404 or 409 is an answer the caller expects.
WELL = {"200", "201", "404", "409"}


def run(test: Callable[[], Awaitable[None]], timeout: float = 60.0) -> None:
    asyncio.run(asyncio.wait_for(test(), timeout))


async def eventually(check: Callable[[], bool], timeout: float = 20.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


def node(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}},
            "status": {"allocatable": {"cpu": "4", "pods": "110"}}}


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    with FakeApiServer(bookmark_interval=0.2) as server:
        server.state.add_node(node("node-1"))
        yield server


async def first_event(client: KubeClient, delay: float = 0.0) -> dict[str, Any]:
    await asyncio.sleep(delay)
    async for event in client.watch("/api/v1/nodes", resource_version=""):
        return event
    raise AssertionError("the watch ended without an event")


async def works(client: KubeClient) -> None:
    """A list, a watch and a Lease renewal, as the cache and the leader elector make them."""
    assert [n["metadata"]["name"] for n in (await client.list("/api/v1/nodes"))["items"]] == ["node-1"]
    assert (await asyncio.wait_for(first_event(client), 5))["object"]["metadata"]["name"] == "node-1"
    lease = await client.get_lease("kpe-system", "kpe")
    await client.replace_lease("kpe-system", "kpe", lease)


@pytest.mark.parametrize("code", [403, 401])
def test_two_requests_refused_at_once_leave_the_client_working_once_the_api_server_answers_again(api: FakeApiServer, tmp_path: Path, code: int) -> None:
    """The Lease renewal and a watch get the refusal together (a restarted API server refuses
    while it loads RBAC); reloading credentials for one while the other builds on them must
    not leave the client without a server address. Offsets vary which one is refused first."""
    config = api.write_kubeconfig(tmp_path / "kubeconfig", token=TOKEN)

    async def body() -> None:
        client = await KubeClient.connect(kubeconfig=config, required=True)
        assert client is not None
        try:
            await client.create_lease("kpe-system", LEASE)
            for offset in (0.0, 0.0, 0.001, 0.002, 0.003, 0.005, 0.0, 0.001):
                api.state.fail_next(2, code)
                answers = await asyncio.gather(client.get_lease("kpe-system", "kpe"), asyncio.wait_for(first_event(client, offset), 5),
                                               return_exceptions=True)
                assert all(isinstance(a, dict) or (isinstance(a, ApiError) and a.status == code) for a in answers), answers
                api.state.clear_faults()
                await works(client)
            # More callers at once, as kpe makes them: both informers' lists and watches, the Lease, a bind.
            api.state.fail_next(6, code)
            await asyncio.gather(client.list("/api/v1/nodes"), client.list("/api/v1/pods"), client.get_lease("kpe-system", "kpe"),
                                 asyncio.wait_for(first_event(client), 5), asyncio.wait_for(first_event(client, 0.001), 5),
                                 client.get_node("node-1"), return_exceptions=True)
            api.state.clear_faults()
            await works(client)
            assert client.server == api.url
        finally:
            await client.close()

    run(body)


def test_the_cache_and_the_lease_recover_by_themselves_from_a_restart_with_refusals_errors_and_half_written_answers(
    api: FakeApiServer, tmp_path: Path
) -> None:
    config = api.write_kubeconfig(tmp_path / "kubeconfig", token=TOKEN)
    api.state.add_node(node("node-2"))
    metrics = Metrics()

    def failing() -> float:
        """kpe's requests so far that got no answer, or an answer that is not a caller's business."""
        total = 0.0
        for family in metrics.registry.collect():
            if family.name == "kpe_kube_api_requests":
                total += sum(s.value for s in family.samples if s.name.endswith("_total") and s.labels["code"] not in WELL)
        return total

    async def body() -> None:
        client = await KubeClient.connect(kubeconfig=config, required=True)
        assert client is not None
        client.measure(metrics.kube_api_requests)
        # The shipped cap on the backoff: recovery must follow the API server, not wait it out.
        cache = ClusterCache(client, metrics=metrics, backoff_max=30.0)
        elector = LeaderElector(client, namespace="kpe-system", name="kpe", identity="kpe-a", lease_duration_s=1.5)
        stop = asyncio.Event()
        tasks = [asyncio.create_task(cache.run(stop)), asyncio.create_task(elector.run(stop))]
        try:
            await asyncio.wait_for(asyncio.gather(cache.synced.wait(), elector.leading.wait()), 10)
            await eventually(lambda: cache.connected, what="the first sync")
            # Watches that have worked a while, as they have when a server restarts under a running kpe
            # (one that fails at once after a list counts as flapping, and its backoff is not cut short).
            await asyncio.sleep(MIN_HEALTHY_WATCH_S + 0.5)
            for restart in range(3):
                # The server goes away (its watches end), refuses connections for a while, and comes
                # back refusing and failing for a moment; meanwhile a node is relabelled and one added.
                api.stop()
                down = time.monotonic()
                await eventually(lambda: not cache.connected, what="the cache to know it is cut off")
                api.state.update("nodes", "node-1", merge={"metadata": {"labels": {"restart": str(restart)}}})
                api.state.add_node(node(f"new-{restart}"))
                await asyncio.sleep(1.5)  # long enough for every backoff to have grown
                api.state.fail_next(6, 403)
                api.state.fail_next(3, 401)
                api.state.fail_next(3, 500)
                api.state.cut_next(3)
                api.start()
                back = time.monotonic()

                def recovered() -> bool:
                    labels = (cache.node("node-1") or {}).get("metadata", {}).get("labels", {})
                    lease = api.state.get_lease("kpe-system", "kpe") or {}
                    renewed = parse_micro_time(lease.get("spec", {}).get("renewTime")) > time.time() - (time.monotonic() - back)
                    return cache.connected and labels.get("restart") == str(restart) and cache.node(f"new-{restart}") is not None and renewed

                await eventually(recovered, what=f"the cache and the Lease after restart {restart + 1}")
                done = time.monotonic()
                settled = failing()
                await asyncio.sleep(1.5)  # lists, watches and three Lease renewals, none of them failing
                assert failing() == settled and cache.connected and elector.is_leader
                assert client.server == api.url
                print(f"\n[recovery] restart {restart + 1}: down {back - down:.1f} s; cache current and Lease renewed {done - back:.2f} s after the "
                      f"server came back (its first 15 answers refusals, errors or half-written); failing requests afterwards {failing() - settled:.0f}")
        finally:
            stop.set()
            await asyncio.gather(*tasks, return_exceptions=True)
            await client.close()

    run(body, timeout=90)
