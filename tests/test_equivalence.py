"""The equivalence cache: remembered per-node results give exactly the answers a
full evaluation gives, through pod, node, nodeInfo, clock and policy changes."""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from engine.cel.ext.timestamps import Timestamp
from engine.equivalence.classes import EquivalenceCache
from engine.equivalence.memo import Offload, TrackedNodeInfo
from engine.equivalence.reads import pod_fingerprint, pod_paths
from engine.decisions.filtering import FilterResult
from engine.decisions.scoring import ScoreResult
from engine.equivalence.filtering import filter_nodes
from engine.policy.loader import load, load_text
from engine.cluster.nodeinfo import NodesByName, NodeState, node_info_map
from engine.policy.model import PolicySet
from engine.equivalence.scoring import score_nodes
from server.http.wire import host_priority, host_priority_json

ROOT = Path(__file__).resolve().parent.parent
HOUR = 3600
INLINE_S = 0.005  # the inline budget of the limited requests in same_filter, as the server's

# Rules with errors under both failure policies, Audit rules, a rule that reads
# the clock with no clock-free operand, and one that reads the pod's name.
EXTRA = """
apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: zz-trial}
spec:
  mode: Audit
  filters:
  - name: odd-nodes
    expression: "int(node.metadata.name.split('-')[2]) % 2 == 0"
    message: would keep odd nodes off
  - name: late
    expression: "now < timestamp('2026-11-21T12:00:00Z')"
    message: too late
---
apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: zz-fragile}
spec:
  failurePolicy: Ignore
  filters:
  - name: needs-rack
    expression: "node.metadata.labels['rack'] != 'r0'"
    message: rack r0 is full
  scores:
  - name: rack-number
    expression: "int(node.metadata.labels['rack'].substring(1)) * 10"
---
apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: zz-named}
spec:
  match: {podSelector: {matchLabels: {replica-rules: "on"}}}
  filters:
  - name: named-after-node
    expression: "!pod.metadata.name.endsWith('-7') || !node.metadata.name.startsWith('gpu')"
    message: replica 7 stays off GPU nodes
---
apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: zz-weekday}
spec:
  match: {namespaces: [ml-train]}
  filters:
  - name: office-hours
    expression: "now.getHours() >= 6 || node.metadata.?labels[?'shift'].orValue('') == 'night'"
    message: "day nodes sleep before 06:00"
"""

# Match expressions: one reads the pod's name (replicas differ), one the clock (never remembered).
MATCHES = """
---
apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: zz-odd-replicas}
spec:
  match:
    expression: "int(pod.metadata.name.split('-')[1]) % 2 == 1"
  filters:
  - name: odd-replicas-off-r1
    expression: "node.metadata.?labels[?'rack'].orValue('') != 'r1'"
    message: odd replicas stay off rack r1
---
apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: zz-mornings}
spec:
  match:
    expression: "now.getHours() < 12"
  filters:
  - name: mornings-off-r2
    expression: "node.metadata.?labels[?'rack'].orValue('') != 'r2'"
    message: mornings keep off rack r2
"""


def load_bench_cluster() -> Any:
    spec = importlib.util.spec_from_file_location("bench_cluster", ROOT / "bench" / "cluster.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


cluster = load_bench_cluster()


def policy_set(extra: str = EXTRA) -> PolicySet:
    shipped = load([ROOT / "policies"])
    added = load_text(extra, file="extra.yaml")
    return PolicySet(shipped.policies + added.policies, shipped.generation + added.generation)


def at(hour: float) -> Timestamp:
    return Timestamp(1_795_219_200 + int(hour * HOUR), 0)  # 2026-11-21T00:00:00Z + hours


def with_windows(nodes: list[dict[str, Any]], rng: random.Random) -> list[dict[str, Any]]:
    """Maintenance windows around the test's clock, racks (some missing: errors) and shifts."""
    for node in nodes:
        meta = node["metadata"]
        if rng.random() < 0.15:
            start = rng.choice(["2026-11-21T03:00:00Z", "2026-11-21T09:00:00Z", "2026-11-21T20:00:00Z", "not a time"])
            meta.setdefault("annotations", {})["kpe.dev/maintenance-window-start"] = start
        if rng.random() < 0.9:
            meta["labels"]["rack"] = f"r{rng.randrange(4)}"
        if rng.random() < 0.3:
            meta["labels"]["shift"] = "night"
    return nodes


def events(result: Any) -> list[tuple[str, str, str, str]]:
    return sorted((e.policy, e.rule, e.node, e.message) for e in result.errors)


def audits(result: FilterResult) -> list[tuple[str, str, str, str]]:
    return sorted((e.policy, e.rule, e.node, e.message) for e in result.audit_rejections)


def same_filter(policies: PolicySet, pod: dict[str, Any], nodes: list[dict[str, Any]], info: dict[str, Any], now: Timestamp, memo: EquivalenceCache) -> FilterResult:
    # The server first tries a request on its event loop with a budget of evaluation time: over
    # it (by the class's measured cost), Offload comes before anything is evaluated or
    # remembered; within it, the answer is whole. Which of the two happens depends on this
    # machine's speed; both must hold.
    offloaded: Offload | None = None
    try:
        limited: FilterResult | None = filter_nodes(policies, pod, nodes, node_info=info, now=now, memo=memo, inline_s=INLINE_S)
    except Offload as exc:
        offloaded, limited = exc, None
    remembered = filter_nodes(policies, pod, nodes, node_info=info, now=now, memo=memo)
    full = filter_nodes(policies, pod, nodes, node_info=info, now=now)
    if offloaded is not None:
        assert offloaded.estimate is None or offloaded.estimate > INLINE_S
        assert remembered.memo_misses <= offloaded.misses
    else:
        assert limited is not None
        assert (limited.passed, limited.failed, limited.unresolvable, events(limited), audits(limited)) == (full.passed, full.failed, full.unresolvable, events(full), audits(full))
        assert remembered.memo_misses == 0, "what the limited request evaluated was remembered"
    assert remembered.passed == full.passed
    assert remembered.failed == full.failed
    assert remembered.unresolvable == full.unresolvable
    assert events(remembered) == events(full)
    assert audits(remembered) == audits(full)
    assert remembered.rejections == full.rejections and sum(full.rejections.values()) == len(full.failed) + len(full.unresolvable)
    # The server passes the request's own names along; the answer must not change.
    named = filter_nodes(policies, pod, nodes, node_info=info, now=now, memo=memo, names=[n["metadata"]["name"] for n in nodes])
    assert (named.passed, named.failed, named.unresolvable, events(named), audits(named)) == (full.passed, full.failed, full.unresolvable, events(full), audits(full))
    return remembered


def replicas(template: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for i in range(1_000):
        pod = copy.deepcopy(template)
        pod["metadata"]["name"] = f"trainer-{i}"
        pod["metadata"]["uid"] = f"uid-trainer-{i}"
        yield pod


@pytest.mark.parametrize("tracked", [False, True], ids=["plain-node-info", "tracked-node-info"])
def test_remembered_answers_equal_full_evaluation_through_every_kind_of_change(tracked: bool) -> None:
    rng = random.Random(5)
    policies = policy_set(EXTRA + MATCHES)
    nodes = with_windows(cluster.nodes(120), rng)
    pods = cluster.pods_on(nodes)
    info: dict[str, Any] = node_info_map(nodes, pods)
    if tracked:
        # As the server's cache keeps it: one map, entries replaced in place and logged.
        info = TrackedNodeInfo(history=8)
        info.update(node_info_map(nodes, pods))
    memo = EquivalenceCache(classes=4)
    templates = [cluster.scheduling_pod(gpus=1), cluster.scheduling_pod(gpus=4)]
    templates[1]["metadata"]["labels"]["team"] = "search"
    streams = [replicas(t) for t in templates]
    hour = 1.0
    reused = encoded_answers = 0
    for step in range(150):
        change = rng.choice(["node", "node-info", "clock", "order", "remove", "none", "none"])
        if change == "node":
            i = rng.randrange(len(nodes))
            node = copy.deepcopy(nodes[i])
            node["metadata"]["labels"]["kpe.dev/maintenance"] = rng.choice(["", "draining", "done"])
            node["metadata"]["labels"]["rack"] = f"r{rng.randrange(4)}"
            nodes = nodes[:i] + [node] + nodes[i + 1 :]
        elif change == "node-info":
            name = rng.choice(nodes)["metadata"]["name"]
            pods = pods + [{"metadata": {"name": f"bound-{step}", "uid": f"bound-{step}"}, "spec": {"nodeName": name, "containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": "2", "cpu": "4"}}}]}}]
            fresh = node_info_map([n for n in nodes if n["metadata"]["name"] == name], pods)[name]
            if isinstance(info, TrackedNodeInfo):
                for _ in range(rng.choice([1, 1, 9])):  # 9 overflows the log of 8: the cache must notice
                    info[name] = fresh
                    info.replaced(name)
            else:
                info = {**info, name: fresh}
        elif change == "clock":
            hour = rng.choice([1.0, 5.5, 7.5, 8.0, 13.0, 19.0, 23.0])
        elif change == "order":
            nodes = nodes[1:] + nodes[:1]
        elif change == "remove":
            nodes = nodes[:-1]
        pod = next(rng.choice(streams))
        result = same_filter(policies, pod, nodes, info, at(hour), memo)
        reused += result.memo_hits
        scored = score_nodes(policies, pod, nodes, node_info=info, now=at(hour), memo=memo, encode=host_priority)
        assert scored.scores == score_nodes(policies, pod, nodes, node_info=info, now=at(hour)).scores
        if scored.encoded is not None:  # the answer kpe sends, assembled from remembered entries
            names = [n["metadata"]["name"] for n in nodes]
            assert orjson.loads(host_priority_json(scored.encoded)) == [{"Host": n, "Score": scored.scores[n]} for n in names]
            encoded_answers += 1
        assert events(scored) == events(score_nodes(policies, pod, nodes, node_info=info, now=at(hour)))
    assert reused > 150 * 100 // 2, "most answers should come from the cache in this walk"
    assert encoded_answers > 100, "most prioritize answers are assembled from remembered entries"


