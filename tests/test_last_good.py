"""A kpe that starts while the cluster holds a policy that does not compile keeps serving
(server/cluster/lastgood.py, PolicyStore.fall_back): the last good set the leader kept, or
with none the objects that compile, said in /readyz, /apis/v1/policies, metrics and each
object's status, until the cluster's set compiles whole. The leader keeps the set it serves,
never a fallback, and writes only when it changed. On the fake API server for the faults."""

from __future__ import annotations

import asyncio
import logging
import socket
from pathlib import Path
from typing import Any

import httpx
import pytest

from engine.errors import PolicyLoadError
from engine.policy.objects import ObjectKey, convert

from server.app import create_app
from server.cluster import lastgood
from server.cluster.kube import KubeClient
from server.cluster.lastgood import LastGoodKeeper, decode, encode
from server.http.listeners import running
from server.reload.store import NoConfigMaps, PolicyStore
from server.settings import Settings

from .fakeapi import FakeApiServer
from .test_policy_status import Objects, policy, status, store_of

POOL_A = {"filters": [{"name": "pool", "expression": "node.metadata.?labels[?'pool'].orValue('') == 'a'", "message": "not in pool a"}]}
POOL_B = {"filters": [{"name": "pool", "expression": "node.metadata.?labels[?'pool'].orValue('') == 'b'", "message": "not in pool b"}]}
BROKEN = {"filters": [{"name": "pool", "expression": "node.metadata.name > 3"}]}
QUOTA = {"admission": {"gate": "example.com/quota", "expression": "true"}}
NAMESPACE = "kpe-system"
CONFIGMAPS = f"/api/v1/namespaces/{NAMESPACE}/configmaps"


def over(*objects: dict[str, Any]) -> PolicyStore:
    """A store over ``objects`` as the server makes it, before its first load."""
    store = PolicyStore("", objects=Objects(*objects))
    store.params = NoConfigMaps()
    return store


def refused(store: PolicyStore) -> PolicyLoadError:
    with pytest.raises(PolicyLoadError) as caught:
        store.load_initial()
    return caught.value


def test_the_kept_set_reads_back_as_the_objects_it_was_made_of_inline_or_gzipped(monkeypatch: pytest.MonkeyPatch) -> None:
    objects = (convert(policy("pool", POOL_A, generation=3)), convert(policy("quota", QUOTA, generation=7)))
    inline = encode(objects, "g1")
    assert list(inline) == ["data"] and list(inline["data"]) == ["objects.json"]
    assert [(o.key, o.generation, o.data) for o in decode(inline)] == [(o.key, o.generation, o.data) for o in objects]
    monkeypatch.setattr(lastgood, "INLINE_LIMIT", 10)
    packed = encode(objects, "g1")
    assert list(packed) == ["binaryData"] and list(packed["binaryData"]) == ["objects.json.gz"]
    assert [(o.key, o.generation, o.data) for o in decode(packed)] == [(o.key, o.generation, o.data) for o in objects]
    with pytest.raises(ValueError, match="neither objects.json nor objects.json.gz in it"):
        decode({"data": {"other": "{}"}})


def test_a_refused_start_serves_the_kept_set_and_each_object_says_what_is_served() -> None:
    kept_store, _ = store_of(policy("pool", POOL_A, generation=1), policy("quota", QUOTA))
    kept = kept_store.served_specs
    fresh = over(policy("pool", BROKEN, generation=2), policy("quota", QUOTA))
    serving = fresh.fall_back(refused(fresh), kept)
    assert serving.generation == kept_store.current.generation, "the very set that was served"
    assert [p.name for p in serving.policies] == ["pool", "quota"]
    assert fresh.degraded == "the policies in the cluster are refused (schedulingpolicy/pool); serving the last good set kept in the cluster (2 objects)"
    pool = status(fresh, policy("pool", BROKEN, generation=2))
    assert pool is not None and pool["conditions"][0]["reason"] == "Invalid"
    assert pool["conditions"][0]["message"] == (
        "refused: spec.filters[0].expression: found no matching overload for '_>_' applied to '(string, int)'; a string is not a number: "
        "convert it with int(), double() or quantity() (KPE302); "
        f"kpe keeps serving policy set generation {serving.generation}"
    )
    quota = status(fresh, policy("quota", QUOTA))
    assert quota is not None and quota["conditions"][0]["reason"] == "Served", "kept at the generation it has"
    # Fixed: the whole current set serves, and the fallback is over.
    fresh.objects = Objects(policy("pool", POOL_B, generation=3), policy("quota", QUOTA))
    assert fresh.reload().ok and fresh.degraded is None
    assert fresh.current.get("pool") is not None and fresh.current.generation != serving.generation


