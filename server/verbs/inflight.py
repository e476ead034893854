"""The filter verb's part in counting pods in flight (``engine.cluster.inflight``): each
filter answer with node names tells kpe's cache where the pod may now be, and a pod whose
filters read ``nodeInfo`` is judged with the pods in flight counted
(``engine.equivalence.inflight``).

Recording costs a dictionary entry per node passed, so it is done only while a policy in
the serving set reads ``nodeInfo`` in its filters: without one, no decision would look.
Pods in flight count in ``counts`` too (``engine.equivalence.inflight.count_across``), wherever they
were passed. It is done on the event loop before the answer is written, so the scheduler's next filter
(sent after it has this answer) finds it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from engine.cluster.nodeinfo import NodesByName
from engine.decisions.deadline import Deadline
from engine.cluster.inflight import InFlight
from engine.decisions.filtering import FilterResult
from engine.equivalence.inflight import Counting, count_across, count_in_flight, in_flight_counts, pods_in_flight
from engine.policy.model import Policy, PolicySet

from server.state import ServerState


def counting(state: ServerState, policy_set: PolicySet) -> Counting:
    """What counting the pods in flight takes under ``policy_set`` (worked out once per set)."""
    known = state.in_flight_counting
    if known is None or known[0] is not policy_set:
        known = state.in_flight_counting = (policy_set, Counting.of(policy_set, state.equivalence.reads))
    found: Counting = known[1]
    return found


@dataclass(frozen=True, slots=True)
class ToCount:
    """What ``counted`` evaluates for one filter result: the pods in flight on the nodes it
    passed (``on``), and whether policies that read ``counts`` must count them (``across``)."""

    on: dict[str, list[Mapping[str, Any]]]
    across: tuple[Policy, ...]  # the matched policies whose filters read counts
    flying: InFlight


def to_count(state: ServerState, policy_set: PolicySet, pod: Mapping[str, Any], result: FilterResult, flying: InFlight | None) -> ToCount | None:
    """What the pods in flight leave to evaluate for ``result`` (None: nothing, the answer is
    ``result``): a few checks, no evaluation, so made where the filter ran.

    ``flying``: the pods in flight as they were before ``result`` read any ``nodeInfo``
    (``in_flight``), None when there were none. On the worker thread the event loop goes on
    applying watch events: a pod seen bound after the filter read its node, and no longer in
    flight when ``counted`` reads it, would count nowhere, and a burst would go past a per-node limit.
    Read before, each such pod counts in flight (and perhaps bound as well: a node refused that
    had room, retried, never one overfilled)."""
    if state.cache is None or flying is None:
        return None
    needed = counting(state, policy_set)
    on = pods_in_flight(result, needed, pod, flying)
    across = needed.counting_policies(result) if result.passed else ()
    return ToCount(on, across, flying) if on or across else None


def counted(
    state: ServerState,
    policy_set: PolicySet,
    pod: Mapping[str, Any],
    nodes: list[dict[str, Any]] | NodesByName,
    result: FilterResult,
    todo: ToCount,
    *,
    deadline: Deadline,
) -> FilterResult:
    """``result`` with the nodes failed where the pods in flight there make the filters reject
    ``pod`` (``todo``, from ``to_count``). An evaluation of its own: the filter's verb runs it
    on the worker thread, once the filter itself is done (``server.verbs.handlers``)."""
    cache = state.cache
    assert cache is not None
    across = in_flight_counts(cache.count_index, todo.flying, pod) if todo.across else None
    if todo.on:
        count_in_flight(result, counting(state, policy_set), pod, nodes, todo.on, node_info=state.node_info(), deadline=deadline, counts=cache.counts,
                        namespaces=state.namespaces(), dra=state.dra())
    count_across(result, policy_set, pod, nodes, across, policies=todo.across, node_info=state.node_info(), deadline=deadline, namespaces=state.namespaces(), dra=state.dra())
    return result


def in_flight(state: ServerState) -> InFlight | None:
    """The pods in flight now, frozen, for ``counted``; None when there are none. Read before the
    filter reads any node's ``nodeInfo``."""
    cache = state.cache
    return cache.in_flight.frozen() if cache is not None and len(cache.in_flight) else None


def record(state: ServerState, policy_set: PolicySet, pod: Mapping[str, Any], passed: list[str]) -> None:
    """The filter passed ``pod`` on ``passed``: it counts there until kpe sees it placed."""
    cache = state.cache
    if cache is not None and cache.in_flight.enabled and (counting(state, policy_set).policies is not None or policy_set.counts):
        cache.in_flight.expire()
        cache.in_flight.passed(pod, passed)
