"""Classes per policy on pods that differ as a real cluster's do (``bench/heterogeneous.py``):
hardly two pods agree on everything the policies read, yet each policy's results are shared by
every pod that agrees on what that policy reads, and every answer is exactly a full evaluation's
through bindings (nodeInfo and counts), node changes and reloads."""

from __future__ import annotations

import copy
import importlib.util
import random
from collections.abc import Callable
from typing import Any

from engine.cel.types.counts import Counts
from engine.cluster.counts import CountIndex
from engine.decisions.filtering import filter_nodes as plain_filter
from engine.decisions.scoring import score_nodes as plain_score
from engine.equivalence.classes import EquivalenceCache
from engine.equivalence.filtering import filter_nodes
from engine.equivalence.scoring import score_nodes
from engine.policy.loader import load, load_text
from engine.policy.model import PolicySet
from server.http.wire import host_priority, host_priority_json
from tests.test_equivalence import ROOT, CachedNodes, audits, events

import orjson

spec = importlib.util.spec_from_file_location("bench_heterogeneous", ROOT / "bench" / "heterogeneous.py")
assert spec is not None and spec.loader is not None
heterogeneous = importlib.util.module_from_spec(spec)
spec.loader.exec_module(heterogeneous)





def shipped(edit: bool = False) -> PolicySet:
    policies = load([ROOT / "policies"])
    if not edit:
        return policies
    text = (ROOT / "policies" / "team-node-pools.yaml").read_text().replace("dedicated to team %s, not %s", "kept for team %s, and the pod is of %s")
    edited = load_text(text, file=str(ROOT / "policies" / "team-node-pools.yaml"))
    return PolicySet(tuple(p for p in policies.policies if p.name != "team-node-pools") + edited.policies, policies.generation + "-edited")


def nodes(count: int) -> list[dict[str, Any]]:
    out = []
    for i in range(count):
        node, status = heterogeneous.node_object(i)
        out.append({**node, **status})
    return out


def test_pods_that_differ_share_each_policy_s_results_and_every_answer_is_a_full_evaluation_s() -> None:
    rng = random.Random(4)
    cluster = nodes(60)
    names = [n["metadata"]["name"] for n in cluster]
    bound: list[dict[str, Any]] = []
    cached = CachedNodes(cluster, bound, history=16)
    sets = [shipped(), shipped(edit=True)]
    policies = sets[0]
    index = CountIndex.build(policies.counts, cluster, bound)
    memo = EquivalenceCache()
    hits = misses = distinct = 0
    seen: set[bytes] = set()
    for step in range(160):
        change = rng.choice(["bind", "bind", "node", "reload", "none"])
        if change == "bind" and bound is not None:
            # A pod placed: its node's nodeInfo is replaced and it counts in its zone and team.
            placed = heterogeneous.pod(1000 + step, 0)
            name = rng.choice(names)
            placed["metadata"]["uid"] = f"uid-{step}"
            cached.bind(placed, name, bound, index)
        elif change == "node":
            state = cached.states[rng.choice(names)]
            node = copy.deepcopy(state.node)
            labels = node["metadata"]["labels"]
            labels["node.kpe.dev/team"] = rng.choice(["vision", "search", "team-07"])
            if rng.random() < 0.3:
                labels["kpe.dev/maintenance"] = "draining"
            cached.put(node, state.info)
        elif change == "reload":
            policies = rng.choice(sets)
        pod = heterogeneous.pod(step, 1)
        pod["metadata"]["uid"] = f"pending-{step}"
        counts = Counts(index)
        window = names[step % 7:] if step % 2 else names  # another window now and then, as the scheduler sends
        full = plain_filter(policies, pod, cached.known(window), node_info=cached.info, counts=counts)
        result = filter_nodes(policies, pod, cached.by_name(window), node_info=cached.info, memo=memo, counts=counts)
        assert (result.passed, result.failed, result.unresolvable) == (full.passed, full.failed, full.unresolvable), step
        assert (events(result), audits(result), result.rejections) == (events(full), audits(full), full.rejections), step
        hits, misses = hits + result.memo_hits, misses + result.memo_misses
        scored = score_nodes(policies, pod, cached.by_name(result.passed), node_info=cached.info, memo=memo, counts=counts, encode=host_priority)
        plain = plain_score(policies, pod, cached.known(result.passed), node_info=cached.info, counts=counts)
        assert scored.scores == plain.scores and events(scored) == events(plain), step
        if scored.encoded is not None:
            assert orjson.loads(host_priority_json(scored.encoded)) == [{"Host": n, "Score": plain.scores[n]} for n in result.passed]
        key = orjson.dumps([pod["metadata"]["namespace"], pod["metadata"]["labels"], pod["metadata"].get("annotations"), pod["spec"]], option=orjson.OPT_SORT_KEYS)
        distinct += key not in seen
        seen.add(key)
    assert distinct > 100, "hardly two pods alike: as classes of whole pods, nearly every request would be a class of its own"
    assert hits > 4 * misses, "yet most of each policy's results are shared between pods"


