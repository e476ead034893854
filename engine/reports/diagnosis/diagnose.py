"""Why is this pod pending: everything ``kpe explain pod`` says about one pod of a
cluster, computed from plain data (the pod, the nodes, the pods on them).

Built on ``engine.reports.explain``'s report (the policies' verdict, first rejecting
rule and scores per node, the admission gates) and adds:

- the pod's state, and plainly when it is not kpe's to decide: already bound,
  finished or being deleted, matched by no policy, or held by a scheduling gate
  kpe did not add;
- per gate on the pod, whose it is and, for kpe's, what holds it (the
  admission message);
- per node, what kube-scheduler's own filters say where kpe can tell
  (``engine.cluster.kubefilters``): those rejections are not kpe's;
- per node that cannot take the pod, whether eviction could help: the
  preemption verdict, as kube-scheduler would reach it (its dry run picks the
  victims, then asks kpe's preempt verb) (``preemption_verdicts``);
- per reservation, whether the pod owns it, its slots and its part in the
  decision (``engine.reports.diagnosis.slots``);
- the devices the pod asks for under Dynamic Resource Allocation, and per node its
  devices of those classes: total, allocated, free (``device_summary``);
- what kpe's preempt verb really did for the pod, when the caller knows it (kpe's
  decision log, or the PreemptionVetoed Event it posted): the nodes a policy's rule
  kept out of the preemption, with the rule (``preemption_vetoes``).

``Diagnosis.to_dict`` is what ``GET /apis/v1/explain?pod=`` answers and what
``kpe explain pod --output json`` prints; ``engine.reports.diagnosis.view`` renders it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.cluster import kubefilters
from engine.decisions.admission import gate_names, kpe_gates
from engine.reports.diagnosis.slots import ReservationPart, fresh_plan, reservation_parts
from engine.decisions.evaluation import current_time
from engine.reports.explain import Report, explain
from engine.reservations.heldroom import Homes, keep_evictions_off
from engine.cluster.counts import counts_of
from engine.cluster.kubefilters import KubeVerdict
from engine.cel.ext.kube import node_devices, node_free_devices, pod_devices
from engine.cel.ext.kuberesources import pod_requests, scheduler_units
from engine.cluster.inflight import nominated_to
from engine.cluster.nodeinfo import TERMINAL_PHASES, is_active, node_info_map, node_name, pod_key, pod_name
from engine.policy.model import PolicySet
from engine.decisions.preemption import preempt, veto, without_victims
from engine.reservations.slots import Slot


@dataclass
class EvictionVerdict:
    """Whether preemption could place the pod on a node it cannot use now."""

    possible: bool
    reason: str
    victims: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"possible": self.possible, "reason": self.reason, "victims": list(self.victims)}


@dataclass
class PodState:
    state: str  # pending | gated | bound | finished | deleting
    kpe_decides: bool
    notes: list[str] = field(default_factory=list)
    scheduled: dict[str, str] | None = None  # the pod's PodScheduled condition read (``scheduled_condition``)

    def to_dict(self) -> dict[str, Any]:
        return {"state": self.state, "kpeDecides": self.kpe_decides, "notes": list(self.notes), "podScheduled": self.scheduled}


# The reason the API server gives a pod created with scheduling gates (pkg/registry/core/pod
# strategy.go, applySchedulingGatedCondition; the same in 1.32 and 1.37): written once, at
# creation, and replaced only when kube-scheduler next writes the condition.
SCHEDULING_GATED = "SchedulingGated"


def scheduled_condition(pod: Mapping[str, Any]) -> dict[str, str] | None:
    """The pod's PodScheduled condition when it says the pod is not scheduled, with what it means
    (``meaning``): who wrote it and whether it is a rejection at all. None without one.

    Who writes it, read from kube-scheduler 1.32 and 1.37.2: the API server, ``SchedulingGated``,
    when a pod is created with gates (kept after the gates go, until kube-scheduler writes the
    condition again: so it is no rejection, by kpe or anyone); kube-scheduler, ``Unschedulable`` or
    ``SchedulerError``, after a scheduling attempt (extenders' reasons included in the message).
    A PreEnqueue plugin's verdict (gates, a pod group short of members) is never written: kube-scheduler
    1.37.2 has no SchedulerPreEnqueuePodStatus feature, so a pod held before the queue keeps what was there."""
    conditions = (pod.get("status") or {}).get("conditions")
    if not isinstance(conditions, list):
        return None
    found = next((c for c in conditions if isinstance(c, Mapping) and c.get("type") == "PodScheduled"), None)
    if found is None or found.get("status") != "False":
        return None
    reason, message = str(found.get("reason") or ""), str(found.get("message") or "")
    gates = gate_names(pod)
    if reason == SCHEDULING_GATED and gates:
        meaning = ("written by the API server when the pod was created with scheduling gates: not a rejection, "
                   "kube-scheduler has not tried the pod")
    elif reason == SCHEDULING_GATED:
        meaning = ("written by the API server at creation, when the pod still had scheduling gates: not a rejection; "
                   "the gates are gone and kube-scheduler has not written the condition since (it has not tried the pod yet, "
                   "or another PreEnqueue plugin holds it, such as a pod group waiting for its members)")
    elif reason == "Unschedulable":
        meaning = "kube-scheduler's last attempt found no node (its plugins' and extenders' reasons, kpe's among them)"
    elif reason == "SchedulerError":
        meaning = "kube-scheduler's last attempt failed with an error, not a decision about nodes"
    else:
        meaning = f"reason {reason or '(none)'}"
    return {"reason": reason, "message": message, "meaning": meaning}


@dataclass
class Diagnosis:
    report: Report
    state: PodState
    gates: list[dict[str, Any]]
    kube: dict[str, KubeVerdict]
    eviction: dict[str, EvictionVerdict]
    node_order: list[str]
    reservations: list[ReservationPart] = field(default_factory=list)
    devices: dict[str, Any] | None = None  # device_summary

    def feasible(self) -> list[str]:
        """Nodes both kpe's policies and kube-scheduler's checked filters accept."""
        passed = set(self.report.filter.passed)
        return [n for n in self.node_order if n in passed and self.kube.get(n, KubeVerdict(n)).passed]

    def to_dict(self) -> dict[str, Any]:
        data = self.report.to_dict()
        for entry in data["nodes"]:
            name = entry["node"]
            entry["kubeScheduler"] = self.kube[name].to_dict() if name in self.kube else None
            verdict = self.eviction.get(name)
            entry["eviction"] = verdict.to_dict() if verdict is not None else None
        data["status"] = self.state.to_dict()
        data["gates"] = self.gates
        data["feasibleNodes"] = self.feasible()
        data["reservations"] = [r.to_dict() for r in self.reservations]
        data["devices"] = self.devices
        return data


def pod_state(
    pod: Mapping[str, Any], matched: Sequence[str], generation: str, *, reserved: bool = False, excluded: frozenset[str] = frozenset()
) -> PodState:
    """The pod's state and notes. ``reserved``: the set has reservations, which keep every
    pod that owns none of them off reserved room, matched by a policy or not. ``excluded``:
    the namespaces no policy matches (the set's ``excluded_namespaces``)."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    gates = gate_names(pod)
    foreign = [g for g in gates if g not in kpe_gates(pod)]
    if status.get("phase") in TERMINAL_PHASES:
        return PodState("finished", False, [f"The pod has {str(status['phase']).lower()}: there is nothing left to schedule."])
    if meta.get("deletionTimestamp"):
        return PodState("deleting", False, ["The pod is being deleted: it will not be scheduled."])
    if spec.get("nodeName"):
        note = (
            f"Not kpe's to decide: the pod is already bound to {spec['nodeName']}. "
            "What follows is what the policies would say if it were scheduled now."
        )
        return PodState("bound", False, [note])
    state = PodState("gated" if gates else "pending", True, scheduled=scheduled_condition(pod))
    if foreign:
        which = f"a scheduling gate kpe did not add ({foreign[0]})" if len(foreign) == 1 else f"scheduling gates kpe did not add ({', '.join(foreign)})"
        state.notes.append(
            f"Held by {which}: kube-scheduler will not try the pod until whoever added "
            f"{'it lifts it' if len(foreign) == 1 else 'them lifts them'}; kpe never does."
        )
    namespace = meta.get("namespace") or "default"
    if namespace in excluded:
        state.kpe_decides = False
        state.notes.append(
            f"Not kpe's to decide: no policy matches pods in {namespace}, one of the namespaces kpe leaves alone "
            "(--excluded-namespaces). kpe keeps every node and scores them all 0; kube-scheduler's own plugins decide."
        )
    elif not matched and reserved:
        state.notes.append(
            f"No policy of generation {generation} matches this pod: only the reservations below apply to it "
            "(it may not take their slots' room)."
        )
    elif not matched:
        state.kpe_decides = False
        state.notes.append(
            f"Not kpe's to decide: no policy of generation {generation} matches this pod. kpe keeps every node "
            "and scores them all 0; kube-scheduler's own plugins decide."
        )
    return state


def gate_states(policy_set: PolicySet, pod: Mapping[str, Any], report: Report) -> list[dict[str, Any]]:
    """Each gate on the pod: whose it is and, for kpe's, whether it holds the pod and why."""
    mine = kpe_gates(pod)
    decisions = {d.gate: d for d in report.admission.decisions if not d.audit}
    out: list[dict[str, Any]] = []
    for gate in gate_names(pod):
        if gate not in mine:
            out.append({"gate": gate, "owner": "other", "policy": None, "held": True,
                        "message": "not kpe's gate: whoever added it lifts it"})
            continue
        decision = decisions.get(gate)
        if decision is None:
            owner = policy_set.gates.get(gate)
            why = f"policy {owner.name} no longer matches the pod" if owner is not None else "no policy of this generation owns it"
            out.append({"gate": gate, "owner": "kpe", "policy": owner.name if owner else None, "held": False,
                        "message": f"{why}: kpe lifts it at its next pass"})
            continue
        out.append({"gate": gate, "owner": "kpe", "policy": decision.policy, "held": not decision.satisfied,
                    "message": decision.message if not decision.satisfied else "the admission rule is satisfied: kpe lifts it at its next pass"})
    return out


def preemption_verdicts(
    policy_set: PolicySet,
    pod: Mapping[str, Any],
    nodes: Sequence[Mapping[str, Any]],
    node_info: Mapping[str, Any],
    rejected: Mapping[str, tuple[str, str]],
    kube: Mapping[str, KubeVerdict],
    *,
    now: Any = None,
    dry_runs: dict[str, tuple[list[Mapping[str, Any]], str]] | None = None,
    homes: Homes | None = None,
    counts: Any = None,
    namespaces: Mapping[str, Any] | None = None, dra: Mapping[str, Any] | None = None,
    in_flight: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
) -> dict[str, EvictionVerdict]:
    """For each node that cannot take the pod (``rejected``: kpe's verdict and reason by node,
    "pass" for nodes only kube-scheduler rejects), whether preemption could place it there:
    kube-scheduler's dry run must find victims (``kubefilters.dry_run_victims``) and kpe's
    preempt decision keep the node with them (filters after the evictions, preemption rules).
    The dry run does not depend on the policies: ``dry_runs`` keeps its results by node
    for another call about the same pod (``engine.reports.impact.compare`` asks for two policy sets).
    ``in_flight``: the pods nominated to (or in flight on) each node, counted after the evictions
    as the preempt verb counts them."""
    out: dict[str, EvictionVerdict] = {}
    by_name = {node_name(n): n for n in nodes}
    if (pod.get("spec") or {}).get("preemptionPolicy") == "Never":
        return {name: EvictionVerdict(False, "the pod's preemptionPolicy is Never") for name in rejected}
    candidates: dict[str, list[Mapping[str, Any]]] = {}
    for name, (verdict, reason) in rejected.items():
        kv = kube.get(name)
        if verdict == "unresolvable":
            out[name] = EvictionVerdict(False, f"kpe's rule {reason.split(':', 1)[0]} is unresolvable: no eviction helps")
            continue
        if kv is not None and kv.unresolvable:
            out[name] = EvictionVerdict(False, "kube-scheduler's own filters reject it for good: no eviction helps")
            continue
        node = by_name.get(name)
        if node is None:
            continue
        found = dry_runs.get(name) if dry_runs is not None else None
        if found is None:
            found = kubefilters.dry_run_victims(pod, node, node_info.get(name))
            if dry_runs is not None:
                dry_runs[name] = found
        victims, why = found
        if not victims:
            out[name] = EvictionVerdict(False, why)
            continue
        candidates[name] = victims
    if candidates:
        result = preempt(policy_set, pod, candidates, nodes=by_name, node_info=node_info, now=now, counts=counts, namespaces=namespaces, dra=dra,
                         in_flight=in_flight)
        result = keep_evictions_off(result, policy_set, pod, by_name, node_info, homes, namespaces=namespaces)
        for name, victims in candidates.items():
            names = [pod_name(v) for v in victims]
            if name in result.rejected:
                out[name] = EvictionVerdict(False, f"kpe refuses: {result.rejected[name]}", names)
            else:
                count = f"{len(names)} pod{'s' if len(names) != 1 else ''}"
                out[name] = EvictionVerdict(True, f"evicting {count} of lower priority would make room, and kpe allows it", names)
    return out


def preemption_vetoes(
    rejected: Mapping[str, str], *, source: str, nodes: int | None = None, unchecked: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """What kpe's preempt verb last did for the pod, as ``kpe explain pod`` shows it (the
    ``preemption`` key of its data, ``engine.reports.diagnosis.view.preemption_lines``):
    the nodes a policy's rule kept out of the preemption (``veto``) with the rule, how many
    there were (``nodes``, when ``rejected`` names only the first few), and the nodes kept
    with their filters unchecked. ``rejected`` is the preempt decision-log entry's (or the
    PreemptionVetoed Event's); ``source`` says which, for the reader."""
    vetoed = {node: why for node in sorted(rejected) if (why := veto(rejected[node])) is not None}
    return {"source": source, "nodes": max(nodes or 0, len(vetoed)), "vetoed": vetoed, "unchecked": dict(unchecked or {})}


def nominated_pods(pod: Mapping[str, Any], cluster_pods: Sequence[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    """The pending pods nominated to each node whose room kube-scheduler holds from ``pod``: of
    its priority or higher, as its preemption dry run counts them (``engine.cluster.inflight``)."""
    mine, floor = pod_key(pod), kubefilters.priority(pod)
    out: dict[str, list[Mapping[str, Any]]] = {}
    for other in cluster_pods:
        node = nominated_to(other)
        if node and not (other.get("spec") or {}).get("nodeName") and is_active(other) and pod_key(other) != mine and kubefilters.priority(other) >= floor:
            out.setdefault(node, []).append(other)
    return out


def diagnose(
    policy_set: PolicySet,
    pod: Mapping[str, Any],
    nodes: Sequence[Mapping[str, Any]],
    *,
    cluster_pods: Sequence[Mapping[str, Any]] = (),
    node_info: Mapping[str, Any] | None = None,
    now: Any = None,
    slots: Mapping[str, Sequence[Slot]] | None = None,
    homes: Homes | None = None,
    placeholder_namespace: str = "kpe-system",
    namespaces: Mapping[str, Any] | None = None, dra: Mapping[str, Any] | None = None,
    in_flight: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
) -> Diagnosis:
    """Everything kpe can say about ``pod`` on ``nodes``. ``node_info`` defaults to the one
    ``cluster_pods`` make (kpe's cache passes its own, as the extender verbs use it).
    ``slots`` and ``homes``: the reservations' slots as the reservation controller last saw
    them; without them, as a first pass over ``cluster_pods`` sees them (placeholders in
    ``placeholder_namespace``). ``namespaces``: Namespace objects by name (``namespaceObject``).
    ``in_flight``: the pods in flight by node for this pod, as kpe's cache has them (``InFlight.on``);
    without it, the pods of ``cluster_pods`` nominated to a node (``nominated_pods``), which the
    preempt verb counts after the evictions too."""
    now = now if now is not None else current_time()
    info = node_info if node_info is not None else node_info_map(nodes, cluster_pods)
    bound_to = (pod.get("spec") or {}).get("nodeName")
    if bound_to and bound_to in info:
        # A bound pod is judged as if it were scheduled now: its own node without it.
        info = {**info, bound_to: without_victims(info[bound_to], [pod])}
    if policy_set.reservations and slots is None:
        seen = fresh_plan(policy_set, cluster_pods, namespace=placeholder_namespace, namespaces=namespaces)
        slots, homes = seen.slots, seen.homes
    counts = counts_of(policy_set.counts, nodes, cluster_pods)
    report = explain(policy_set, pod, nodes, cluster_pods=cluster_pods, node_info=info, now=now, homes=homes, counts=counts, namespaces=namespaces, dra=dra)
    kube = kubefilters.check_all(pod, nodes, info)
    rejected: dict[str, tuple[str, str]] = {}
    for verdict in report.filter.explanation or []:
        kv = kube.get(verdict.node)
        if verdict.verdict != "pass" or (kv is not None and not kv.passed):
            rejected[verdict.node] = (verdict.verdict, verdict.reason)
    held = in_flight if in_flight is not None else nominated_pods(pod, cluster_pods)
    eviction = preemption_verdicts(policy_set, pod, nodes, info, rejected, kube, now=now, homes=homes, counts=counts, namespaces=namespaces, dra=dra,
                                   in_flight=held)
    return Diagnosis(
        report=report,
        state=pod_state(pod, report.matched, policy_set.generation, reserved=bool(policy_set.reservations), excluded=policy_set.excluded_namespaces),
        gates=gate_states(policy_set, pod, report),
        kube=kube,
        eviction=eviction,
        node_order=[node_name(n) for n in nodes],
        reservations=reservation_parts(
            policy_set, pod, report.matched, slots or {}, {v.node: (v.verdict, v.reason) for v in report.filter.explanation or []}
        ),
        devices=device_summary(pod, nodes, info, dra) if dra else None,
    )


def device_summary(pod: Mapping[str, Any], nodes: Sequence[Mapping[str, Any]], node_info: Mapping[str, Any], dra: Mapping[str, Any]) -> dict[str, Any] | None:
    """What ``kpe explain pod`` shows of DRA: the devices the pod asks of each DeviceClass (its
    claims', and its requests of the extended resource a class backs, KEP-5004), and per node
    that has any of them its devices of those classes: total, allocated, free (as
    ``kube.nodeFreeDevices`` counts them, pods in flight aside). None when the pod asks for none."""
    asked: dict[str, dict[str, int]] = {}
    requests = pod_requests(pod, strict=False)
    for cls, info in sorted((dra.get("classes") or {}).items()):
        claimed = pod_devices(pod, dra, cls)
        extended = info.get("extendedResourceName") if isinstance(info, Mapping) else None
        q = requests.get(extended) if isinstance(extended, str) else None
        by_resource = scheduler_units(str(extended), q) if q is not None else 0
        if claimed or by_resource:
            asked[cls] = {"claims": claimed, "extendedResource": by_resource}
    if not asked:
        return None
    per_node: dict[str, dict[str, dict[str, int]]] = {}
    for node in nodes:
        name = str((node.get("metadata") or {}).get("name") or "")
        for cls in asked:
            found = node_devices(node, dra, cls)
            if found["total"]:
                free = node_free_devices(node, node_info.get(name) or {"pods": []}, dra, cls)
                per_node.setdefault(name, {})[cls] = {**found, "free": free}
    return {"pod": asked, "nodes": per_node}


__all__ = ["Diagnosis", "EvictionVerdict", "PodState", "SCHEDULING_GATED", "device_summary", "diagnose", "gate_states", "nominated_pods", "pod_state", "preemption_verdicts", "preemption_vetoes", "scheduled_condition"]
