"""One report of everything the policies decide for a pod: which policies
match, the admission gates, and per node the filter verdict with the failing
rule, each score contribution and the final score. ``kpe explain`` prints it;
the server returns it from ``POST /apis/v1/explain``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engine.decisions.admission import AdmissionResult, admit
from engine.decisions.evaluation import current_time
from engine.decisions.filtering import FilterResult, filter_nodes
from engine.reservations.heldroom import Homes, keep_off
from engine.cluster.counts import counts_of
from engine.cluster.nodeinfo import node_info_map, node_name, pod_name
from engine.policy.model import Policy, PolicySet
from engine.policy.reads import reads_variable
from engine.decisions.scoring import ScoreResult, score_nodes
from engine.reports.tables import render_table


@dataclass
class Report:
    generation: str
    pod: str
    matched: list[str]
    filter: FilterResult
    score: ScoreResult
    admission: AdmissionResult
    workload: str | None = None
    """``Deployment shop/api`` when ``pod`` is the pod that workload's controller would
    create (``engine.cluster.workloads``); printed and in the JSON only then."""
    final: dict[str, int] | None = None
    """The final score (0..10) of each node that passes the filters, spread over those nodes
    alone: kube-scheduler sends prioritize only the nodes that passed (docs/guides/scores.md).
    None: every node's score as ``score`` gives it."""
    lacking: list[dict[str, str]] | None = None
    """Inputs a policy that decides (or whose match decides) reads and the caller did not
    give (``missing``): what makes a verdict differ from the cluster's."""

    def to_dict(self) -> dict[str, Any]:
        scores = {s.node: s for s in self.score.explanation or []}
        nodes = []
        for verdict in self.filter.explanation or []:
            entry = verdict.to_dict()
            node_score = scores.get(verdict.node)
            if self.final is not None:
                entry["score"] = self.final.get(verdict.node)
            else:
                entry["score"] = node_score.score if node_score else None
            entry["contributions"] = [c.to_dict() for c in node_score.contributions] if node_score else []
            entry["scoreRules"] = [o.to_dict() for o in node_score.outcomes] if node_score else []
            nodes.append(entry)
        head: dict[str, Any] = {"generation": self.generation, "pod": self.pod}
        if self.workload:
            head["workload"] = self.workload
        if self.lacking:
            head["lacking"] = self.lacking
        return {
            **head,
            "matchedPolicies": self.matched,
            "matchConditions": [o.to_dict() for o in self.filter.match_outcomes],
            "admission": {
                "gates": self.admission.gates,
                "admitted": self.admission.admitted,
                "decisions": [d.to_dict() for d in self.admission.decisions],
            },
            "nodes": nodes,
        }

    def render(self) -> str:
        return render_report(self)


def explain(
    policy_set: PolicySet,
    pod: Mapping[str, Any],
    nodes: Sequence[Mapping[str, Any]],
    *,
    cluster_pods: Sequence[Mapping[str, Any]] = (),
    node_info: Mapping[str, Any] | None = None,
    now: Any = None,
    homes: Homes | None = None,
    counts: Any = None,
    namespaces: Mapping[str, Any] | None = None, dra: Mapping[str, Any] | None = None,
    missing: frozenset[str] = frozenset(),
) -> Report:
    """Evaluate every decision for ``pod`` with explanations switched on. ``homes``: where
    the reservations' slots are (``engine.reservations.slots``), so non-owners are kept out of reserved
    room in transit as the filter verb keeps them. ``counts``: what ``counts`` reads (default:
counted over ``nodes`` and ``cluster_pods``). ``namespaces``: Namespace objects by name
(the pod's is ``namespaceObject``). ``missing``: the inputs of ``LACKS`` the caller could not give
(``kpe explain`` from files), named next to the policies that read them."""
    now = now if now is not None else current_time()
    info = node_info if node_info is not None else node_info_map(nodes, cluster_pods)
    counts = counts_of(policy_set.counts, nodes, cluster_pods) if counts is None else counts
    filtered = filter_nodes(policy_set, pod, nodes, node_info=info, now=now, explain=True, counts=counts, namespaces=namespaces, dra=dra)
    if homes:
        keep_off(filtered, pod, nodes, info, homes, reservations={r.name for r in policy_set.reservations})
    scored = score_nodes(policy_set, pod, nodes, node_info=info, now=now, explain=True, counts=counts, namespaces=namespaces, dra=dra)  # every node's rules, for the table
    passing = set(filtered.passed)
    final = (
        score_nodes(policy_set, pod, [n for n in nodes if node_name(n) in passing], node_info=info, now=now, counts=counts, namespaces=namespaces, dra=dra).scores
        if passing
        else {}
    )
    admission = admit(policy_set, pod, nodes=nodes, pods=cluster_pods, now=now, namespaces=namespaces, dra=dra)
    return Report(
        generation=policy_set.generation,
        pod=pod_name(pod),
        matched=filtered.matched,
        filter=filtered,
        score=scored,
        admission=admission,
        final=final,
        lacking=lacking(policy_set, filtered.matched, missing) if missing else None,
    )


