"""What the node and pod cache keeps of each object (server/cluster/cache.py ``trim``): no
``metadata.managedFields``, from the first list and from the watch; every other field
equal to what the API server sent; equal strings shared between objects."""

from __future__ import annotations

import copy
import functools
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from engine.cluster.projection import Projection
from server.cluster.trim import trim
from tests.fakeapi import FakeApiServer
from tests.test_cache import api, cache_on, client_on, eventually, kubeconfig, node, pod, run  # noqa: F401 - fixtures

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import cluster  # noqa: E402 - bench/cluster.py: realistic objects

MANAGED = [{"manager": "kubectl-client-side-apply", "operation": "Update", "apiVersion": "v1", "time": "2026-11-21T16:15:13Z",
            "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:app": {}}}}}]


def managed(obj: dict[str, Any]) -> dict[str, Any]:
    obj["metadata"]["managedFields"] = copy.deepcopy(MANAGED)
    return obj


def without_managed_fields(obj: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["metadata"].pop("managedFields", None)
    return out


def test_trim_drops_managed_fields_and_keeps_every_other_field_equal() -> None:
    original = cluster.realistic_pod(7, "cpu-us-east-1a-00001")
    assert original["metadata"]["managedFields"]
    trimmed = trim(orjson.loads(orjson.dumps(original)))
    assert "managedFields" not in trimmed["metadata"]
    assert trimmed == without_managed_fields(original)


def test_trim_keeps_a_node_equal_but_for_its_managed_fields() -> None:
    original = managed(cluster.sample_node())
    trimmed = trim(orjson.loads(orjson.dumps(original)))
    assert trimmed == without_managed_fields(original)


def test_equal_strings_of_two_decoded_pods_become_one_object() -> None:
    a, b = (trim(orjson.loads(orjson.dumps(cluster.realistic_pod(i, "cpu-us-east-1a-00001")))) for i in (0, 16))
    assert a["metadata"]["namespace"] == b["metadata"]["namespace"]
    assert a["metadata"]["namespace"] is b["metadata"]["namespace"]
    assert a["spec"]["nodeName"] is b["spec"]["nodeName"]
    assert a["spec"]["containers"][0]["image"] is b["spec"]["containers"][0]["image"]
    assert a["metadata"]["labels"]["app.kubernetes.io/name"] is b["metadata"]["labels"]["app.kubernetes.io/name"]
    assert a["status"]["conditions"][0]["type"] is b["status"]["conditions"][0]["type"]
    assert a["spec"]["tolerations"][1]["key"] is b["spec"]["tolerations"][1]["key"]  # strings in lists of objects too


def test_trim_leaves_what_is_not_an_object_and_objects_without_metadata_alone() -> None:
    assert trim([1, "a"]) == [1, "a"]  # type: ignore[arg-type]
    assert trim({"spec": {"nodeName": "n"}}) == {"spec": {"nodeName": "n"}}
    assert trim({"metadata": None}) == {"metadata": None}


def test_an_object_nested_deeper_than_the_stack_is_kept_whole() -> None:
    deep: Any = "leaf"
    for _ in range(sys.getrecursionlimit() + 100):
        deep = {"d": deep}
    obj = {"metadata": {"name": "x", "managedFields": []}, "spec": deep}
    assert trim(obj) is obj and "managedFields" not in obj["metadata"] and obj["spec"] is deep


def test_listed_pods_and_nodes_are_cached_without_managed_fields(api: FakeApiServer, kubeconfig: str) -> None:
    for i in range(3):
        api.state.add_node(managed(node(f"node-{i}", pool="cpu")))
    for i in range(5):
        api.state.add_pod(managed(pod(f"web-{i}", nodeName="node-1")))

    async def body() -> None:
        async with cache_on(kubeconfig, page_size=2) as (client, cache):
            served, _ = await client.list_all("/api/v1/pods")
            assert all(p["metadata"].get("managedFields") for p in served), "the fake API server serves managedFields"
            assert len(cache.pods()) == 5 and len(cache.nodes()) == 3
            assert not [o for o in cache.pods() + cache.nodes() if "managedFields" in o["metadata"]]
            by_uid = {p["metadata"]["uid"]: p for p in cache.pods()}
            assert [by_uid[p["metadata"]["uid"]] for p in served] == [without_managed_fields(p) for p in served]
            assert [p["metadata"]["name"] for p in cache.node_info["node-1"]["pods"]] == [f"web-{i}" for i in range(5)]

    run(body)


def test_watched_pods_and_nodes_are_cached_without_managed_fields(api: FakeApiServer, kubeconfig: str) -> None:
    api.state.add_node(node("node-1"))

    async def body() -> None:
        events: list[dict[str, Any]] = []
        async with cache_on(kubeconfig, on_event=lambda kind, type_, obj: events.append(obj)) as (_, cache):
            api.state.add_node(managed(node("node-2")))
            api.state.add_pod(managed(pod("web", nodeName="node-2")))
            await eventually(lambda: cache.node("node-2") is not None and len(cache.pods()) == 1, what="the watched objects")
            assert "managedFields" not in (cache.node("node-2") or {})["metadata"]
            assert "managedFields" not in cache.pods()[0]["metadata"]
            assert cache.pods()[0]["spec"]["containers"][0]["resources"] == {"requests": {"cpu": "500m", "memory": "1Gi"}}
            assert not [e for e in events if "managedFields" in e["metadata"]], "subscribers see the trimmed object"
            assert cache.node_info["node-2"]["requested"] == {"cpu": "500m", "memory": "1Gi"}

    run(body)


def test_list_all_transforms_each_item_of_every_page(api: FakeApiServer, kubeconfig: str) -> None:
    for i in range(5):
        api.state.add_node(node(f"node-{i}"))

    async def body() -> None:
        async with client_on(kubeconfig) as client:
            seen: list[str] = []

            def mark(obj: dict[str, Any]) -> dict[str, Any]:
                seen.append(obj["metadata"]["name"])
                return {"marked": obj["metadata"]["name"]}

            items, rv = await client.list_all("/api/v1/nodes", page_size=2, transform=mark)
            assert items == [{"marked": f"node-{i}"} for i in range(5)] and seen == [f"node-{i}" for i in range(5)] and rv

    run(body)


def test_many_decoded_pods_share_their_repeated_strings() -> None:
    """The point of interning: 64 replicas' namespaces, images and node names are a handful of objects."""
    pods = [trim(orjson.loads(orjson.dumps(cluster.realistic_pod(i, f"node-{i % 4}")))) for i in range(64)]
    assert len({id(p["metadata"]["namespace"]) for p in pods}) == len({p["metadata"]["namespace"] for p in pods}) == 4
    assert len({id(p["spec"]["nodeName"]) for p in pods}) == 4
    assert len({id(p["spec"]["containers"][0]["image"]) for p in pods}) == len({p["spec"]["containers"][0]["image"] for p in pods})


def test_uids_resource_versions_and_a_bound_pods_name_are_not_interned() -> None:
    """No other object repeats them: interned, 20,000 pods grew the interpreter's table of
    interned strings by 3.7 MiB. Nodes' and pending pods' names are interned still."""
    raw = cluster.realistic_pod(5, "node-x")
    raw["metadata"]["uid"], raw["metadata"]["resourceVersion"] = "uid-a8f3-4f51-9d02-trim-test", "91823741"
    bound = trim(orjson.loads(orjson.dumps(raw)))
    raw["spec"]["nodeName"] = ""
    pending = trim(orjson.loads(orjson.dumps(raw)))
    raw_node = cluster.nodes(1)[0]
    raw_node["metadata"]["uid"] = "uid-77c1-node-trim-test"
    node = trim(orjson.loads(orjson.dumps(raw_node)))

    def interned(value: str) -> bool:
        return sys.intern("".join(value)) is value

    meta = bound["metadata"]
    assert [field for field in ("name", "uid", "resourceVersion") if interned(meta[field])] == []
    assert interned(meta["namespace"]) and interned(bound["spec"]["nodeName"])
    assert interned(pending["metadata"]["name"]) and not interned(pending["metadata"]["uid"])
    assert interned(node["metadata"]["name"]) and not interned(node["metadata"]["uid"])


@functools.cache
def shipped_projection() -> Projection:
    from engine.policy.loader import load

    return load([str(Path(__file__).resolve().parents[1] / "policies")]).pod_projection


def projected(i: int, node: str, **labels: str) -> dict[str, Any]:
    """Replica ``i`` of one Deployment, bound to ``node``, as the cache keeps it with the shipped policies."""
    pod = cluster.realistic_pod(0, node)
    pod["metadata"]["name"] = f"checkout-{i}"
    pod["metadata"]["uid"] = f"uid-{i}"
    pod["metadata"]["labels"].update(labels)
    return trim(orjson.loads(orjson.dumps(pod)), shipped_projection())


def test_bound_replicas_share_their_equal_parts_and_keep_their_names_their_own() -> None:
    """20,000 bound pods would otherwise hold their containers, resources and five conditions
    20,000 times: equal parts are one object, as equal strings are."""
    a, b = projected(0, "node-0"), projected(1, "node-1")
    assert a["metadata"]["name"] != b["metadata"]["name"] and a["metadata"] is not b["metadata"] and a["spec"] is not b["spec"]
    assert a["spec"]["containers"] == b["spec"]["containers"] and a["spec"]["containers"] is b["spec"]["containers"]
    assert a["status"]["conditions"] is b["status"]["conditions"]
    assert a["metadata"]["labels"] is b["metadata"]["labels"]
    assert a["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "1", "memory": "1Gi"}


def test_bound_pods_not_yet_started_share_one_status_and_a_started_pods_status_stays_its_own() -> None:
    """Pods a scheduler bound that no kubelet runs yet keep equal statuses: one object, not two
    dicts a pod. Once started, a pod's start time is most often its own: its status is not looked
    up in the table of parts, whose entry (the status's JSON) would cost more than it saves."""
    from server.cluster import trim as module

    def bound(i: int, status: dict[str, Any]) -> dict[str, Any]:
        raw = cluster.realistic_pod(0, f"node-{i % 3}")  # replicas of one app: parts alike but the status
        raw["metadata"]["name"], raw["metadata"]["uid"] = f"replica-{i}", f"uid-status-{i}"
        raw["status"] = status
        return trim(orjson.loads(orjson.dumps(raw)), shipped_projection())

    scheduled = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}]}
    a, b = bound(0, scheduled), bound(1, scheduled)
    assert a["status"] == b["status"] and a["status"] is b["status"]

    started = cluster.realistic_pod(0, "node-0")["status"]
    before = len(module._SHARED)
    running = [bound(i, {**started, "startTime": f"2026-11-30T10:{i // 60:02d}:{i % 60:02d}Z"}) for i in range(2, 402)]
    assert len(module._SHARED) - before < 20, "an entry of the table of parts per started pod"
    twin = bound(402, {**started, "startTime": "2026-11-30T10:00:02Z"})
    assert twin["status"] == running[0]["status"] and twin["status"] is not running[0]["status"]
    assert twin["status"]["conditions"] is running[0]["status"]["conditions"]  # its parts are shared still


