"""The request deadline in the decisions: past it, nodes are answered unevaluated under
each policy's failurePolicy, and nothing computed after it is remembered. The clock is
injected: each look at it moves it one second on."""

from __future__ import annotations

import itertools
import types
from typing import Any

import pytest

import engine.decisions.deadline
import engine.decisions.filtering
from engine.decisions.deadline import Deadline
from engine.equivalence.classes import EquivalenceCache
from engine.equivalence.filtering import filter_nodes
from engine.policy.loader import load_text
from engine.decisions.preemption import preempt
from engine.equivalence.scoring import score_nodes

POLICY = """apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {{name: pool}}
spec:
  failurePolicy: {failure}
  filters:
  - {{name: pool, expression: "node.metadata.labels['pool'] == 'a'", message: not in pool a}}
  scores:
  - {{name: flat, expression: "100"}}
  preemption:
    victim: "true"
"""
NODES = [{"metadata": {"name": f"n{i}", "labels": {"pool": "a"}}} for i in range(6)]
POD = {"metadata": {"name": "p", "namespace": "d"}}
OVERDUE = "pool/(deadline): kpe's deadline of 4 s for this request passed before this node was evaluated (--request-deadline-s)"


@pytest.fixture
def ticking(monkeypatch: pytest.MonkeyPatch) -> None:
    """perf_counter reads 0, 1, 2, ... in the engine's deadline checks."""
    ticks = itertools.count()
    clock = lambda: float(next(ticks))  # noqa: E731
    monkeypatch.setattr(engine.decisions.filtering, "perf_counter", clock)
    monkeypatch.setattr(engine.decisions.deadline, "time", types.SimpleNamespace(perf_counter=clock))


def policies(failure: str) -> Any:
    return load_text(POLICY.format(failure=failure))


@pytest.mark.parametrize("failure,passed", [("Fail", ["n0", "n1", "n2"]), ("Ignore", [f"n{i}" for i in range(6)])])
def test_nodes_left_at_the_deadline_are_answered_under_the_failure_policy(ticking: None, failure: str, passed: list[str]) -> None:
    result = filter_nodes(policies(failure), POD, NODES, deadline=Deadline(2.5, 4))
    assert result.passed == passed
    assert result.failed == ({f"n{i}": OVERDUE for i in range(3, 6)} if failure == "Fail" else {})
    assert result.overdue == 3
    assert result.evaluations == 3  # only the nodes before the deadline were evaluated


def test_past_the_deadline_the_equivalence_cache_remembers_nothing_new(ticking: None) -> None:
    memo = EquivalenceCache()
    late = filter_nodes(policies("Fail"), POD, NODES, memo=memo, deadline=Deadline(2.5, 4))
    assert late.failed == {f"n{i}": OVERDUE for i in range(6)} and late.overdue == 6
    # With time to spare, the answer is the real one, from what was remembered and the rest.
    again = filter_nodes(policies("Fail"), POD, NODES, memo=memo, deadline=Deadline(10**9, 4))
    assert again.passed == [f"n{i}" for i in range(6)] and again.overdue == 0
    assert again.memo_hits == 3  # the three nodes computed before the deadline (clock 0, 1, 2)


def test_scores_past_the_deadline_are_zero(ticking: None) -> None:
    result = score_nodes(policies("Fail"), POD, NODES, deadline=Deadline(2.5, 4))
    assert result.scores == {"n0": 10, "n1": 10, "n2": 10, "n3": 0, "n4": 0, "n5": 0}
    assert result.overdue == 3


@pytest.mark.parametrize("failure,kept", [("Fail", []), ("Ignore", ["n0", "n1"])])
def test_preemption_candidates_past_the_deadline_are_dropped_unless_policies_ignore_errors(failure: str, kept: list[str]) -> None:
    victims = {n: [{"metadata": {"name": f"v-{n}", "uid": f"u-{n}"}}] for n in ("n0", "n1")}
    result = preempt(policies(failure), POD, victims, nodes={n["metadata"]["name"]: n for n in NODES}, deadline=Deadline(0.0, 4))
    assert sorted(result.candidates) == kept
    assert result.overdue >= 2
