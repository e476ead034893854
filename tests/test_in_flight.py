"""Pods in flight: a pod kpe's filter passed counts, for filters that read nodeInfo, on every
node it passed until kpe sees it bound, failed or deleted (engine.cluster.inflight), so a
burst of pods cannot go past a per-node limit in the window before their bindings show."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from engine.cluster.inflight import InFlight, with_pods
from engine.cluster.nodeinfo import pod_key

from server.app import create_app
from server.settings import Settings

from .fakeapi import FakeApiServer
from .serving import serve

ONE_PER_TEAM = """apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: one-per-team}
spec:
  match: {podSelector: {matchExpressions: [{key: team, operator: Exists}]}}
  filters:
  - name: spread
    expression: "!nodeInfo.pods.exists(p, p.metadata.?labels[?'team'].orValue('') == pod.metadata.labels['team'])"
    message: a pod of this team already runs here
"""

LABELS_ONLY = """apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: not-drained}
spec:
  filters:
  - name: drain
    expression: "node.metadata.?labels[?'drain'].orValue('') != 'true'"
    message: node is drained
"""


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def pod(name: str, *, team: str = "a", node: str = "", nominated: str = "", phase: str = "Pending", priority: int | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "apps", "uid": f"uid-{name}", "labels": {"team": team}},
        "spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "500m"}}}]},
        "status": {"phase": phase},
    }
    if node:
        out["spec"]["nodeName"] = node
    if nominated:
        out["status"]["nominatedNodeName"] = nominated
    if priority is not None:
        out["spec"]["priority"] = priority
    return out


# -- the bookkeeping ----------------------------------------------------------------------


def test_a_passed_pod_counts_on_every_node_it_passed_until_it_is_seen_bound() -> None:
    flight = InFlight(clock=Clock())
    flight.passed(pod("a1"), ["n1", "n2"])
    assert {n: [p["metadata"]["name"] for p in ps] for n, ps in flight.on(["n1", "n2", "n3"]).items()} == {"n1": ["a1"], "n2": ["a1"]}
    flight.seen(pod("a1"))  # still pending: still in flight
    assert len(flight) == 1
    flight.seen(pod("a1", node="n2"))
    assert len(flight) == 0 and flight.on(["n1", "n2"]) == {}


def test_a_pod_finished_or_deleted_stops_counting() -> None:
    flight = InFlight(clock=Clock())
    flight.passed(pod("a1"), ["n1"])
    flight.seen(pod("a1", phase="Failed"))
    assert len(flight) == 0
    flight.passed(pod("a2"), ["n1"])
    flight.forget(pod_key(pod("a2")))
    assert flight.on(["n1"]) == {}


def test_a_later_answer_for_the_same_pod_replaces_the_earlier_one() -> None:
    flight = InFlight(clock=Clock())
    flight.passed(pod("a1"), ["n1", "n2"])
    flight.passed(pod("a1"), ["n3"])  # another attempt
    assert list(flight.on(["n1", "n2", "n3"])) == ["n3"]
    flight.passed(pod("a1"), [])  # no node passed: it can be nowhere
    assert len(flight) == 0


def test_a_filter_of_a_pod_group_member_is_no_placement_it_counts_only_once_nominated_or_bound() -> None:
    """kube-scheduler filters a group's pods once per candidate placement, the earlier ones placed
    only in its own books: counted on every node they passed, the first member would keep a
    one-per-node filter from passing the second anywhere in the placement."""
    flight = InFlight(clock=Clock())
    member = pod("g1")
    member["spec"]["schedulingGroup"] = {"podGroupName": "train"}
    flight.passed(member, ["n1", "n2", "n3"])
    assert len(flight) == 0 and flight.on(["n1", "n2", "n3"]) == {}
    nominated = {**member, "status": {"phase": "Pending", "nominatedNodeName": "n2"}}
    flight.seen(nominated)  # kube-scheduler names the member's node before binding it: that is a placement
    assert list(flight.on(["n1", "n2", "n3"])) == ["n2"]
    flight.seen({**member, "spec": {**member["spec"], "nodeName": "n2"}})
    assert len(flight) == 0


def test_a_pod_stops_counting_when_its_time_is_up() -> None:
    clock = Clock()
    flight = InFlight(ttl=30, clock=clock)
    flight.passed(pod("a1"), ["n1"])
    clock.now += 29.9
    flight.expire()
    assert len(flight) == 1
    clock.now += 0.1
    flight.expire()
    assert len(flight) == 0


def test_a_nominated_pod_counts_on_its_nominated_node_alone_for_as_long_as_it_names_it() -> None:
    clock = Clock()
    flight = InFlight(ttl=30, clock=clock)
    flight.passed(pod("a1"), ["n1", "n2", "n3"])
    flight.seen(pod("a1", nominated="n2"))  # kube-scheduler 1.35+ before binding, or a preemptor
    assert list(flight.on(["n1", "n2", "n3"])) == ["n2"]
    flight.passed(pod("a1"), ["n1"])  # a filter of a nominated pod does not move it
    clock.now += 3600
    flight.expire()
    assert list(flight.on(["n1", "n2"])) == ["n2"]
    flight.seen(pod("a1"))  # no longer nominated
    assert len(flight) == 0


def test_a_nominated_pod_kpe_never_filtered_counts_too() -> None:
    flight = InFlight(clock=Clock())
    flight.seen(pod("p1", nominated="n1"))
    assert list(flight.on(["n1"])) == ["n1"]


def test_a_zero_time_turns_the_accounting_of_passed_pods_off_but_nominated_pods_still_count() -> None:
    flight = InFlight(ttl=0, clock=Clock())
    flight.passed(pod("a1"), ["n1"])
    assert len(flight) == 0 and not flight.enabled
    flight.seen(pod("a2", nominated="n1"))  # written by the scheduler, not guessed: kube-scheduler counts it too
    assert list(flight.on(["n1"])) == ["n1"]
    flight.seen(pod("a2", node="n1"))
    assert len(flight) == 0


def test_a_nominated_pod_counts_for_pods_of_its_priority_or_lower_as_kube_scheduler_counts_it() -> None:
    flight = InFlight(clock=Clock())
    flight.seen(pod("p1", nominated="n1", priority=100))
    flight.passed(pod("a1"), ["n1"])  # passed, not nominated: it counts for every pod, as an assumed pod does
    counted = {p: sorted(x["metadata"]["name"] for x in flight.on(["n1"], priority=p).get("n1", [])) for p in (10, 100, 1000)}
    assert counted == {10: ["a1", "p1"], 100: ["a1", "p1"], 1000: ["a1"]}
    assert [x["metadata"]["name"] for x, _ in flight.held(priority=1000)] == ["a1"]
    assert sorted(x["metadata"]["name"] for x, _ in flight.held(priority=100)) == ["a1", "p1"]


def test_the_pod_being_decided_is_not_counted_against_itself() -> None:
    flight = InFlight(clock=Clock())
    flight.passed(pod("a1"), ["n1"])
    assert flight.on(["n1"], besides=pod_key(pod("a1"))) == {}


def test_nodeinfo_with_pods_in_flight_counts_them_as_bound_pods_are_counted() -> None:
    view = {"pods": [pod("b1", node="n1")], "podCount": 1, "requested": {"cpu": "500m"}}
    grown = with_pods(view, [pod("a1"), pod("a2")])
    assert grown["podCount"] == 3 and grown["requested"] == {"cpu": "1500m"}
    assert [p["metadata"]["name"] for p in grown["pods"]] == ["b1", "a1", "a2"]
    assert view["podCount"] == 1  # the cache's view is not changed


# -- through the filter verb, with kpe's cache fed by an API server ----------------------------


def wait_for(check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    with FakeApiServer(bookmark_interval=0.2) as server:
        for name in ("n1", "n2"):
            server.state.add_node({"metadata": {"name": name}, "status": {"allocatable": {"cpu": "4", "pods": "110"}}})
        yield server


def kpe(api: FakeApiServer, tmp_path: Path, policy: str, **settings: Any) -> Iterator[tuple[str, Any]]:
    """kpe serving ``policy`` with its cache fed by ``api``: (its URL, its state)."""
    (tmp_path / "policy.yaml").write_text(policy)
    app = create_app(Settings(policies=str(tmp_path / "policy.yaml"), kubeconfig=str(api.write_kubeconfig(tmp_path / "kubeconfig")), cluster="on", **settings))
    with serve(app) as url:
        wait_for(lambda: httpx.get(url + "/readyz").status_code == 200)
        state = app.state.kpe
        # A clock that stands still: a pod in flight never outlives --in-flight-s here, however
        # slow the machine (expiry has its own test above, with a clock it moves).
        state.cache.in_flight.clock = Clock()
        yield url, state


def create(api: FakeApiServer, name: str) -> dict[str, Any]:
    created: dict[str, Any] = api.state.add_pod(pod(name))
    return created


def filter_(url: str, the_pod: dict[str, Any]) -> dict[str, Any]:
    answer: dict[str, Any] = httpx.post(url + "/scheduler/filter", json={"Pod": the_pod, "NodeNames": ["n1", "n2"]}).json()
    return answer


def test_a_pod_of_a_burst_is_kept_off_the_nodes_an_earlier_pod_may_have_been_placed_on(api: FakeApiServer, tmp_path: Path) -> None:
    for url, _ in kpe(api, tmp_path, ONE_PER_TEAM):
        first, second = create(api, "a1"), create(api, "a2")
        assert filter_(url, first)["NodeNames"] == ["n1", "n2"]
        # a1 is placed (by kube-scheduler, on one of n1 and n2) but not yet bound: a2 may go on neither.
        refused = filter_(url, second)
        assert refused["NodeNames"] == []
        assert refused["FailedNodes"]["n1"] == (
            "one-per-team/spread: a pod of this team already runs here (counting 1 pod in flight (apps/a1) that "
            "kube-scheduler may have placed on this node and kpe has not yet seen bound)"
        )
        # The binding shows: a1 counts on its node alone, as a bound pod.
        api.state.bind("apps", "a1", "n1")
        wait_for(lambda: httpx.get(url + "/apis/v1/nodes/n1").json()["nodeInfo"]["podCount"] == 1)
        answer = filter_(url, second)
        assert answer["NodeNames"] == ["n2"] and answer["FailedNodes"] == {"n1": "one-per-team/spread: a pod of this team already runs here"}


def test_a_pod_seen_bound_while_a_filter_runs_still_counts_where_that_filter_read_its_node_before_the_binding(
    api: FakeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from server.verbs import handlers

    for url, state in kpe(api, tmp_path, ONE_PER_TEAM):
        first, second = create(api, "a1"), create(api, "a2")
        assert filter_(url, first)["NodeNames"] == ["n1", "n2"]
        real = handlers.filter_nodes
        applied: list[bool] = []

        def filter_then_a1_seen_bound(*args: Any, **kwargs: Any) -> Any:
            # The filter has read n1 and n2 without a1; then the event loop applies a1's binding to
            # n1 (on the worker thread it goes on doing so), before the pods in flight are counted.
            result = real(*args, **kwargs)
            if not applied:
                applied.append(True)
                bound = {**first, "metadata": {**first["metadata"], "resourceVersion": "999999"}, "spec": {**first["spec"], "nodeName": "n1"}}
                state.cache.apply(state.cache._informers["pod"], {"type": "MODIFIED", "object": bound})
            return result

        monkeypatch.setattr(handlers, "filter_nodes", filter_then_a1_seen_bound)
        # a1 counts where the filter judged without it: in flight, as it was when the filter began
        # (the counting on the worker reads the pods in flight of then). Never on n1 uncounted.
        answer = filter_(url, second)
        assert applied and "n1" not in answer["NodeNames"] and answer["FailedNodes"]["n1"].startswith("one-per-team/spread")


def test_a_filter_with_pods_in_flight_to_count_evaluates_the_pod_s_policies_once_and_counts_them_on_the_worker(
    api: FakeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from server.verbs import handlers

    for url, state in kpe(api, tmp_path, ONE_PER_TEAM):
        first, second = create(api, "a1"), create(api, "a2")
        assert filter_(url, first)["NodeNames"] == ["n1", "n2"]
        assert filter_(url, second)["NodeNames"] == []  # a1 in flight on both, measured and remembered
        real, calls = handlers.filter_nodes, []

        def counting_calls(*args: Any, **kwargs: Any) -> Any:
            calls.append(kwargs.get("inline_s"))
            return real(*args, **kwargs)

        monkeypatch.setattr(handlers, "filter_nodes", counting_calls)
        before = state.metrics.offloaded.labels("filter")._value.get()
        refused = filter_(url, create(api, "a3"))
        # Once, on the event loop (every node remembered); only counting a1 went to the worker.
        assert refused["NodeNames"] == [] and refused["FailedNodes"]["n1"].startswith("one-per-team/spread")
        assert calls == [handlers.INLINE_BUDGET_S]
        assert state.metrics.offloaded.labels("filter")._value.get() == before + 1


def test_without_the_accounting_the_burst_goes_past_the_limit(api: FakeApiServer, tmp_path: Path) -> None:
    for url, _ in kpe(api, tmp_path, ONE_PER_TEAM, in_flight_s=0):
        first, second = create(api, "a1"), create(api, "a2")
        assert filter_(url, first)["NodeNames"] == ["n1", "n2"]
        assert filter_(url, second)["NodeNames"] == ["n1", "n2"]  # what the burst on the real scheduler did


def test_a_pod_nominated_to_a_node_keeps_pods_of_its_priority_or_lower_off_it_and_not_higher_ones(api: FakeApiServer, tmp_path: Path) -> None:
    for url, state in kpe(api, tmp_path, ONE_PER_TEAM):
        api.state.add_pod(pod("p1", nominated="n1", priority=100))  # a preemptor, or 1.35+ before its binding
        wait_for(lambda: len(state.cache.in_flight) == 1)

        def passed(name: str, priority: int) -> list[str]:
            answer = filter_(url, pod(name, priority=priority))
            state.cache.in_flight.forget(f"uid-{name}")  # only p1 is to count: the pods asking here leave no trace
            # The room is held by the nominated pod, named as such (not a pod kpe merely passed).
            assert not answer["FailedNodes"] or answer["FailedNodes"] == {"n1": (
                "one-per-team/spread: a pod of this team already runs here "
                "(counting 1 pod nominated to this node (apps/p1), whose room kube-scheduler holds for it)")}
            return list(answer["NodeNames"])

        assert passed("a1", 10) == ["n2"]
        assert passed("a2", 100) == ["n2"]
        assert passed("a3", 1000) == ["n1", "n2"]  # kube-scheduler lets it take the room p1 was nominated to


def test_a_nominated_pod_counts_with_the_accounting_of_passed_pods_off(api: FakeApiServer, tmp_path: Path) -> None:
    for url, state in kpe(api, tmp_path, ONE_PER_TEAM, in_flight_s=0):
        api.state.add_pod(pod("p1", nominated="n1"))
        wait_for(lambda: len(state.cache.in_flight) == 1)
        assert filter_(url, pod("a1"))["NodeNames"] == ["n2"]
        api.state.bind("apps", "p1", "n1")  # bound: it counts as a bound pod, and is in flight no more
        wait_for(lambda: len(state.cache.in_flight) == 0)
        assert filter_(url, pod("a1"))["FailedNodes"] == {"n1": "one-per-team/spread: a pod of this team already runs here"}


def test_a_policy_set_whose_filters_do_not_read_nodeinfo_records_nothing(api: FakeApiServer, tmp_path: Path) -> None:
    for url, state in kpe(api, tmp_path, LABELS_ONLY):
        assert filter_(url, create(api, "a1"))["NodeNames"] == ["n1", "n2"]
        assert state.cache is not None and len(state.cache.in_flight) == 0


# -- what a policy set needs counted --------------------------------------------------------

FREE_CPU = """apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: free-cpu}
spec:
  filters:
  - name: room
    expression: "kube.nodeFree(node, nodeInfo, 'cpu').isGreaterThan(quantity('1'))"
    message: no room
