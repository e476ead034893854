"""What kpe keeps while it schedules costs what it holds (issue 42, "Memory measured two
ways" in docs/performance.md): bytes kept long-term at their length, not in orjson's
4 KiB buffers; a filter's node names the cache's own strings; the domains a pod in
flight may count in the nodes' own label maps, not copies."""

from __future__ import annotations

import gc
import sys
import tracemalloc
from collections.abc import Callable, Iterator
from typing import Any, cast

import orjson
import pytest

from engine.cluster.counts import CountIndex, CountSpecs
from engine.cluster.keptjson import dumps_kept
from engine.equivalence.reads import pod_fingerprint
from server.cluster import trim
from server.http.wire import decode_extender_args
from server.verbs.wholenodes import WholeNodes


def grown_by(make: Callable[[], Any]) -> tuple[int, Any]:
    """The bytes ``make()`` allocated and still holds when it returns, and what it returned."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = make()
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - before, kept
    finally:
        tracemalloc.stop()


def test_kept_json_is_the_json_orjson_writes() -> None:
    value = {"b": [1, "x"], "a": {"z": None}}
    assert dumps_kept(value) == orjson.dumps(value)
    assert dumps_kept(value, option=orjson.OPT_SORT_KEYS) == b'{"a":{"z":null},"b":[1,"x"]}'


def test_a_thousand_kept_encodings_cost_about_their_length() -> None:
    grown, kept = grown_by(lambda: [dumps_kept({"pod": f"team-{i}/app"}) for i in range(1000)])
    assert len(kept) == 1000
    # orjson's own result holds a buffer of at least 4 KiB: 4 MB for these thousand.
    assert grown < 1000 * 200, f"{grown:,} bytes for 1,000 encodings of about 20 bytes"


def test_pod_fingerprints_kept_by_the_match_memo_cost_about_their_length() -> None:
    paths = [("metadata", "labels"), ("metadata", "namespace")]
    pods = [{"metadata": {"namespace": f"team-{i % 30}", "labels": {"app": f"app-{i}"}}} for i in range(1000)]
    grown, kept = grown_by(lambda: [pod_fingerprint(p, paths) for p in pods])
    assert kept[3] == b'[[0,{"app":"app-3"}],[1,"team-3"]]'
    assert grown < 1000 * 200, f"{grown:,} bytes for 1,000 fingerprints of about 40 bytes"


def bound_pods(count: int) -> Iterator[dict[str, Any]]:
    """Bound pods of ``count`` apps, each with parts of its own (labels, a container) for the
    shared-parts table to keep."""
    for i in range(count):
        yield {"metadata": {"name": f"app-{i}-x1", "namespace": "team", "uid": f"u{i}", "labels": {"app": f"app-{i}"}},
               "spec": {"nodeName": "node-1", "containers": [{"name": "app", "image": f"registry/app-{i}:1",
                                                               "resources": {"requests": {"cpu": "100m"}}}]},
               "status": {"phase": "Running"}}


def test_the_shared_parts_of_a_thousand_bound_pods_cost_less_than_orjsons_buffers_would(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trim, "_SHARED", {})
    pods = list(bound_pods(1000))
    grown, kept = grown_by(lambda: [trim.trim(p) for p in pods])
    parts = len(trim._SHARED)
    assert parts >= 3000  # each pod's labels, containers and container (the resources are alike)
    # Each key was about 4 KiB as orjson returned it: over 12 MB for these pods.
    assert grown < parts * 400, f"{grown:,} bytes for {parts:,} shared parts"
    assert kept[0]["metadata"]["labels"] == {"app": "app-0"}


def test_whole_nodes_kept_between_requests_cost_about_their_json() -> None:
    nodes = [{"metadata": {"name": f"node-{i}", "resourceVersion": "1"}, "status": {"allocatable": {"cpu": "4"}}} for i in range(1000)]
    kept = WholeNodes(clock=lambda: 0.0)
    grown, _ = grown_by(lambda: kept.remember(nodes))
    assert kept.get("node-7") == nodes[7]
    assert grown < 1000 * 400, f"{grown:,} bytes for 1,000 nodes of about 70 bytes of JSON"


def test_a_filters_node_names_are_the_caches_own_strings() -> None:
    from server.cluster.cache import ClusterCache

    cache = ClusterCache(cast(Any, object()))
    nodes = cache._informers["node"]
    for event, name in (("ADDED", "cpu-us-east-1a-00042"), ("ADDED", "cpu-us-east-1c-00001"), ("MODIFIED", "cpu-us-east-1a-00042")):
        cache.apply(nodes, {"type": event, "object": {"metadata": {"name": "".join(["cpu-us-east-1", name[13:]]), "resourceVersion": "1"}}})
    cache.apply(nodes, {"type": "DELETED", "object": {"metadata": {"name": "cpu-us-east-1c-00001"}}})
    cached = cache.node("cpu-us-east-1a-00042")["metadata"]["name"]  # type: ignore[index]
    body = orjson.loads(b'{"Pod": {"metadata": {"name": "p"}}, "NodeNames": ["cpu-us-east-1a-00042", "cpu-us-east-1c-00001"]}')
    assert body["NodeNames"][0] is not cached  # decoded: a string of its own
    args = decode_extender_args(body, "filter", own_names=cache.own_names)
    assert args.node_names == ["cpu-us-east-1a-00042", "cpu-us-east-1c-00001"]
    assert args.node_names[0] is cached
    assert args.node_names[1] is body["NodeNames"][1]  # a deleted node's name is not kept


def test_the_domains_of_nodes_in_flight_are_the_nodes_own_label_maps() -> None:
    zone = "topology.kubernetes.io/zone"
    index = CountIndex(CountSpecs(frozenset({(("app",), zone)}), frozenset()))
    for name, z in [("a1", "a"), ("a2", "a"), ("b1", "b")]:
        index.set_node(name, {"metadata": {"name": name, "labels": {zone: z}}})
    domains = index.domains_of(frozenset({"a1", "a2", "b1"}))
    assert sorted(d[zone] for d in domains) == ["a", "b"]
    assert all(any(d is index.labels_of(n) for n in ("a1", "a2", "b1")) for d in domains)


def test_the_replicas_of_an_app_count_as_one_kept_tuple() -> None:
    """20,000 lean pods held 5 MiB of equal tuples in the counts before they were shared."""
    zone = "topology.kubernetes.io/zone"
    index = CountIndex(CountSpecs(frozenset({(("app", "kpe.dev/namespace"), zone), (("team",), "kubernetes.io/hostname")}), frozenset({("team",)})))
    for n in range(100):
        index.set_node(f"n{n}", {"metadata": {"name": f"n{n}", "labels": {zone: f"z{n % 5}"}}})
    pods = [{"metadata": {"uid": f"uid-{i:06d}", "namespace": f"team-{i % 30}", "labels": {"app": f"app-{i % 90}", "team": f"team-{i % 30}"}},
             "spec": {"nodeName": f"n{i % 100}"}, "status": {"phase": "Running"}} for i in range(3000)]
    keys = [p["metadata"]["uid"] for p in pods]

    def count_all() -> CountIndex:
        for key, pod in zip(keys, pods):
            index.set_pod(key, pod)
        return index

    grown, _ = grown_by(count_all)
    assert index.cluster((("team",), ("team-3",))) == 100
    # A pod's own entries (its node by its key, and what it counts as on its node) are about 85
    # bytes; the tuples it counts as were 250 more each, and a (node, counted) tuple 55.
    assert grown < 3000 * 110, f"{grown:,} bytes for 3,000 pods of 90 apps"
    for key in keys[:1500]:
        index.set_pod(key, None)
    assert index.cluster((("team",), ("team-3",))) == 50
    assert len(index._kinds) == 90  # kinds no pod holds any more are let go
    for key in keys[1500:]:
        index.set_pod(key, None)
    assert not index._kinds and not index._on_node
