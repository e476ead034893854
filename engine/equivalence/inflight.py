"""The filter decision with the pods in flight counted (``engine.cluster.inflight``).

The filter runs as ever, against ``nodeInfo`` as kpe's cache has it (bound pods only),
and keeps its equivalence cache: the pods in flight come and go with every pod of a
burst, and folding them into the cached ``nodeInfo`` would cost every class that reads
it (scores included) a re-evaluation of each node a pod passed. Then, only for a pod
whose matching policies read ``nodeInfo`` in their filters, the nodes it passed that
have pods in flight are evaluated once more with those pods added: a node passes only
if it passes both ways. Nothing else pays: a pod whose filters do not read ``nodeInfo``,
or a request with no pod in flight on the nodes it passed, costs one check.

A pod nominated to a node counts there only for pods of its priority or lower, as
kube-scheduler counts nominated pods (``engine.cluster.inflight``).

Pods in flight count in ``counts`` too (``count_across``). A rule that reads ``counts`` is
never remembered (``engine.equivalence.reads``), so the filter already ran it against the
counts the cache keeps. Only while pods are in flight, and only for a pod whose matching
policies read ``counts`` in their filters, the nodes it passed are evaluated once more by
those policies with every pod in flight counted in every domain of the nodes it was passed
on (wherever it lands, no domain holds more: ``engine.cluster.counts.Adjusted``); a node
passes only if it passes both ways: a burst of 30 replicas under "at most 2 per zone"
cannot put a third in a zone while the first two are still being bound.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields, is_dataclass
from typing import Any

from engine.cel.parser import ast

from engine.cel.types.counts import Counts
from engine.cluster.counts import Adjusted, CountIndex
from engine.cluster.inflight import InFlight, counted_note, with_pods
from engine.cluster.kubefilters import priority
from engine.cluster.nodeinfo import NodesByName, node_names, pod_key
from engine.decisions.deadline import Deadline
from engine.decisions.filtering import FilterResult, count_rules, filter_nodes
from engine.equivalence.reads import PolicyReads
from engine.policy.counts import reads_counts
from engine.policy.model import Expression, Policy, PolicySet

@dataclass(frozen=True)
class Counting:
    """What counting the pods in flight takes for one policy set, worked out once per set:
    the policies whose filters read ``nodeInfo`` (the only ones whose verdict the pods in
    flight can change, so the only ones evaluated again), and whether any of them reads more
    of ``nodeInfo`` than its pods and their count (summing the requests of the pods in flight
    onto every node costs more than the evaluation itself)."""

    policies: PolicySet | None
    requested: frozenset[str]  # the policies among them that read more of nodeInfo than its pods
    # The policies whose filters read ``counts``: evaluated again with the pods in flight counted
    # in every domain (``count_across``). Worked out here once, not on every filter.
    counters: tuple[Policy, ...] = ()

    @staticmethod
    def of(policy_set: PolicySet, reads: Callable[[Policy], PolicyReads]) -> Counting:
        counters = tuple(p for p in policy_set.policies if p.filters and reads_counts(p)) if policy_set.counts else ()
        counting = tuple(p for p in policy_set.policies if p.filters and reads(p).reads_node_info("filter"))
        if not counting:
            return Counting(None, frozenset(), counters)
        return Counting(policy_set.subset(counting), frozenset(p.name for p in counting if any(_reads_more_than_pods(e.root) for e in _expressions(p))), counters)

    def counting_policies(self, result: FilterResult) -> tuple[Policy, ...]:
        """The policies ``result`` matched whose filters read ``counts``."""
        return tuple(p for p in self.counters if p.name in result.matched) if self.counters else ()


def _expressions(policy: Policy) -> list[Expression]:
    return [e for r in policy.filters for e in (r.expression, r.message_expression) if e is not None]


def _reads_more_than_pods(root: Any) -> bool:
    """Whether the syntax tree reads ``nodeInfo`` other than as ``nodeInfo.pods`` or
    ``nodeInfo.podCount`` (no tree: assumed so)."""
    if root is None:
        return True
    stack: list[Any] = [(root, None)]
    while stack:
        node, parent = stack.pop()
        if isinstance(node, ast.Ident) and node.name == "nodeInfo":
            if not (isinstance(parent, (ast.Select, ast.Has)) and parent.field in ("pods", "podCount")):
                return True
            continue
        if is_dataclass(node):
            for f in fields(node):
                value = getattr(node, f.name)
                for child in value if isinstance(value, tuple) else (value,):
                    if isinstance(child, ast.MapEntry):
                        stack += [(child.key, node), (child.value, node)]
                    elif isinstance(child, ast.Node):
                        stack.append((child, node))
    return False


def pods_in_flight(
    result: FilterResult, counting: Counting, pod: Mapping[str, Any], in_flight: InFlight | None
) -> dict[str, list[Mapping[str, Any]]]:
    """The pods in flight on each node ``result`` passed, where they can change its verdict:
    none unless a policy matching ``pod`` reads ``nodeInfo`` in its filters."""
    if in_flight is None or not len(in_flight) or not result.passed or counting.policies is None:
        return {}
    if not any(counting.policies.get(name) is not None for name in result.matched):
        return {}
    return in_flight.on(result.passed, besides=pod_key(pod), priority=priority(pod))


def count_in_flight(
    result: FilterResult,
    counting: Counting,
    pod: Mapping[str, Any],
    nodes: Sequence[Mapping[str, Any]] | NodesByName,
    on: Mapping[str, list[Mapping[str, Any]]],
    *,
    node_info: Mapping[str, Any] | None,
    now: Any = None,
    deadline: Deadline | None = None,
    counts: Any = None,
    namespaces: Mapping[str, Any] | None = None, dra: Mapping[str, Any] | None = None,
) -> int:
    """Fail the nodes ``result`` passed where the filters reject ``pod`` once the pods in
    flight there (``on``, from ``pods_in_flight``) are counted; how many it failed. Changes
    ``result`` in place."""
    if not on or counting.policies is None:
        return 0
    objects = _nodes_named(nodes, on)
    empty: Mapping[str, Any] = {"pods": [], "podCount": 0, "requested": {}}
    info: dict[str, Any] = {}
    requests: dict[int, Any] = {}
    summed = not counting.requested.isdisjoint(result.matched)
    for name, pods in on.items():
        view = (node_info.get(name) if node_info is not None else None) or empty
        if summed:
            info[name] = with_pods(view, pods, requests=requests)
        else:
            info[name] = {"pods": [*view["pods"], *pods], "podCount": view["podCount"] + len(pods), "requested": view["requested"]}
    again = filter_nodes(counting.policies, pod, objects, node_info=info, now=now, deadline=deadline, counts=counts, namespaces=namespaces, dra=dra)
    return _fail_rejected(result, again, lambda name: counted_note(on[name], name))


def in_flight_counts(index: CountIndex, in_flight: InFlight | None, pod: Mapping[str, Any]) -> Counts | None:
    """``counts`` with the pods in flight added (None when there are none besides ``pod``)."""
    if in_flight is None or not len(in_flight) or not index.specs:
        return None
    held = in_flight.held(besides=pod_key(pod), priority=priority(pod))
    if not held:
        return None
    return Counts(Adjusted(index, added=[(p, index.domains_of(nodes)) for p, nodes in held]))


def count_across(
    result: FilterResult,
    policy_set: PolicySet,
    pod: Mapping[str, Any],
    nodes: Sequence[Mapping[str, Any]] | NodesByName,
    counts: Counts | None,
    *,
    policies: tuple[Policy, ...] | None = None,
    node_info: Mapping[str, Any] | None,
    now: Any = None,
    deadline: Deadline | None = None,
    namespaces: Mapping[str, Any] | None = None, dra: Mapping[str, Any] | None = None,
) -> int:
    """Fail the nodes ``result`` passed where the matching policies that read ``counts`` reject
    ``pod`` with the pods in flight counted (``counts``, from ``in_flight_counts``); how many
    it failed. Changes ``result`` in place. ``policies``: those of ``result``'s matched whose
    filters read ``counts`` (``Counting.counting_policies``; worked out here when not given)."""
    if policies is None:
        policies = tuple(p for p in policy_set.policies if p.name in result.matched and p.filters and reads_counts(p)) if policy_set.counts else ()
    if counts is None or not result.passed or not policies:
        return 0
    objects = _nodes_named(nodes, dict.fromkeys(result.passed))
    again = filter_nodes(policy_set.subset(policies), pod, objects, node_info=node_info, now=now, deadline=deadline, counts=counts,
                         namespaces=namespaces, dra=dra)
    return _fail_rejected(result, again, lambda _: "counting the pods kube-scheduler may have placed and kpe has not yet seen bound")


def _nodes_named(nodes: Sequence[Mapping[str, Any]] | NodesByName, names: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The node objects of ``names`` (in their order when ``nodes`` are by name)."""
    if isinstance(nodes, NodesByName):
        return [s.node for name in names if (s := nodes.states.get(name)) is not None]
    return [n for n, name in zip(nodes, node_names(nodes)) if name in names]


def _fail_rejected(result: FilterResult, again: FilterResult, because: Callable[[str], str]) -> int:
    """Fail in ``result`` the nodes the second evaluation ``again`` rejected, each reason
    followed by what was counted there; how many it failed. Changes ``result`` in place."""
    rejected = {**again.failed, **again.unresolvable}
    if not rejected:
        return 0
    result.passed = [name for name in result.passed if name not in rejected]
    for name, reason in rejected.items():
        result.failed[name] = f"{reason} ({because(name)})"
    result.rejections = count_rules(result.failed.values(), result.unresolvable.values())
    return len(rejected)
