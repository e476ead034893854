"""Counts across nodes (``counts`` in filters and scores): the index kept from the watch,
the load-time rule on selectors, the equivalence cache, pods in flight, preemption's victims,
the static cost and what the cache keeps of pods (docs/guides/counts.md)."""

from __future__ import annotations

import random
from typing import Any, cast

import pytest

from engine.cel.checker import cost as cel_cost
from engine.cel.checker.shapes import kubernetes_roots
from engine.cel.types.counts import Counts
from engine.cel.parser.parser import parse
from engine.cluster.counts import Adjusted, CountIndex, CountSpecs, counts_of
from engine.cluster.inflight import InFlight
from engine.cluster.nodeinfo import node_info_map, pod_key
from engine.decisions.filtering import filter_nodes as plain_filter
from engine.equivalence.classes import EquivalenceCache
from engine.equivalence.inflight import count_across, in_flight_counts
from engine.equivalence.filtering import filter_nodes
from engine.policy.loader import PolicyLoadError, load_text
from engine.policy.model import PolicySet

ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"

ZONE_CAP = """
apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: zone-cap}
spec:
  filters:
  - name: two-per-zone
    expression: "counts.inDomain(node, 'topology.kubernetes.io/zone', {'app': pod.metadata.labels.app}) < 2"
"""


def policies(text: str = ZONE_CAP) -> PolicySet:
    return load_text(text)


def node(name: str, zone: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {ZONE: zone, HOST: name}}}


def pod(name: str, on: str = "", *, app: str = "web", team: str = "", phase: str = "Running") -> dict[str, Any]:
    labels = {"app": app, **({"team": team} if team else {})}
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "i"}]}
    if on:
        spec["nodeName"] = on
    return {"metadata": {"name": name, "namespace": "shop", "uid": name, "labels": labels}, "spec": spec, "status": {"phase": phase}}


NODES = [node("a1", "a"), node("a2", "a"), node("b1", "b"), node("c1", "c")]
SPECS = CountSpecs(frozenset({(("app",), ZONE), (("team",), HOST)}), frozenset({("team",)}))


def answers(index: CountIndex, nodes: list[dict[str, Any]]) -> dict[str, Any]:
    """Everything the index can say of the apps and teams the tests use."""
    out: dict[str, Any] = {}
    for value in ("web", "api"):
        sel = (("app",), (value,))
        out[f"zones/{value}"] = index.domains(ZONE, sel)
        for n in nodes:
            out[f"{n['metadata']['name']}/{value}"] = index.in_domain(n, ZONE, sel)
    for team in ("red", "blue"):
        sel = (("team",), (team,))
        out[f"cluster/{team}"] = index.cluster(sel)
        out[f"hosts/{team}"] = index.domains(HOST, sel)
    return out


def test_the_index_kept_event_by_event_agrees_with_one_built_from_scratch() -> None:
    rng = random.Random(7)
    kept = CountIndex(SPECS)
    nodes = {n["metadata"]["name"]: n for n in NODES}
    for n in NODES:
        kept.set_node(n["metadata"]["name"], n)
    pods: dict[str, dict[str, Any]] = {}
    for step in range(200):
        what = rng.random()
        if what < 0.6:
            p = pod(f"p{rng.randrange(40)}", rng.choice(["", "a1", "a2", "b1", "c1", "gone"]), app=rng.choice(["web", "api"]),
                    team=rng.choice(["", "red", "blue"]), phase=rng.choice(["Running", "Running", "Succeeded"]))
            pods[pod_key(p)] = p
            kept.set_pod(pod_key(p), p)
        elif what < 0.85 and pods:
            key = rng.choice(sorted(pods))
            del pods[key]
            kept.set_pod(key, None)
        else:
            name = rng.choice(sorted(nodes))
            nodes[name] = node(name, rng.choice(["a", "b", "c"]))
            kept.set_node(name, nodes[name])
        assert answers(kept, list(nodes.values())) == answers(CountIndex.build(SPECS, nodes.values(), pods.values()), list(nodes.values())), f"step {step}"


