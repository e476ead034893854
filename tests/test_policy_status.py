"""The status kpe writes on its objects (server/cluster/policystatus.py): what it says, exactly,
for a served object, a refused one, one another object kept from being served, and when it
writes nothing; and, on the fake API server for the faults only it can stage, a status write
that conflicts and one RBAC forbids. The store serving from objects keeps the last good set."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.policy.objects import ObjectKey, PolicyObject, convert

from server.cluster.informer import Informer
from server.cluster.kube import KubeClient
from server.cluster.policyobjects import PolicyObjects
from server.cluster.policystatus import StatusWriter, desired_status
from server.reload.store import LoadOutcome, NoConfigMaps, PolicyStore

from .fakeapi import FakeApiServer

NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z
LATER = NOW + 60


def policy(name: str, spec: dict[str, Any], generation: int = 1) -> dict[str, Any]:
    return {"apiVersion": "kpe.dev/v1alpha1", "kind": "SchedulingPolicy", "metadata": {"name": name, "generation": generation}, "spec": spec}


POOL = {"filters": [{"name": "pool", "expression": "node.metadata.?labels[?'pool'].orValue('') == 'a'"}], "scores": [{"name": "s", "expression": "1"}]}
GATED = {"admission": {"gate": "example.com/quota", "expression": "true"}}


class Objects:
    """The store's ObjectSource, by hand."""

    def __init__(self, *objects: dict[str, Any]) -> None:
        self.objects = [convert(o) for o in objects]

    def snapshot(self) -> tuple[PolicyObject, ...]:
        return tuple(self.objects)


def store_of(*objects: dict[str, Any]) -> tuple[PolicyStore, Objects]:
    source = Objects(*objects)
    store = PolicyStore("", objects=source)
    store.params = NoConfigMaps()  # as the server starts: no ConfigMap found before the cache watches them
    store.load_initial()
    return store, source


def status(store: PolicyStore, obj: dict[str, Any], current: dict[str, Any] | None = None, now: float = NOW) -> dict[str, Any] | None:
    assert store.last is not None
    return desired_status(convert(obj), current, outcome=store.last, served=store.served_objects, serving=store.current, now=now)


def test_a_served_object_is_ready_with_the_generation_kpe_serves() -> None:
    store, _ = store_of(policy("pool", POOL, generation=4))
    generation = store.current.generation
    assert status(store, policy("pool", POOL, generation=4)) == {
        "observedGeneration": 4,
        "servedGeneration": generation,
        "decisions": "filter,score",
        "conditions": [{"type": "Ready", "status": "True", "observedGeneration": 4, "lastTransitionTime": "2027-01-15T08:00:00Z",
                        "reason": "Served", "message": f"served in policy set generation {generation}"}],
    }


def test_a_refused_object_says_why_with_its_field_paths_and_the_others_keep_what_they_had() -> None:
    store, source = store_of(policy("pool", POOL), policy("first", GATED))
    good = store.current.generation
    before = status(store, policy("first", GATED))
    clash = policy("second", GATED)
    edited = policy("pool", {"filters": [{"name": "pool", "expression": "true"}]}, generation=2)
    source.objects = [convert(o) for o in (edited, policy("first", GATED), clash)]
    outcome = store.reload()
    assert not outcome.ok and store.current.generation == good
    refused = status(store, clash)
    assert refused is not None and refused["conditions"][0] | {"lastTransitionTime": ""} == {
        "type": "Ready", "status": "False", "observedGeneration": 1, "lastTransitionTime": "", "reason": "Invalid",
        "message": "refused: spec.admission.gate: scheduling gate 'example.com/quota' is also the gate of policy 'first' "
                   f"(schedulingpolicy/first); each policy needs a gate of its own (KPE404); kpe keeps serving policy set generation {good}",
    }
    assert refused["servedGeneration"] == good and refused["decisions"] == "admission"
    # kstatus (Flux) reads Stalled, not Ready: a refused object is failed, not in progress until a timeout.
    assert [c["type"] for c in refused["conditions"]] == ["Ready", "Stalled"]
    assert refused["conditions"][1] == {**refused["conditions"][0], "type": "Stalled", "status": "True"}
    # What the set serves is unchanged: still Ready, and its condition says what is wrong elsewhere.
    unchanged = status(store, policy("first", GATED), current=before, now=LATER)
    assert unchanged is not None and unchanged["conditions"][0] == {
        "type": "Ready", "status": "True", "observedGeneration": 1, "lastTransitionTime": "2027-01-15T08:00:00Z", "reason": "Served",
        "message": f"served in policy set generation {good}; the newest set is refused: schedulingpolicy/second: spec.admission.gate: "
                   "scheduling gate 'example.com/quota' is also the gate of policy 'first' (schedulingpolicy/first); each policy needs a gate of its own (KPE404)",
    }
    # The edit made meanwhile is not served: another object broke the set.
    waiting = status(store, edited)
    assert waiting is not None and [(c["type"], c["status"]) for c in waiting["conditions"]] == [("Ready", "False"), ("Stalled", "True")]
    assert waiting is not None and (waiting["conditions"][0]["reason"], waiting["conditions"][0]["message"]) == (
        "SetNotServed",
        "not served: the policy set with it is refused: schedulingpolicy/second: spec.admission.gate: scheduling gate 'example.com/quota' is also "
        f"the gate of policy 'first' (schedulingpolicy/first); each policy needs a gate of its own (KPE404); kpe keeps serving policy set generation {good}",
    )