"""


def test_only_the_policies_whose_filters_read_nodeinfo_are_evaluated_again_and_only_those_reading_requests_sum_them() -> None:
    from engine.equivalence.classes import EquivalenceCache
    from engine.equivalence.inflight import Counting
    from engine.policy.loader import load_text

    reads = EquivalenceCache().reads
    counting = Counting.of(load_text(ONE_PER_TEAM + "---\n" + LABELS_ONLY + "---\n" + FREE_CPU), reads)
    assert counting.policies is not None
    assert sorted(p.name for p in counting.policies.policies) == ["free-cpu", "one-per-team"]
    assert counting.requested == frozenset({"free-cpu"})
    assert Counting.of(load_text(LABELS_ONLY), reads).policies is None


def test_past_its_bound_the_oldest_pod_in_flight_is_forgotten(monkeypatch: pytest.MonkeyPatch) -> None:
    import engine.cluster.inflight

    monkeypatch.setattr(engine.cluster.inflight, "MAX_PODS", 2)
    flight = InFlight(clock=Clock())
    for name in ("a1", "a2", "a3"):
        flight.passed(pod(name), ["n1"])
    assert [p["metadata"]["name"] for p in flight.on(["n1"])["n1"]] == ["a2", "a3"]


# -- what a rejection says it counted -----------------------------------------------------------


def test_a_rejection_names_the_pods_nominated_to_the_node_apart_from_the_pods_in_flight() -> None:
    from engine.cluster.inflight import counted_note

    assert counted_note([pod("p1", nominated="n1")], "n1") == "counting 1 pod nominated to this node (apps/p1), whose room kube-scheduler holds for it"
    assert counted_note([pod("a1"), pod("p1", nominated="n1"), pod("p2", nominated="n1")], "n1") == (
        "counting 2 pods nominated to this node (apps/p1, apps/p2), whose room kube-scheduler holds for them and "
        "1 pod in flight (apps/a1) that kube-scheduler may have placed on this node and kpe has not yet seen bound"
    )
    # Nominated elsewhere and passed here: in flight here, not holding this node's room.
    assert counted_note([pod("a1", nominated="n2")], "n1") == (
        "counting 1 pod in flight (apps/a1) that kube-scheduler may have placed on this node and kpe has not yet seen bound"
    )


# -- the preempt verb counts them as the filter does ----------------------------------------------


def test_preemption_keeps_a_node_only_if_the_filters_pass_after_the_evictions_with_the_nominated_pods_there() -> None:
    """kube-scheduler's dry run keeps the room of pods nominated to a node (of the preemptor's priority
    or higher) when it picks victims; kpe's preempt verb judges the node after the evictions with them too."""
    from engine.decisions.preemption import preempt
    from engine.cluster.nodeinfo import node_info_map
    from engine.policy.loader import load_text

    policies = load_text(ONE_PER_TEAM)
    nodes = {"n1": {"metadata": {"name": "n1"}}, "n2": {"metadata": {"name": "n2"}}}
    victim1, victim2 = pod("v1", team="b", node="n1", priority=0), pod("v2", team="b", node="n2", priority=0)
    info = node_info_map(list(nodes.values()), [victim1, victim2])
    preemptor = pod("urgent", priority=1000)
    candidates = {"n1": [victim1], "n2": [victim2]}
    nominated = {"n1": [pod("p1", nominated="n1", priority=1000)]}  # what InFlight.on gives for the preemptor

    assert sorted(preempt(policies, preemptor, candidates, nodes=nodes, node_info=info).candidates) == ["n1", "n2"]
    result = preempt(policies, preemptor, candidates, nodes=nodes, node_info=info, in_flight=nominated)
    assert sorted(result.candidates) == ["n2"]
    assert result.rejected == {"n1": (
        "still rejected with the victims evicted: one-per-team/spread: a pod of this team already runs here "
        "(counting 1 pod nominated to this node (apps/p1), whose room kube-scheduler holds for it)"
    )}
    assert result.rejections == {"one-per-team/spread": 1}