class CachedNodes:
    """Nodes as kpe's cluster cache keeps them: a NodeState per node, replaced and logged in a
    TrackedNodeInfo whenever the node or its nodeInfo changes."""

    def __init__(self, nodes: list[dict[str, Any]], pods: list[dict[str, Any]], *, history: int = 8) -> None:
        self.info = TrackedNodeInfo(history=history)
        self.states: dict[str, NodeState] = {}
        for name, view in node_info_map(nodes, pods).items():
            self.put(next(n for n in nodes if n["metadata"]["name"] == name), view)

    def put(self, node: dict[str, Any], view: dict[str, Any]) -> None:
        name = node["metadata"]["name"]
        old = self.states.get(name)
        self.info[name] = view
        self.states[name] = NodeState(name, node, view)
        self.info.replaced(name, node=old is None or old.node is not node)

    def delete(self, name: str) -> None:
        del self.states[name], self.info[name]
        self.info.replaced(name)

    def bind(self, pod: dict[str, Any], name: str, bound: list[dict[str, Any]], index: Any = None) -> None:
        """``pod`` placed on node ``name`` and running: added to ``bound``, the node's nodeInfo
        replaced, and the pod counted in ``index`` (a CountIndex) when given."""
        pod["spec"]["nodeName"] = name
        pod["status"] = {"phase": "Running"}
        bound.append(pod)
        state = self.states[name]
        self.put(state.node, node_info_map([state.node], bound)[name])
        if index is not None:
            index.set_pod(f"{pod['metadata']['namespace']}/{pod['metadata']['name']}", pod)

    def by_name(self, names: list[str]) -> NodesByName:
        return NodesByName(names, self.states)

    def known(self, names: list[str]) -> list[dict[str, Any]]:
        return [self.states[n].node for n in names if n in self.states]


def test_nodes_given_by_name_are_answered_as_a_full_evaluation_of_the_cached_nodes_through_every_change() -> None:
    rng = random.Random(7)
    policies = policy_set(EXTRA + MATCHES)
    nodes = with_windows(cluster.nodes(120), rng)
    pods = cluster.pods_on(nodes)
    cached = CachedNodes(nodes, pods)
    names = [n["metadata"]["name"] for n in nodes]
    memo = EquivalenceCache(classes=12)  # three templates, odd and even replicas, mornings or not
    templates = [cluster.scheduling_pod(gpus=1), cluster.scheduling_pod(gpus=4), general_pod()]
    templates[1]["metadata"]["labels"]["team"] = "search"
    streams = [replicas(t) for t in templates]
    hour = 1.0
    reused = asked = encoded_answers = unknown_seen = 0
    for step in range(200):
        change = rng.choice(["node", "node-info", "clock", "window", "unknown", "delete", "none", "none"])
        if change == "node":
            state = cached.states[rng.choice(list(cached.states))]
            node = copy.deepcopy(state.node)
            node["metadata"]["labels"]["kpe.dev/maintenance"] = rng.choice(["", "draining", "done"])
            node["metadata"]["labels"]["rack"] = f"r{rng.randrange(4)}"
            cached.put(node, state.info)
        elif change == "node-info":
            state = cached.states[rng.choice(list(cached.states))]
            pods = pods + [{"metadata": {"name": f"bound-{step}", "uid": f"bound-{step}"}, "spec": {"nodeName": state.name, "containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": "2", "cpu": "4"}}}]}}]
            for _ in range(rng.choice([1, 1, 9])):  # 9 overflows the log of 8: the cache must notice
                cached.put(state.node, node_info_map([state.node], pods)[state.name])
        elif change == "clock":
            hour = rng.choice([1.0, 5.5, 7.5, 8.0, 13.0, 19.0, 23.0])
        elif change == "window":  # kube-scheduler's next window: another start, its own order
            known = list(cached.states)
            start = rng.randrange(len(known))
            names = [known[(start + k) % len(known)] for k in range(rng.randrange(30, len(known) + 1))]
            rng.shuffle(names)
        elif change == "unknown":
            names = names + [f"gone-{step}"]
        elif change == "delete" and len(cached.states) > 60:
            cached.delete(rng.choice(list(cached.states)))
        pod = next(rng.choice(streams))
        now = at(hour)
        full = filter_nodes(policies, pod, cached.known(names), node_info=cached.info, now=now)
        try:
            filter_nodes(policies, pod, cached.by_name(names), node_info=cached.info, now=now, memo=memo, inline_s=INLINE_S)
        except Offload as exc:
            assert exc.estimate is None or exc.estimate > INLINE_S
        remembered = filter_nodes(policies, pod, cached.by_name(names), node_info=cached.info, now=now, memo=memo)
        assert (remembered.passed, remembered.failed, remembered.unresolvable) == (full.passed, full.failed, full.unresolvable)
        assert (events(remembered), audits(remembered), remembered.rejections) == (events(full), audits(full), full.rejections)
        assert remembered.unknown == [n for n in names if n not in cached.states]
        unknown_seen += bool(remembered.unknown)
        reused += remembered.memo_hits
        asked += len(names)
        scored = score_nodes(policies, pod, cached.by_name(names), node_info=cached.info, now=now, memo=memo, encode=host_priority)
        plain = score_nodes(policies, pod, cached.known(names), node_info=cached.info, now=now)
        assert scored.scores == plain.scores and events(scored) == events(plain)
        assert scored.unknown == remembered.unknown
        if scored.encoded is not None and not scored.unknown:
            assert orjson.loads(host_priority_json(scored.encoded)) == [{"Host": n, "Score": plain.scores[n]} for n in names]
            encoded_answers += 1
    assert reused > asked * 0.5, "most answers should come from the cache in this walk (its log of 8 overflows often)"
    assert encoded_answers > 20 and unknown_seen > 20


