"""Reservations' room held in transit, applied to the verbs' answers.

The reservation controller knows where each slot is at home (``ServerState.reservations``);
the filter and preempt verbs use that to keep non-owners out of room a slot is moving
into (``engine.reservations.heldroom``). Both run where the decision runs, in the worker
that reads nodeInfo.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from engine.cluster.nodeinfo import NodesByName
from engine.decisions.filtering import FilterResult
from engine.decisions.preemption import PreemptionResult
from engine.policy.model import PolicySet
from engine.reservations.heldroom import keep_evictions_off, keep_off

from server.state import ServerState


def keep_off_reserved(
    state: ServerState, policy_set: PolicySet, pod: Mapping[str, Any], nodes: Sequence[Mapping[str, Any]] | NodesByName, result: FilterResult
) -> FilterResult:
    """The filter's result with non-owners kept out of reserved room in transit."""
    controller = state.reservations
    if controller is None or not controller.homes or not policy_set.reservations:
        return result
    names = {r.name for r in policy_set.reservations}
    if isinstance(nodes, NodesByName):
        # Only the passing nodes where a slot is at home are looked at: resolve just those.
        homes, states = controller.homes, nodes.states
        nodes = [states[name].node for name in result.passed if name in homes and name in states]
    return keep_off(result, pod, nodes, state.node_info(), controller.homes, reservations=names)


def keep_evictions_off_reserved(
    state: ServerState, policy_set: PolicySet, pod: Mapping[str, Any], nodes: Mapping[str, Mapping[str, Any]], result: PreemptionResult
) -> PreemptionResult:
    """The preempt verb's candidates without the nodes where the pod would fit only in
    reserved room in transit once the victims are gone."""
    controller = state.reservations
    if controller is None or not controller.homes or not policy_set.reservations:
        return result
    return keep_evictions_off(result, policy_set, pod, nodes, state.node_info(), controller.homes, namespaces=state.namespaces())
