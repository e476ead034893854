"""The filter verb's part in counting pods in flight (``engine.cluster.inflight``): each
filter answer with node names tells kpe's cache where the pod may now be, and a pod whose
filters read ``nodeInfo`` is judged with the pods in flight counted
(``engine.equivalence.inflight``).

Recording costs a dictionary entry per node passed, so it is done only while a policy in
the serving set reads ``nodeInfo`` in its filters: without one, no decision would look.
It is done on the event loop before the answer is written, so the scheduler's next filter
(sent after it has this answer) finds it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.cluster.nodeinfo import NodesByName
from engine.decisions.deadline import Deadline
from engine.decisions.filtering import FilterResult
from engine.equivalence.classes import Offload
from engine.equivalence.inflight import Counting, count_in_flight, pods_in_flight
from engine.policy.model import PolicySet

from server.state import ServerState


def counting(state: ServerState, policy_set: PolicySet) -> Counting:
    """What counting the pods in flight takes under ``policy_set`` (worked out once per set)."""
    known = state.in_flight_counting
    if known is None or known[0] is not policy_set:
        known = state.in_flight_counting = (policy_set, Counting.of(policy_set, state.equivalence.reads))
    found: Counting = known[1]
    return found


def counted(
    state: ServerState,
    policy_set: PolicySet,
    pod: Mapping[str, Any],
    nodes: list[dict[str, Any]] | NodesByName,
    result: FilterResult,
    *,
    inline_s: float | None,
    deadline: Deadline,
) -> FilterResult:
    """``result`` with the nodes failed where the pods in flight there make the filters reject
    ``pod``. Evaluated on the worker: with ``inline_s`` (on the event loop) and anything to
    evaluate, ``Offload``."""
    cache = state.cache
    if cache is None or not len(cache.in_flight):
        return result
    needed = counting(state, policy_set)
    on = pods_in_flight(result, needed, pod, cache.in_flight)
    if not on:
        return result
    if inline_s is not None:
        raise Offload(len(on), None)
    count_in_flight(result, needed, pod, nodes, on, node_info=state.node_info(), deadline=deadline, namespaces=state.namespaces())
    return result


def record(state: ServerState, policy_set: PolicySet, pod: Mapping[str, Any], passed: list[str]) -> None:
    """The filter passed ``pod`` on ``passed``: it counts there until kpe sees it placed."""
    cache = state.cache
    if cache is not None and cache.in_flight.enabled and counting(state, policy_set).policies is not None:
        cache.in_flight.expire()
        cache.in_flight.passed(pod, passed)
