"""What Audit-mode policies would have done to the cluster's pods, for PolicyReports.

An Audit policy is evaluated with every decision and never changes one; the decisions count
what it would have rejected (``kpe_audit_would_reject_total``). A report needs more than a
count: which pod, which rule, why, and it must follow the cluster as pods come and go. So
the leader evaluates the Audit policies over the pods it caches, each pass from scratch,
and a finding lasts exactly as long as the pod and the verdict do.

A finding is what enforcing the policy would change for the pod now:

- a pod bound to a node: a filter rule that rejects that node (``fail``: Enforce would have
  kept the pod off it). The node is judged as kube-scheduler judged it, without the pod
  itself in its ``nodeInfo`` and counts;
- a pod not yet bound: a filter rule that rejects every node kpe knows (Enforce would leave
  the pod pending), and an admission rule that does not hold (Enforce would hold the pod at
  its gate);
- an evaluation error where the policy's failurePolicy is Fail (``error``).

Pods that are finished, being deleted or in the set's excluded namespaces have none, so a
pod's findings go when the pod does. Enforce policies are not evaluated: they decide already.

Most pods of a pass are bound and nothing about them changed since the last one, so a bound
pod's findings are remembered (``FindingsMemo``) while the set, the pod's node, the node's
``nodeInfo`` (a view kpe's cache replaces, never changes) and its Namespace are the same
objects, and so is the cluster's ``dra`` (replaced whenever a DRA object changes), for at
most ``max_age_s`` when an Audit rule reads ``now``; never for a set whose Audit policies read
``counts``, which change with pods on other nodes.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engine.cluster.nodeinfo import is_active, node_name, pod_key
from engine.cluster.projection import EMPTY, Projection, from_paths
from engine.decisions.admission import admit
from engine.decisions.evaluation import matching_scopes, namespace_object, request_inputs
from engine.decisions.filtering import NO_NODE_INFO, RuleEvent, evaluate_rule, filter_nodes, judge
from engine.decisions.preemption import without_counted, without_victims
from engine.policy.counts import reads_counts
from engine.policy.model import PolicySet
from engine.policy.reads import reads_variable, subject_reads

FILTER, ADMISSION = "filter", "admission"
FAIL, ERROR = "fail", "error"


@dataclass(frozen=True, order=True)
class Finding:
    """One pod, one rule of an Audit policy, and what enforcing it would do. Ordered by
    namespace, pod, policy and rule: reports list them in that order."""

    namespace: str
    pod: str
    policy: str
    rule: str  # the filter rule's name, or "admission"
    category: str  # FILTER | ADMISSION
    result: str  # FAIL | ERROR
    message: str
    uid: str = ""
    node: str = ""  # the bound pod's node, for a filter finding

    @property
    def key(self) -> tuple[str, str, str, str]:
        """What a report keeps one result for: the pod, the policy and the rule."""
        return (self.namespace, self.pod, self.policy, self.rule)


class FindingsMemo:
    """Bound pods' findings from earlier passes, by pod uid (see the module docstring)."""

    def __init__(self, *, max_age_s: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_age_s = max_age_s
        self.clock = clock
        self._entries: dict[str, tuple[tuple[Any, ...], float, list[Finding]]] = {}
        self.hits = 0

    def get(self, uid: str, depends: tuple[Any, ...], *, timed: bool = True) -> list[Finding] | None:
        """The findings kept for ``uid`` if they were worked out from the same ``depends``;
        ``timed``: the rules read ``now``, so findings older than ``max_age_s`` are not used."""
        entry = self._entries.get(uid)
        if entry is None or len(entry[0]) != len(depends) or any(a is not b for a, b in zip(entry[0], depends)):
            return None
        if timed and self.clock() - entry[1] > self.max_age_s:
            return None
        self.hits += 1
        return entry[2]

    def put(self, uid: str, depends: tuple[Any, ...], found: list[Finding]) -> None:
        self._entries[uid] = (depends, self.clock(), found)

    def keep_only(self, uids: set[str]) -> None:
        for uid in set(self._entries) - uids:
            del self._entries[uid]


# What matching reads of the decided pod besides expressions: podSelector's labels, and the
# resources ``match.resources`` looks for (engine.decisions.evaluation.matching_scopes).
MATCH_READS = from_paths([("metadata", "labels"), ("spec", "containers", "resources"), ("spec", "initContainers", "resources")])
_projections: dict[str, Projection] = {}  # by set generation (its content): worked out once per set


def audit_projection(policy_set: PolicySet) -> Projection:
    """What kpe's cache must keep of a bound pod, beyond what the set reads of other pods, for
    the Audit policies to judge it as they would a pending pod: what their expressions read of
    ``pod`` and what matching reads (EMPTY without Audit policies)."""
    found = _projections.get(policy_set.generation)
    if found is None:
        audit = audit_only(policy_set)
        found = EMPTY if audit is None else MATCH_READS.union(subject_reads(audit))
        if len(_projections) >= 8:
            _projections.pop(next(iter(_projections)))
        _projections[policy_set.generation] = found
    return found


def audit_only(policy_set: PolicySet) -> PolicySet | None:
    """The set's Audit policies as a set of their own (None when it has none)."""
    audit = tuple(p for p in policy_set.policies if not p.enforce)
    return dataclasses.replace(policy_set, policies=audit) if audit else None


def audit_findings(
    policy_set: PolicySet,
    pods: Iterable[Mapping[str, Any]],
    nodes: Sequence[Mapping[str, Any]],
    *,
    node_info: Mapping[str, Any] | None = None,
    counts: Any = None,
    namespaces: Mapping[str, Any] | None = None,
    dra: Mapping[str, Any] | None = None,
    now: Any = None,
    cluster_pods: Sequence[Mapping[str, Any]] = (),
    memo: FindingsMemo | None = None,
) -> list[Finding]:
    """Every finding of the set's Audit policies over ``pods``, sorted. ``nodes`` are the
    cluster's, ``node_info`` and ``counts`` what kpe's cache keeps, ``cluster_pods`` what
    admission expressions read as ``pods``, ``dra`` the cluster's DRA objects; ``now`` is the CEL timestamp to evaluate at;
    ``memo`` keeps bound pods' findings for the next call."""
    audit = audit_only(policy_set)
    if audit is None:
        if memo is not None:
            memo.keep_only(set())
        return []
    if memo is not None and any(reads_counts(p) for p in audit.policies):
        memo.keep_only(set())
        memo = None
    # Findings of rules that do not read `now` stay true while what they read is the same
    # objects: at 150,000 bound pods a pass outlasts any age limit, and would never reuse one.
    timed = reads_variable(audit, "now")
    by_name = {node_name(n): n for n in nodes}
    findings: list[Finding] = []
    remembered: set[str] = set()
    for pod in pods:
        meta = pod.get("metadata") or {}
        if not is_active(pod) or meta.get("deletionTimestamp"):
            continue
        where = (str(meta.get("namespace") or "default"), str(meta.get("name") or ""), str(meta.get("uid") or ""))
        bound = (pod.get("spec") or {}).get("nodeName")
        if bound:
            node = by_name.get(bound)
            if node is None:
                continue
            if memo is None or not where[2]:
                findings += _on_its_node(audit, pod, node, node_info, counts, namespaces, dra, now, where)
                continue
            depends = (policy_set, node, node_info.get(bound) if node_info is not None else None, namespace_object(pod, namespaces), dra)
            found = memo.get(where[2], depends, timed=timed)
            if found is None:
                found = _on_its_node(audit, pod, node, node_info, counts, namespaces, dra, now, where)
                memo.put(where[2], depends, found)
            remembered.add(where[2])
            findings += found
        else:
            findings += _anywhere(audit, pod, nodes, node_info, counts, namespaces, dra, now, where)
            findings += _held(audit, pod, nodes, cluster_pods, namespaces, dra, now, where)
    if memo is not None:
        memo.keep_only(remembered)
    return sorted(findings)


def _finding(where: tuple[str, str, str], event: RuleEvent, *, category: str, result: str, message: str, node: str = "") -> Finding:
    namespace, pod, uid = where
    return Finding(namespace, pod, event.policy, event.rule, category, result, message, uid, node)


def _on_its_node(
    audit: PolicySet, pod: Mapping[str, Any], node: Mapping[str, Any], node_info: Mapping[str, Any] | None, counts: Any,
    namespaces: Mapping[str, Any] | None, dra: Mapping[str, Any] | None, now: Any, where: tuple[str, str, str],
) -> list[Finding]:
    name = node_name(node)
    before = {name: without_victims(node_info.get(name), [pod])} if node_info is not None else None
    result = filter_nodes(audit, pod, [node], node_info=before, counts=without_counted(counts, [pod], name) if counts is not None else None,
                          namespaces=namespaces, dra=dra, now=now)
    errors = {(e.policy, e.rule) for e in result.errors}
    return [
        _finding(where, e, category=FILTER, result=ERROR if (e.policy, e.rule) in errors else FAIL, node=name,
                 message=f"would have kept the pod off its node {name}: {e.message}")
        for e in result.audit_rejections
    ]


def _anywhere(
    audit: PolicySet, pod: Mapping[str, Any], nodes: Sequence[Mapping[str, Any]], node_info: Mapping[str, Any] | None, counts: Any,
    namespaces: Mapping[str, Any] | None, dra: Mapping[str, Any] | None, now: Any, where: tuple[str, str, str],
) -> list[Finding]:
    """The filter rules that reject every node, each stopping at the first node it keeps:
    a pending pod costs one evaluation per rule in the usual case, not one per node."""
    if not nodes:
        return []
    extra = {} if counts is None else {"counts": counts}
    scopes = matching_scopes(audit, pod, request_inputs(pod, now, namespaces=namespaces, dra=dra, **extra))
    info_get = node_info.get if node_info is not None else None
    findings: list[Finding] = []
    for scope in scopes:
        for rule in scope.policy.filters:
            arity, fn, bind_error = scope.caller(rule.expression)
            first: tuple[str, str] | None = None
            errors: list[RuleEvent] = []
            for node in nodes:
                name = node_name(node)
                info = info_get(name, NO_NODE_INFO) if info_get is not None else NO_NODE_INFO
                cache: dict[str, Any] = {}
                value, error = evaluate_rule(scope, rule, arity, fn, bind_error, node, info, cache)
                rejected, message, _ = (False, "", "") if value is True else judge(scope, rule, node, info, cache, value, error, name, errors)
                if not rejected:
                    break
                first = first or (name, message)
            else:
                assert first is not None
                event = RuleEvent(scope.policy.name, rule.name, first[0], first[1])
                count = len(nodes)
                message = f"would leave the pod pending: rejects all {count} node{'s' if count != 1 else ''}, {first[0]} first: {first[1]}"
                findings.append(_finding(where, event, category=FILTER, result=ERROR if errors else FAIL, message=message))
    return findings


def _held(
    audit: PolicySet, pod: Mapping[str, Any], nodes: Sequence[Mapping[str, Any]], cluster_pods: Sequence[Mapping[str, Any]],
    namespaces: Mapping[str, Any] | None, dra: Mapping[str, Any] | None, now: Any, where: tuple[str, str, str],
) -> list[Finding]:
    if not any(p.admission is not None for p in audit.policies):
        return []
    result = admit(audit, pod, nodes=nodes, pods=[p for p in cluster_pods if pod_key(p) != pod_key(pod)], namespaces=namespaces, dra=dra, now=now)
    return [
        _finding(where, RuleEvent(d.policy, "admission", "", d.message), category=ADMISSION, result=ERROR if d.error is not None else FAIL,
                 message=f"would hold the pod at its gate {d.gate}: {d.message}")
        for d in result.decisions
        if not d.satisfied
    ]