def general_pod() -> dict[str, Any]:
    """A pod without GPUs in namespace batch: no filter it meets reads nodeInfo, bin-packing's score does."""
    pod = cluster.scheduling_pod(gpus=1)
    pod["metadata"]["namespace"] = "batch"
    for c in pod["spec"]["containers"]:
        for section in c["resources"].values():
            section.pop("nvidia.com/gpu", None)
    return pod


def test_a_pod_bound_to_a_node_costs_an_evaluation_only_to_classes_whose_rules_read_node_info() -> None:
    nodes = cluster.nodes(40)
    pods = cluster.pods_on(nodes)
    cached = CachedNodes(nodes, pods, history=64)
    names = [n["metadata"]["name"] for n in nodes]
    policies = load([ROOT / "policies"])
    memo = EquivalenceCache()
    gpu, general = cluster.scheduling_pod(gpus=1), general_pod()

    def misses() -> dict[str, int]:
        asked = {
            "gpu filter": filter_nodes(policies, gpu, cached.by_name(names), node_info=cached.info, memo=memo),
            "general filter": filter_nodes(policies, general, cached.by_name(names), node_info=cached.info, memo=memo),
            "general score": score_nodes(policies, general, cached.by_name(names), node_info=cached.info, memo=memo),
        }
        return {verb: result.memo_misses for verb, result in asked.items()}

    # Misses count each policy's result per node. The GPU pod's four filtering policies evaluate
    # every node; of the general pod's four, three read nothing in which it differs from the GPU
    # pod (arm64-readiness, maintenance-drain, team-node-pools: the same team), so their classes
    # are the GPU pod's and only keep-general-off-gpu evaluates. Four policies score.
    assert misses() == {"gpu filter": 4 * 40, "general filter": 40, "general score": 4 * 40}
    assert misses() == {"gpu filter": 0, "general filter": 0, "general score": 0}
    # A pod bound to one node: its nodeInfo is replaced, the node object is the same.
    state = cached.states[names[3]]
    bound = {"metadata": {"name": "bound", "uid": "bound"}, "spec": {"nodeName": state.name, "containers": [{"name": "c", "resources": {"requests": {"cpu": "2"}}}]}}
    cached.put(state.node, node_info_map([state.node], pods + [bound])[state.name])
    assert misses() == {"gpu filter": 1, "general filter": 0, "general score": 1}
    # The node itself changed: every class evaluates it again, once (the general pod's filter
    # finds the three classes it shares with the GPU pod's evaluated already).
    node = copy.deepcopy(cached.states[names[5]].node)
    node["metadata"]["labels"]["kpe.dev/maintenance"] = "draining"
    cached.put(node, cached.states[names[5]].info)
    assert misses() == {"gpu filter": 4, "general filter": 1, "general score": 4}
    general_filter = filter_nodes(policies, general, cached.by_name(names), node_info=cached.info, memo=memo)
    assert names[5] in general_filter.unresolvable and general_filter.memo_misses == 0


def test_a_result_computed_from_a_state_replaced_meanwhile_is_computed_again_at_the_next_request() -> None:
    # The worker thread evaluates while the event loop applies watch events: a node's state can
    # be replaced between the lookup and the end of the evaluation.
    nodes = cluster.nodes(3)
    cached = CachedNodes(nodes, [])
    names = [n["metadata"]["name"] for n in nodes]
    memo = EquivalenceCache().table(generation="g", verb="filter", scopes=[], pod={})
    assert memo is not None
    computed: list[str] = []

    def compute(node: Any, info: Any, name: str) -> str:
        computed.append(name)
        if name == names[1] and len(computed) <= 3:
            cached.put(copy.deepcopy(node), info)  # replaced while being evaluated
        return f"{name}@{id(node)}"

    first = memo.lookup_names(names, cached.states, cached.info, compute)
    assert computed == names and first.hits == 0
    again = memo.lookup_names(names, cached.states, cached.info, compute)
    assert computed == [*names, names[1]], "only the node whose state was replaced is evaluated again"
    assert again.results[1] == f"{names[1]}@{id(cached.states[names[1]].node)}"
    assert memo.lookup_names(names, cached.states, cached.info, compute).hits == 3


def test_replicas_share_results_but_a_policy_reading_the_name_tells_one_apart() -> None:
    policies = policy_set()
    nodes = with_windows(cluster.nodes(40), random.Random(2))
    info = node_info_map(nodes, [])
    memo = EquivalenceCache()
    template = cluster.scheduling_pod(gpus=1)
    template["metadata"]["labels"]["replica-rules"] = "on"
    stream = replicas(template)
    first = same_filter(policies, next(stream), nodes, info, at(9), memo)
    second = same_filter(policies, next(stream), nodes, info, at(9), memo)
    assert first.memo_hits == 0 and first.memo_misses > 40
    # Misses count each policy's result per node: only zz-named reads the name, so only its class is new.
    assert (second.memo_hits, second.memo_misses) == (first.memo_misses - 40, 40), "every name is a class of its own for zz-named alone"
    plain = cluster.scheduling_pod(gpus=1)
    for pod in replicas(plain):
        if pod["metadata"]["name"] == "trainer-1":
            break
        same_filter(policies, pod, nodes, info, at(9), memo)
    shared = same_filter(policies, pod, nodes, info, at(9), memo)
    assert shared.memo_hits > 0 and shared.memo_misses == 0, "without the name-reading policy, replicas share every class"
    seventh = [next(stream) for _ in range(6)][-1]
    assert seventh["metadata"]["name"].endswith("-7")
    result = same_filter(policies, seventh, nodes, info, at(9), memo)
    assert result.memo_misses == 40, "zz-named reads pod.metadata.name, so trainer-7 is a class of its own for it (and only for it)"
    assert any("replica 7 stays off GPU nodes" in reason for reason in result.unresolvable.values())


