"""How ``kpe explain pod`` prints a diagnosis (``Diagnosis.to_dict``, possibly
received from a running kpe): a plain-text table for terminals and Markdown
for issues and pull requests. Both say first what the pod's state is and
whether it is kpe's to decide (and what kpe's preempt verb last kept out of the
pod's preemption, when known), then one row per node (the nodes that can take
the pod first, best score first), then the score table of the nodes kpe keeps.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from engine.reports.diagnosis.slots import part_lines
from engine.reports.tables import render_table

DEFAULT_LIMIT = 50  # node rows shown; the rest are counted


def _contributions(node: dict[str, Any]) -> str:
    return "; ".join(
        f"{c['policy']}/{c['rule']}={'-' if c['score'] is None else format(c['score'], 'g')}x{c['weight']}"
        + (" (audit)" if c["audit"] else "") + (f" error: {c['error']}" if c["error"] else "")
        for c in node.get("contributions") or []
    )


def _kube(node: dict[str, Any]) -> str:
    kube = node.get("kubeScheduler") or {}
    return "; ".join(kube.get("reasons") or [])


def _eviction(node: dict[str, Any]) -> str:
    verdict = node.get("eviction")
    if not verdict:
        return "-"
    text = ("yes: " if verdict["possible"] else "no: ") + str(verdict["reason"])
    if verdict["possible"] and verdict["victims"]:
        text += " (" + ", ".join(verdict["victims"]) + ")"
    return text


def ordered_nodes(data: dict[str, Any]) -> list[dict[str, Any]]:
    """The nodes that can take the pod first (best score first), then the others as listed."""
    feasible = set(data.get("feasibleNodes") or [])
    nodes = list(data.get("nodes") or [])
    first = sorted((n for n in nodes if n["node"] in feasible), key=lambda n: (-(n["score"] or 0), n["node"]))
    return first + [n for n in nodes if n["node"] not in feasible]


def headline(data: dict[str, Any]) -> list[str]:
    """The summary: state, notes, gates, matching policies, and the overall verdict."""
    status = data.get("status") or {}
    lines = [f"pod {data['pod']}  (policy generation {data['generation']}{', ' + data['source'] if data.get('source') else ''})"]
    lines.append(f"state: {status.get('state', '?')}" + ("" if status.get("kpeDecides", True) else " - not kpe's to decide"))
    lines += [f"  {note}" for note in status.get("notes") or []]
    scheduled = status.get("podScheduled")
    if scheduled:
        lines.append(f"PodScheduled: False, reason {scheduled['reason'] or '(none)'} - {scheduled['meaning']}")
        if scheduled.get("message"):
            lines.append(f"  message: {scheduled['message']}")
    for gate in data.get("gates") or []:
        whose = f"kpe's, policy {gate['policy']}" if gate["owner"] == "kpe" and gate["policy"] else ("kpe's" if gate["owner"] == "kpe" else "not kpe's")
        lines.append(f"gate {gate['gate']} ({whose}): {'held' if gate['held'] else 'lifted'} - {gate['message']}")
    lines.append("matching policies: " + (", ".join(data.get("matchedPolicies") or []) or "none"))
    for cond in data.get("matchConditions") or []:
        lines.append(f"  match {cond['policy']}: {cond['effect']}" + (f" ({cond['error']})" if cond["error"] else ""))
    lines += device_lines(data.get("devices"))
    lines += part_lines(data.get("reservations") or [])
    lines += preemption_lines(data.get("preemption"))
    lines.append(verdict_line(data))
    return lines


DEVICE_NODES_SHOWN = 10  # nodes with devices named; the rest are counted


def device_lines(devices: dict[str, Any] | None) -> list[str]:
    """The devices the pod asks for under DRA and, per node that has them, how many are free."""
    if not devices:
        return []
    lines = []
    for cls, asked in (devices.get("pod") or {}).items():
        how = [f"{asked['claims']} through its claims"] if asked.get("claims") else []
        how += [f"{asked['extendedResource']} as an extended resource"] if asked.get("extendedResource") else []
        lines.append(f"devices: the pod asks for {asked.get('claims', 0) + asked.get('extendedResource', 0)} of DeviceClass {cls} ({', '.join(how)})")
    nodes = list((devices.get("nodes") or {}).items())
    for node, per_class in nodes[:DEVICE_NODES_SHOWN]:
        for cls, n in per_class.items():
            lines.append(f"  {node}: {n['free']} of {n['total']} {cls} free ({n['allocated']} allocated to claims)")
    if len(nodes) > DEVICE_NODES_SHOWN:
        lines.append(f"  and {len(nodes) - DEVICE_NODES_SHOWN} more nodes with such devices")
    if not nodes:
        lines.append("  no node publishes such devices (ResourceSlices)")
    return lines


VETOES_SHOWN = 5  # vetoed nodes named; the rest are counted


def preemption_lines(part: dict[str, Any] | None) -> list[str]:
    """What kpe's preempt verb last did for the pod (``diagnose.preemption_vetoes``): each node a
    policy's rule kept out, with the rule, and the nodes kept with their filters unchecked."""
    if not part:
        return []
    vetoed = part.get("vetoed") or {}
    lines = [f"preemption: kpe kept node {node} out: {why}" for node, why in list(vetoed.items())[:VETOES_SHOWN]]
    more = max(int(part.get("nodes") or 0), len(vetoed)) - len(lines)
    if more > 0:
        lines.append(f"preemption: kpe kept {more} more node{'s' if more != 1 else ''} out")
    lines += [f"preemption: kpe kept node {node} in unchecked: {why}" for node, why in (part.get("unchecked") or {}).items()]
    return lines