def test_selectors_must_name_literal_keys_and_topology_keys_at_load_time() -> None:
    bad = {
        "counts.inDomain(node, params.key, {'app': 'web'}) < 2": "the topology key must be a string literal",
        "counts.inDomain(node, 'zone', pod.metadata.labels) < 2": "the selector must be a map literal",
        "counts.cluster({pod.metadata.name: 'x'}) < 2": "the selector must be a map literal",
        "size([counts]) == 1": "counts can only be called",
    }
    for expression, message in bad.items():
        text = ZONE_CAP.replace("counts.inDomain(node, 'topology.kubernetes.io/zone', {'app': pod.metadata.labels.app}) < 2", expression)
        with pytest.raises(PolicyLoadError) as raised:
            policies(text.replace("spec:\n", "spec:\n  params: {key: zone}\n", 1))
        assert [e.code for e in raised.value.errors] == ["KPE308"], expression
        assert message in raised.value.errors[0].message


def test_counts_is_not_readable_where_no_node_is_judged() -> None:
    text = ZONE_CAP.replace("  filters:", "  match: {expression: \"counts.cluster({'app': 'x'}) < 2\"}\n  filters:")
    with pytest.raises(PolicyLoadError) as raised:
        policies(text)
    assert raised.value.errors[0].code == "KPE305"


def test_a_set_knows_what_it_counts_by_and_its_cache_keeps_those_labels() -> None:
    text = ZONE_CAP + "  - name: team\n    expression: \"counts.cluster({'team': 'red', 'tier': 'x'}) < 5\"\n"
    loaded = policies(text)
    assert loaded.counts == CountSpecs(frozenset({(("app",), ZONE)}), frozenset({("team", "tier")}))
    kept = loaded.pod_projection.apply({"metadata": {"name": "x", "labels": {"app": "w", "team": "r", "tier": "t", "other": "o"}}})
    assert kept["metadata"]["labels"] == {"app": "w", "team": "r", "tier": "t"}


def test_a_filter_over_counts_is_a_lookup_in_the_static_cost() -> None:
    root = parse("counts.inDomain(node, 'topology.kubernetes.io/zone', {'app': pod.metadata.labels.app}) < 2 && counts.cluster({'team': 'x'}) < 3")
    estimate = cel_cost.estimate(root, kubernetes_roots(), {})[0]
    # In Kubernetes' units: two calls and two map literals (30 each), whatever the cluster's size;
    # scanning even one node's pods for the same answer is estimated at thousands.
    scan = cel_cost.estimate(parse("nodeInfo.pods.filter(p, p.metadata.labels.app == pod.metadata.labels.app).size() < 2"), kubernetes_roots(), {})[0]
    assert estimate.cost < 100 and scan.cost > 30 * estimate.cost


def test_a_filter_counts_the_pods_of_the_app_in_the_nodes_zone() -> None:
    cluster = [pod("w1", "a1"), pod("w2", "a2"), pod("w3", "b1"), pod("x", "b1", app="api")]
    result = plain_filter(policies(), pod("new"), NODES[:4], node_info=node_info_map(NODES, cluster), counts=counts_of(SPECS, NODES, cluster))
    assert result.passed == ["b1", "c1"]
    assert set(result.failed) == {"a1", "a2"}
    assert not result.unresolvable  # an eviction can change a count: kube-scheduler may preempt for it


def test_without_kept_counts_a_rule_reading_them_fails_with_the_reason() -> None:
    result = plain_filter(policies(), pod("new"), NODES[:1], node_info={})
    assert "no cluster counts are kept" in result.failed["a1"]