def test_only_a_new_class_that_remembers_something_is_filled_ahead() -> None:
    # app-zone-cap's rule reads counts, so it runs on every request: a class of a new app's pods
    # remembers nothing, and a filter that is the first of that class alone asks for no filling ahead.
    cluster = nodes(10)
    names = [n["metadata"]["name"] for n in cluster]
    cached = CachedNodes(cluster, [])
    policies = shipped()
    counts = Counts(CountIndex.build(policies.counts, cluster, []))
    memo = EquivalenceCache()
    pod = heterogeneous.pod(0, 0)
    pod["metadata"]["labels"].update({"kpe.dev/spread": "zone", "app": "web-0"})

    def first(app: str, team: str) -> bool:
        asked = copy.deepcopy(pod)
        asked["metadata"]["labels"].update({"app": app, "team": team})
        return filter_nodes(policies, asked, cached.by_name(names), node_info=cached.info, memo=memo, counts=counts).first_of_class

    assert first("web-0", "vision") is True
    assert first("web-1", "vision") is False, "only app-zone-cap's class is new, and it remembers nothing"
    assert first("web-2", "search") is True, "team-node-pools' class of another team is new"


def recurring_of_teams(*, together: bool = False) -> Callable[..., bool]:
    """Whether the filter of a pod of ``team`` is a class's second (with ``together``: soon after
    its first), asked of one cache in turn."""
    cluster = nodes(10)
    names = [n["metadata"]["name"] for n in cluster]
    cached = CachedNodes(cluster, [])
    policies = shipped()
    memo = EquivalenceCache()

    def recurring(team: str, *, ahead: bool = False) -> bool:
        pod = heterogeneous.pod(0, 0)
        pod["metadata"]["labels"]["team"] = team
        result = filter_nodes(policies, pod, cached.by_name(names), node_info=cached.info, memo=memo, ahead=ahead)
        return result.together if together else result.recurring

    return recurring


def test_a_class_is_filled_ahead_once_a_second_filter_asks_for_it_not_after_its_first() -> None:
    recurring = recurring_of_teams()
    # team-node-pools reads the team: each team's pods are a class of it; the other policies' classes are shared.
    assert [recurring("vision"), recurring("search")] == [False, True], "the second pod is the second for the shared classes"
    assert [recurring("ads"), recurring("ads"), recurring("ads")] == [False, True, False], "a team's class: filled ahead once, at its second pod"


def test_a_class_s_second_filter_says_whether_it_came_soon_after_its_first() -> None:
    recurring = recurring_of_teams(together=True)
    assert [recurring("team-10"), recurring("team-11")] == [False, True], "the shared classes' second filter, right after the first"
    # team-node-pools' class of each team: asked again right after, or with others between.
    assert [recurring("ads"), recurring("vision"), recurring("ads")] == [False, False, True], "its pods come together"
    asked = [recurring("search")] + [recurring(f"team-{k:02d}") for k in range(12, 16)] + [recurring("search")]
    assert asked == [False] * 6, "its second pod came after four others' pods"
    # A filter worked out ahead of the scheduler is none of the scheduler's requests.
    asked = [recurring("payments")] + [recurring(f"team-{k:02d}", ahead=True) for k in range(16, 22)] + [recurring("payments")]
    assert asked == [False] * 7 + [True]