def test_a_bound_pod_with_a_part_of_its_own_shares_the_rest() -> None:
    a, b = projected(0, "node-0"), projected(1, "node-0", team="another")
    assert a["metadata"]["labels"] is not b["metadata"]["labels"] and b["metadata"]["labels"]["team"] == "another"
    assert a["spec"]["containers"] is b["spec"]["containers"]


def test_a_pending_pod_is_kept_as_it_came() -> None:
    pending = cluster.realistic_pod(0, "node-0")
    del pending["spec"]["nodeName"]
    a, b = (trim(orjson.loads(orjson.dumps(pending))) for _ in range(2))
    assert a["spec"]["containers"] == b["spec"]["containers"] and a["spec"]["containers"] is not b["spec"]["containers"]


def test_parts_no_cached_pod_holds_any_more_are_forgotten() -> None:
    """The table of parts follows the cluster: a part of pods long gone does not stay in it."""
    from server.cluster import trim as module

    gone = projected(0, "node-0", team="a-team-no-other-test-names")
    labels = orjson.dumps(gone["metadata"]["labels"])
    assert labels in module._SHARED
    del gone
    for i in range(3 * module.SWEEP_FLOOR):  # parts of their own, each let go: the table doubles and is swept
        projected(i, "node-0", team=f"team-{i}")
    assert labels not in module._SHARED
    assert len(module._SHARED) < 3 * module.SWEEP_FLOOR


