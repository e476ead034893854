"""The prioritize that follows a filter, worked out ahead (``server.verbs.lookahead``): answers
equal to scoring the request as sent, through binds, reloads and bodies that are not the
expected one."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from engine.policy.loader import load_text
from server.app import create_app
from server.verbs.lookahead import IDLE_AFTER, Lookahead
from server.settings import Settings
from server.state import ServerState

from .fakeapi import FakeApiServer
from .serving import serve

ROOT = Path(__file__).resolve().parent.parent
NODES = [f"node-{i}" for i in range(6)]


def go_json(value: Any) -> bytes:
    """JSON as kube-scheduler's Go client writes a request: compact, keys in struct order."""
    return json.dumps(value, separators=(",", ":")).encode()


def node(name: str, i: int) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "topology.kubernetes.io/zone": f"zone-{i % 2}"}},
        "status": {"allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"}, "conditions": [{"type": "Ready", "status": "True"}]},
    }


def pod(name: str, *, node_name: str = "", cpu: str = "500m") -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu, "memory": "256Mi"}}}]}
    if node_name:
        spec["nodeName"] = node_name
    return {"metadata": {"name": name, "namespace": "batch", "uid": f"uid-{name}", "labels": {"app": "job"}}, "spec": spec, "status": {"phase": "Pending"}}