def test_remembered_filter_answers_do_not_outlive_a_change_of_the_counts() -> None:
    nodes = [node("a1", "a"), node("a2", "a"), node("b1", "b")]
    info = node_info_map(nodes, [])
    index = CountIndex.build(policies().counts, nodes, [])
    memo = EquivalenceCache()
    first = filter_nodes(policies(), pod("r1"), nodes, node_info=info, memo=memo, counts=Counts(index))
    assert first.passed == ["a1", "a2", "b1"]
    # Two pods bound in zone a on a1 only: a2's node and nodeInfo objects are unchanged.
    for name in ("w1", "w2"):
        index.set_pod(name, pod(name, "a1"))
    again = filter_nodes(policies(), pod("r2"), nodes, node_info=info, memo=memo, counts=Counts(index))
    assert again.passed == ["b1"]


def test_pods_in_flight_count_in_every_zone_they_were_passed_in() -> None:
    loaded = policies()
    nodes = [node("a1", "a"), node("b1", "b"), node("c1", "c")]
    index = CountIndex.build(loaded.counts, nodes, [pod("w1", "a1")])
    in_flight = InFlight(clock=lambda: 0.0)
    in_flight.passed(pod("f1"), ["a1", "b1"])
    in_flight.passed(pod("other", app="api"), ["c1"])
    result = plain_filter(loaded, pod("new"), nodes, node_info={}, counts=Counts(index))
    assert result.passed == ["a1", "b1", "c1"]
    adjusted = in_flight_counts(index, in_flight, pod("new"))
    assert count_across(result, loaded, pod("new"), nodes, adjusted, node_info={}) == 1
    assert result.passed == ["b1", "c1"]
    assert "not yet seen bound" in result.failed["a1"]
    assert in_flight_counts(index, in_flight, pod("f1")) is not None  # the pod itself is left out, the other stays


def test_a_nominated_pod_counts_in_its_node_s_zone_for_pods_of_its_priority_or_lower() -> None:
    loaded = policies()
    nodes = [node("a1", "a"), node("b1", "b")]
    index = CountIndex.build(loaded.counts, nodes, [pod("w1", "a1")])
    in_flight = InFlight(ttl=0, clock=lambda: 0.0)
    nominated = pod("f1", phase="Pending")
    nominated["spec"]["priority"] = 100
    nominated["status"]["nominatedNodeName"] = "a1"
    in_flight.seen(nominated)
    for priority, passed in ((100, ["b1"]), (1000, ["a1", "b1"])):
        new = pod("new")
        new["spec"]["priority"] = priority
        result = plain_filter(loaded, new, nodes, node_info={}, counts=Counts(index))
        adjusted = in_flight_counts(index, in_flight, new)
        if adjusted is not None:
            count_across(result, loaded, new, nodes, adjusted, node_info={})
        assert result.passed == passed, priority


def test_pods_in_flight_can_take_one_new_domain_each_at_most() -> None:
    index = CountIndex.build(SPECS, NODES[:4], [pod("t1", "a1", team="red")])
    sel = (("team",), ("red",))
    labels = [index.labels_of(n) for n in ("a1", "b1", "c1")]
    adjusted = Adjusted(index, added=[(pod("f1", team="red"), labels), (pod("f2", team="red"), labels[:1])])
    assert adjusted.domains(HOST, sel) == 2  # f1 may take a new node, f2 only a1, already taken
    assert adjusted.cluster(sel) == 3
    assert adjusted.in_domain(NODES[2], HOST, sel) == 1


def test_victims_leave_the_count_of_their_own_zone_only() -> None:
    index = CountIndex.build(SPECS, NODES[:4], [pod("w1", "a1"), pod("w2", "a2")])
    sel = (("app",), ("web",))
    adjusted = Adjusted(index, removed=[(pod("w1", "a1"), index.labels_of("a1"))])
    assert (adjusted.in_domain(NODES[0], ZONE, sel), adjusted.in_domain(NODES[2], ZONE, sel), adjusted.domains(ZONE, sel)) == (1, 0, 1)


