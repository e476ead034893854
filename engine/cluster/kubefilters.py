"""What kube-scheduler's own filters say about a node, where kpe can tell, and
which pods its preemption dry run would evict there.

kpe sees only the nodes that passed the scheduler's filters, so an explanation
that lists every node would blame kpe for nodes the scheduler rejected first.
These checks are the in-tree filter plugins that need nothing but the pod, the
node and ``nodeInfo``, computed with the ``kube.*`` helpers (engine/cel/ext/kubescheduling.py
and engine/cel/ext/kuberesources.py):

- NodeUnschedulable: ``spec.unschedulable`` without a toleration of
  ``node.kubernetes.io/unschedulable:NoSchedule`` (unresolvable);
- TaintToleration: the first NoSchedule/NoExecute taint the pod does not
  tolerate (unresolvable);
- NodeAffinity: ``spec.nodeSelector`` and required node affinity (unresolvable);
  where every required term names nodes with a ``matchFields`` ``metadata.name In``,
  its PreFilter keeps only those nodes and the scheduler says of the others
  "node(s) didn't satisfy plugin(s) [NodeAffinity]" (no other filter runs
  there), or "pod affinity terms conflict" of every node when the terms name no
  node in common;
- NodeResourcesFit: "Too many pods" (a node without ``status.allocatable.pods``
  has room for none) and "Insufficient <resource>" per resource the pod requests
  that the scheduler counts (cpu, memory, ephemeral-storage and the scalar
  resources: extended, ``hugepages-*``, ``*kubernetes.io/*``,
  ``attachable-volumes-*``), against allocatable minus the requests in
  ``nodeInfo``, in the scheduler's integer units (kuberesources.scheduler_units)
  (resolvable by eviction, unless the pod asks for more than the node's
  allocatable at all, which the scheduler marks unresolvable too).

Not covered (kpe cannot tell, or not from these objects): inter-pod affinity,
topology spread, volumes, ports, images, dynamic resources, nominated pods, and
pod disruption budgets in preemption. Messages are the scheduler's own.

``dry_run_victims`` is DefaultPreemption's SelectVictimsOnNode for the checks
above: take every lower-priority pod off the node; if the pod then fits, put
them back one at a time, most important first, keeping out only those without
which it does not fit. Like the real dry run it never asks kpe, so a node that
only kpe rejects gets no victims there (its own filters pass with every pod in
place), and kube-scheduler skips it as a preemption candidate.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.cel.ext import kuberesources, kubescheduling
from engine.cel.errors import EvalError
from engine.cel.ext.quantity import Quantity
from engine.cel.ext.quantity import _add as _q_add
from engine.cel.ext.quantity import _negated as _q_neg
from engine.cluster.nodeinfo import is_active

UNSCHEDULABLE_TAINT = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
# NodeResourcesFit checks these first, in this order; other requested resources after, by name.
FIRST_RESOURCES = ("cpu", "memory", "ephemeral-storage")
_FN = "kpe explain"


@dataclass
class KubeVerdict:
    """kube-scheduler's own filters on one node: the reasons it would reject it ("" none)."""

    node: str
    reasons: list[str] = field(default_factory=list)
    unresolvable: bool = False  # UnschedulableAndUnresolvable: preemption does not try the node

    @property
    def passed(self) -> bool:
        return not self.reasons

    def to_dict(self) -> dict[str, Any]:
        return {"reasons": list(self.reasons), "unresolvable": self.unresolvable}


def priority(pod: Mapping[str, Any]) -> int:
    """``spec.priority`` (0 when unset, as for a pod without a priority class)."""
    spec = pod.get("spec") or {}
    value = spec.get("priority") if isinstance(spec, Mapping) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def check(
    pod: Mapping[str, Any], node: Mapping[str, Any], node_info: Mapping[str, Any] | None, *, requests: Mapping[str, Quantity] | None = None
) -> KubeVerdict:
    """The scheduler's filters above on ``node``; ``node_info`` None skips NodeResourcesFit
    (without the pods on the node, free capacity is unknown). ``requests``: the pod's
    effective requests, when the caller has them already (``kube.podRequests``)."""
    verdict = placement(pod, node)
    if node_info is not None and not _cannot_tell(verdict):
        reasons, unresolvable = insufficient(pod, node, node_info, requests=requests)
        verdict.reasons += reasons
        verdict.unresolvable = verdict.unresolvable or unresolvable
    return verdict


def _cannot_tell(verdict: KubeVerdict) -> bool:
    return any(r.startswith("kpe cannot tell: ") for r in verdict.reasons)


NOT_IN_PREFILTER = "node(s) didn't satisfy plugin(s) [NodeAffinity]"
AFFINITY_CONFLICT = "pod affinity terms conflict"