def test_the_transition_time_moves_only_when_ready_changes_and_an_unjudged_generation_keeps_its_status() -> None:
    store, _ = store_of(policy("pool", POOL))
    first = status(store, policy("pool", POOL))
    assert status(store, policy("pool", POOL), current=first, now=LATER) == first, "nothing to write"
    flipped = {**first, "conditions": [{**first["conditions"][0], "status": "False"}]} if first else None
    moved = status(store, policy("pool", POOL), current=flipped, now=LATER)
    assert moved is not None and moved["conditions"][0]["lastTransitionTime"] == "2027-01-15T08:01:00Z"
    assert status(store, policy("pool", POOL, generation=2)) is None, "generation 2 has not been loaded yet"


def test_a_params_configmap_kpe_could_not_use_is_a_warning() -> None:
    spec = {"paramsFrom": {"configMap": {"namespace": "kpe-system", "name": "caps"}, "parameterNotFoundAction": "UseDefaults"},
            "params": {"cap": 1}, "filters": [{"name": "f", "expression": "params.cap > 0"}]}
    store, _ = store_of(policy("capped", spec))
    found = status(store, policy("capped", spec))
    assert found is not None and found["warnings"] == [
        "spec.paramsFrom: params: ConfigMap kpe-system/caps not found (parameterNotFoundAction UseDefaults)"
    ]


def test_the_store_serving_objects_keeps_the_last_good_set_and_remembers_what_it_serves() -> None:
    store, source = store_of(policy("pool", POOL, generation=1))
    served = store.current
    source.objects = [convert(policy("pool", {"filters": [{"name": "pool", "expression": "nodee"}]}, generation=2))]
    outcome = store.reload()
    assert (outcome.ok, outcome.generation, outcome.objects) == (False, served.generation, ((ObjectKey("SchedulingPolicy", "pool"), 2),))
    assert store.current is served and store.served_objects == {ObjectKey("SchedulingPolicy", "pool"): 1}
    # Undone: the same content at another generation is the set served.
    source.objects = [convert(policy("pool", POOL, generation=3))]
    assert store.reload() == LoadOutcome(True, served.generation, at=store.last.at if store.last else 0, objects=((ObjectKey("SchedulingPolicy", "pool"), 3),))
    assert store.served_objects == {ObjectKey("SchedulingPolicy", "pool"): 3}


# -- faults, on the fake API server -----------------------------------------------------------

PATH = "/apis/kpe.dev/v1alpha1/schedulingpolicies"


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    with FakeApiServer(bookmark_interval=0.1) as server:
        yield server


async def watching(kubeconfig: str, stop: asyncio.Event) -> tuple[KubeClient, PolicyObjects, PolicyStore, StatusWriter]:
    client = await KubeClient.connect(kubeconfig=kubeconfig, required=True)
    assert client is not None
    objects = PolicyObjects(lambda kind, path, sink: Informer(kind, path, client=client, sink=sink))
    store = PolicyStore("", objects=objects)
    await objects.start(client, stop)
    store.load_initial()
    return client, objects, store, StatusWriter(client, objects, store, clock=lambda: NOW)


async def until(check: Any) -> None:
    for _ in range(500):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("timed out")


