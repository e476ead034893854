"""What each page of the web view shows, worked out from the introspection API's
documents (``server.introspection.documents``): pure functions of those documents, so
the pages render the same from a running kpe, from a snapshot, and from recorded
documents in the tests.

The pages group rather than list, so they stay readable at thousands of nodes and
pods: pending pods by the policy and rule that keeps them (as kube-scheduler's
"0/N nodes are available" counts reasons), a pod's nodes by verdict and reason, and
only the best-scored nodes as rows.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.reports.diagnosis.view import headline, ordered_nodes

SHOWN_PODS = 100  # pods listed in one group of the pending page; the rest are counted
SHOWN_NODES = 8  # node names shown in one verdict group of a pod's page
SCORED_ROWS = 20  # best-scored nodes shown with their scores per rule


def duration(seconds: float | None) -> str:
    """A wait as people read it: 45s, 12m 5s, 3h 20m, 2d 4h."""
    if seconds is None:
        return "?"
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60}s"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60}m"
    return f"{s // 86400}d {s % 86400 // 3600}h"


# -- pending pods -----------------------------------------------------------------------

@dataclass
class Group:
    """Pods kept by one cause: ``title`` (a policy/rule, a gate, kube-scheduler's reason)."""

    title: str
    kind: str  # gate | kpe filter | kube-scheduler | waiting | not tried
    policy: str | None
    pods: list[dict[str, Any]] = field(default_factory=list)

    @property
    def longest(self) -> str:
        return duration(max((p["waitingSeconds"] or 0.0 for p in self.pods), default=None))


_COUNTED = re.compile(r"(\d+) (.+?)(?=, \d+ |\.?$)")


def scheduler_reasons(message: str, policies: Iterable[str]) -> dict[str, int]:
    """Nodes per reason in kube-scheduler's "0/N nodes are available: ..." message: a kpe
    rule's reasons (``policy/rule: message``) counted under ``policy/rule``, the scheduler's
    own under their text."""
    _, _, listed = message.partition("nodes are available: ")
    listed = listed.split(" preemption:")[0].strip()
    out: dict[str, int] = {}
    names = sorted(policies, key=len, reverse=True)
    for count, reason in _COUNTED.findall(listed):
        label = next((reason.partition(":")[0] for p in names if reason.startswith(p + "/") and ":" in reason), reason.strip())
        out[label] = out.get(label, 0) + int(count)
    return out


def _top(counted: Mapping[str, int]) -> str:
    return min(counted.items(), key=lambda kv: (-kv[1], kv[0]))[0]


def cause(pod: Mapping[str, Any], policies: Sequence[str]) -> tuple[str, str, str | None, str]:
    """Why ``pod`` (a pending document's entry) waits: its group's title, kind and policy, and
    the detail its row shows."""
    held = pod.get("heldBy") or []
    if held:
        gate = held[0]
        return f"{gate['policy'] or 'a removed policy'}: gate {gate['gate']}", "gate", gate["policy"], str(gate["message"])
    last = pod.get("lastFilter")
    if last and last.get("rejections") and not last.get("passed"):
        counted = last["rejections"]
        top = _top(counted)
        detail = ", ".join(f"{n} {label}" for label, n in sorted(counted.items(), key=lambda kv: (-kv[1], kv[0])))
        return top, "kpe filter", top.partition("/")[0], f"kpe's last filter passed no node: {detail}"
    scheduled = pod.get("podScheduled") or {}
    if scheduled.get("reason") == "Unschedulable" and scheduled.get("message"):
        counted = scheduler_reasons(scheduled["message"], policies)
        kpe = {k: v for k, v in counted.items() if k.partition("/")[0] in policies and "/" in k}
        if kpe:
            top = _top(kpe)
            return top, "kpe filter", top.partition("/")[0], scheduled["message"]
        if counted:
            return f"kube-scheduler: {_top(counted)}", "kube-scheduler", None, scheduled["message"]
        return "kube-scheduler: unschedulable", "kube-scheduler", None, scheduled["message"]
    if scheduled.get("reason") == "SchedulerError":
        return "kube-scheduler: error", "kube-scheduler", None, scheduled.get("message") or ""
    if pod.get("gates"):
        return f"gates not kpe's: {', '.join(pod['gates'])}", "gate", None, "another controller's scheduling gates"
    if last and last.get("passed"):
        return "passed kpe's filter, not bound yet", "waiting", None, f"kpe's last filter passed {last['passed']} nodes"
    return "not tried yet", "not tried", None, "no attempt recorded: kube-scheduler has not tried it, or it tried before kpe's last restart"


def pending_groups(document: Mapping[str, Any], policies: Sequence[str], *, show_all: bool = False) -> list[Group]:
    """The pending pods grouped by cause, the largest group first; each group's pods longest
    waiting first, at most ``SHOWN_PODS`` of them unless ``show_all`` (``shown``/``count``)."""
    groups: dict[str, Group] = {}
    for pod in document.get("pods") or []:
        title, kind, policy, detail = cause(pod, policies)
        group = groups.setdefault(title, Group(title, kind, policy))
        group.pods.append({**pod, "detail": detail, "waited": duration(pod.get("waitingSeconds"))})
    ordered = sorted(groups.values(), key=lambda g: (-len(g.pods), g.title))
    for group in ordered:
        group.pods.sort(key=lambda p: (-(p.get("waitingSeconds") or 0.0), p["namespace"], p["name"]))
    return ordered


# -- one pod -------------------------------------------------------------------------------

@dataclass
class VerdictGroup:
    title: str
    kind: str  # feasible | kube-scheduler | rejected | unresolvable
    nodes: list[str]

    @property
    def count(self) -> int:
        return len(self.nodes)

    @property
    def shown(self) -> str:
        more = len(self.nodes) - SHOWN_NODES
        return ", ".join(self.nodes[:SHOWN_NODES]) + (f" and {more} more" if more > 0 else "")


def verdict_groups(data: Mapping[str, Any]) -> list[VerdictGroup]:
    """A pod's nodes by verdict and reason (one group per reason, largest first): feasible,
    passed by kpe and rejected by kube-scheduler's checked filters, rejected by a rule,
    unresolvable."""
    feasible = set(data.get("feasibleNodes") or [])
    groups: dict[tuple[str, str], list[str]] = {}
    for node in data.get("nodes") or []:
        name = node["node"]
        if name in feasible:
            key = ("feasible", "feasible: kpe's policies and kube-scheduler's filters pass")
        elif node["verdict"] == "pass":
            reasons = (node.get("kubeScheduler") or {}).get("reasons") or ["rejected"]
            key = ("kube-scheduler", f"kube-scheduler: {reasons[0]}")
        else:
            key = ("unresolvable" if node["verdict"] == "unresolvable" else "rejected", node.get("reason") or node["verdict"])
        groups.setdefault(key, []).append(name)
    order = {"feasible": 0, "rejected": 1, "unresolvable": 2, "kube-scheduler": 3}
    return [VerdictGroup(title, kind, sorted(nodes)) for (kind, title), nodes in
            sorted(groups.items(), key=lambda kv: (order[kv[0][0]], -len(kv[1]), kv[0][1]))]


@dataclass
class ScoreRow:
    node: str
    score: float
    cells: list[tuple[float | None, str]]  # per rule: the rule's score (0-100) or None, and its title


def score_rows(data: Mapping[str, Any]) -> tuple[list[str], list[ScoreRow], int]:
    """The feasible nodes best-scored first (at most ``SCORED_ROWS``): the score rules as
    columns (``policy/rule xweight``), each node's score per rule, and how many more there are."""
    feasible = ordered_nodes(dict(data))[: len(data.get("feasibleNodes") or [])]
    columns: list[str] = []
    for node in feasible:
        for c in node.get("contributions") or []:
            title = f"{c['policy']}/{c['rule']} x{c['weight']}"
            if title not in columns:
                columns.append(title)
    rows = []
    for node in feasible[:SCORED_ROWS]:
        by = {f"{c['policy']}/{c['rule']} x{c['weight']}": c["score"] for c in node.get("contributions") or []}
        rows.append(ScoreRow(node["node"], node.get("score") or 0, [(by.get(col), col) for col in columns]))
    return columns, rows, max(0, len(feasible) - SCORED_ROWS)


def pod_summary(data: Mapping[str, Any]) -> list[str]:
    """The lines ``kpe explain pod`` prints above its table: the same words on the page."""
    return headline(dict(data))


# -- decisions ------------------------------------------------------------------------------

def decision_summary(entry: Mapping[str, Any]) -> str:
    """One line for a logged decision."""
    verb = entry.get("verb")
    if verb == "filter":
        rejections = entry.get("rejections") or {}
        top = ", ".join(f"{n} {label}" for label, n in sorted(rejections.items(), key=lambda kv: (-kv[1], kv[0]))[:3])
        return f"passed {entry.get('passed', 0)}" + (f"; rejected: {top}" if top else "")
    if verb == "prioritize":
        scores = entry.get("scores") or []
        best = sorted((s for s in scores if isinstance(s, Mapping)), key=lambda s: (-(s.get("Score") or 0), str(s.get("Host"))))[:3]
        return f"{len(scores)} nodes scored" + ("; best: " + ", ".join(f"{s.get('Host')}={s.get('Score')}" for s in best) if best else "")
    if verb == "bind":
        return f"to {entry.get('node')}" + (f": {entry['error']}" if entry.get("error") else "")
    if verb == "preempt":
        return f"{len(entry.get('candidates') or [])} candidate nodes kept" + (f", {len(entry['rejected'])} kept out" if entry.get("rejected") else "")
    if verb == "admit":
        return "admitted" if entry.get("admitted") else "gated: " + ", ".join(entry.get("gates") or [])
    return ""


def filter_decisions(entries: Iterable[Mapping[str, Any]], *, policy: str | None) -> list[Mapping[str, Any]]:
    """The entries a policy took part in (it matched the pod), or all of them."""
    if not policy:
        return list(entries)
    return [e for e in entries if policy in (e.get("policies") or []) or any(str(k).startswith(policy + "/") for k in e.get("rejections") or {})]