@pytest.mark.any_hour
def test_a_rule_that_reads_now_runs_on_every_request_unless_its_clock_free_part_holds() -> None:
    policies = policy_set()
    nodes = cluster.nodes(20)
    for i, node in enumerate(nodes):
        node["metadata"]["labels"]["rack"] = "r1"
        if i < 5:
            node["metadata"]["labels"]["shift"] = "night"
    info = node_info_map(nodes, [])
    memo = EquivalenceCache()
    stream = replicas(cluster.scheduling_pod(gpus=1))
    same_filter(policies, next(stream), nodes, info, at(3), memo)

    def office_hours_runs(hour: float) -> int:
        result = filter_nodes(policies, next(stream), nodes, node_info=info, now=at(hour), memo=memo)
        return dict(((p, r), n) for p, r, n in result.rule_counts)[("zz-weekday", "office-hours")]

    # Night-shift nodes pass whatever the hour: only the 15 day nodes (less those rejected earlier) run it.
    day_nodes_reaching_it = office_hours_runs(3)
    assert 0 < day_nodes_reaching_it <= 15
    assert office_hours_runs(4) == day_nodes_reaching_it
    night = same_filter(policies, next(stream), nodes, info, at(3), memo)
    day = same_filter(policies, next(stream), nodes, info, at(9), memo)
    assert any("day nodes sleep" in r for r in night.unresolvable.values())
    assert not any("day nodes sleep" in r for r in day.failed.values())


@pytest.mark.any_hour
def test_a_new_policy_generation_forgets_what_the_old_one_remembered() -> None:
    nodes = cluster.nodes(10)
    for node in nodes:
        node["metadata"]["labels"]["rack"] = "r1"
    info = node_info_map(nodes, [])
    memo = EquivalenceCache()
    pod = cluster.scheduling_pod(gpus=1)
    old = policy_set()
    # At noon: zz-weekday keeps these day nodes (no shift label) off before 06:00.
    assert filter_nodes(old, pod, nodes, node_info=info, memo=memo, now=at(12)).passed != []
    stricter = policy_set(EXTRA.replace("rack r0 is full", "rack r0 is closed").replace("!= 'r0'", "== 'nowhere'"))
    assert stricter.generation != old.generation
    result = filter_nodes(stricter, pod, nodes, node_info=info, memo=memo, now=at(12))
    assert result.memo_misses == 10, "the edited policy's class is new; the other policies' classes kept their results"
    assert result.memo_hits > 0
    assert result.passed == filter_nodes(stricter, pod, nodes, node_info=info, now=at(12)).passed == []


@pytest.mark.any_hour
def test_the_cache_keeps_at_most_the_configured_number_of_classes_of_each_policy() -> None:
    policies = policy_set()
    nodes = cluster.nodes(5)
    memo = EquivalenceCache(classes=2)
    for gpus in (1, 2, 3, 1):  # of the filtering policies, only gpu-placement reads how many GPUs the pod asks for
        filter_nodes(policies, cluster.scheduling_pod(gpus=gpus), nodes, memo=memo, now=at(12))
    again = filter_nodes(policies, cluster.scheduling_pod(gpus=1), nodes, memo=memo, now=at(12))
    assert again.memo_misses == 0, "the classes used last are still there"
    evicted = filter_nodes(policies, cluster.scheduling_pod(gpus=2), nodes, memo=memo, now=at(12))
    assert evicted.memo_misses == 5, "gpu-placement's least recently used class went first; the other policies' one class each stayed"
    assert filter_nodes(policies, cluster.scheduling_pod(gpus=2), nodes, memo=EquivalenceCache(classes=0), now=at(12)).memo_misses == 0


@pytest.mark.parametrize(("results", "kept"), [(12, 7), (None, 10)])
def test_past_the_budget_of_node_results_the_least_recently_used_classes_go_however_many_classes_are_allowed(results: int | None, kept: int) -> None:
    policies = policy_set()
    nodes = cluster.nodes(5)
    memo = EquivalenceCache(classes=10, results=results)
    # The first pod's classes of its seven filtering policies, then one more class of gpu-placement
    # per pod; five results each, counted as each class comes. The classes a request uses stay
    # whatever the budget: past 12 results, only the last pod's seven are left.
    for gpus in (1, 2, 3, 4):
        filter_nodes(policies, cluster.scheduling_pod(gpus=gpus), nodes, memo=memo, now=at(12))
    assert len(memo) == kept
    again = filter_nodes(policies, cluster.scheduling_pod(gpus=1), nodes, memo=memo, now=at(12))
    assert again.memo_misses == (5 if results else 0), "past 12 results, gpu-placement's class for one GPU went"


@pytest.mark.parametrize(
    ("expression", "paths"),
    [
        ("pod.spec.containers.all(c, has(c.resources))", {("spec", "containers")}),
        ("pod.metadata.?labels[?'team'].orValue('') == 'ml'", {("metadata", "labels", "team")}),
        ("pod.metadata.labels[params.key] == 'x'", {("metadata", "labels")}),
        # An element by a constant index: that field of every element.
        ("size(pod.spec.containers[0].ports) > 0", {("spec", "containers", "ports")}),
        ("has(pod.spec.priorityClassName)", {("spec", "priorityClassName")}),
        ("[pod].size() == 1", {()}),
        ("node.metadata.name == 'x'", set()),
        # A helper that declares what it reads of the pod: those fields, through lists (each container's requests), not the
        # name or the images. Not its status: a resize counts for a bound pod only, so pending replicas stay one class.
        ("kube.podRequests(pod)[?'cpu'].orValue(0) > 1", {
            ("spec", "containers", "name"), ("spec", "containers", "resources", "limits"), ("spec", "containers", "resources", "requests"),
            ("spec", "initContainers", "name"), ("spec", "initContainers", "resources", "limits"),
            ("spec", "initContainers", "resources", "requests"), ("spec", "initContainers", "restartPolicy"), ("spec", "nodeName"),
            ("spec", "overhead"), ("spec", "resources", "limits"), ("spec", "resources", "requests")}),
        ("kube.podToleratesNodeTaints(pod, node)", {("spec", "tolerations", f) for f in ("key", "operator", "value", "effect")}),
        ("strings.quote(pod.metadata.name) != ''", {("metadata", "name")}),
        ("string(pod) != ''", {()}),
    ],
)
def test_the_fingerprint_covers_every_pod_field_an_expression_reads(expression: str, paths: set[tuple[str, ...]]) -> None:
    from engine.cel.parser.parser import parse

    assert set(pod_paths(parse(expression))) == paths


def test_a_key_taken_from_the_policy_s_params_is_the_params_value_and_a_list_is_read_element_by_element() -> None:
    from engine.cel.parser.parser import parse

    assert set(pod_paths(parse("pod.metadata.?labels[?params.teamLabel].orValue('') == 'ml'"), {"teamLabel": "team"})) == {("metadata", "labels", "team")}
    assert set(pod_paths(parse("pod.metadata.labels[params.key] == 'x'"), {"key": 3})) == {("metadata", "labels")}, "only a string key is a label"
    # Pods whose containers differ only in what is not read print alike; a difference in what is read, or an extra container, does not.
    paths = [("spec", "containers", "resources", "requests")]
    one = {"spec": {"containers": [{"name": "a", "image": "x:1", "resources": {"requests": {"cpu": "1"}}}]}}
    other_image = {"spec": {"containers": [{"name": "a", "image": "x:2", "resources": {"requests": {"cpu": "1"}}}]}}
    more_cpu = {"spec": {"containers": [{"name": "a", "image": "x:1", "resources": {"requests": {"cpu": "2"}}}]}}
    two = {"spec": {"containers": [{"name": "a", "image": "x:1", "resources": {"requests": {"cpu": "1"}}}, {"name": "b"}]}}
    assert pod_fingerprint(one, paths) == pod_fingerprint(other_image, paths)
    assert len({pod_fingerprint(p, paths) for p in (one, more_cpu, two)}) == 3