def verdict_line(data: dict[str, Any]) -> str:
    nodes = data.get("nodes") or []
    feasible = ordered_nodes(data)[: len(data.get("feasibleNodes") or [])]
    if feasible:
        best = ", ".join(f"{n['node']} ({n['score']})" for n in feasible[:3])
        return f"verdict: {len(feasible)} of {len(nodes)} nodes can take the pod; kpe's best scores: {best}"
    by_kpe = [n for n in nodes if n["verdict"] != "pass"]
    by_kube = [n for n in nodes if n["verdict"] == "pass" and _kube(n)]
    reasons: Counter[str] = Counter()
    for n in by_kpe:
        reasons[n["reason"].split(":", 1)[0]] += 1
    for n in by_kube:
        for r in (n.get("kubeScheduler") or {}).get("reasons") or []:
            reasons[f"{r} (kube-scheduler)"] += 1
    counted = ", ".join(f"{k} x{v}" for k, v in reasons.most_common())
    helps = [n["node"] for n in nodes if (n.get("eviction") or {}).get("possible")]
    line = f"verdict: no node can take the pod now: {len(by_kpe)} of {len(nodes)} rejected by kpe's policies"
    if by_kube:
        line += f", {len(by_kube)} more by kube-scheduler's own filters (not kpe's)"
    if counted:
        line += f"; {counted}"
    line += "; eviction could help on " + ", ".join(helps[:5]) + (f" and {len(helps) - 5} more" if len(helps) > 5 else "") if helps else "; no eviction helps"
    return line


NODE_HEADERS = ["NODE", "KPE", "FIRST REJECTING RULE", "KUBE-SCHEDULER (NOT KPE'S)", "EVICTION", "SCORE"]
SCORE_HEADERS = ["NODE", "SCORE", "SCORE RULES (value x weight)"]


def _rows(data: dict[str, Any], limit: int) -> tuple[list[list[str]], list[list[str]], int]:
    nodes = ordered_nodes(data)
    shown = nodes if limit <= 0 else nodes[:limit]
    rows = []
    for n in shown:
        reason = n["reason"]
        audit = [f"{r['message'] or r['policy'] + '/' + r['rule']} ({r['effect']})" for r in n.get("rules") or [] if r["audit"] and "would have" in r["effect"]]
        if audit:
            reason = "\n".join([reason, *audit]) if reason else "\n".join(audit)
        score = "" if n["verdict"] != "pass" or n["score"] is None else str(n["score"])
        rows.append([n["node"], n["verdict"].upper(), reason, _kube(n), _eviction(n), score])
    scored = sorted((n for n in data.get("nodes") or [] if n["verdict"] == "pass"), key=lambda n: (-(n["score"] or 0), n["node"]))
    scored = scored if limit <= 0 else scored[:limit]
    score_rows = [[n["node"], "" if n["score"] is None else str(n["score"]), _contributions(n)] for n in scored]
    return rows, score_rows, len(nodes) - len(shown)


def render_text(data: dict[str, Any], *, limit: int = DEFAULT_LIMIT) -> str:
    rows, score_rows, more = _rows(data, limit)
    out = headline(data) + ["", render_table(NODE_HEADERS, rows)]
    if more:
        out.append(f"... {more} more node{'s' if more != 1 else ''} (--limit 0 shows all)")
    if score_rows:
        out += ["", "scores of the nodes kpe's filters keep (what prioritize answers, 0..10):", render_table(SCORE_HEADERS, score_rows)]
    return "\n".join(out)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", "<br>") or " "


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + " --- |" * len(headers)]
    lines += ["| " + " | ".join(_cell(str(c)) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def render_markdown(data: dict[str, Any], *, limit: int = DEFAULT_LIMIT) -> str:
    rows, score_rows, more = _rows(data, limit)
    head = headline(data)
    out = [f"### `{data['pod']}`", "", head[0].split("  ", 1)[1].strip("()"), ""]
    out += [f"- {line.strip()}" for line in head[1:]]
    out += ["", markdown_table(NODE_HEADERS, rows)]
    if more:
        out += ["", f"_{more} more node{'s' if more != 1 else ''} not shown._"]
    if score_rows:
        out += ["", "Scores of the nodes kpe's filters keep (0..10):", "", markdown_table(SCORE_HEADERS, score_rows)]
    return "\n".join(out)


__all__ = ["DEFAULT_LIMIT", "headline", "preemption_lines", "markdown_table", "ordered_nodes", "render_markdown", "render_text", "verdict_line"]
