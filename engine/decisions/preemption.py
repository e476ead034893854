"""The preemption decision: which candidate nodes, with which victims, may be used.

kube-scheduler proposes, per node, the pods it would evict. Its dry run
re-runs only its own filters, never an extender's, so a node kpe's filters
reject would have its victims evicted in vain. A node therefore stays a
candidate only if

1. every matching policy's filters pass on it with the victims taken out of
   ``nodeInfo`` (exactly the filter decision, run on the node as it would be
   after the evictions), and pass again with the pods in flight there added
   (``in_flight``, as the filter counts them, ``engine.cluster.inflight``): the
   pods nominated to the node, whose room kube-scheduler's dry run holds for
   them too (``RunFilterPluginsWithNominatedPods`` in ``SelectVictimsOnNode``,
   pkg/scheduler/framework/plugins/defaultpreemption), and the pods kpe passed
   there and has not seen placed; and
2. every matching Enforce policy allows the node (``preemption.node`` over
   ``victims``) and every victim on it (``preemption.victim``).

3. the reservations allow the victims (``engine.policy.reservation.preemption_veto``):
   a placeholder only for an owner of its reservation, and for an owner of a
   ``Required`` reservation nothing but its placeholders.

A node with no victims is never a candidate. An evaluation error drops the
node with failurePolicy Fail and is ignored with Ignore. So does a node kpe has
no object of (``nodes`` lacks it: not in kpe's cache, or in whole-node mode not
sent lately), whose filters cannot be run: a matching Enforce policy with filters
and failurePolicy Fail drops it, naming itself; with only Ignore ones it is kept
and ``unchecked`` says why. Audit-mode policies are evaluated and reported, never
applied.

``veto`` reads a rejection reason back as the ``policy/rule: message`` that caused
it, for the Event the preempt verb posts and for ``kpe explain pod``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine import cel
from engine.cel.types.counts import Counts
from engine.cluster.counts import Adjusted, CountIndex
from engine.decisions.evaluation import matching_scopes, request_inputs, run_rule
from engine.decisions.deadline import Deadline
from engine.decisions.filtering import NO_NODE_INFO, RuleEvent, filter_nodes
from engine.cluster.inflight import counted_note, with_pods
from engine.cluster.nodeinfo import NodeInfoAccumulator, node_name, pod_key, pod_name
from engine.policy.counts import reads_counts
from engine.policy.model import PolicySet
from engine.policy.reservation import preemption_veto


@dataclass
class PreemptionResult:
    generation: str
    candidates: dict[str, list[Mapping[str, Any]]] = field(default_factory=dict)
    rejected: dict[str, str] = field(default_factory=dict)
    errors: list[RuleEvent] = field(default_factory=list)
    audit_rejections: list[RuleEvent] = field(default_factory=list)
    rejections: dict[str, int] = field(default_factory=dict)  # "policy/rule" -> candidate nodes it dropped
    # Candidates kept although their filters could not be checked (kpe does not know the node
    # and every matching Enforce policy with filters is failurePolicy Ignore), with why.
    unchecked: dict[str, str] = field(default_factory=dict)
    overdue: int = 0  # candidates decided unevaluated: the request's deadline had passed



def preempt(
    policy_set: PolicySet,
    pod: Mapping[str, Any],
    candidates: Mapping[str, Sequence[Mapping[str, Any]]],
    *,
    nodes: Mapping[str, Mapping[str, Any]] | None = None,
    node_info: Mapping[str, Any] | None = None,
    now: Any = None,
    deadline: Deadline | None = None,
    counts: Any = None,
    namespaces: Mapping[str, Any] | None = None, dra: Mapping[str, Any] | None = None,
    in_flight: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
) -> PreemptionResult:
    """Keep the candidate nodes (and their victims) that every policy allows. Past
    ``deadline``, the candidates left are dropped when a matching Enforce policy
    fails closed, and kept otherwise. ``in_flight``: the pods in flight on each candidate
    (nominated there or passed there), for the preemptor (``InFlight.on`` with its key and
    priority), counted after the evictions as the filter counts them."""
    result = PreemptionResult(policy_set.generation)
    extra = {} if counts is None else {"counts": counts}
    inputs = request_inputs(pod, now, namespaces=namespaces, dra=dra, **extra)
    matching = matching_scopes(policy_set, pod, inputs)
    scopes = [s for s in matching if s.policy.preemption]
    reservations = policy_set.reservations
    owned = frozenset(s.policy.reservation.name for s in matching if s.policy.reservation is not None)
    # A reservation's own filter asks for a free slot, which evicting its placeholder is how
    # an owner takes: the filters re-run after the evictions are everything else's.
    refiltered = _filters_after_evictions(
        policy_set.without_reservations, pod, candidates, [s for s in matching if s.policy.reservation is None], result,
        nodes=nodes or {}, node_info=node_info, now=inputs["now"], deadline=deadline, counts=counts, namespaces=namespaces, dra=dra,
        in_flight=in_flight,
    )
    closed = [s for s in matching if s.policy.enforce and s.policy.fail_closed and (s.policy.filters or s.policy.preemption)]
    for name, victims in candidates.items():
        if deadline is not None and deadline.passed():
            result.overdue += 1
            if closed:
                result.rejected[name] = f"{closed[0].policy.name}/(deadline): {deadline.message}"
            else:
                result.candidates[name] = list(victims)
            continue
        if not victims:
            result.rejected[name] = "no victims: preemption would not free anything on this node"
            continue
        veto = preemption_veto(reservations, owned, pod, victims)
        if veto is not None:
            result.rejected[name] = veto[1]
            label = veto[1].split(":", 1)[0]
            result.rejections[label] = result.rejections.get(label, 0) + 1
            continue
        if name in refiltered:
            result.rejected[name] = refiltered[name]
            continue
        node = (nodes or {}).get(name)
        info = node_info.get(name, NO_NODE_INFO) if node_info is not None else NO_NODE_INFO
        reason = ""
        for scope in scopes:
            rules = scope.policy.preemption
            assert rules is not None
            checks: list[tuple[str, Any, dict[str, Any]]] = []
            if rules.node is not None:
                checks.append(("node", rules.node, {"node": node, "nodeInfo": info, "victims": list(victims)}))
            if rules.victim is not None:
                checks += [(f"victim {pod_name(v)}", rules.victim, {"node": node, "nodeInfo": info, "victim": v}) for v in victims]
            for what, expr, inputs in checks:
                outcome = run_rule(scope, expr, inputs, {}, rule=what, kind="preemption", timed=False)
                error = outcome.error
                if error is None and not isinstance(outcome.value, bool):
                    error = f"preemption rule must give a bool, got {cel.type_name(outcome.value)}"
                label = f"{scope.policy.name}/preemption.{what.split(' ')[0]}"
                rule = what.split(" ")[0]  # "node" or "victim": one metric label per rule, not per pod
                if error is not None:
                    result.errors.append(RuleEvent(scope.policy.name, rule, name, f"{what}: {error}" if rule == "victim" else error))
                    denied = scope.policy.fail_closed
                    message = f"{label}: evaluation error: {error}"
                else:
                    denied = outcome.value is False
                    message = f"{label}: {what} may not be preempted" if what != "node" else f"{label}: node is not a preemption candidate"
                if not denied:
                    continue
                if not scope.policy.enforce:
                    result.audit_rejections.append(RuleEvent(scope.policy.name, rule, name, message))
                    continue
                reason = message
                break
            if reason:
                break
        if reason:
            result.rejected[name] = reason
            label = reason.split(":", 1)[0]
            result.rejections[label] = result.rejections.get(label, 0) + 1
        else:
            result.candidates[name] = list(victims)
    return result


AFTER_EVICTIONS = "still rejected with the victims evicted: "


def unknown_node(name: str) -> str:
    """Why a candidate's filters cannot be checked: kpe has no object of the node (its
    cache has none, or in whole-node mode no recent request carried it)."""
    return f"kpe does not know node {name}, so its filters cannot be checked after the evictions"


def veto(reason: str) -> str | None:
    """The ``policy/rule: message`` a rejection reason blames, or None when no policy's rule
    vetoed the node: no victims, a victim kpe does not know, a node it does not know, the
    request's deadline. What the verb tells the pod (an Event) and ``kpe explain pod`` shows."""
    reason = reason.removeprefix(AFTER_EVICTIONS)
    label, sep, _ = reason.partition(": ")
    policy, slash, rule = label.partition("/")
    if not sep or not slash or not policy or not rule or " " in label or rule == "(deadline)":
        return None
    return reason