def test_nodes_a_class_decides_alike_without_errors_share_one_remembered_result() -> None:
    """A window's passing nodes read one object, and so do the nodes one rule rejects with
    one message: one result is built for them, not one a node."""
    policies = load_text("""apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: tens}
spec:
  filters:
  - name: not-a-ten
    expression: "!node.metadata.name.endsWith('0')"
    message: nodes ending in 0 are kept free
""")
    nodes = cluster.nodes(40)
    memo = EquivalenceCache()
    result = filter_nodes(policies, cluster.scheduling_pod(), nodes, memo=memo, now=at(12))
    table = next(t for (verb, _, _), t in memo._tables.items() if verb == "filter")
    assert len(result.passed) == 36 and len({id(table.result_of[name]) for name in result.passed}) == 1
    rejected = {**result.failed, **result.unresolvable}
    assert len(rejected) == 4 and len({id(table.result_of[name]) for name in rejected}) == 1


POOL_POLICY = """apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: pools}
spec:
  filters:
  - name: ml-pool
    expression: "node.metadata.?labels[?'pool'].orValue('') == 'ml' && nodeInfo.podCount < 2"
    message: not an ml node with room
"""


def test_over_http_a_node_or_pod_change_reaches_the_next_answer_and_hits_are_counted(tmp_path: Path) -> None:
    import time

    import httpx

    from server.app import create_app
    from server.settings import Settings

    from .fakeapi import FakeApiServer
    from .serving import serve

    def eventually(check: Any) -> None:
        deadline = time.monotonic() + 10
        while not check():
            assert time.monotonic() < deadline, "timed out"
            time.sleep(0.05)

    def pod(i: int) -> dict[str, Any]:
        return {"metadata": {"name": f"web-{i}", "namespace": "apps", "uid": f"uid-web-{i}"}, "spec": {"containers": [{"name": "c"}]}}

    (tmp_path / "pools.yaml").write_text(POOL_POLICY)
    with FakeApiServer(bookmark_interval=0.2) as api:
        api.state.add_node({"metadata": {"name": "node-a", "labels": {"pool": "ml"}}})
        api.state.add_node({"metadata": {"name": "node-b", "labels": {"pool": "web"}}})
        # The pods are filtered and never bound: not counted in flight (tests/test_in_flight.py), as once bound.
        settings = Settings(policies=str(tmp_path / "pools.yaml"), kubeconfig=api.write_kubeconfig(tmp_path / "kubeconfig"), cluster="on", in_flight_s=0,
                            warm_classes=False)  # exact hits: no class filled ahead in the background between requests
        with serve(create_app(settings)) as url:
            eventually(lambda: httpx.get(url + "/readyz").status_code == 200)

            def passing(i: int) -> list[str]:
                answer = httpx.post(url + "/scheduler/filter", json={"Pod": pod(i), "NodeNames": ["node-a", "node-b"]}).json()
                assert set(answer["NodeNames"]) | set(answer["FailedNodes"]) == {"node-a", "node-b"}
                return list(answer["NodeNames"])

            assert passing(1) == ["node-a"]
            assert passing(2) == ["node-a"]
            api.state.update("nodes", "node-b", merge={"metadata": {"labels": {"pool": "ml"}}})
            eventually(lambda: httpx.get(url + "/apis/v1/nodes/node-b").json()["node"]["metadata"]["labels"]["pool"] == "ml")
            assert passing(3) == ["node-a", "node-b"]
            for i in (1, 2):
                api.state.add_pod({**pod(100 + i), "spec": {"nodeName": "node-a", "containers": [{"name": "c"}]}, "status": {"phase": "Running"}})
            eventually(lambda: httpx.get(url + "/apis/v1/nodes/node-a").json()["nodeInfo"]["podCount"] == 2)
            assert passing(4) == ["node-b"]
            counted = {line.rpartition(" ")[0]: float(line.rpartition(" ")[2]) for line in httpx.get(url + "/metrics").text.splitlines() if line.startswith("kpe_equivalence_cache_nodes_total{")}
            # 1: both evaluated; 2: both remembered; 3: node-b changed, node-a remembered; 4: node-a's nodeInfo changed.
            assert counted == {'kpe_equivalence_cache_nodes_total{result="hit",verb="filter"}': 4.0, 'kpe_equivalence_cache_nodes_total{result="miss",verb="filter"}': 4.0}


@pytest.mark.any_hour
def test_a_reloaded_policy_that_starts_reading_now_is_not_answered_from_memory() -> None:
    template = """apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: clock}
spec:
  scores:
  - name: hour
    expression: "EXPR"
"""
    before = load_text(template.replace("EXPR", "50"))
    after = load_text(template.replace("EXPR", "now.getHours() * 4"))
    nodes = cluster.nodes(3)
    memo = EquivalenceCache()
    pod = cluster.scheduling_pod(gpus=1)
    assert set(score_nodes(before, pod, nodes, memo=memo, now=at(1)).scores.values()) == {0}  # every node alike: nothing to tell apart
    for hour in (1, 20, 1):
        answer = score_nodes(after, pod, nodes, memo=memo, now=at(hour))
        assert answer.scores == score_nodes(after, pod, nodes, now=at(hour)).scores
        assert answer.memo_hits == 0


@pytest.mark.parametrize("tracked", [False, True], ids=["plain-node-info", "tracked-node-info"])
def test_a_class_remembers_the_nodes_outside_the_current_window_of_names(tracked: bool) -> None:
    # kube-scheduler sends each pod a different window of about 40% of the nodes.
    policies = policy_set()
    nodes = cluster.nodes(400)
    plain = node_info_map(nodes, cluster.pods_on(nodes, 2))
    info: dict[str, Any] = plain
    if tracked:
        info = TrackedNodeInfo()
        info.update(plain)
    memo = EquivalenceCache()
    stream = replicas(cluster.scheduling_pod(gpus=0))
    for start in range(0, 400, 100):  # a first round over every node
        same_filter(policies, next(stream), nodes[start:start + 100], info, at(12), memo)
    rng = random.Random(5)
    for _ in range(20):
        start = rng.randrange(400)
        window = [nodes[(start + k) % 400] for k in range(100)]
        result = same_filter(policies, next(stream), window, info, at(12), memo)
        assert result.memo_misses == 0, "nothing changed: every node of every window is remembered"


class Ticks:
    """A clock that moves ``step`` seconds each time it is read: a batch of misses is measured as
    one step, so ``step`` over the batch's size is what the class learns one node costs."""

    def __init__(self, step: float) -> None:
        self.step, self.now = step, 0.0

    def __call__(self) -> float:
        self.now += self.step
        return self.now


COSTED = """apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: pools}
spec:
  filters:
  - {name: ml-pool, expression: "node.metadata.labels['pool'] == 'ml'", message: not an ml node}
  scores:
  - {name: ml-first, expression: "node.metadata.labels['pool'] == 'ml' ? 90 : 20"}
"""
POD = {"metadata": {"name": "web-1", "namespace": "apps"}, "spec": {"containers": [{"name": "c"}]}}


def pool_nodes(count: int) -> list[dict[str, Any]]:
    return [{"metadata": {"name": f"node-{i}", "labels": {"pool": "ml" if i % 2 else "web"}}} for i in range(count)]