def test_the_preempt_verb_keeps_the_preemptor_off_a_node_whose_room_a_nominated_pod_of_its_team_holds(api: FakeApiServer, tmp_path: Path) -> None:
    for url, state in kpe(api, tmp_path, ONE_PER_TEAM):
        victims = {name: api.state.add_pod(pod(f"v-{name}", team="b", node=name, phase="Running", priority=0)) for name in ("n1", "n2")}
        api.state.add_pod(pod("p1", nominated="n1", priority=1000))  # a preemptor waiting on n1 for its victims
        wait_for(lambda: len(state.cache.in_flight) == 1 and httpx.get(url + "/apis/v1/nodes/n2").json()["nodeInfo"]["podCount"] == 1)
        request = {"Pod": pod("urgent", priority=1000),
                   "NodeNameToMetaVictims": {name: {"Pods": [{"UID": v["metadata"]["uid"]}], "NumPDBViolations": 0} for name, v in victims.items()}}
        answer = httpx.post(url + "/scheduler/preempt", json=request).json()
        assert list(answer["NodeNameToMetaVictims"]) == ["n2"], answer
        [entry] = httpx.get(url + "/apis/v1/decisions", params={"pod": "apps/urgent", "verb": "preempt"}).json()["decisions"]
        assert entry["rejected"] == {"n1": (
            "still rejected with the victims evicted: one-per-team/spread: a pod of this team already runs here "
            "(counting 1 pod nominated to this node (apps/p1), whose room kube-scheduler holds for it)"
        )}


