"""labelSelector and fieldSelector, parsed and matched as kube-apiserver does."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from .wire import Obj, Resource, bad_request

Predicate = Callable[[Obj], bool]

_SET_RE = re.compile(r"^\s*(!?)\s*([A-Za-z0-9_./-]+)\s*(?:(notin|in)\s*\(([^)]*)\))?\s*$")
_EQ_RE = re.compile(r"^\s*([A-Za-z0-9_./-]+)\s*(==|!=|=)\s*([A-Za-z0-9_.-]*)\s*$")


def _split_top(text: str) -> list[str]:
    """Split on commas outside parentheses."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return [p for p in parts if p.strip()]


def label_selector(text: str) -> Predicate:
    reqs: list[Callable[[dict[str, str]], bool]] = []
    for part in _split_top(text or ""):
        m = _EQ_RE.match(part)
        if m:
            key, op, val = m.groups()
            if op == "!=":
                reqs.append(lambda ls, k=key, v=val: ls.get(k) != v)
            else:
                reqs.append(lambda ls, k=key, v=val: ls.get(k) == v)
            continue
        m = _SET_RE.match(part)
        if not m:
            raise bad_request(f"unable to parse requirement: found '{part.strip()}', expected: identifier")
        neg, key, op, values = m.groups()
        if op:
            if neg:
                raise bad_request(f"unable to parse requirement: found '{part.strip()}'")
            vals = {v.strip() for v in values.split(",") if v.strip()}
            if op == "in":
                reqs.append(lambda ls, k=key, vs=vals: ls.get(k) in vs)
            else:
                reqs.append(lambda ls, k=key, vs=vals: ls.get(k) not in vs)
        elif neg:
            reqs.append(lambda ls, k=key: k not in ls)
        else:
            reqs.append(lambda ls, k=key: k in ls)

    def match(obj: Obj) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return all(r(labels) for r in reqs)

    return match


def _field_value(obj: Obj, path: str) -> str:
    if path == "source":  # core Event's "source" field label is source.component
        path = "source.component"
    if path == "status.podIPs":
        ips = (obj.get("status") or {}).get("podIPs") or []
        return ",".join(str(i.get("ip", "")) for i in ips if isinstance(i, dict))
    cur: Any = obj
    for part in path.split("."):
        cur = cur.get(part) if isinstance(cur, dict) else None
    if cur is None:
        # spec.unschedulable and spec.hostNetwork are bools that default to false
        return "false" if path in ("spec.unschedulable", "spec.hostNetwork") else ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return str(cur)


def field_selector(text: str, res: Resource) -> Predicate:
    reqs: list[tuple[str, bool, str]] = []
    for part in _split_top(text or ""):
        m = re.match(r"^\s*([^=!\s]+)\s*(==|!=|=)\s*(.*?)\s*$", part)
        if not m:
            raise bad_request(f"invalid selector: '{text}'; can't understand '{part}'")
        key, op, val = m.groups()
        if key not in res.field_labels:
            raise bad_request(f'"{key}" is not a known field selector: only "' + '", "'.join(res.field_labels) + '"'
                              if res.group else f"field label not supported: {key}")
        reqs.append((key, op == "!=", val))

    def match(obj: Obj) -> bool:
        return all((_field_value(obj, k) != v) if neg else (_field_value(obj, k) == v) for k, neg, v in reqs)

    return match


def selector(params: dict[str, str], res: Resource) -> tuple[Predicate, bool]:
    """The combined predicate, and whether it selects everything."""
    ls, fs = params.get("labelSelector", ""), params.get("fieldSelector", "")
    if not ls.strip() and not fs.strip():
        return (lambda obj: True), True
    lp, fp = label_selector(ls), field_selector(fs, res)
    return (lambda obj: lp(obj) and fp(obj)), False
