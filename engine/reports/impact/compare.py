"""Impact preview: what a policy change does to a cluster's pods (``kpe diff``).

Every pending pod, and a deterministic sample of running ones, is decided under
the old and the new policy set on the same cluster view (the nodes, ``nodeInfo``
from the pods on them, the same ``now``), and the differences are reported:

- ``unschedulable`` / ``schedulable``: no node can take the pod any more, or
  some can now where none could. A node can take a pod when kpe's filters keep
  it and kube-scheduler's own filters that kpe can check do too
  (``engine.cluster.kubefilters``): a node the scheduler rejects anyway is no loss;
- ``nodes-lost`` / ``nodes-gained``: nodes that can no longer (or now can) take
  the pod, grouped by the rule that now rejects them (or that did);
- ``gate``: a gate of kpe's on a gated pod that would lift or hold; for other pods,
  a gate the new set would hold them at if they were created again;
- ``preemption``: for a pod no node can take under either set, the nodes where
  eviction could make room (``engine.reports.diagnosis.diagnose.preemption_verdicts``) change;
- ``ranking``: the best-scored nodes (``top``) of those both sets keep come in
  another order (a node lost or gained is reported as such, not as a ranking change).

A running pod is decided as if it were created again: without ``spec.nodeName``,
and on a cluster where its node does not count it. The sample is the ``sample``
running pods whose ``namespace/name`` hash lowest: the same pods each run.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.cluster import kubefilters
from engine.decisions.admission import admit, admitted_pods, gate_names, held_by_kpe, kpe_gates
from engine.reports.diagnosis.diagnose import EvictionVerdict, preemption_verdicts
from engine.decisions.evaluation import current_time
from engine.decisions.filtering import filter_nodes
from engine.cel.types.counts import Counts
from engine.cluster.counts import Adjusted, CountIndex
from engine.cluster.kubefilters import KubeVerdict
from engine.cluster.nodeinfo import is_active, node_info_map, node_name
from engine.cluster.projection import namespaces_by_name
from engine.policy.model import PolicySet
from engine.decisions.preemption import without_victims
from engine.decisions.scoring import score_nodes

SEVERITY = ("unschedulable", "gate", "nodes-lost", "preemption", "ranking", "nodes-gained", "schedulable")
NAMES_SHOWN = 5


@dataclass
class Decision:
    """One pod under one policy set."""

    matched: list[str]
    reasons: dict[str, str]  # node -> kpe's first rejecting rule ("" when kpe keeps it)
    feasible: list[str]
    scores: dict[str, int]
    gates: dict[str, tuple[bool, str, str]]  # gate -> (held, message, policy); Enforce policies
    eviction: dict[str, EvictionVerdict] = field(default_factory=dict)


@dataclass
class Change:
    pod: str
    kind: str
    summary: str
    details: dict[str, Any] = field(default_factory=dict)
    running_on: str = ""  # the node of a running pod ("" pending)

    def to_dict(self) -> dict[str, Any]:
        return {"pod": self.pod, "kind": self.kind, "summary": self.summary, "runningOn": self.running_on or None, "details": self.details}


@dataclass
class Impact:
    old_generation: str
    new_generation: str
    nodes: int
    pending: int
    running: int
    sampled: int
    changes: list[Change] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def changed_pods(self) -> list[str]:
        return sorted({c.pod for c in self.changes})

    @property
    def unschedulable(self) -> list[str]:
        return sorted({c.pod for c in self.changes if c.kind == "unschedulable"})

    def counts(self) -> dict[str, int]:
        counted = Counter(c.kind for c in self.changes)
        return {kind: counted[kind] for kind in SEVERITY if counted[kind]}

    def to_dict(self) -> dict[str, Any]:
        return {
            "from": self.old_generation,
            "to": self.new_generation,
            "examined": {"nodes": self.nodes, "pendingPods": self.pending, "runningPods": self.running, "sampledRunningPods": self.sampled},
            "changedPods": len(self.changed_pods),
            "unschedulablePods": self.unschedulable,
            "counts": self.counts(),
            "changes": [c.to_dict() for c in self.changes],
            "notes": list(self.notes),
        }


def pod_label(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name') or '?'}"


def _sample_key(pod: Mapping[str, Any]) -> str:
    return hashlib.sha256(pod_label(pod).encode()).hexdigest()


def subjects(pods: Sequence[Mapping[str, Any]], sample: int) -> tuple[list[Mapping[str, Any]], list[Mapping[str, Any]], int]:
    """(pending pods, the sampled running pods, how many run): active pods not being deleted."""
    live = [p for p in pods if is_active(p) and not (p.get("metadata") or {}).get("deletionTimestamp")]
    pending = [p for p in live if not (p.get("spec") or {}).get("nodeName")]
    running = [p for p in live if (p.get("spec") or {}).get("nodeName")]
    chosen = sorted(running, key=_sample_key)[: max(sample, 0)]
    return sorted(pending, key=pod_label), sorted(chosen, key=pod_label), len(running)


def decide(
    policy_set: PolicySet,
    pod: Mapping[str, Any],
    nodes: Sequence[Mapping[str, Any]],
    info: Mapping[str, Any],
    pods: Sequence[Mapping[str, Any]],
    kube: Mapping[str, KubeVerdict],
    *,
    now: Any,
    dry_runs: dict[str, tuple[list[Mapping[str, Any]], str]],
    admitted: Sequence[Mapping[str, Any]] | None = None,
    counts: Any = None,
    namespaces: Mapping[str, Any] | None = None, dra: Mapping[str, Any] | None = None,
) -> Decision:
    filtered = filter_nodes(policy_set, pod, nodes, node_info=info, now=now, counts=counts, namespaces=namespaces, dra=dra)
    reasons = {**dict.fromkeys(filtered.passed, ""), **filtered.failed, **filtered.unresolvable}
    kept = set(filtered.passed)
    feasible_nodes = [n for n in nodes if node_name(n) in kept and kube[node_name(n)].passed]
    feasible = [node_name(n) for n in feasible_nodes]
    scores = score_nodes(policy_set, pod, feasible_nodes, node_info=info, now=now, counts=counts, namespaces=namespaces, dra=dra).scores if feasible_nodes else {}
    admission = admit(policy_set, pod, nodes=nodes, pods=pods, admitted=admitted, now=now, namespaces=namespaces, dra=dra)
    gates = {d.gate: (not d.satisfied, d.message, d.policy) for d in admission.decisions if not d.audit}
    decision = Decision(filtered.matched, reasons, feasible, scores, gates)
    if not feasible:
        kinds = {**dict.fromkeys(filtered.failed, "fail"), **dict.fromkeys(filtered.unresolvable, "unresolvable")}
        rejected = {name: (kinds.get(name, "pass"), reason) for name, reason in reasons.items()}
        decision.eviction = preemption_verdicts(policy_set, pod, nodes, info, rejected, kube, now=now, dry_runs=dry_runs, counts=counts, namespaces=namespaces, dra=dra)
    return decision


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'s' if n != 1 else ''}"


def _names(names: Sequence[str]) -> str:
    shown = ", ".join(names[:NAMES_SHOWN])
    return shown + (f" and {len(names) - NAMES_SHOWN} more" if len(names) > NAMES_SHOWN else "")


def _by_rule(nodes: Sequence[str], reasons: Mapping[str, str], kube: Mapping[str, KubeVerdict] | None = None) -> dict[str, list[str]]:
    grouped: dict[str, list[str]] = {}
    for name in nodes:
        reason = reasons.get(name, "")
        label = reason.split(":", 1)[0] if reason else "(kube-scheduler)"
        grouped.setdefault(label, []).append(name)
    return dict(sorted(grouped.items(), key=lambda kv: (-len(kv[1]), kv[0])))


def _grouped_text(grouped: Mapping[str, list[str]]) -> str:
    return "; ".join(f"{rule} ({len(names)}: {_names(names)})" for rule, names in grouped.items())


def _top(decision: Decision, top: int, among: set[str]) -> list[tuple[str, int]]:
    return sorted(((n, decision.scores.get(n, 0)) for n in decision.feasible if n in among), key=lambda ns: (-ns[1], ns[0]))[:top]


def compare(label: str, pod: Mapping[str, Any], old: Decision, new: Decision, *, top: int, running_on: str = "") -> list[Change]:
    """The changes from ``old`` to ``new`` for one pod."""
    out: list[Change] = []

    def add(kind: str, summary: str, **details: Any) -> None:
        out.append(Change(label, kind, summary, details, running_on))

    lost = [n for n in old.feasible if n not in set(new.feasible)]
    gained = [n for n in new.feasible if n not in set(old.feasible)]
    own = f" (including {running_on}, where it runs)" if running_on and running_on in lost else ""
    if old.feasible and not new.feasible:
        grouped = _by_rule(lost, new.reasons)
        add("unschedulable", f"no node can take it any more (it had {len(old.feasible)}){own}: {_grouped_text(grouped)}", lost=grouped)
    elif new.feasible and not old.feasible:
        grouped = _by_rule(gained, old.reasons)
        add("schedulable", f"{_count(len(new.feasible), 'node')} can take it now (none could), no longer rejected by {_grouped_text(grouped)}", gained=grouped)
    else:
        if lost:
            grouped = _by_rule(lost, new.reasons)
            add("nodes-lost", f"loses {len(lost)} of {len(old.feasible)} nodes{own}: {_grouped_text(grouped)}", lost=grouped)
        if gained:
            grouped = _by_rule(gained, old.reasons)
            add("nodes-gained", f"gains {_count(len(gained), 'node')}, no longer rejected by {_grouped_text(grouped)}", gained=grouped)
    out += _gate_changes(label, pod, old, new, running_on)
    if not old.feasible and not new.feasible:
        before = sorted(n for n, v in old.eviction.items() if v.possible)
        after = sorted(n for n, v in new.eviction.items() if v.possible)
        if before != after:
            refused = {n: new.eviction[n].reason for n in before if n not in after and n in new.eviction}
            text = f"eviction could make room on {_names(before) or 'no node'} before, on {_names(after) or 'no node'} now"
            if refused:
                first = next(iter(refused.items()))
                text += f" ({first[0]}: {first[1]})"
            add("preemption", text, before=before, after=after, refused=refused)
    if old.feasible and new.feasible:
        # Among the nodes both sets keep: a node lost or gained is reported as such.
        common = set(old.feasible) & set(new.feasible)
        was, now_ = _top(old, top, common), _top(new, top, common)
        if [n for n, _ in was] != [n for n, _ in now_]:
            add("ranking", f"best nodes {_ranked(was)} -> {_ranked(now_)}", before=[list(x) for x in was], after=[list(x) for x in now_])
    return out


def _ranked(ranked: Sequence[tuple[str, int]]) -> str:
    return ", ".join(f"{n} {s}" for n, s in ranked)


def _gate_changes(label: str, pod: Mapping[str, Any], old: Decision, new: Decision, running_on: str) -> list[Change]:
    out: list[Change] = []
    on_pod = set(gate_names(pod)) & kpe_gates(pod)
    for gate in sorted(set(old.gates) | set(new.gates) | on_pod):
        was, now_ = old.gates.get(gate), new.gates.get(gate)
        held_before = was[0] if was else False
        held_after = now_[0] if now_ else False
        if gate in on_pod:
            if held_before and not held_after:
                why = "the admission rule is satisfied" if now_ else "no policy of the new set holds it"
                out.append(Change(label, "gate", f"gate {gate} would lift: {why}", {"gate": gate, "held": False}, running_on))
            elif held_after and not held_before:
                out.append(Change(label, "gate", f"gate {gate} would hold it: {now_[1] if now_ else ''}", {"gate": gate, "held": True, "message": now_[1] if now_ else ""}, running_on))
        elif held_after and not held_before:
            out.append(Change(label, "gate", f"created again, it would wait at gate {gate}: {now_[1] if now_ else ''}", {"gate": gate, "held": True, "atCreation": True}, running_on))
    return out


def preview(
    old: PolicySet,
    new: PolicySet,
    nodes: Sequence[Mapping[str, Any]],
    pods: Sequence[Mapping[str, Any]],
    *,
    sample: int = 100,
    top: int = 3,
    now: Any = None,
    namespaces: Sequence[Mapping[str, Any]] = (),
) -> Impact:
    """Decide every pending pod and ``sample`` running pods under ``old`` and ``new``
    (``namespaces``: the cluster's, whose objects are ``namespaceObject``)."""
    now = now if now is not None else current_time()
    pending, running, total_running = subjects(pods, sample)
    impact = Impact(old.generation, new.generation, len(nodes), len(pending), total_running, len(running))
    if old.generation == new.generation:
        impact.notes.append(f"both sets are generation {old.generation}: the same policies, nothing changes")
        return impact
    info = node_info_map(nodes, pods)
    index = CountIndex.build(old.counts.union(new.counts), nodes, pods)
    by_name = namespaces_by_name(namespaces)
    everyone_admitted = admitted_pods(pods)
    for pod, running_on in [(p, "") for p in pending] + [(p, str(p["spec"]["nodeName"])) for p in running]:
        subject: Mapping[str, Any] = pod
        view: Mapping[str, Any] = info
        if running_on:
            subject = {**pod, "spec": {k: v for k, v in (pod.get("spec") or {}).items() if k != "nodeName"}}
            if running_on in info:
                view = {**info, running_on: without_victims(info[running_on], [pod])}
        # A gated pod is decided as the gate controller does, among all pods; any other as if
        # created again, when it is not there yet.
        held = held_by_kpe(pod)
        others = pods if held else [p for p in pods if p is not pod]
        admitted = everyone_admitted if held else [p for p in everyone_admitted if p is not pod]
        kube = kubefilters.check_all(subject, nodes, view)
        dry_runs: dict[str, tuple[list[Mapping[str, Any]], str]] = {}
        # A running pod does not count itself where it runs, as it does not in its node's nodeInfo.
        counts = Counts(Adjusted(index, removed=[(pod, index.labels_of(running_on))]) if running_on else index)
        before = decide(old, subject, nodes, view, others, kube, now=now, dry_runs=dry_runs, admitted=admitted, counts=counts, namespaces=by_name)
        after = decide(new, subject, nodes, view, others, kube, now=now, dry_runs=dry_runs, admitted=admitted, counts=counts, namespaces=by_name)
        impact.changes += compare(pod_label(pod), pod, before, after, top=top, running_on=running_on)
    impact.changes.sort(key=lambda c: (SEVERITY.index(c.kind), c.pod))
    return impact


__all__ = ["SEVERITY", "Change", "Decision", "Impact", "compare", "decide", "preview", "subjects"]