def test_parts_cached_pods_still_hold_are_swept_once_each_time_the_table_doubles_not_at_every_new_part(monkeypatch: pytest.MonkeyPatch) -> None:
    """A sweep walks the whole table: on every watch event of a cluster with more live parts than
    the floor, it would make each event cost the cluster's size."""
    from server.cluster import trim as module

    sweeps = []
    sweep = module._sweep
    monkeypatch.setattr(module, "_sweep", lambda: (sweeps.append(len(module._SHARED)), sweep()))
    held = [projected(i, "node-0", team=f"held-{i}") for i in range(3 * module.SWEEP_FLOOR)]
    assert all(orjson.dumps(pod["metadata"]["labels"]) in module._SHARED for pod in held)
    assert 1 <= len(sweeps) <= 3, sweeps


READS_CACHED_PODS = """
apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: reads-cached-pods}
spec:
  filters:
  - name: few-of-my-app
    expression: >-
      nodeInfo.pods.filter(p, p.metadata.labels['app.kubernetes.io/name'] == 'checkout'
        && p.status.phase == 'Running' && p.status.conditions.exists(c, c.type == 'Ready' && c.status == 'True')).size() < 2
  - name: no-old-image
    expression: "!nodeInfo.pods.exists(p, p.spec.containers[0].image.endsWith(':1.0.0'))"
  scores:
  - name: spread-namespaces
    expression: "100 - nodeInfo.pods.map(p, p.metadata.namespace).filter(n, n == 'vision-prod').size() * 10"
"""


def test_decisions_over_trimmed_pods_equal_decisions_over_the_pods_as_sent() -> None:
    from engine.decisions.filtering import filter_nodes
    from engine.policy.loader import load_text
    from engine.cluster.nodeinfo import node_info_map

    policies = load_text(READS_CACHED_PODS)
    nodes = cluster.nodes(40)
    sent = cluster.realistic_pods(nodes, 5)
    trimmed = [trim(orjson.loads(orjson.dumps(p))) for p in sent]
    pod = cluster.scheduling_pod(gpus=0)
    full = filter_nodes(policies, pod, nodes, node_info=node_info_map(nodes, sent))
    lean = filter_nodes(policies, pod, nodes, node_info=node_info_map(nodes, trimmed))
    assert full.failed and full.passed, "the policy tells nodes apart"
    assert (lean.passed, lean.failed, lean.unresolvable, lean.errors) == (full.passed, full.failed, full.unresolvable, full.errors)
    assert node_info_map(nodes, trimmed) == {name: {**info, "pods": [without_managed_fields(p) for p in info["pods"]]}
                                             for name, info in node_info_map(nodes, sent).items()}
