"""What kube-scheduler's own filters say about a node, where kpe can tell, and
which pods its preemption dry run would evict there.

kpe sees only the nodes that passed the scheduler's filters, so an explanation
that lists every node would blame kpe for nodes the scheduler rejected first.
These checks are the in-tree filter plugins that need nothing but the pod, the
node and ``nodeInfo``, computed with the ``kube.*`` helpers (engine/cel/kube.py):

- NodeUnschedulable: ``spec.unschedulable`` without a toleration of
  ``node.kubernetes.io/unschedulable:NoSchedule`` (unresolvable);
- TaintToleration: the first NoSchedule/NoExecute taint the pod does not
  tolerate (unresolvable);
- NodeAffinity: ``spec.nodeSelector`` and required node affinity (unresolvable);
- NodeResourcesFit: "Too many pods" and "Insufficient <resource>" per resource
  the pod requests, against allocatable minus the requests in ``nodeInfo``
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

from .cel import kube
from .cel.errors import EvalError
from .cel.quantity import Quantity
from .nodeinfo import NodeInfoAccumulator, is_active, pod_key

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


def check(pod: Mapping[str, Any], node: Mapping[str, Any], node_info: Mapping[str, Any] | None) -> KubeVerdict:
    """The scheduler's filters above on ``node``; ``node_info`` None skips NodeResourcesFit
    (without the pods on the node, free capacity is unknown)."""
    name = str((node.get("metadata") or {}).get("name") or "")
    verdict = KubeVerdict(name)
    pod_d, node_d = dict(pod), dict(node)
    try:
        spec = node.get("spec") or {}
        if spec.get("unschedulable") is True and not kube.pod_tolerates_taint_fn(pod_d, dict(UNSCHEDULABLE_TAINT)):
            verdict.reasons.append("node(s) were unschedulable")
            verdict.unresolvable = True
        untolerated = kube.untolerated_taints(pod_d, node_d, _FN)
        if untolerated:
            taint = untolerated[0]
            verdict.reasons.append(f"node(s) had untolerated taint {{{taint.get('key', '')}: {taint.get('value', '')}}}")
            verdict.unresolvable = True
        if not kube.pod_node_affinity_matches(pod_d, node_d, _FN):
            verdict.reasons.append("node(s) didn't match Pod's node affinity/selector")
            verdict.unresolvable = True
    except EvalError as exc:
        verdict.reasons.append(f"kpe cannot tell: {exc.message}")
        return verdict
    if node_info is not None:
        reasons, unresolvable = insufficient(pod, node, node_info)
        verdict.reasons += reasons
        verdict.unresolvable = verdict.unresolvable or unresolvable
    return verdict


def insufficient(pod: Mapping[str, Any], node: Mapping[str, Any], node_info: Mapping[str, Any]) -> tuple[list[str], bool]:
    """NodeResourcesFit: its reasons, and whether one is unresolvable (the pod asks for
    more than the node's allocatable, so no eviction makes room)."""
    node_d, info = dict(node), dict(node_info)
    reasons: list[str] = []
    unresolvable = False
    try:
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        if "pods" in allocatable and kube.node_free(node_d, info, "pods", _FN).compare(_ONE) < 0:
            reasons.append("Too many pods")
        requests = kube.pod_requests(dict(pod), strict=False)
        order = [r for r in FIRST_RESOURCES if r in requests] + sorted(r for r in requests if r not in FIRST_RESOURCES and r != "pods")
        for resource in order:
            wanted = requests[resource]
            if wanted.sign() <= 0:
                continue
            if kube.node_free(node_d, info, resource, _FN).compare(wanted) < 0:
                reasons.append(f"Insufficient {resource}")
                have = kube.node_free(node_d, {}, resource, _FN)  # allocatable alone
                unresolvable = unresolvable or have.compare(wanted) < 0
    except EvalError as exc:
        return [f"kpe cannot tell: {exc.message}"], False
    return reasons, unresolvable


_ONE = Quantity(1, 0, False, "DecimalSI")


def check_all(pod: Mapping[str, Any], nodes: Sequence[Mapping[str, Any]], node_info: Mapping[str, Any] | None) -> dict[str, KubeVerdict]:
    """``check`` for every node, by node name."""
    out: dict[str, KubeVerdict] = {}
    for node in nodes:
        verdict = check(pod, node, node_info.get(_name(node)) if node_info is not None else None)
        out[verdict.node] = verdict
    return out


def _name(node: Mapping[str, Any]) -> str:
    return str((node.get("metadata") or {}).get("name") or "")


def _start(pod: Mapping[str, Any]) -> str:
    status = pod.get("status") or {}
    return str(status.get("startTime") or (pod.get("metadata") or {}).get("creationTimestamp") or "")


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
    all_pods = list((node_info or {}).get("pods") or [])
    gone = {pod_key(p) for p in candidates}
    emptied = check(pod, node, _info_of([p for p in all_pods if pod_key(p) not in gone]))
    if not emptied.passed:
        return [], f"kube-scheduler's filters still reject it with all {len(candidates)} lower-priority pods evicted: {'; '.join(emptied.reasons)}"
    victims: list[Mapping[str, Any]] = []
    for candidate in candidates:
        gone.discard(pod_key(candidate))
        if not check(pod, node, _info_of([p for p in all_pods if pod_key(p) not in gone])).passed:
            gone.add(pod_key(candidate))
            victims.append(candidate)
    if not victims:
        return [], "kube-scheduler's dry run evicts no one there: its own filters pass with every pod in place"
    return victims, ""


def _info_of(pods: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    acc = NodeInfoAccumulator()
    for p in pods:
        acc.add(pod_key(p), p)
    return acc.view()


__all__ = ["KubeVerdict", "check", "check_all", "dry_run_victims", "insufficient", "lower_priority_pods", "priority"]
