"""The filter decision with the pods in flight counted in ``counts`` (the pods kube-scheduler
may have placed and kpe has not seen bound: ``engine.cluster.inflight``).

A rule that reads ``counts`` is never remembered (``engine.equivalence.reads``), so the
filter already ran it against the counts the cache keeps. Only while pods are in flight,
and only for a pod whose matching policies read ``counts`` in their filters, the nodes it
passed are evaluated once more by those policies with every pod in flight counted in every
domain of the nodes it was passed on (wherever it lands, no domain holds more:
``engine.cluster.counts.Adjusted``). A node passes only if it passes both ways, as with
``nodeInfo`` (``engine.equivalence.inflight``): a burst of 30 replicas under "at most 2 per
zone" cannot put a third in a zone while the first two are still being bound.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from engine.cel.types.counts import Counts
from engine.cluster.counts import Adjusted, CountIndex
from engine.cluster.inflight import InFlight
from engine.cluster.nodeinfo import NodesByName, node_names, pod_key
from engine.decisions.deadline import Deadline
from engine.decisions.filtering import FilterResult, count_rules, filter_nodes
from engine.policy.counts import reads_counts
from engine.policy.model import Policy, PolicySet


def in_flight_counts(index: CountIndex, in_flight: InFlight | None, pod: Mapping[str, Any]) -> Counts | None:
    """``counts`` with the pods in flight added (None when there are none besides ``pod``)."""
    if in_flight is None or not len(in_flight) or not index.specs:
        return None
    held = in_flight.held(besides=pod_key(pod))
    if not held:
        return None
    return Counts(Adjusted(index, added=[(p, index.domains_of(nodes)) for p, nodes in held]))


def counting_policies(policy_set: PolicySet, result: FilterResult) -> tuple[Policy, ...]:
    """The policies ``result`` matched whose filters read ``counts``."""
    if not policy_set.counts:
        return ()
    return tuple(p for p in policy_set.policies if p.name in result.matched and p.filters and reads_counts(p))


def count_in_flight(
    result: FilterResult,
    policy_set: PolicySet,
    pod: Mapping[str, Any],
    nodes: Sequence[Mapping[str, Any]] | NodesByName,
    counts: Counts | None,
    *,
    node_info: Mapping[str, Any] | None,
    now: Any = None,
    deadline: Deadline | None = None,
) -> int:
    """Fail the nodes ``result`` passed where the matching policies that read ``counts`` reject
    ``pod`` with the pods in flight counted (``counts``, from ``in_flight_counts``); how many
    it failed. Changes ``result`` in place."""
    policies = counting_policies(policy_set, result)
    if counts is None or not result.passed or not policies:
        return 0
    passed = set(result.passed)
    if isinstance(nodes, NodesByName):
        objects = [s.node for name in result.passed if (s := nodes.states.get(name)) is not None]
    else:
        objects = [n for n, name in zip(nodes, node_names(nodes)) if name in passed]
    again = filter_nodes(policy_set.subset(policies), pod, objects, node_info=node_info, now=now, deadline=deadline, counts=counts)
    rejected = {**again.failed, **again.unresolvable}
    if not rejected:
        return 0
    result.passed = [name for name in result.passed if name not in rejected]
    for name, reason in rejected.items():
        result.failed[name] = f"{reason} (counting the pods kube-scheduler may have placed and kpe has not yet seen bound)"
    result.rejections = count_rules(result.failed.values(), result.unresolvable.values())
    return len(rejected)