def prefilter_node_names(pod: Mapping[str, Any]) -> set[str] | None:
    """NodeAffinity's PreFilter: the node names the pod's required node affinity is limited
    to, or None for every node. Only when every term has a ``matchFields`` ``metadata.name``
    ``In`` requirement: a term's such requirements intersect, the terms unite."""
    spec = pod.get("spec")
    affinity = spec.get("affinity") if isinstance(spec, Mapping) else None
    node_affinity = affinity.get("nodeAffinity") if isinstance(affinity, Mapping) else None
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") if isinstance(node_affinity, Mapping) else None
    terms = required.get("nodeSelectorTerms") if isinstance(required, Mapping) else None
    if not isinstance(terms, list) or not terms:
        return None
    names: set[str] = set()
    for term in terms:
        fields = term.get("matchFields") if isinstance(term, Mapping) else None
        term_names: set[str] | None = None
        for r in fields if isinstance(fields, list) else ():
            if isinstance(r, Mapping) and r.get("key") == "metadata.name" and r.get("operator") == "In":
                values = {v for v in r.get("values") or () if isinstance(v, str)}
                term_names = values if term_names is None else term_names & values
        if term_names is None:
            return None  # a term without node names: every node may match it
        names |= term_names
    return names


def placement(pod: Mapping[str, Any], node: Mapping[str, Any]) -> KubeVerdict:
    """NodeUnschedulable, TaintToleration and NodeAffinity: what does not depend on the pods
    on the node (all unresolvable)."""
    name = str((node.get("metadata") or {}).get("name") or "")
    verdict = KubeVerdict(name)
    pod_d, node_d = dict(pod), dict(node)
    only = prefilter_node_names(pod)
    if only is not None and name not in only:
        # The scheduler's PreFilter dropped the node: no filter runs on it.
        verdict.reasons.append(AFFINITY_CONFLICT if not only else NOT_IN_PREFILTER)
        verdict.unresolvable = True
        return verdict
    try:
        spec = node.get("spec") or {}
        if spec.get("unschedulable") is True and not kubescheduling.pod_tolerates_taint_fn(pod_d, dict(UNSCHEDULABLE_TAINT)):
            verdict.reasons.append("node(s) were unschedulable")
            verdict.unresolvable = True
        untolerated = kubescheduling.untolerated_taints(pod_d, node_d, _FN)
        if untolerated:
            taint = untolerated[0]
            verdict.reasons.append(f"node(s) had untolerated taint {{{taint.get('key', '')}: {taint.get('value', '')}}}")
            verdict.unresolvable = True
        if not kubescheduling.pod_node_affinity_matches(pod_d, node_d, _FN):
            verdict.reasons.append("node(s) didn't match Pod's node affinity/selector")
            verdict.unresolvable = True
    except EvalError as exc:
        verdict.reasons.append(f"kpe cannot tell: {exc.message}")
    return verdict


def pod_requests(pod: Mapping[str, Any]) -> dict[str, Quantity]:
    """The pod's effective requests as NodeResourcesFit counts them (malformed ones left out)."""
    try:
        return kuberesources.pod_requests(dict(pod), strict=False)
    except EvalError:
        return {}


def insufficient(
    pod: Mapping[str, Any], node: Mapping[str, Any], node_info: Mapping[str, Any], *, requests: Mapping[str, Quantity] | None = None
) -> tuple[list[str], bool]:
    """NodeResourcesFit: its reasons, and whether one is unresolvable (the pod asks for
    more than the node's allocatable, so no eviction makes room)."""
    node_d, info = dict(node), dict(node_info)
    reasons: list[str] = []
    unresolvable = False
    try:
        # AllowedPodNumber is 0 on a node without allocatable pods: no pod fits there.
        if kuberesources.node_free(node_d, info, "pods", _FN).compare(_ONE) < 0:
            reasons.append("Too many pods")
        requests = requests if requests is not None else pod_requests(pod)
        for resource in _counted(requests):
            wanted = kuberesources.scheduler_units(resource, requests[resource])
            if wanted <= 0:
                continue
            if kuberesources.scheduler_units(resource, kuberesources.node_free(node_d, info, resource, _FN)) < wanted:
                reasons.append(f"Insufficient {resource}")
                have = kuberesources.node_free(node_d, {}, resource, _FN)  # allocatable alone
                unresolvable = unresolvable or kuberesources.scheduler_units(resource, have) < wanted
    except EvalError as exc:
        return [f"kpe cannot tell: {exc.message}"], False
    return reasons, unresolvable


_ONE = Quantity(1, 0, False, "DecimalSI")


def is_scalar_resource(name: str) -> bool:
    """schedutil.IsScalarResourceName: extended resources (a domain other than kubernetes.io,
    not ``requests.*``), ``hugepages-*``, prefixed native (``*kubernetes.io/*``) and
    ``attachable-volumes-*`` resources; the scheduler counts no other name."""
    if name.startswith(("hugepages-", "attachable-volumes-")) or "kubernetes.io/" in name:
        return True
    return "/" in name and not name.startswith("requests.") and kubescheduling._is_qualified_name("requests." + name)


