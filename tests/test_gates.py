"""Enqueue admission end to end: the fake API server calls kpe's webhook on pod
CREATE, kpe's gate controller (leader through a Lease) lifts the gate when the
policy admits the pod, and records an Event."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx

from server.app import create_app
from server.settings import Settings

from .fakeapi import FakeApiServer
from .gatecluster import POLICY, cluster, manifest, wait_for
from .serving import ServerThread

def pod(name: str, node: str = "") -> dict[str, Any]:
    return manifest(name, node=node)


def test_a_gated_pod_is_released_when_its_team_frees_quota(tmp_path: Path) -> None:
    with cluster(tmp_path) as c:
        api, url = c.api, c.kpe
        created = c.create("waiting")
        assert [g["name"] for g in created["spec"]["schedulingGates"]] == ["example.com/ml-quota"]
        wait_for(lambda: httpx.get(url + "/apis/v1/gated").json()["pods"] != [])
        gated = httpx.get(url + "/apis/v1/gated").json()
        assert gated["leader"] is True
        assert gated["pods"][0]["gates"] == [{"gate": "example.com/ml-quota", "policy": "ml-quota", "message": "ml-quota: team ml already runs 1 pod"}]
        assert c.gates("waiting") == ["example.com/ml-quota"]

        api.state.delete("pods", "running", "demo")
        wait_for(lambda: not c.gates("waiting"))
        # The Event is posted after the patch that lifts the gate: waited for, not raced.
        wait_for(lambda: lifted(api) == ["waiting"])
        events = [e for e in api.state.events if e.get("reason") == "SchedulingGateLifted"]
        assert len(events) == 1 and "kpe policy ml-quota lifted scheduling gate example.com/ml-quota after" in events[0]["message"]
        patches = api.state.requests_to("PATCH", "/api/v1/namespaces/demo/pods/waiting")
        assert patches and patches[0].json()[0]["op"] == "test"
        [lease] = api.state.leases
        assert lease["spec"]["holderIdentity"] and lease["spec"]["leaseDurationSeconds"] == 2
        assert 'kpe_gate_wait_seconds_count{policy="ml-quota"} 1.0' in httpx.get(url + "/metrics").text


def gated(url: str) -> dict[str, Any]:
    answer: dict[str, Any] = httpx.get(url + "/apis/v1/gated").json()
    return answer


def gates_of(api: FakeApiServer, name: str) -> list[str]:
    found = api.state.get_pod("demo", name)
    assert found is not None, f"pod {name} is gone"
    return [g["name"] for g in found["spec"].get("schedulingGates") or []]


def holder(api: FakeApiServer) -> str:
    lease = api.state.get_lease("kpe-system", "kpe-gate-controller")
    assert lease is not None
    return str(lease["spec"]["holderIdentity"])


def lifted(api: FakeApiServer) -> list[str]:
    return sorted(e["involvedObject"]["name"] for e in api.state.events if e.get("reason") == "SchedulingGateLifted")


def senders(api: FakeApiServer, path: str) -> set[str | None]:
    return {r.headers.get("authorization") for r in api.state.requests_to("PATCH", path)}


def test_two_replicas_share_one_lease_only_the_leader_patches_and_the_other_takes_over(tmp_path: Path) -> None:
    (tmp_path / "policy.yaml").write_text(POLICY)
    with FakeApiServer(bookmark_interval=0.2) as api:
        api.state.add_node({"metadata": {"name": "node-1"}, "status": {"allocatable": {"cpu": "4"}}})
        api.state.add_pod(pod("running", node="node-1"))
        replicas: dict[str, ServerThread] = {}
        urls: dict[str, str] = {}
        try:
            for name in ("replica-a", "replica-b"):
                # Each replica has its own credential, as pods with their own service-account
                # tokens do: the fake's request log then tells whose requests are whose.
                kubeconfig = api.write_kubeconfig(tmp_path / f"{name}.kubeconfig", token=name, require_token=False)
                settings = Settings(policies=str(tmp_path / "policy.yaml"), kubeconfig=kubeconfig, cluster="on", controllers="gates,reservations,requeue", identity=name,
                                    lease_duration_s=2, gate_resync_s=1, gate_debounce_ms=50)
                replicas[name] = ServerThread(create_app(settings))
                urls[name] = replicas[name].start()
            wait_for(lambda: any(gated(u)["leader"] for u in urls.values()))
            leader = next(name for name, u in urls.items() if gated(u)["leader"])
            follower = next(name for name in urls if name != leader)
            assert gated(urls[follower])["leader"] is False and holder(api) == leader
            # The webhook is served by the follower: admission does not need the Lease.
            api.state.add_mutating_webhook("kpe", urls[follower] + "/admission/pods")

            names = [f"waiting-{i}" for i in range(3)]
            for name in names:
                assert httpx.post(api.url + "/api/v1/namespaces/demo/pods", json=pod(name)).status_code == 201
            wait_for(lambda: len(gated(urls[leader])["pods"]) == 3)
            api.state.delete("pods", "running", "demo")
            wait_for(lambda: len(lifted(api)) == 3)
            assert lifted(api) == names and all(gates_of(api, n) == [] for n in names)
            assert len(api.state.requests_to("PATCH", "/api/v1/namespaces/demo/pods/")) >= 3
            assert senders(api, "/api/v1/namespaces/demo/pods/") == {f"Bearer {leader}"}
            assert gated(urls[follower])["pods"] == []

            stopped = time.monotonic()
            replicas.pop(leader).stop()
            wait_for(lambda: gated(urls[follower])["leader"] is True, timeout=5)
            assert time.monotonic() - stopped < 2.0, "the follower waited longer than the lease lasts"
            assert holder(api) == follower

            assert httpx.post(api.url + "/api/v1/namespaces/demo/pods", json=pod("after-handover")).status_code == 201
            wait_for(lambda: "after-handover" in lifted(api))
            assert gates_of(api, "after-handover") == []
            assert senders(api, "/api/v1/namespaces/demo/pods/after-handover") == {f"Bearer {follower}"}
        finally:
            for replica in replicas.values():
                replica.stop()


def test_a_replica_that_loses_the_lease_stops_reporting_the_pods_it_held(tmp_path: Path) -> None:
    from server.cluster.leader import micro_time

    with cluster(tmp_path) as c:
        api, url = c.api, c.kpe
        c.create("waiting")
        wait_for(lambda: len(httpx.get(url + "/apis/v1/gated").json()["pods"]) == 1)
        assert 'kpe_gated_pods{policy="ml-quota"} 1.0' in httpx.get(url + "/metrics").text

        [lease] = api.state.leases
        # Another replica took the Lease (say, after this one stalled past its lease).
        api.state.update("leases", lease["metadata"]["name"], lease["metadata"]["namespace"],
                         merge={"spec": {"holderIdentity": "someone-else", "renewTime": micro_time(), "leaseDurationSeconds": 60}})
        wait_for(lambda: httpx.get(url + "/apis/v1/gated").json()["leader"] is False)
        wait_for(lambda: httpx.get(url + "/apis/v1/gated").json()["pods"] == [])
        metrics = httpx.get(url + "/metrics").text
        assert 'kpe_gated_pods{policy="ml-quota"} 0.0' in metrics and "kpe_gate_controller_leader 0.0" in metrics
        assert c.gates("waiting") == ["example.com/ml-quota"]


def test_a_pass_with_no_pod_at_a_gate_does_not_scan_the_cached_pods(tmp_path: Path) -> None:
    import asyncio

    from server.cluster.cache import ClusterCache
    from server.admission.gates import GateController
    from server.reload.store import PolicyStore
    from server.state import ServerState

    (tmp_path / "policy.yaml").write_text(
        "apiVersion: kpe.dev/v1alpha1\nkind: SchedulingPolicy\nmetadata: {name: hold}\nspec:\n"
        "  admission: {gate: kpe.dev/hold, expression: 'false', message: held}\n"
    )
    store = PolicyStore(str(tmp_path / "policy.yaml"))
    store.load_initial()
    state = ServerState(settings=Settings(policies=str(tmp_path / "policy.yaml"), cluster="off"), store=store)
    cache = ClusterCache(client=None)  # type: ignore[arg-type]  # filled by hand; nothing is listed
    state.cache = cache
    scans: list[int] = []
    listed = cache.pods

    def counted() -> list[dict[str, Any]]:
        scans.append(1)
        return listed()

    cache.pods = counted  # type: ignore[method-assign]
    for i in range(50):
        cache._upsert("pod", {"metadata": {"name": f"running-{i}", "namespace": "demo", "uid": f"u{i}"}, "spec": {"nodeName": "n1"}}, "ADDED")
    controller = GateController(state, resync_s=30, debounce_s=0)
    assert asyncio.run(controller.reconcile()) == 0 and scans == []
    gated: dict[str, Any] = {"metadata": {"name": "waiting", "namespace": "demo", "uid": "w", "annotations": {"kpe.dev/gates": "kpe.dev/hold"}},
                             "spec": {"schedulingGates": [{"name": "kpe.dev/hold"}]}}
    cache._upsert("pod", gated, "ADDED")
    assert cache.gated == {"w"}
    asyncio.run(controller.reconcile())
    assert scans, "a pod waits at a gate: the pass looks at the pods"
    cache._delete("pod", gated)
    assert cache.gated == set()