def test_the_server_cache_keeps_the_counts_from_watch_events() -> None:
    from server.cluster.cache import ClusterCache

    cache = ClusterCache(cast(Any, object()))
    cache.recount(SPECS)
    pods, nodes = cache._informers["pod"], cache._informers["node"]
    cache.apply(nodes, {"type": "ADDED", "object": node("a1", "a")})
    cache.apply(pods, {"type": "ADDED", "object": pod("w1", "a1")})
    cache.apply(pods, {"type": "ADDED", "object": pod("w2")})  # pending: not counted
    sel = (("app",), ("web",))
    assert cache.count_index.in_domain(node("x", "a"), ZONE, sel) == 1
    cache.apply(nodes, {"type": "MODIFIED", "object": node("a1", "b")})
    assert (cache.count_index.in_domain(node("x", "a"), ZONE, sel), cache.count_index.in_domain(node("x", "b"), ZONE, sel)) == (0, 1)
    cache.apply(pods, {"type": "MODIFIED", "object": pod("w2", "a1")})
    cache.apply(pods, {"type": "DELETED", "object": pod("w1", "a1")})
    assert cache.count_index.cluster(sel) == 1
    assert cache.count_index.in_domain(node("x", "b"), ZONE, sel) == 1


def test_a_reloaded_set_that_counts_by_other_labels_has_the_cache_count_them_before_it_serves() -> None:
    from server.cluster.cache import ClusterCache

    cache = ClusterCache(cast(Any, object()))
    cache.apply(cache._informers["node"], {"type": "ADDED", "object": node("a1", "a")})
    cache.apply(cache._informers["pod"], {"type": "ADDED", "object": pod("w1", "a1")})
    candidate = policies()
    cache._before_swap(candidate)  # the cache is not running: counted at once
    assert cache.count_index.specs.domains == candidate.counts.domains
    assert Counts(cache.count_index).source is cache.count_index
    assert cache.count_index.in_domain(node("x", "a"), ZONE, (("app",), ("web",))) == 1


NAMESPACED_ZONE_CAP = ZONE_CAP.replace("{'app': pod.metadata.labels.app}", "{'app': pod.metadata.labels.app, 'kpe.dev/namespace': pod.metadata.namespace}")


def in_namespace(made: dict[str, Any], namespace: str) -> dict[str, Any]:
    return {**made, "metadata": {**made["metadata"], "namespace": namespace, "uid": f"{namespace}-{made['metadata']['uid']}"}}


def test_a_cap_scoped_to_the_pod_s_namespace_counts_no_other_namespace_s_app_of_the_same_name() -> None:
    # Two pods named app=web in zone a, but in another team's namespace.
    cluster = [in_namespace(pod("w1", "a1"), "other-team"), in_namespace(pod("w2", "a2"), "other-team")]
    for text, passed in ((ZONE_CAP, ["b1", "c1"]), (NAMESPACED_ZONE_CAP, ["a1", "a2", "b1", "c1"])):
        loaded = policies(text)
        counts = Counts(CountIndex.build(loaded.counts, NODES, cluster))
        assert plain_filter(loaded, pod("new"), NODES, node_info={}, counts=counts).passed == passed, text
    # The namespace's own pods count, kept from the watch and adjusted for pods in flight.
    loaded = policies(NAMESPACED_ZONE_CAP)
    index = CountIndex.build(loaded.counts, NODES, cluster)
    index.set_pod("shop/w3", pod("w3", "a1"))
    in_flight = InFlight(clock=lambda: 0.0)
    in_flight.passed(pod("f1"), ["a2"])
    in_flight.passed(in_namespace(pod("f2"), "other-team"), ["b1"])
    result = plain_filter(loaded, pod("new"), NODES, node_info={}, counts=Counts(index))
    assert result.passed == ["a1", "a2", "b1", "c1"]
    adjusted = in_flight_counts(index, in_flight, pod("new"))
    count_across(result, loaded, pod("new"), NODES, adjusted, node_info={})
    assert result.passed == ["b1", "c1"], "w3 bound in zone a, f1 in flight there: two of the namespace's web pods"