# What each input is when the caller did not give it, for the note next to a policy that reads it.
LACKS = {
    "namespaceObject": "namespaceObject is null: no --namespaces given",
    "nodeInfo": "nodeInfo has no pods on any node: no --cluster-pods given",
    "counts": "every count is 0: no --cluster-pods given",
    "dra": "dra has no DRA objects: none can be given from files",
    "params": "params are the policy's own (spec.params), not its paramsFrom ConfigMap's: not read from files",
}


def lacking(policy_set: PolicySet, matched: Sequence[str], missing: frozenset[str]) -> list[dict[str, str]]:
    """Per policy that matched (or whose match expression reads one), each input in
    ``missing`` it reads: a verdict that may differ from the cluster's, said next to it."""
    out = []
    for policy in policy_set.policies:
        reads = _reads(policy)
        match_reads = _reads(policy, match_only=True)
        for name in sorted(missing):
            if name in reads and (policy.name in matched or name in match_reads):
                out.append({"policy": policy.name, "input": name, "note": LACKS[name]})
    return out


def _reads(policy: Policy, *, match_only: bool = False) -> set[str]:
    """The inputs of ``LACKS`` the policy's expressions (or its match expression alone) read;
    ``params`` only when they come from a ConfigMap (the policy's own are given)."""
    if match_only:
        names = set(policy.match.expression.program.free_variables) & set(LACKS) if policy.match.expression is not None else set()
    else:
        names = {name for name in LACKS if reads_variable([policy], name)}
    return names if policy.params_from is not None else names - {"params"}


def render_report(report: Report) -> str:
    """The human view: a summary, then one row per node."""
    data = report.to_dict()
    source = f" from {report.workload}" if report.workload else ""
    lines = [f"pod {report.pod}{source}  (policy generation {report.generation})"]
    lines.append("matching policies: " + (", ".join(report.matched) or "none"))
    for cond in data["matchConditions"]:
        lines.append(f"  match {cond['policy']}: {cond['effect']}" + (f" ({cond['error']})" if cond["error"] else ""))
    for lack in report.lacking or []:
        lines.append(f"  not given, for {lack['policy']}: {lack['note']}")
    if report.admission.decisions:
        for d in report.admission.decisions:
            state = "lifted" if d.satisfied else "held"
            lines.append(f"gate {d.gate} ({d.policy}{', audit' if d.audit else ''}): {state}" + (f" - {d.message}" if d.message else ""))
    rows = []
    for node in data["nodes"]:
        contributions = "; ".join(
            f"{c['policy']}/{c['rule']}={'-' if c['score'] is None else format(c['score'], 'g')}x{c['weight']}" + (" (audit)" if c["audit"] else "") + (f" error: {c['error']}" if c["error"] else "")
            for c in node["contributions"]
        )
        audit = [f"{r['message'] or r['policy'] + '/' + r['rule']} ({r['effect']})" for r in node["rules"] if r["audit"] and "would have" in r["effect"]]
        reason = node["reason"] + ("\n" + "\n".join(audit) if audit else "")
        rows.append([node["node"], node["verdict"].upper(), reason, contributions, "" if node["score"] is None else node["score"]])
    lines.append("")
    lines.append(render_table(["NODE", "VERDICT", "REASON", "SCORE RULES (value x weight)", "SCORE"], rows))
    return "\n".join(lines)


__all__ = ["Report", "explain", "node_name", "render_report"]