def changed(nodes: list[dict[str, Any]], *positions: int) -> list[dict[str, Any]]:
    """The same nodes with new objects at ``positions``: misses there, as after a watch event."""
    return [copy.deepcopy(n) if i in positions else n for i, n in enumerate(nodes)]


@pytest.mark.parametrize("verb", ["filter", "score"])
def test_a_class_measured_expensive_offloads_even_one_miss_before_evaluating_it(verb: str) -> None:
    policies, nodes = load_text(COSTED), pool_nodes(4)
    memo = EquivalenceCache(clock=Ticks(1.0))  # 4 nodes measured in 1 s: 250 ms a node
    decide = filter_nodes if verb == "filter" else score_nodes
    assert decide(policies, POD, nodes, memo=memo).memo_misses == 4
    after = changed(nodes, 2)
    with pytest.raises(Offload) as offloaded:
        decide(policies, POD, after, memo=memo, inline_s=10 * INLINE_S)
    assert (offloaded.value.misses, offloaded.value.estimate) == (1, 0.25)
    assert decide(policies, POD, after, memo=memo).memo_misses == 1, "nothing was evaluated or remembered before Offload"


@pytest.mark.parametrize("verb", ["filter", "score"])
def test_a_class_measured_cheap_evaluates_the_misses_that_fit_the_budget_in_place(verb: str) -> None:
    policies, nodes = load_text(COSTED), pool_nodes(8)
    memo = EquivalenceCache(clock=Ticks(8 * INLINE_S / 5))  # 8 nodes measured at a fifth of the budget each
    decide = filter_nodes if verb == "filter" else score_nodes
    decide(policies, POD, nodes, memo=memo)
    with pytest.raises(Offload) as offloaded:
        decide(policies, POD, changed(nodes, *range(6)), memo=memo, inline_s=INLINE_S)
    assert offloaded.value.misses == 6 and offloaded.value.estimate == pytest.approx(1.2 * INLINE_S)
    inline = decide(policies, POD, changed(nodes, 1, 2, 3, 4), memo=memo, inline_s=INLINE_S)
    assert inline.memo_misses == 4 and inline.memo_hits == 4
    if verb == "filter":
        assert isinstance(inline, FilterResult) and inline.passed == ["node-1", "node-3", "node-5", "node-7"]
    else:
        assert isinstance(inline, ScoreResult) and inline.scores == {n["metadata"]["name"]: 10 if i % 2 else 0 for i, n in enumerate(nodes)}


@pytest.mark.parametrize("verb", ["filter", "score"])
def test_a_class_not_measured_yet_and_a_request_without_a_class_offload_any_evaluation(verb: str) -> None:
    policies, nodes = load_text(COSTED), pool_nodes(1)
    decide = filter_nodes if verb == "filter" else score_nodes
    with pytest.raises(Offload) as cold:
        decide(policies, POD, nodes, memo=EquivalenceCache(clock=Ticks(0.0)), inline_s=60.0)
    assert (cold.value.misses, cold.value.estimate) == (1, None)
    with pytest.raises(Offload) as plain:
        decide(policies, POD, nodes, inline_s=60.0)
    assert (plain.value.misses, plain.value.estimate) == (1, None)
    # Nothing to evaluate: no policy matches.
    assert decide(load_text(""), POD, nodes, inline_s=INLINE_S).memo_misses == 0


@pytest.mark.parametrize("verb", ["filter", "score"])
def test_a_request_of_remembered_nodes_only_never_offloads_however_expensive_the_class(verb: str) -> None:
    policies, nodes = load_text(COSTED), pool_nodes(32)
    memo = EquivalenceCache(clock=Ticks(3600.0))
    decide = filter_nodes if verb == "filter" else score_nodes
    decide(policies, POD, nodes, memo=memo)
    for window in (nodes, nodes[::-1], nodes[5:9]):
        assert decide(policies, POD, window, memo=memo, inline_s=INLINE_S).memo_hits == len(window)


def test_a_class_whose_rules_that_read_now_are_measured_expensive_offloads_even_when_every_node_is_remembered() -> None:
    timed = COSTED.replace("node.metadata.labels['pool'] == 'ml'\",", "now > timestamp('2026-01-01T00:00:00Z')\",", 1)
    policies, nodes = load_text(timed), pool_nodes(4)
    memo = EquivalenceCache(clock=Ticks(1.0))
    assert filter_nodes(policies, POD, nodes, memo=memo, now=at(12)).passed == [n["metadata"]["name"] for n in nodes]
    with pytest.raises(Offload) as offloaded:
        filter_nodes(policies, POD, nodes, memo=memo, now=at(12), inline_s=INLINE_S)
    assert (offloaded.value.misses, offloaded.value.estimate) == (0, 1.0), "the rules that read now run per request: 1 s measured"
    # The same class with rules that read now measured cheap stays in place.
    cheap = EquivalenceCache(clock=Ticks(INLINE_S / 4))
    filter_nodes(policies, POD, nodes, memo=cheap, now=at(12))
    assert filter_nodes(policies, POD, nodes, memo=cheap, now=at(12), inline_s=INLINE_S).memo_hits == 4


def test_a_class_measured_expensive_comes_back_in_place_over_a_few_requests_once_it_is_cheap() -> None:
    policies, nodes = load_text(COSTED), pool_nodes(2)
    clock = Ticks(5 * INLINE_S)  # the first pair: 2.5 budgets a node
    memo = EquivalenceCache(clock=clock)
    filter_nodes(policies, POD, nodes, memo=memo)
    clock.step = INLINE_S / 100  # then cheap
    where = []
    for _ in range(12):
        nodes = changed(nodes, 0, 1)
        try:
            filter_nodes(policies, POD, nodes, memo=memo, inline_s=INLINE_S)
            where.append("loop")
        except Offload:
            filter_nodes(policies, POD, nodes, memo=memo)  # the worker's turn, measured as well
            where.append("worker")
    assert where == ["worker"] * 6 + ["loop"] * 6, "a mean over the last few requests: 5 budgets a request fall below 1 in six"


def test_one_measurement_stretched_by_the_machine_does_not_send_a_cheap_class_to_the_worker() -> None:
    policies, nodes = load_text(COSTED), pool_nodes(4)
    clock = Ticks(4 * INLINE_S / 20)  # a twentieth of the budget a node
    memo = EquivalenceCache(clock=clock)
    filter_nodes(policies, POD, nodes, memo=memo)
    clock.step = 4 * INLINE_S / 2  # one request's four nodes stretched tenfold (the thread preempted)
    filter_nodes(policies, POD, changed(nodes, 0, 1, 2, 3), memo=memo)
    assert filter_nodes(policies, POD, changed(nodes, 0, 1, 2, 3), memo=memo, inline_s=INLINE_S).memo_misses == 4


def test_a_cheap_class_whose_evaluation_turns_slow_goes_to_the_worker_from_its_next_request() -> None:
    policies, nodes = load_text(COSTED), pool_nodes(4)
    clock = Ticks(4 * INLINE_S / 20)
    memo = EquivalenceCache(clock=clock)
    filter_nodes(policies, POD, nodes, memo=memo)
    clock.step = 0.5  # half a second a node from now on
    filter_nodes(policies, POD, changed(nodes, 0), memo=memo, inline_s=INLINE_S)  # measured in place, once
    with pytest.raises(Offload):
        filter_nodes(policies, POD, changed(nodes, 1), memo=memo, inline_s=INLINE_S)


