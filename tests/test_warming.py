"""Equivalence classes filled ahead of the scheduler (engine/equivalence/warming.py, server/verbs/warming.py):
after a class's first filter the rest of the cluster is evaluated in steps, and after a reload the
classes seen last are filled under the new set."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from engine.cluster.nodeinfo import NodesByName, NodeState, node_info_map
from engine.equivalence.classes import EquivalenceCache
from engine.equivalence.memo import TrackedNodeInfo
from engine.equivalence.filtering import filter_nodes
from engine.equivalence.warming import Exemplars, Warming, as_pending, workload
from engine.policy.loader import load_text
from engine.policy.model import PolicySet

from .test_equivalence import COSTED, POOL_POLICY, kpe_on_pools, pool_nodes

POD = {"metadata": {"name": "web-1", "namespace": "apps"}, "spec": {"containers": [{"name": "c"}]}}
OTHER = """apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: elsewhere}
spec:
  match: {namespaces: [batch]}
  filters:
  - {name: not-r2, expression: "node.metadata.?labels[?'rack'].orValue('') != 'r2'", message: keeps off r2}
"""


class Ticks:
    """A clock that moves ``step`` seconds each time it is read (once before a step, once after each evaluation)."""

    def __init__(self, step: float = 1.0) -> None:
        self.step, self.now = step, 0.0

    def __call__(self) -> float:
        self.now += self.step
        return self.now


class Calls:
    """An ``Evaluate`` that records its calls; ``first`` says what it answers for each class (by pod name)."""

    def __init__(self, first: dict[str, bool] | None = None) -> None:
        self.calls: list[tuple[str, str, list[str]]] = []
        self.first = first or {}

    def __call__(self, policy_set: PolicySet, pod: Any, names: list[str], scores: bool, budget: float | None = None) -> bool:
        self.calls.append((policy_set.generation, pod["metadata"]["name"] + (" scores" if scores else ""), names))
        return self.first.get(pod["metadata"]["name"], True)


def pod(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "apps"}}


NAMES = [f"node-{i}" for i in range(5)]


def test_a_class_asked_again_fills_the_rest_of_the_cluster_a_chunk_at_a_time_each_step_for_its_time() -> None:
    policies = load_text(COSTED)
    # A second per evaluation against a step of 1.5 s: two evaluations a step, neither so quick that
    # the chunk grows (under step_s / 8) nor so slow that it shrinks (over step_s).
    warming = Warming(chunk=2, first_chunk=2, step_s=1.5, clock=Ticks())
    woken: list[bool] = []
    warming.on_job = lambda: woken.append(True)
    warming.asked_again(policies, pod("web-1"), NAMES)
    assert woken == [True] and warming
    evaluate = Calls()
    warming.step(policies, evaluate)
    assert [(name, names) for _, name, names in evaluate.calls] == [("web-1", ["node-0", "node-1"]), ("web-1", ["node-2", "node-3"])]
    for _ in range(2):
        warming.step(policies, evaluate)
    assert [(name, names) for _, name, names in evaluate.calls][2:] == [
        ("web-1", ["node-4"]), ("web-1 scores", ["node-0", "node-1"]), ("web-1 scores", ["node-2", "node-3"]), ("web-1 scores", ["node-4"]),
    ], "the filter on every node, then the scores"
    assert not warming, "every name evaluated: the job is done"
    assert warming.evaluated == 10


def test_classes_take_turns_a_chunk_each_and_every_class_s_filter_is_filled_before_any_class_s_scores() -> None:
    policies = load_text(COSTED)
    warming = Warming(chunk=2, first_chunk=2, step_s=100, clock=Ticks())
    for name in ("web-1", "api-1"):
        warming.asked_again(policies, pod(name), NAMES)
    evaluate = Calls()
    warming.step(policies, evaluate)
    assert [(name, names[0]) for _, name, names in evaluate.calls] == [
        ("web-1", "node-0"), ("api-1", "node-0"), ("web-1", "node-2"), ("api-1", "node-2"), ("web-1", "node-4"), ("api-1", "node-4"),
        ("web-1 scores", "node-0"), ("api-1 scores", "node-0"), ("web-1 scores", "node-2"), ("api-1 scores", "node-2"),
        ("web-1 scores", "node-4"), ("api-1 scores", "node-4"),
    ]


def test_once_the_scheduler_s_windows_went_round_the_nodes_after_its_last_window_are_filled_first() -> None:
    names = [f"node-{i}" for i in range(12)]
    scheduler = names[6:] + names[:6]  # kube-scheduler's own order of the nodes: not kpe's
    warming = Warming()
    assert warming.order(names) == names  # nothing seen: kpe's order
    warming.saw(scheduler[0:4])
    warming.saw(scheduler[4:8])
    # Not yet round the cluster: the next window is among the nodes not seen yet.
    assert warming.order(names)[:4] == ["node-2", "node-3", "node-4", "node-5"]
    warming.saw(scheduler[8:12])
    warming.saw(scheduler[0:3])  # round once: the scheduler's next window starts at scheduler[3]
    assert warming.order(names) == scheduler[3:] + scheduler[:3]
    # A node the scheduler never sends (its own filters reject it) comes last.
    assert warming.order([*names, "node-tainted"])[-1] == "node-tainted"


def test_a_class_is_filled_in_the_order_the_scheduler_will_ask_for_its_nodes() -> None:
    policies = load_text(COSTED)
    names = [f"node-{i}" for i in range(6)]
    warming = Warming(chunk=2, first_chunk=2, step_s=100, clock=Ticks(), ahead=3)
    for window in (["node-4", "node-5"], ["node-0", "node-1"], ["node-2", "node-3"], ["node-4", "node-5"]):
        warming.saw(window)
    warming.asked_again(policies, pod("web-1"), names)
    evaluate = Calls()
    warming.step(policies, evaluate)
    assert [names for _, name, names in evaluate.calls if name == "web-1"] == [["node-0", "node-1"], ["node-2", "node-3"], ["node-4", "node-5"]]


def test_a_class_asked_again_is_filled_as_far_as_the_scheduler_s_next_windows_go() -> None:
    policies = load_text(COSTED)
    names = [f"node-{i}" for i in range(12)]
    warming = Warming(chunk=2, first_chunk=2, step_s=100, clock=Ticks(), ahead=2)
    for window in (["node-0", "node-1", "node-2"], ["node-3", "node-4"]):  # windows of up to 3 names: 6 filled
        warming.saw(window)
    warming.asked_again(policies, pod("web-1"), names)
    evaluate = Calls()
    warming.step(policies, evaluate)
    assert [names for _, name, names in evaluate.calls if name == "web-1"] == [["node-5", "node-6"], ["node-7", "node-8"], ["node-9", "node-10"]]
    assert [names for _, name, names in evaluate.calls if name == "web-1 scores"] == [["node-5", "node-6"], ["node-7", "node-8"], ["node-9", "node-10"]]
    assert not warming


def test_a_job_of_a_policy_set_no_longer_serving_is_dropped_unevaluated() -> None:
    old, new = load_text(COSTED), load_text(COSTED + "\n", file="other.yaml")
    warming = Warming(chunk=2, first_chunk=2, step_s=10, clock=Ticks())
    warming.asked_again(old, pod("web-1"), NAMES)
    evaluate = Calls()
    warming.step(new, evaluate)
    assert evaluate.calls == [] and not warming


def test_after_a_reload_the_classes_seen_last_are_filled_under_the_new_set_and_one_already_filled_ends_at_its_first_chunk() -> None:
    old, new = load_text(COSTED), load_text(COSTED.replace("not an ml node", "not an ml node (edited)"))
    warming = Warming(chunk=2, first_chunk=2, step_s=100, clock=Ticks(), recent=2)
    for name in ("web-1", "api-1", "batch-1"):  # the oldest falls out of the two kept
        warming.asked_again(old, pod(name), NAMES)
    warming.reloaded(new, NAMES)
    # api-1's class kept its results through the reload (or a request is filling it): not the first to fill it.
    evaluate = Calls(first={"api-1": False})
    warming.step(new, evaluate)
    assert [(generation, name) for generation, name, _ in evaluate.calls] == (
        # The most recent first, then a chunk of each in turn: api-1's first chunk ends its job.
        [(new.generation, "batch-1"), (new.generation, "api-1")] + [(new.generation, "batch-1")] * 2 + [(new.generation, "batch-1 scores")] * 3
    )
    assert not warming


def test_at_start_up_one_pod_of_each_waiting_workload_is_filled_and_bound_gated_or_finished_pods_are_not() -> None:
    policies = load_text(COSTED)
    owned = [{"metadata": {"name": f"web-{i}", "namespace": "apps", "ownerReferences": [{"uid": "rs-web", "controller": True}]}, "spec": {}} for i in range(3)]
    loose = [{"metadata": {"name": f"job-{i}", "namespace": "batch", "labels": {"app": "job"}}, "spec": {}} for i in range(2)]
    others = [
        {"metadata": {"name": "bound", "namespace": "apps"}, "spec": {"nodeName": "node-1"}},
        {"metadata": {"name": "gated", "namespace": "apps"}, "spec": {"schedulingGates": [{"name": "kpe.dev/gpu-quota"}]}},
        {"metadata": {"name": "done", "namespace": "apps"}, "spec": {}, "status": {"phase": "Succeeded"}},
    ]
    warming = Warming(chunk=5, first_chunk=5, step_s=100, clock=Ticks())
    woken: list[bool] = []
    warming.on_job = lambda: woken.append(True)
    warming.at_start(policies, owned + loose + others, [], NAMES)
    evaluate = Calls()
    warming.step(policies, evaluate)
    assert [name for _, name, _ in evaluate.calls] == ["web-0", "job-0", "web-0 scores", "job-0 scores"] and woken == [True]


def bound(name: str, created: str, owner: str, **extra: Any) -> dict[str, Any]:
    """A pod of a ReplicaSet ``owner`` as the API server lists it after it was placed."""
    meta = {"name": name, "namespace": "apps", "creationTimestamp": created, "ownerReferences": [{"uid": owner, "controller": True}], **extra}
    return {"metadata": meta, "spec": {"nodeName": "node-1", "containers": [{"name": "c"}]}, "status": {"phase": "Running"}}


def test_the_first_list_keeps_the_newest_pod_of_each_of_the_workloads_that_created_pods_last() -> None:
    exemplars = Exemplars(limit=2)
    for pod_ in [
        bound("web-1", "2026-11-27T10:00:00Z", "rs-web"),
        bound("api-1", "2026-11-27T10:01:00Z", "rs-api"),
        bound("batch-1", "2026-11-27T09:00:00Z", "rs-batch"),  # older than both kept: never kept
        bound("web-2", "2026-11-27T10:02:00Z", "rs-web"),  # web's newer pod replaces its older one
        bound("old-1", "2026-11-27T08:00:00Z", "rs-old"),
        bound("api-2", "2026-11-27T10:03:00Z", "rs-api", deletionTimestamp="2026-11-27T10:04:00Z"),  # going: not offered
        {**bound("done-1", "2026-11-27T11:00:00Z", "rs-done"), "status": {"phase": "Succeeded"}},  # finished
        {"metadata": {"name": "no-time", "namespace": "apps"}, "spec": {}},
    ]:
        exemplars.offer(pod_)
    assert [p["metadata"]["name"] for p in exemplars.take()] == ["web-2", "api-1"]
    assert exemplars.take() == []  # taken once

    # A workload dropped for a newer one comes back with a pod newer than what is kept.
    exemplars.offer(bound("a-1", "2026-11-27T10:00:00Z", "rs-a"))
    exemplars.offer(bound("b-1", "2026-11-27T10:01:00Z", "rs-b"))
    exemplars.offer(bound("c-1", "2026-11-27T10:02:00Z", "rs-c"))  # drops a
    exemplars.offer(bound("a-2", "2026-11-27T10:03:00Z", "rs-a"))  # a again, dropping b
    assert [p["metadata"]["name"] for p in exemplars.take()] == ["a-2", "c-1"]


def test_at_start_up_the_waiting_pods_classes_come_first_then_the_newest_workloads_as_pending_pods() -> None:
    policies = load_text(COSTED)
    waiting = [{"metadata": {"name": "web-9", "namespace": "apps", "ownerReferences": [{"uid": "rs-web", "controller": True}]}, "spec": {}}]
    newest = [bound("api-1", "2026-11-27T10:03:00Z", "rs-api"), bound("web-2", "2026-11-27T10:02:00Z", "rs-web")]
    warming = Warming(chunk=5, first_chunk=5, step_s=100, clock=Ticks())
    seen: list[Any] = []

    def evaluate(policy_set: PolicySet, pod_: Any, names: list[str], scores: bool, budget: float | None = None) -> bool:
        seen.append((pod_["metadata"]["name"] + (" scores" if scores else ""), pod_["spec"].get("nodeName"), pod_.get("status")))
        return True

    warming.at_start(policies, waiting, newest, NAMES)
    warming.step(policies, evaluate)
    # web's waiting pod stands for its workload; api's newest pod is filled as its next pod will come: no node, pending.
    assert seen == [("web-9", None, None), ("api-1", None, {"phase": "Pending"}), ("web-9 scores", None, None), ("api-1 scores", None, {"phase": "Pending"})]


def test_a_bound_pod_stands_for_its_next_pod_without_the_topology_labels_binding_copied_from_its_node() -> None:
    node = {"metadata": {"name": "node-1", "labels": {"topology.kubernetes.io/zone": "a", "topology.kubernetes.io/region": "r", "topology.k8s.io/rack": "7"}}}
    placed = bound("web-1", "2026-11-27T10:00:00Z", "rs-web")
    placed["metadata"]["labels"] = {"app": "web", "topology.kubernetes.io/zone": "a", "topology.kubernetes.io/region": "r",
                                    "topology.k8s.io/rack": "9"}  # the rack differs from the node's: the pod's own label
    pending = as_pending(placed, node)
    assert pending["metadata"]["labels"] == {"app": "web", "topology.k8s.io/rack": "9"}
    assert "nodeName" not in pending["spec"] and pending["status"] == {"phase": "Pending"}
    assert placed["metadata"]["labels"]["topology.kubernetes.io/zone"] == "a" and placed["spec"]["nodeName"] == "node-1"  # the cache's pod is untouched
    loose = [{"metadata": {"namespace": "apps", "labels": {"app": "web", "topology.kubernetes.io/zone": zone}}} for zone in "ab"]
    assert workload(loose[0]) == workload(loose[1]) == workload({"metadata": {"namespace": "apps", "labels": {"app": "web"}}})


def test_a_chunk_doubles_while_quick_and_halves_when_one_evaluation_takes_longer_than_a_step() -> None:
    policies = load_text(COSTED)
    names = [f"node-{i}" for i in range(40)]
    quick = Warming(chunk=8, first_chunk=1, step_s=0.625, clock=Ticks(0.0625))  # each evaluation a tenth of a step (exact in binary)
    quick.asked_again(policies, pod("web-1"), names)
    evaluate = Calls()
    quick.step(policies, evaluate)
    # Ten evaluations fill the step: the filter on all 40 names, then the scores go on at the size reached.
    assert [(name, len(chunk)) for _, name, chunk in evaluate.calls] == (
        [("web-1", n) for n in (1, 2, 4, 8, 8, 8, 8, 1)] + [("web-1 scores", 8)] * 2
    )

    slow = Warming(chunk=8, first_chunk=4, step_s=1.0, clock=Ticks(3.0))  # each evaluation three steps
    slow.asked_again(policies, pod("web-1"), names)
    evaluate = Calls()
    for _ in range(4):
        slow.step(policies, evaluate)  # one evaluation a step: it alone overruns the step
    assert [len(chunk) for _, _, chunk in evaluate.calls] == [4, 2, 1, 1]


def cached(nodes: list[dict[str, Any]]) -> tuple[TrackedNodeInfo, dict[str, NodeState]]:
    info, states = TrackedNodeInfo(), {}
    for name, view in node_info_map(nodes, []).items():
        info[name] = view
        states[name] = NodeState(name, next(n for n in nodes if n["metadata"]["name"] == name), view)
        info.replaced(name)
    return info, states


def test_a_filled_class_answers_a_window_it_was_never_asked_about_from_memory_and_only_its_first_request_claims_it() -> None:
    policies = load_text(COSTED + "---\n" + OTHER)
    nodes = pool_nodes(40)
    info, states = cached(nodes)
    memo = EquivalenceCache()
    names = [n["metadata"]["name"] for n in nodes]

    def evaluate(policy_set: PolicySet, pod: Any, chunk: list[str], scores: bool, budget: float | None = None) -> bool:
        return filter_nodes(policy_set, pod, NodesByName(chunk, states), node_info=info, memo=memo).first_of_class

    first = filter_nodes(policies, POD, NodesByName(names[:10], states), node_info=info, memo=memo)
    assert first.first_of_class and first.memo_misses == 10
    warming = Warming(chunk=8, first_chunk=8, step_s=1000, clock=Ticks())
    warming.asked_again(policies, POD, names)
    warming.step(policies, evaluate)
    assert not warming
    later = filter_nodes(policies, {**POD, "metadata": {**POD["metadata"], "name": "web-2"}}, NodesByName(names[25:], states), node_info=info, memo=memo)
    assert (later.memo_hits, later.memo_misses, later.first_of_class) == (15, 0, False)
    assert later.passed == [n for n in names[25:] if int(n.split("-")[1]) % 2]

    # A reload that edits a policy the class does not match keeps the class: its job ends at its first chunk.
    edited = load_text(COSTED + "---\n" + OTHER.replace("keeps off r2", "keeps off rack r2"))
    warming.reloaded(edited, names)
    calls: list[list[str]] = []
    warming.step(edited, lambda p, q, chunk, scores, budget: calls.append(chunk) or evaluate(p, q, chunk, scores))
    assert calls == [names[:8]] and not warming


def warmed_and_missed(url: str) -> tuple[float, float]:
    import httpx

    lines = httpx.get(url + "/metrics").text.splitlines()
    warmed = sum(float(line.rpartition(" ")[2]) for line in lines if line.startswith("kpe_equivalence_warmed_nodes_total "))
    missed = sum(float(line.rpartition(" ")[2]) for line in lines if line.startswith('kpe_equivalence_cache_nodes_total{result="miss",verb="filter"}'))
    return warmed, missed


def filter_window(url: str, i: int, window: list[str]) -> None:
    import httpx

    pod = {"metadata": {"name": f"web-{i}", "namespace": "apps", "uid": f"uid-web-{i}"}, "spec": {"containers": [{"name": "c"}]}}
    answer = httpx.post(url + "/scheduler/filter", json={"Pod": pod, "NodeNames": window}).json()
    assert answer["NodeNames"] == [n for n in window if int(n.split("-")[1]) % 2]


def test_over_http_the_third_pod_of_a_class_finds_the_nodes_outside_the_first_two_pods_windows_filled(tmp_path: Path) -> None:
    names = [f"node-{i}" for i in range(8)]
    with kpe_on_pools(tmp_path, len(names), POOL_POLICY) as url:
        filter_window(url, 1, names[:2])  # a class asked once is not filled: it may never be asked again
        filter_window(url, 2, names[2:4])
        deadline = time.monotonic() + 10  # a bound on waiting for the background, not a measurement
        while warmed_and_missed(url)[0] < len(names):
            assert time.monotonic() < deadline, "the class was not filled"
            time.sleep(0.02)
        filter_window(url, 3, names[4:])
        assert warmed_and_missed(url)[1] == 4, "only the first two pods' windows were evaluated by a request"


def test_over_http_with_warming_off_the_second_pod_evaluates_its_own_window(tmp_path: Path) -> None:
    names = [f"node-{i}" for i in range(8)]
    with kpe_on_pools(tmp_path, len(names), POOL_POLICY, warm_classes=False) as url:
        filter_window(url, 1, names[:2])
        filter_window(url, 2, names[2:])
        assert warmed_and_missed(url) == (0, 8)


def test_on_a_large_cluster_only_a_class_whose_pods_come_together_is_filled_ahead() -> None:
    policies = load_text(COSTED)
    small, large = [f"node-{i}" for i in range(8)], [f"node-{i}" for i in range(40)]
    for names, together, filled in ((large, False, False), (large, True, True), (small, False, True)):
        warming = Warming(chunk=2, first_chunk=2, step_s=100, clock=Ticks(), ahead=2)
        warming.saw(names[0:3])
        warming.saw(names[3:6])  # the next two windows: 6 names, most of 8 and a few of 40
        warming.asked_again(policies, pod("web-1"), names, together=together)
        evaluate = Calls()
        warming.step(policies, evaluate)
        assert any(name == "web-1" for _, name, _ in evaluate.calls) == filled, (len(names), together)