def _counted(requests: Mapping[str, Quantity]) -> list[str]:
    """The requested resources NodeResourcesFit checks, in its order: cpu, memory,
    ephemeral-storage, then the scalar ones (by name; the scheduler's map order varies)."""
    return [r for r in FIRST_RESOURCES if r in requests] + sorted(r for r in requests if r not in FIRST_RESOURCES and is_scalar_resource(r))


def check_all(pod: Mapping[str, Any], nodes: Sequence[Mapping[str, Any]], node_info: Mapping[str, Any] | None) -> dict[str, KubeVerdict]:
    """``check`` for every node, by node name."""
    requests = pod_requests(pod)
    out: dict[str, KubeVerdict] = {}
    for node in nodes:
        verdict = check(pod, node, node_info.get(_name(node)) if node_info is not None else None, requests=requests)
        out[verdict.node] = verdict
    return out


def _name(node: Mapping[str, Any]) -> str:
    return str((node.get("metadata") or {}).get("name") or "")


def _start(pod: Mapping[str, Any]) -> str:
    status = pod.get("status") or {}
    return str(status.get("startTime") or (pod.get("metadata") or {}).get("creationTimestamp") or "")


class _Room:
    """What a node has left for the pod as pods are taken off it and put back: NodeResourcesFit
    for the dry run, without rebuilding ``nodeInfo`` at every step."""

    def __init__(self, node: Mapping[str, Any], node_info: Mapping[str, Any], requests: Mapping[str, Quantity]) -> None:
        self.node, self.requests = dict(node), requests
        self.free = {name: kuberesources.node_free(self.node, dict(node_info), name, _FN) for name in _counted(requests) if requests[name].sign() > 0}
        self.pods: Quantity | None = kuberesources.node_free(self.node, dict(node_info), "pods", _FN)

    def take(self, need: Mapping[str, Quantity], sign: int) -> None:
        """Put a pod needing ``need`` back on the node (+1) or take it off (-1)."""
        for name, q in need.items():
            if name in self.free:
                q = kuberesources.scheduler_quantity(name, q)
                self.free[name] = _q_add(self.free[name], q if sign < 0 else _q_neg(q))
        if self.pods is not None:
            self.pods = _q_add(self.pods, _ONE if sign < 0 else _q_neg(_ONE))

    def short(self) -> list[str]:
        """NodeResourcesFit's reasons now ([] when the pod fits)."""
        reasons = ["Too many pods"] if self.pods is not None and self.pods.compare(_ONE) < 0 else []
        order = [r for r in FIRST_RESOURCES if r in self.free] + sorted(r for r in self.free if r not in FIRST_RESOURCES)
        return reasons + [f"Insufficient {r}" for r in order if self.free[r].compare(kuberesources.scheduler_quantity(r, self.requests[r])) < 0]


def lower_priority_pods(pod: Mapping[str, Any], node_info: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    """The pods on the node that preemption may consider: active, not being deleted, of
    lower priority than ``pod``; most important first (higher priority, then started earlier)."""
    mine = priority(pod)
    pods = [
        p for p in (node_info or {}).get("pods") or []
        if is_active(p) and not (p.get("metadata") or {}).get("deletionTimestamp") and priority(p) < mine
    ]
    return sorted(pods, key=lambda p: (-priority(p), _start(p)))


def dry_run_victims(pod: Mapping[str, Any], node: Mapping[str, Any], node_info: Mapping[str, Any] | None) -> tuple[list[Mapping[str, Any]], str]:
    """The pods kube-scheduler's dry run would evict on ``node`` for ``pod``, and "" or why
    there are none: its own filters fail even with every lower-priority pod gone (the
    reason), or pass with every pod in place (nothing to evict)."""
    candidates = lower_priority_pods(pod, node_info)
    if not candidates:
        return [], "no pod of lower priority runs there"
    requests = pod_requests(pod)
    fixed = placement(pod, node)
    if fixed.reasons:
        return [], f"kube-scheduler's filters reject it whoever runs there: {'; '.join(fixed.reasons)}"
    if not insufficient(pod, node, node_info or {}, requests=requests)[0]:
        return [], "kube-scheduler's dry run evicts no one there: its own filters pass with every pod in place"
    # Only NodeResourcesFit changes as pods leave and come back: one running sum, adjusted.
    room = _Room(node, node_info or {}, requests)
    needs = [pod_requests(c) for c in candidates]
    for need in needs:
        room.take(need, -1)
    still = room.short()
    if still:
        return [], f"kube-scheduler's filters still reject it with all {len(candidates)} lower-priority pods evicted: {'; '.join(still)}"
    victims: list[Mapping[str, Any]] = []
    for candidate, need in zip(candidates, needs):
        room.take(need, +1)
        if room.short():
            room.take(need, -1)
            victims.append(candidate)
    return victims, ""


__all__ = ["KubeVerdict", "check", "check_all", "dry_run_victims", "insufficient", "lower_priority_pods", "placement", "pod_requests", "priority"]