def test_over_http_a_request_the_cache_answers_skips_the_worker_thread_and_a_cold_one_uses_it(tmp_path: Path) -> None:
    import httpx

    names = [f"node-{i}" for i in range(6)]
    with kpe_on_pools(tmp_path, len(names)) as url:

        def filter_and_count(i: int) -> float:
            pod = {"metadata": {"name": f"web-{i}", "namespace": "apps", "uid": f"uid-web-{i}"}, "spec": {"containers": [{"name": "c"}]}}
            answer = httpx.post(url + "/scheduler/filter", json={"Pod": pod, "NodeNames": names}).json()
            assert answer["NodeNames"] == names[1::2] and set(answer["FailedNodes"]) == set(names[::2])
            metrics = httpx.get(url + "/metrics").text.splitlines()
            return sum(float(line.rpartition(" ")[2]) for line in metrics if line.startswith('kpe_worker_requests_total{verb="filter"}'))

        assert filter_and_count(1) == 1.0, "a class not measured yet: however few its nodes, the worker evaluates them"
        assert filter_and_count(2) == 1.0, "the same class again: every node remembered, answered on the event loop"
        assert filter_and_count(3) == 1.0


POOL_SCORE = POOL_POLICY + """  scores:
  - name: ml-first
    expression: "node.metadata.?labels[?'pool'].orValue('') == 'ml' ? 90 : 20"
"""


def test_over_http_prioritize_answers_from_remembered_entries_and_the_decision_log_keeps_the_answer_as_sent(tmp_path: Path) -> None:
    import httpx

    names = [f"node-{i}" for i in range(6)]
    with kpe_on_pools(tmp_path, len(names), POOL_SCORE) as url:
        answers = []
        for i in range(3):  # cold, then from memory; the window reversed the third time
            pod = {"metadata": {"name": f"web-{i}", "namespace": "apps", "uid": f"uid-web-{i}"}, "spec": {"containers": [{"name": "c"}]}}
            window = names if i < 2 else names[::-1]
            answers.append((window, httpx.post(url + "/scheduler/prioritize", json={"Pod": pod, "NodeNames": window}).json()))
        for window, answer in answers:
            assert answer == [{"Host": n, "Score": 10 if int(n.split("-")[1]) % 2 else 0} for n in window]
        logged = httpx.get(url + "/apis/v1/decisions", params={"verb": "prioritize"}).json()["decisions"]
        assert [d["scores"] for d in logged] == [a for _, a in reversed(answers)]
        assert [d["pod"] for d in logged] == ["apps/web-2", "apps/web-1", "apps/web-0"]


def test_a_prioritize_answer_too_large_for_the_decision_log_s_entry_budget_is_logged_cut_to_its_first_hosts(tmp_path: Path) -> None:
    import httpx

    names = [f"node-{i}" for i in range(300)]
    with kpe_on_pools(tmp_path, len(names), POOL_SCORE, decision_log_bytes=64 * 1024) as url:  # 4 KiB an entry
        pod = {"metadata": {"name": "web-1", "namespace": "apps", "uid": "uid-web-1"}, "spec": {"containers": [{"name": "c"}]}}
        for _ in range(2):  # cold, then answered from the remembered entries
            answer = httpx.post(url + "/scheduler/prioritize", json={"Pod": pod, "NodeNames": names}).json()
        assert len(answer) == 300
        logged = httpx.get(url + "/apis/v1/decisions", params={"verb": "prioritize"}).json()["decisions"]
        for decision in logged:
            kept = decision["scores"]
            assert 0 < len(kept) < 300 and kept == answer[: len(kept)]
            assert decision["leftOut"] == {"scores": 300 - len(kept)}
            assert len(orjson.dumps(decision)) <= 4 * 1024


def test_whole_nodes_of_the_version_kpe_has_cached_are_answered_from_memory_and_others_as_sent(tmp_path: Path) -> None:
    import httpx

    with kpe_on_pools(tmp_path, 6) as url:
        nodes = [httpx.get(url + f"/apis/v1/nodes/node-{i}").json()["node"] for i in range(6)]  # as the API server has them

        def filter_(i: int, sent: list[dict[str, Any]]) -> tuple[list[str], dict[str, float]]:
            pod = {"metadata": {"name": f"web-{i}", "namespace": "apps", "uid": f"uid-web-{i}"}, "spec": {"containers": [{"name": "c"}]}}
            answer = httpx.post(url + "/scheduler/filter", json={"Pod": pod, "Nodes": {"items": sent}}).json()
            lines = httpx.get(url + "/metrics").text.splitlines()
            counted = {line.rpartition(" ")[0]: float(line.rpartition(" ")[2]) for line in lines if line.startswith("kpe_equivalence_cache_nodes_total{")}
            return [n["metadata"]["name"] for n in answer["Nodes"]["items"]], counted

        hit, miss = 'kpe_equivalence_cache_nodes_total{result="hit",verb="filter"}', 'kpe_equivalence_cache_nodes_total{result="miss",verb="filter"}'
        assert filter_(1, nodes)[0] == ["node-1", "node-3", "node-5"]
        passed, counted = filter_(2, copy.deepcopy(nodes))
        assert passed == ["node-1", "node-3", "node-5"] and counted.get(hit) == 6.0, "the same versions: answered from memory"
        # The scheduler's copy of node-0 is newer than kpe's (relabelled; kpe's watch has not caught up).
        newer = copy.deepcopy(nodes)
        newer[0]["metadata"]["labels"]["pool"] = "ml"
        newer[0]["metadata"]["resourceVersion"] = "999999"
        passed, counted = filter_(3, newer)
        assert passed == ["node-0", "node-1", "node-3", "node-5"], "a node of another version is judged as sent"
        assert counted.get(hit) == 11.0 and counted.get(miss) == 7.0
        # What kpe evaluates for a node it has at that version is its own copy, so only other versions are checked.
        garbled = copy.deepcopy(nodes)
        garbled[1]["metadata"]["labels"] = 5
        assert filter_(4, garbled)[0] == ["node-1", "node-3", "node-5"]
        garbled[1]["metadata"]["resourceVersion"] = "999999"
        pod = {"metadata": {"name": "web-5", "namespace": "apps"}, "spec": {"containers": [{"name": "c"}]}}
        refused = httpx.post(url + "/scheduler/filter", json={"Pod": pod, "Nodes": {"items": garbled}})
        assert (refused.status_code, refused.json()) == (400, {"Error": "invalid filter request: Nodes.items[1] (node-1).metadata.labels must be an object of strings, got int"})


@contextlib.contextmanager
def kpe_on_pools(tmp_path: Path, count: int, policy: str = POOL_POLICY, **settings: Any) -> Iterator[str]:
    """kpe serving POOL_POLICY with cluster access, synced with a fake API server's ``count``
    nodes (node-0, node-1, ...; odd ones in the ml pool)."""
    import time

    import httpx

    from server.app import create_app
    from server.settings import Settings

    from .fakeapi import FakeApiServer
    from .serving import serve

    (tmp_path / "pools.yaml").write_text(policy)
    with FakeApiServer(bookmark_interval=0.2) as api:
        for i in range(count):
            api.state.add_node({"metadata": {"name": f"node-{i}", "labels": {"pool": "ml" if i % 2 else "web"}}})
        # The pods are filtered and never bound: not counted in flight (tests/test_in_flight.py).
        options = Settings(policies=str(tmp_path / "pools.yaml"), kubeconfig=api.write_kubeconfig(tmp_path / "kubeconfig"), cluster="on", **{"in_flight_s": 0, **settings})
        with serve(create_app(options)) as url:
            deadline = time.monotonic() + 10
            while httpx.get(url + "/readyz").status_code != 200:
                assert time.monotonic() < deadline, "kpe did not sync"
                time.sleep(0.05)
            yield url


