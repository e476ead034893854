"""How ``kpe diff`` prints an impact preview (``Impact.to_dict``): a table for
terminals and CI logs, and Markdown short enough for a pull-request comment
(at most ``max_rows`` changes, the rest counted by kind)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from engine.reports.diagnosis.view import markdown_table
from engine.reports.tables import render_table

KIND_WORDS = {
    "unschedulable": "would become unschedulable",
    "schedulable": "would become schedulable",
    "nodes-lost": "lose nodes",
    "nodes-gained": "gain nodes",
    "gate": "gate changes",
    "preemption": "preemption changes",
    "ranking": "ranking changes",
}
DEFAULT_MAX_ROWS = 20


def summary(data: dict[str, Any]) -> str:
    ex = data["examined"]
    sampled = f"{ex['sampledRunningPods']} of {ex['runningPods']} running pods"
    scope = f"{ex['pendingPods']} pending pods and {sampled} on {ex['nodes']} nodes"
    if not data["changes"]:
        return f"no change for the {scope}"
    counts = ", ".join(f"{n} {KIND_WORDS.get(kind, kind)}" for kind, n in data["counts"].items())
    pods = data["changedPods"]
    return f"{pods} pod{'s' if pods != 1 else ''} change, of the {scope}: {counts}"


def _row(change: dict[str, Any]) -> list[str]:
    pod = change["pod"] + (f" (on {change['runningOn']})" if change.get("runningOn") else "")
    return [pod, change["kind"], change["summary"]]


HEADERS = ["POD", "CHANGE", "DETAIL"]


def render_text(data: dict[str, Any], *, source: str = "", max_rows: int = 0) -> str:
    lines = [f"kpe diff {data['from']} -> {data['to']}" + (f" on {source}" if source else "")]
    lines += [f"note: {n}" for n in data.get("notes") or []]
    lines.append(summary(data))
    changes = data["changes"]
    if changes:
        shown = changes if max_rows <= 0 else changes[:max_rows]
        lines += ["", render_table(HEADERS, [_row(c) for c in shown])]
        if len(shown) < len(changes):
            lines.append(_more(changes[len(shown):]))
    return "\n".join(lines)


def _more(rest: list[dict[str, Any]]) -> str:
    by_kind = Counter(c["kind"] for c in rest)
    return f"... and {len(rest)} more: " + ", ".join(f"{n} {kind}" for kind, n in by_kind.items())


def render_markdown(data: dict[str, Any], *, source: str = "", max_rows: int = DEFAULT_MAX_ROWS) -> str:
    unschedulable = data.get("unschedulablePods") or []
    mark = ":x:" if unschedulable else (":warning:" if data["changes"] else ":white_check_mark:")
    lines = [f"### {mark} kpe diff `{data['from']}` → `{data['to']}`", ""]
    if source:
        lines += [f"On {source}.", ""]
    lines += [f"> {n}" for n in data.get("notes") or []]
    lines.append(f"**{summary(data)}**")
    changes = data["changes"]
    if changes:
        shown = changes if max_rows <= 0 else changes[:max_rows]
        lines += ["", markdown_table([h.lower() for h in HEADERS], [_row(c) for c in shown])]
        if len(shown) < len(changes):
            lines += ["", f"_{_more(changes[len(shown):])}; `kpe diff --output json` lists them all._"]
    return "\n".join(lines)


__all__ = ["DEFAULT_MAX_ROWS", "render_markdown", "render_text", "summary"]
