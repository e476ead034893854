"""Whole-node mode without cluster access (``kpe serve --cluster off``, nodeCacheCapable false):
the preempt verb checks the filters after the evictions on the nodes the filter and
prioritize requests carried, and leaves a node it was never sent to failurePolicy."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from server.app import create_app
from server.settings import Settings
from server.state import ServerState
from server.verbs.wholenodes import FORGET_AFTER_S, WholeNodes, remember_nodes

from .serving import serve

POLICY = """apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {{name: accel-only}}
spec:
  failurePolicy: {failure}
  match: {{podSelector: {{matchLabels: {{needs: accel}}}}}}
  filters:
  - name: accelerated
    expression: "node.metadata.?labels[?'kpe.dev/accelerated'].orValue('') == 'true'"
    message: node is not accelerated
"""

POD = {"metadata": {"name": "urgent", "namespace": "demo", "uid": "u-urgent", "labels": {"needs": "accel"}}, "spec": {"priority": 1000, "containers": [{"name": "c", "image": "x"}]}}


def node(name: str, accelerated: bool, version: str = "1") -> dict[str, Any]:
    labels = {"kpe.dev/accelerated": "true"} if accelerated else {}
    return {"metadata": {"name": name, "resourceVersion": version, "labels": labels}, "status": {"allocatable": {"cpu": "4", "pods": "110"}}}


def victim(name: str, node_name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "demo", "uid": f"u-{name}"}, "spec": {"nodeName": node_name, "priority": 10, "containers": [{"name": "c", "image": "x"}]}}


class Kpe:
    def __init__(self, url: str, state: ServerState) -> None:
        self.url, self.state = url, state

    def filter(self, *nodes: dict[str, Any]) -> Any:
        return httpx.post(self.url + "/scheduler/filter", json={"Pod": POD, "Nodes": {"items": list(nodes)}}).json()

    def prioritize(self, *nodes: dict[str, Any]) -> Any:
        return httpx.post(self.url + "/scheduler/prioritize", json={"Pod": POD, "Nodes": {"items": list(nodes)}}).json()

    def preempt(self, *nodes: str) -> dict[str, list[str]]:
        """The candidates kpe keeps, each with its victims' UIDs, for one victim per node."""
        request = {"Pod": POD, "NodeNameToVictims": {n: {"Pods": [victim(f"low-{n}", n)], "NumPDBViolations": 0} for n in nodes}}
        answer = httpx.post(self.url + "/scheduler/preempt", json=request).json()
        return {n: [p["UID"] for p in entry["Pods"]] for n, entry in answer["NodeNameToMetaVictims"].items()}

    def decision(self) -> dict[str, Any]:
        found: dict[str, Any] = httpx.get(self.url + "/apis/v1/decisions", params={"verb": "preempt", "pod": "demo/urgent"}).json()["decisions"][0]
        return found


@pytest.fixture(params=["Fail", "Ignore"])
def kpe(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Kpe]:
    (tmp_path / "policy.yaml").write_text(POLICY.format(failure=request.param))
    app = create_app(Settings(policies=str(tmp_path / "policy.yaml"), cluster="off"))
    with serve(app) as url:
        yield Kpe(url, app.state.kpe)


def test_a_node_sent_in_a_filter_stays_a_candidate_when_its_filters_pass_after_the_evictions(kpe: Kpe) -> None:
    kpe.filter(node("n1", accelerated=True))
    assert kpe.preempt("n1") == {"n1": ["u-low-n1"]}
    assert kpe.decision()["rejected"] == {}


def test_a_node_sent_in_a_prioritize_stays_a_candidate_when_its_filters_pass_after_the_evictions(kpe: Kpe) -> None:
    kpe.prioritize(node("n1", accelerated=True))
    assert kpe.preempt("n1") == {"n1": ["u-low-n1"]}


def test_a_node_sent_in_a_filter_is_dropped_when_its_filters_still_reject_the_pod_after_the_evictions(kpe: Kpe) -> None:
    kpe.filter(node("n1", accelerated=True), node("n2", accelerated=False))
    assert kpe.preempt("n1", "n2") == {"n1": ["u-low-n1"]}
    assert kpe.decision()["rejected"] == {"n2": "still rejected with the victims evicted: accel-only/accelerated: node is not accelerated"}