# Two teams' policies, each matching its own namespace: a change to one must not cost the other's pods.
TEAMS = """
apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: team-a-racks}
spec:
  match: {namespaces: [team-a]}
  filters:
  - name: off-r0
    expression: "node.metadata.?labels[?'rack'].orValue('') != 'r0'"
    message: team a stays off rack r0
  scores:
  - name: higher-racks
    expression: "int(node.metadata.?labels[?'rack'].orValue('r0').substring(1)) * 10"
---
apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: team-b-racks}
spec:
  match: {namespaces: [team-b]}
  filters:
  - name: off-r1
    expression: "node.metadata.?labels[?'rack'].orValue('') != 'r1'"
    message: team b stays off rack r1
"""


def team_pod(namespace: str) -> dict[str, Any]:
    return {"metadata": {"name": "p-1", "namespace": namespace, "labels": {}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}


def racked_nodes(count: int) -> list[dict[str, Any]]:
    nodes = cluster.nodes(count)
    for i, node in enumerate(nodes):
        node["metadata"]["labels"]["rack"] = f"r{i % 3}"
    return nodes


@pytest.mark.any_hour
@pytest.mark.parametrize("change", ["team b's policy edited", "a policy added", "the same files loaded again"])
def test_a_reload_keeps_what_was_remembered_for_classes_whose_policies_it_left_alone(change: str) -> None:
    nodes = racked_nodes(9)
    info = node_info_map(nodes, [])
    memo = EquivalenceCache()
    before = load_text(TEAMS, file="teams.yaml")
    first = filter_nodes(before, team_pod("team-a"), nodes, node_info=info, memo=memo, now=at(12))
    score_nodes(before, team_pod("team-a"), nodes, node_info=info, memo=memo, now=at(12))
    assert first.memo_misses == 9
    edited = {
        "team b's policy edited": TEAMS.replace("!= 'r1'", "!= 'r2'"),
        "a policy added": TEAMS + "---" + EXTRA.split("---")[2].replace("zz-named", "team-c-named"),
        "the same files loaded again": TEAMS,
    }[change]
    after = load_text(edited, file="teams.yaml")
    filtered = filter_nodes(after, team_pod("team-a"), nodes, node_info=info, memo=memo, now=at(12))
    scored = score_nodes(after, team_pod("team-a"), nodes, node_info=info, memo=memo, now=at(12))
    assert (filtered.memo_hits, scored.memo_hits) == (9, 9)
    full = filter_nodes(after, team_pod("team-a"), nodes, node_info=info, now=at(12))
    assert (filtered.passed, filtered.failed) == (full.passed, full.failed)
    assert scored.scores == score_nodes(after, team_pod("team-a"), nodes, node_info=info, now=at(12)).scores


@pytest.mark.any_hour
def test_a_reload_that_edits_a_policy_evaluates_its_pods_again_under_the_edit() -> None:
    nodes = racked_nodes(9)
    info = node_info_map(nodes, [])
    memo = EquivalenceCache()

    def rejected(policies: PolicySet) -> tuple[int, list[str]]:
        result = filter_nodes(policies, team_pod("team-b"), nodes, node_info=info, memo=memo, now=at(12))
        return result.memo_hits, sorted({**result.failed, **result.unresolvable}.values())

    before = load_text(TEAMS, file="teams.yaml")
    assert rejected(before) == (0, ["team-b-racks/off-r1: team b stays off rack r1"] * 3)
    after = load_text(TEAMS.replace("r1", "r2"), file="teams.yaml")
    assert rejected(after) == (0, ["team-b-racks/off-r2: team b stays off rack r2"] * 3)
    # Back to the first content: what was remembered for it serves again.
    assert rejected(load_text(TEAMS, file="teams.yaml")) == (9, ["team-b-racks/off-r1: team b stays off rack r1"] * 3)


def test_a_policy_s_digest_follows_its_document_its_file_and_the_values_of_its_config_map() -> None:
    from engine.equivalence.reads import policy_digest

    one = load_text(TEAMS, file="teams.yaml").policies[0]
    assert policy_digest(one) == policy_digest(load_text(TEAMS, file="teams.yaml").policies[0])
    assert policy_digest(one) != policy_digest(load_text(TEAMS, file="other.yaml").policies[0])
    assert policy_digest(one) != policy_digest(load_text(TEAMS.replace("rack r0", "rack zero"), file="teams.yaml").policies[0])
    ref = ("kpe-system", "caps")
    params = TEAMS.split("---")[0].replace("spec:\n", "spec:\n  params: {cap: 1}\n  paramsFrom: {configMap: {namespace: kpe-system, name: caps}}\n", 1)
    three, four = (load_text(params, file="teams.yaml", cluster_params={ref: {"cap": v}}).policies[0] for v in ("3", "4"))
    assert three.params == {"cap": 3}
    assert policy_digest(three) != policy_digest(four)


TEAM_MATCH = """apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: team-match}
spec:
  match:
    expression: "pod.metadata.?labels[?'team'].orValue('') != ''"
  filters:
  - name: any
    expression: "true"
"""


def test_the_pod_asked_about_last_keeps_its_match_outcomes_by_identity_until_an_input_or_the_policy_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    import engine.equivalence.classes as classes

    policy = load_text(TEAM_MATCH).policies[0]
    memo = EquivalenceCache()
    fingerprints: list[Any] = []
    real = classes.pod_fingerprint
    monkeypatch.setattr(classes, "pod_fingerprint", lambda *args, **kwargs: fingerprints.append(args[0]) or real(*args, **kwargs))
    evaluated: list[str] = []

    def asked(pod: dict[str, Any], fixed: dict[str, Any] | None = None, *, of: Any = policy) -> Any:
        return memo.match(of, pod, lambda: evaluated.append(pod["metadata"]["name"]) or f"outcome of {pod['metadata']['name']}", fixed)

    web = {"metadata": {"name": "web-1", "labels": {"team": "web"}}}
    namespace = {"metadata": {"name": "apps"}}
    assert asked(web, {"namespaceObject": namespace}) == "outcome of web-1"
    # The filter's pod again, as the prioritize worked out ahead asks: no fingerprint, no evaluation.
    assert asked(web, {"namespaceObject": namespace}) == "outcome of web-1"
    assert (fingerprints, evaluated) == ([web], ["web-1"])
    # An equal pod of another object: by its fingerprint, as a replica is.
    replica = copy.deepcopy(web)
    assert asked(replica, {"namespaceObject": namespace}) == "outcome of web-1" and fingerprints == [web, replica]
    # The same object under another namespace object, or a changed policy of the same name: asked anew.
    assert asked(replica, {"namespaceObject": copy.deepcopy(namespace)}) == "outcome of web-1" and len(fingerprints) == 3
    changed = load_text(TEAM_MATCH.replace("!= ''", "== 'web'")).policies[0]
    assert asked(replica, {"namespaceObject": namespace}, of=changed) == "outcome of web-1" and evaluated == ["web-1", "web-1"]