def test_a_status_write_that_conflicts_is_written_again_from_the_newer_object(api: FakeApiServer, tmp_path: Path) -> None:
    api.state.add("schedulingpolicies", policy("pool", POOL))

    async def scenario() -> tuple[dict[str, int], dict[str, Any]]:
        stop = asyncio.Event()
        client, objects, store, writer = await watching(api.write_kubeconfig(tmp_path / "kubeconfig"), stop)
        try:
            # Another client's write lands between kpe's read and its status write.
            api.state.before_next(lambda s: s.update("schedulingpolicies", "pool", merge={"metadata": {"labels": {"team": "infra"}}}), method="PATCH")
            assert await writer.write_pass() == 0
            await until(lambda: objects.raw[ObjectKey("SchedulingPolicy", "pool")]["metadata"]["resourceVersion"]
                        == api.state.get("schedulingpolicies", "pool")["metadata"]["resourceVersion"])
            assert await writer.write_pass() == 1
            assert await writer.write_pass() == 0, "written once: nothing differs any more"
            return writer.writes, api.state.get("schedulingpolicies", "pool")
        finally:
            stop.set()
            await objects.close()
            await client.close()

    writes, stored = asyncio.run(scenario())
    assert writes == {"written": 1, "conflict": 1, "forbidden": 0, "failed": 0}
    assert stored["metadata"]["labels"] == {"team": "infra"}, "the other client's change is kept"
    assert stored["status"]["conditions"][0]["reason"] == "Served" and stored["spec"] == POOL
    patches = api.state.requests_to("PATCH", PATH)
    assert [p.path for p in patches] == [f"{PATH}/pool/status"] * 2
    assert patches[0].json()["metadata"]["resourceVersion"] != patches[1].json()["metadata"]["resourceVersion"]


def test_a_forbidden_status_write_names_the_permission_and_waits_for_the_next_pass(api: FakeApiServer, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    api.state.add("schedulingpolicies", policy("pool", POOL))

    async def scenario() -> dict[str, int]:
        stop = asyncio.Event()
        client, objects, store, writer = await watching(api.write_kubeconfig(tmp_path / "kubeconfig"), stop)
        try:
            api.state.fail_next(1, 403, method="PATCH")
            assert await writer.write_pass() == 0
            assert await writer.write_pass() == 1, "the next pass (a change, or the resync) writes it"
            return writer.writes
        finally:
            stop.set()
            await objects.close()
            await client.close()

    with caplog.at_level(logging.ERROR, logger="kpe.policies"):
        writes = asyncio.run(scenario())
    assert writes == {"written": 1, "conflict": 0, "forbidden": 1, "failed": 0}
    assert [r.getMessage() for r in caplog.records if r.name == "kpe.policies"] == [
        "kpe may not write the status of schedulingpolicy/pool (403 Forbidden): grant patch on schedulingpolicies.kpe.dev/status "
        "(deploy/cluster-policies/rbac.yaml)"
    ]


def test_a_status_write_is_no_change_of_the_set(api: FakeApiServer, tmp_path: Path) -> None:
    api.state.add("schedulingpolicies", policy("pool", POOL))

    async def scenario() -> tuple[bool, int]:
        stop = asyncio.Event()
        client, objects, _, writer = await watching(api.write_kubeconfig(tmp_path / "kubeconfig"), stop)
        try:
            objects.dirty.clear()
            await writer.write_pass()
            await until(lambda: "status" in objects.raw[ObjectKey("SchedulingPolicy", "pool")])
            api.state.update("schedulingpolicies", "pool", merge={"metadata": {"annotations": {"note": "x"}}})
            await until(lambda: objects.raw[ObjectKey("SchedulingPolicy", "pool")]["metadata"]["resourceVersion"]
                        == api.state.get("schedulingpolicies", "pool")["metadata"]["resourceVersion"])
            return objects.dirty.is_set(), objects.snapshot()[0].generation
        finally:
            stop.set()
            await objects.close()
            await client.close()

    assert asyncio.run(scenario()) == (False, 1)


def test_a_rule_that_fails_on_ordinary_pods_is_a_warning_of_the_served_object() -> None:
    spec = {"filters": [{"name": "f", "expression": "node.metadata.labels['zone'] == 'a'"}]}
    store, _ = store_of(policy("zoned", spec))
    found = status(store, policy("zoned", spec))
    assert found is not None and found["conditions"][0]["status"] == "True" and found["warnings"] == [
        "spec.filters[0].expression: node.metadata.labels['zone'] fails on a node without the label 'zone' (under failurePolicy Fail, "
        "the node is rejected); read it as node.metadata.labels[?'zone'].orValue(''), or test 'zone' in node.metadata.labels first (KPE600)"
    ]