def test_the_latest_copy_of_a_node_decides(kpe: Kpe) -> None:
    kpe.filter(node("n1", accelerated=True, version="1"))
    kpe.filter(node("n1", accelerated=False, version="2"))  # its label removed since
    assert kpe.preempt("n1") == {}


def test_a_node_kpe_was_never_sent_follows_the_policy_s_failure_policy_and_the_decision_log_says_so(kpe: Kpe) -> None:
    kpe.filter(node("n1", accelerated=True))
    kept = kpe.preempt("n1", "ghost")
    entry = kpe.decision()
    unknown = "kpe does not know node ghost, so its filters cannot be checked after the evictions"
    if kpe.state.store.current.policies[0].fail_closed:
        assert kept == {"n1": ["u-low-n1"]}
        assert entry["rejected"] == {"ghost": f"accel-only: {unknown} (failurePolicy Fail drops the node)"}
        assert "unchecked" not in entry
    else:
        assert kept == {"n1": ["u-low-n1"], "ghost": ["u-low-ghost"]}
        assert entry["rejected"] == {}
        assert entry["unchecked"] == {"ghost": f"accel-only: {unknown} (failurePolicy Ignore keeps the node)"}


def test_a_node_not_sent_for_a_while_is_forgotten_and_left_to_failure_policy(kpe: Kpe) -> None:
    now = [1000.0]
    kpe.state.whole_nodes = WholeNodes(clock=lambda: now[0])
    kpe.filter(node("n1", accelerated=True))
    now[0] += FORGET_AFTER_S + 1
    kept = kpe.preempt("n1")
    assert ("n1" in kept) == (not kpe.state.store.current.policies[0].fail_closed)
    assert "kpe does not know node n1" in str(kpe.decision())


# -- the memory itself ---------------------------------------------------------------------


def test_the_memory_keeps_the_nodes_it_was_sent_as_they_were_sent() -> None:
    memory = WholeNodes()
    sent = node("n1", accelerated=True)
    remember_nodes(memory, [sent])
    assert memory.get("n1") == sent
    remember_nodes(memory, None)  # node names: nothing to keep
    remember_nodes(None, [node("n2", accelerated=True)])  # with a node cache: no memory at all
    assert len(memory) == 1 and memory.get("n2") is None


def test_a_newer_copy_replaces_the_older_one() -> None:
    memory = WholeNodes()
    memory.remember([node("n1", accelerated=True, version="1")])
    newer = node("n1", accelerated=False, version="2")
    memory.remember([newer])
    assert memory.get("n1") == newer and len(memory) == 1


def test_the_memory_is_bounded_by_count_and_the_least_recently_sent_go_first() -> None:
    memory = WholeNodes(max_nodes=3)
    memory.remember([node(f"n{i}", accelerated=True) for i in range(3)])
    memory.remember([node("n0", accelerated=True)])  # sent again: now the most recent
    memory.remember([node("n3", accelerated=True), node("n4", accelerated=True)])
    assert len(memory) == 3
    assert sorted(memory.nodes(["n0", "n1", "n2", "n3", "n4"])) == ["n0", "n3", "n4"]


def test_a_node_not_sent_for_longer_than_the_limit_is_forgotten() -> None:
    now = [0.0]
    memory = WholeNodes(forget_after_s=600, clock=lambda: now[0])
    memory.remember([node("old", accelerated=True)])
    now[0] = 400.0
    memory.remember([node("recent", accelerated=True)])
    now[0] = 600.0
    assert memory.get("old") is not None  # exactly at the limit: still kept
    now[0] = 601.0
    assert memory.get("old") is None and memory.get("recent") is not None
    assert list(memory.nodes(["old", "recent"])) == ["recent"]
    assert len(memory) == 1  # forgotten, not just hidden
    now[0] = 1001.0
    assert memory.nodes(["recent"]) == {} and len(memory) == 0