def wait_for(check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


class Kpe:
    def __init__(self, url: str, api: FakeApiServer, state: ServerState, policies: Path) -> None:
        self.url, self.api, self.state, self.policies = url, api, state, policies

    def post(self, verb: str, body: bytes) -> httpx.Response:
        return httpx.post(f"{self.url}/scheduler/{verb}", content=body, headers={"content-type": "application/json"})

    def filter(self, target: dict[str, Any], names: list[str] = NODES) -> list[str]:
        answer = self.post("filter", go_json({"Pod": target, "Nodes": None, "NodeNames": names})).json()
        passed: list[str] = answer["NodeNames"]
        return passed

    def prioritize(self, body: bytes) -> tuple[list[dict[str, Any]], str]:
        response = self.post("prioritize", body)
        assert response.status_code == 200, response.text
        return response.json(), response.headers["x-kpe-policy-generation"]

    def as_sent(self, target: dict[str, Any], names: list[str]) -> tuple[list[dict[str, Any]], str]:
        """A prioritize the same in content but not in bytes (spaces after separators): decoded and scored as sent."""
        return self.prioritize(json.dumps({"Pod": target, "Nodes": None, "NodeNames": names}).encode())

    def outcomes(self) -> dict[str, float]:
        metric = self.state.metrics.ahead
        return {o: metric.labels(o)._value.get() for o in ("answered", "rescored", "unasked")}

    def pods_on(self, name: str) -> int:
        count: int = httpx.get(f"{self.url}/apis/v1/nodes/{name}").json()["nodeInfo"]["podCount"]
        return count


@pytest.fixture
def kpe(tmp_path: Path) -> Iterator[Kpe]:
    policies = tmp_path / "policies"
    shutil.copytree(ROOT / "policies", policies, ignore=shutil.ignore_patterns("tests"))
    with FakeApiServer(bookmark_interval=0.2) as api:
        for i, name in enumerate(NODES):
            api.state.add_node(node(name, i))
        api.state.add_pod(pod("running-0", node_name="node-0", cpu="2"))
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
        app = create_app(Settings(policies=str(policies), kubeconfig=str(kubeconfig), cluster="on", gate_resync_s=0))
        with serve(app) as url:
            wait_for(lambda: httpx.get(url + "/readyz").status_code == 200)
            yield Kpe(url, api, app.state.kpe, policies)


def expected_body(target: dict[str, Any], passed: list[str]) -> bytes:
    return go_json({"Pod": target, "Nodes": None, "NodeNames": passed})


def measured(kpe: Kpe, names: list[str] = NODES) -> None:
    """A replica of the tests' pods filtered and prioritized first: kpe works a prioritize out
    ahead only for a class whose evaluation it has measured (on the worker thread)."""
    replica = pod("job-0")
    kpe.prioritize(expected_body(replica, kpe.filter(replica, names)))
    kpe.state.metrics.ahead.clear()


def test_the_prioritize_after_a_filter_is_answered_ahead_with_the_scores_of_scoring_it_as_sent(kpe: Kpe) -> None:
    measured(kpe)
    target = pod("job-1")
    passed = kpe.filter(target)
    assert len(passed) >= 2
    ahead, generation = kpe.prioritize(expected_body(target, passed))
    assert kpe.outcomes() == {"answered": 1, "rescored": 0, "unasked": 0}
    as_sent, same_generation = kpe.as_sent(target, passed)
    assert ahead == as_sent and generation == same_generation
    # node-0 holds a pod requesting 2 CPUs: bin-packing prefers it over every empty node.
    scores = {e["Host"]: e["Score"] for e in ahead}
    assert [e["Host"] for e in ahead] == passed and all(scores["node-0"] > s for n, s in scores.items() if n != "node-0")


def test_a_bind_to_a_passed_node_between_filter_and_prioritize_is_scored_again(kpe: Kpe) -> None:
    target = pod("job-2")
    passed = kpe.filter(target)
    before, _ = kpe.as_sent(target, passed)
    passed = kpe.filter(target)  # the as-sent prioritize was not the expected one: expect again
    kpe.api.state.add_pod(pod("bound-1", node_name="node-3", cpu="3"))
    wait_for(lambda: kpe.pods_on("node-3") == 1)
    after, _ = kpe.prioritize(expected_body(target, passed))
    assert kpe.outcomes()["rescored"] == 1 and kpe.outcomes()["answered"] == 0
    assert after == kpe.as_sent(target, passed)[0]
    score = {e["Host"]: e["Score"] for e in after}
    was = {e["Host"]: e["Score"] for e in before}
    # Scores are normalised over the request's nodes: the others may move, but keep their order.
    others = [n for n in score if n != "node-3"]
    assert score["node-3"] > was["node-3"] and all((score[a] > score[b]) == (was[a] > was[b]) for a in others for b in others)


def test_a_bind_to_a_node_the_filter_did_not_pass_keeps_the_answer_worked_out_ahead(kpe: Kpe) -> None:
    measured(kpe, NODES[:4])
    target = pod("job-3")
    passed = kpe.filter(target, NODES[:4])
    kpe.api.state.add_pod(pod("bound-2", node_name="node-5", cpu="3"))
    wait_for(lambda: kpe.pods_on("node-5") == 1)
    ahead, _ = kpe.prioritize(expected_body(target, passed))
    assert kpe.outcomes() == {"answered": 1, "rescored": 0, "unasked": 0}
    assert ahead == kpe.as_sent(target, passed)[0]


def test_a_prioritize_of_other_nodes_than_the_filter_passed_is_scored_as_sent_and_the_expectation_counts_as_unasked(kpe: Kpe) -> None:
    target = pod("job-4")
    passed = kpe.filter(target)
    fewer = passed[1:]
    answer, _ = kpe.prioritize(expected_body(target, fewer))
    assert [e["Host"] for e in answer] == fewer
    assert kpe.outcomes() == {"answered": 0, "rescored": 0, "unasked": 0}
    kpe.filter(pod("job-5"))
    # Counted once the filter's answer is written, so possibly just after the client has it.
    wait_for(lambda: kpe.outcomes()["unasked"] == 1)


def test_a_reload_between_filter_and_prioritize_answers_from_the_new_policies(kpe: Kpe) -> None:
    target = pod("job-6")
    passed = kpe.filter(target)
    before, old = kpe.as_sent(target, passed)
    passed = kpe.filter(target)
    path = kpe.policies / "bin-packing.yaml"
    # Spread instead of pack: the emptiest node first.
    path.write_text(path.read_text().replace('expression: "variables.cpuFull * 100.0"', 'expression: "100.0 - variables.cpuFull * 100.0"'))
    assert kpe.state.store.reload().ok
    after, new = kpe.prioritize(expected_body(target, passed))
    assert new != old and new == kpe.state.store.current.generation
    assert after == kpe.as_sent(target, passed)[0]
    assert {e["Host"]: e["Score"] for e in after}["node-0"] < {e["Host"]: e["Score"] for e in before}["node-0"]


# -- which filter bodies are expected, and what their prioritize decodes to ---------------

POD = {"metadata": {"name": "p", "namespace": "batch"}, "spec": {"containers": []}}
OTHER = {"metadata": {"name": "q", "namespace": "batch"}, "spec": {"containers": []}}
PASSED = ["n-2", "n-3"]


def _set() -> Any:
    return load_text("")


@pytest.mark.parametrize(
    "raw",
    [
        b'{"Pod":%s,"Nodes":null,"NodeNames":["n-1","n-2","n-3"]}' % go_json(POD),
        # Duplicate members decode to the last one (Go and orjson): the expected body must too.
        b'{"Pod":%s,"Pod":%s,"Nodes":null,"NodeNames":["n-1","n-2","n-3"]}' % (go_json(OTHER), go_json(POD)),
        b'{"Pod":%s,"NodeNames":["x"],"Nodes":{"items":[]},"Nodes":null,"NodeNames":["n-1","n-2","n-3"]}' % go_json(POD),
        b'{"Pod":%s,"Nodes":null,"NodeNames":["n-1"],"Nodes":null,"NodeNames":["n-1","n-2","n-3"]}' % go_json(POD),
    ],
    ids=["as-kube-scheduler-sends-it", "pod-twice", "names-and-nodes-before-the-pod-ends", "tail-twice"],
)
def test_an_expected_prioritize_body_decodes_to_the_filters_pod_and_the_passed_names(raw: bytes) -> None:
    body = orjson.loads(raw)
    expected = Lookahead().expect(raw, body, body["Pod"], PASSED, _set())
    assert expected is not None
    # Python's own decoder, not the one kpe decodes with, says what the expected bytes mean.
    assert json.loads(expected.body) == {"Pod": POD, "Nodes": None, "NodeNames": PASSED}
    assert expected.pod == POD and expected.names == PASSED


@pytest.mark.parametrize(
    "raw",
    [
        b'{"Pod": %s, "Nodes": null, "NodeNames": ["n-1","n-2","n-3"]}' % go_json(POD),
        b'{"pod":%s,"Nodes":null,"NodeNames":["n-1","n-2","n-3"]}' % go_json(POD),
        b'{"Pod":%s,"Nodes":null,"NodeNames":["n-1","n-2","n-3"],"Extra":1}' % go_json(POD),
        b'{"Pod":%s,"Nodes":null,"NodeNames":["n\\u002d1","n-2","n-3"]}' % go_json(POD),
        b'{"Pod":%s,"Nodes":null,"NodeNames":["n-1","n-2","n-3"]}\n' % go_json(POD),
        b'{"Pod":%s,"Nodes":{"items":[]},"NodeNames":["n-1","n-2","n-3"]}' % go_json(POD),
    ],
    ids=["spaces", "lower-case-key", "another-key", "escaped-name", "trailing-newline", "whole-nodes"],
)
def test_a_filter_body_in_another_form_expects_nothing(raw: bytes) -> None:
    body = orjson.loads(raw)
    assert Lookahead().expect(raw, body, POD, PASSED, _set()) is None


def test_a_filter_that_passes_fewer_than_two_nodes_expects_nothing() -> None:
    # kube-scheduler does not prioritize a single feasible node.
    raw = expected_body(POD, ["n-1", "n-2"])
    assert Lookahead().expect(raw, orjson.loads(raw), POD, ["n-1"], _set()) is None


def test_an_expectation_is_taken_once_and_only_by_its_exact_body() -> None:
    outcomes: list[str] = []
    lookahead = Lookahead(count=outcomes.append)
    raw = expected_body(POD, ["n-1", "n-2", "n-3"])
    expected = lookahead.expect(raw, orjson.loads(raw), POD, PASSED, _set())
    assert expected is not None
    assert lookahead.take(expected.body + b" ") is None and lookahead.take(expected.body[:-1] + b" ") is None
    assert lookahead.take(expected.body) is expected
    assert lookahead.take(expected.body) is None
    assert lookahead.expect(raw, orjson.loads(raw), POD, PASSED, _set()) is not None
    assert lookahead.expect(raw, orjson.loads(raw), POD, PASSED, _set()) is not None
    assert outcomes == ["unasked"]


SCORING = """
apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: prefer-big}
spec:
  scores:
  - name: big
    expression: "node.metadata.name.size() * 10"
"""
CLOCK = """
---
apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: late-shift}
spec:
  match:
    expression: "now > timestamp('2026-01-01T00:00:00Z')"
  scores:
  - name: any
    expression: "50"
"""


def test_nothing_is_worked_out_ahead_for_policies_that_read_the_clock_or_do_not_score_or_without_the_equivalence_cache() -> None:
    from engine.equivalence.classes import EquivalenceCache

    reads = EquivalenceCache()
    assert Lookahead().worth_working(load_text(SCORING), reads)
    assert not Lookahead().worth_working(load_text(SCORING), EquivalenceCache(classes=0))
    assert not Lookahead().worth_working(load_text(SCORING + CLOCK), reads)
    assert not Lookahead().worth_working(load_text(SCORING.replace("scores:", "filters:").replace("node.metadata.name.size() * 10", "node.metadata.name.size() > 1")), reads)


def test_after_enough_expectations_no_prioritize_took_nothing_is_worked_out_until_one_does() -> None:
    from engine.equivalence.classes import EquivalenceCache

    lookahead, reads, policies = Lookahead(), EquivalenceCache(), load_text(SCORING)
    raw = expected_body(POD, ["n-1", "n-2", "n-3"])
    expected = None
    for _ in range(IDLE_AFTER + 1):
        assert lookahead.worth_working(policies, reads)
        expected = lookahead.expect(raw, orjson.loads(raw), POD, PASSED, policies)
    assert not lookahead.worth_working(policies, reads)
    assert expected is not None and lookahead.take(expected.body) is expected
    assert lookahead.worth_working(policies, reads)