def test_kpe_explain_pod_counts_a_nominated_pod_after_the_evictions_as_the_preempt_verb_does() -> None:
    from engine.policy.loader import load_text
    from engine.reports.diagnosis.diagnose import diagnose

    node = {"metadata": {"name": "n1"}, "status": {"allocatable": {"cpu": "1", "pods": "110"}}}
    victim = pod("v1", team="b", node="n1", phase="Running", priority=0)
    victim["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "1"
    urgent = pod("urgent", priority=1000)
    urgent["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "1"
    nominated = pod("p1", nominated="n1", priority=1000)
    nominated["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "0"
    policies = load_text(ONE_PER_TEAM)

    alone = diagnose(policies, urgent, [node], cluster_pods=[victim]).eviction["n1"]
    assert alone.possible, alone
    held = diagnose(policies, urgent, [node], cluster_pods=[victim, nominated]).eviction["n1"]
    assert not held.possible and held.reason == (
        "kpe refuses: still rejected with the victims evicted: one-per-team/spread: a pod of this team already runs here "
        "(counting 1 pod nominated to this node (apps/p1), whose room kube-scheduler holds for it)"
    )
    lower = {**nominated, "spec": {**nominated["spec"], "priority": 10}}  # kube-scheduler lets urgent take its room
    assert diagnose(policies, urgent, [node], cluster_pods=[victim, lower]).eviction["n1"].possible


def test_kpe_explain_counts_a_pod_seen_bound_while_it_copies_node_info_in_its_eviction_verdict(
    api: FakeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full(name: str, node: str) -> dict[str, Any]:
        filling = pod(name, node=node, phase="Running", priority=0)
        filling["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "4"  # kube-scheduler's fit fails: it would evict
        return filling

    for url, state in kpe(api, tmp_path, ONE_PER_TEAM):
        api.state.add_pod(full("b1", "n1"))
        wait_for(lambda: httpx.get(url + "/apis/v1/nodes/n1").json()["nodeInfo"]["podCount"] == 1)
        urgent = api.state.add_pod(pod("a1", priority=1000))
        assert filter_(url, urgent)["NodeNames"] == ["n2"]  # a1 is in flight on n2
        api.state.add_pod(full("b2", "n2"))
        api.state.add_pod(pod("a2", priority=100))
        wait_for(lambda: httpx.get(url + "/apis/v1/nodes/n2").json()["nodeInfo"]["podCount"] == 1 and len(state.cache.pods()) == 4)
        real = state.worker.run
        applied: list[bool] = []

        async def copy_then_a1_seen_bound(fn: Any, *args: Any, **kwargs: Any) -> Any:
            # The explanation copied nodeInfo without a1; then the event loop applies a1's binding to n2.
            result = await real(fn, *args, **kwargs)
            # Only the explanation's copy: the warming and the controllers use the worker too.
            if not applied and "LiveSource.pod" in getattr(fn, "__qualname__", ""):
                applied.append(True)
                bound = {**urgent, "metadata": {**urgent["metadata"], "resourceVersion": "999999"}, "spec": {**urgent["spec"], "nodeName": "n2"}}
                state.cache.apply(state.cache._informers["pod"], {"type": "MODIFIED", "object": bound})
            return result

        monkeypatch.setattr(state.worker, "run", copy_then_a1_seen_bound)
        data = httpx.get(url + "/apis/v1/explain", params={"pod": "apps/a2"}).json()
        eviction = {row["node"]: (row["eviction"] or {}).get("possible") for row in data["nodes"]}
        # Evicting b1 makes room on n1. On n2, a1 (in flight when the explanation began, bound
        # since, of a priority a2 cannot evict) stays: counted in flight there, never nowhere.
        assert applied and eviction == {"n1": True, "n2": False}, data["text"]