def _filters_after_evictions(
    policy_set: PolicySet,
    pod: Mapping[str, Any],
    candidates: Mapping[str, Sequence[Mapping[str, Any]]],
    matching: Sequence[Any],
    result: PreemptionResult,
    *,
    nodes: Mapping[str, Mapping[str, Any]],
    node_info: Mapping[str, Any] | None,
    now: Any,
    deadline: Deadline | None = None,
    counts: Any = None,
    namespaces: Mapping[str, Any] | None = None, dra: Mapping[str, Any] | None = None,
    in_flight: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
) -> dict[str, str]:
    """The candidate nodes the filters still reject once the victims are gone,
    with the reason. Runs the filter decision itself (same order, messages,
    failurePolicy and Audit handling) on ``nodeInfo`` without the victims, and
    where pods are in flight on a node it passes, once more with them added."""
    enforced = [s for s in matching if s.policy.enforce and s.policy.filters]
    if not any(s.policy.filters for s in matching):
        return {}
    rejected: dict[str, str] = {}
    known: list[Mapping[str, Any]] = []
    after: dict[str, Any] = {}
    for name, victims in candidates.items():
        if not victims:
            continue
        node = nodes.get(name)
        if node is None:
            # No node object, no filter verdict: an unknown answer is an error, and
            # failurePolicy decides, as for any rule that cannot be evaluated.
            closed = [s.policy.name for s in enforced if s.policy.fail_closed]
            if closed:
                rejected[name] = f"{closed[0]}: {unknown_node(name)} (failurePolicy Fail drops the node)"
            elif enforced:
                names = ", ".join(s.policy.name for s in enforced)
                result.unchecked[name] = f"{names}: {unknown_node(name)} (failurePolicy Ignore keeps the node)"
            continue
        known.append(node)
        if node_info is not None:
            after[name] = without_victims(node_info.get(name), victims)
    if not known:
        return rejected
    if counts is None or not any(reads_counts(s.policy) for s in matching):
        verdicts = [filter_nodes(policy_set, pod, known, node_info=after if node_info is not None else None, now=now, deadline=deadline,
                                 counts=counts, namespaces=namespaces, dra=dra)]
    else:
        # Counts across nodes differ per candidate: each is judged with its own victims gone.
        verdicts = [
            filter_nodes(policy_set, pod, [node], node_info=after if node_info is not None else None, now=now, deadline=deadline,
                         counts=without_counted(counts, candidates[node_name(node)], node_name(node)), namespaces=namespaces, dra=dra)
            for node in known
        ]
    for verdict in verdicts:
        result.overdue += verdict.overdue
        result.errors.extend(verdict.errors)
        result.audit_rejections.extend(verdict.audit_rejections)
        for label, n in verdict.rejections.items():
            result.rejections[label] = result.rejections.get(label, 0) + n
        for name, reason in {**verdict.failed, **verdict.unresolvable}.items():
            rejected[name] = AFTER_EVICTIONS + reason
    held = {node_name(n): in_flight[node_name(n)] for n in known if in_flight and in_flight.get(node_name(n)) and node_name(n) not in rejected}
    if held and node_info is not None:
        # As the filter counts them (engine.equivalence.inflight): a node passes only if it passes both ways.
        requests: dict[Any, Any] = {}
        crowded = {name: with_pods(after[name], list(pods), requests=requests) for name, pods in held.items()}
        again = filter_nodes(policy_set, pod, [n for n in known if node_name(n) in held], node_info=crowded, now=now, deadline=deadline,
                             counts=counts, namespaces=namespaces)
        for label, n in again.rejections.items():
            result.rejections[label] = result.rejections.get(label, 0) + n
        for name, reason in {**again.failed, **again.unresolvable}.items():
            rejected[name] = f"{AFTER_EVICTIONS}{reason} ({counted_note(held[name], name)})"
    return rejected


def without_counted(counts: Any, victims: Sequence[Mapping[str, Any]], node: str) -> Any:
    """``counts`` as they would be once ``victims`` (on ``node``) are evicted."""
    index = counts.source if isinstance(counts, Counts) else None
    if not isinstance(index, CountIndex):
        return counts
    labels = index.labels_of(node)
    return Counts(Adjusted(index, removed=[(v, labels) for v in victims]))


def without_victims(info: Mapping[str, Any] | None, victims: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``nodeInfo`` as it would be once ``victims`` are evicted."""
    gone = {pod_key(v) for v in victims}
    acc = NodeInfoAccumulator()
    for p in (info or {}).get("pods") or []:
        key = pod_key(p)
        if key not in gone:
            acc.add(key, p)
    return acc.view()