def test_without_a_kept_set_a_refused_start_serves_the_objects_that_compile_down_to_none() -> None:
    store = over(policy("pool", BROKEN), policy("quota", QUOTA))
    serving = store.fall_back(refused(store), None)
    assert [p.name for p in serving.policies] == ["quota"]
    assert store.served_objects == {ObjectKey("SchedulingPolicy", "quota"): 1}
    assert store.degraded == "the policies in the cluster are refused (schedulingpolicy/pool); serving the 1 objects of the cluster that compile without the refused ones"
    assert store.last is not None and not store.last.ok and [e.code for e in store.last.errors] == ["KPE302"]
    # A fresh install whose only policy is broken: nothing to serve but the empty set, said as such.
    alone = over(policy("pool", BROKEN))
    assert len(alone.fall_back(refused(alone), None)) == 0
    assert alone.degraded == "the policies in the cluster are refused (schedulingpolicy/pool); serving the 0 objects of the cluster that compile without the refused ones"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def settings_for(kubeconfig: str, **kw: Any) -> Settings:
    return Settings(policy_source="cluster", cluster="on", kubeconfig=kubeconfig, port=0, health_port=free_port(), lease_namespace=NAMESPACE,
                    **kw)


def test_a_kpe_started_on_a_broken_cluster_is_ready_on_the_kept_set_and_says_so(tmp_path: Path) -> None:
    with FakeApiServer() as api:
        api.state.add("schedulingpolicies", policy("pool", POOL_A))
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
        # The leader kept the set it served...
        settings = settings_for(kubeconfig, controllers="status", lease_duration_s=2)
        with running(create_app(settings), settings) as urls:
            health = httpx.Client(base_url=urls["health"])
            kept = _wait(lambda: api.state.get("configmaps", lastgood.NAME, NAMESPACE))
            assert health.get("/readyz").text == "ok" and health.get("/metrics").text.count("kpe_policy_fallback 0.0") == 1
            served = httpx.get(urls["introspection"] + "/apis/v1/policies").json()["generation"]
        assert [o.key.name for o in decode(kept)] == ["pool"] and kept["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "kpe"}
        # ...then, while no kpe ran, an edit that does not compile was stored.
        api.state.update("schedulingpolicies", "pool", merge={"spec": BROKEN, "metadata": {"generation": 2}})
        settings = settings_for(kubeconfig)
        with running(create_app(settings), settings) as urls:
            health = httpx.Client(base_url=urls["health"])
            ready = health.get("/readyz")
            assert ready.status_code == 200
            assert ready.text == ("ok, on a fallback set: the policies in the cluster are refused (schedulingpolicy/pool); "
                                  "serving the last good set kept in the cluster (1 objects)")
            answer = httpx.get(urls["introspection"] + "/apis/v1/policies").json()
            assert answer["generation"] == served and answer["fallback"] == ready.text.removeprefix("ok, on a fallback set: ")
            assert [e["code"] for e in answer["lastLoad"]["errors"]] == ["KPE302"]
            assert "kpe_policy_fallback 1.0" in health.get("/metrics").text


def _wait(check: Any) -> Any:
    import time

    for _ in range(1000):
        found = check()
        if found:
            return found
        time.sleep(0.01)
    raise AssertionError("timed out")


def keeper_scenario(api: FakeApiServer, tmp_path: Path, steps: Any) -> Any:
    async def scenario() -> Any:
        client = await KubeClient.connect(kubeconfig=api.write_kubeconfig(tmp_path / "kubeconfig"), required=True)
        assert client is not None
        try:
            return await steps(client)
        finally:
            await client.close()

    return asyncio.run(scenario())


def test_the_leader_keeps_the_set_it_serves_once_per_change_and_never_a_fallback(tmp_path: Path) -> None:
    store, source = store_of(policy("pool", POOL_A))
    with FakeApiServer() as api:

        async def steps(client: KubeClient) -> list[bool]:
            keeper = LastGoodKeeper(client, store, namespace=NAMESPACE)
            done = [await keeper.keep(), await keeper.keep()]
            source.objects = [convert(policy("pool", POOL_B, generation=2))]
            store.reload()
            done.append(await keeper.keep())
            fallen = over(policy("pool", BROKEN, generation=3))
            fallen.fall_back(refused(fallen), None)
            done.append(await LastGoodKeeper(client, fallen, namespace=NAMESPACE).keep())
            return done

        assert keeper_scenario(api, tmp_path, steps) == [True, False, True, False]
        assert [r.method for r in api.state.requests_to("POST", CONFIGMAPS) + api.state.requests_to("PUT", CONFIGMAPS)] == ["POST", "PUT"]
        assert [o.data["spec"] for o in decode(api.state.get("configmaps", lastgood.NAME, NAMESPACE) or {})] == [POOL_B]


def test_a_keeper_rbac_forbids_names_the_permission(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store, _ = store_of(policy("pool", POOL_A))
    with FakeApiServer() as api:
        api.state.fail_next(1, 403, method="POST", path=CONFIGMAPS)

        async def steps(client: KubeClient) -> list[bool]:
            keeper = LastGoodKeeper(client, store, namespace=NAMESPACE)
            return [await keeper.keep(), await keeper.keep()]

        with caplog.at_level(logging.ERROR, logger="kpe.policies"):
            assert keeper_scenario(api, tmp_path, steps) == [False, True]
    assert [r.getMessage() for r in caplog.records if r.name == "kpe.policies" and r.levelno >= logging.ERROR] == [
        "kpe may not keep the last good policy set (configmap kpe-system/kpe-last-good-policies: 403 Forbidden): grant get, create and "
        "update on it (deploy/cluster-policies/rbac.yaml); a replica that starts while a policy is broken has nothing to fall back to"
    ]
