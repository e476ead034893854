"""Audit findings as PolicyReports (wgpolicyk8s.io/v1alpha2), the format Kyverno writes and
Policy Reporter and ``kubectl get policyreport`` show.

One report per namespace, named ``kpe-audit``: the findings of every Audit policy about
that namespace's pods, one result per pod, policy and rule. One report per namespace (not
per policy) keeps the writes of a pass to one per namespace that changed, and a namespace's
owners read one object. A report holds at most ``max_results`` results (the first in
namespace, pod, policy, rule order); its ``summary`` counts them all, and the annotation
``kpe.dev/results-left-out`` says how many it does not list. A namespace without findings
has no report.

A result's ``timestamp`` is when kpe first found it with that message, so a report is the
same object from one pass to the next until a finding comes, goes or changes: an unchanged
report is never written again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from engine.reports.audit import ERROR, FAIL, Finding

API_VERSION = "wgpolicyk8s.io/v1alpha2"
REPORT_NAME = "kpe-audit"
MANAGED_BY = {"app.kubernetes.io/managed-by": "kpe"}
LEFT_OUT = "kpe.dev/results-left-out"
SOURCE = "kpe"
MAX_RESULTS = 1000  # about 500 KB of results: well under the 1.5 MB an object may have in etcd

Seen = tuple[tuple[str, str, str, str], str]  # a finding's key and message


class AuditReports:
    """Builds each namespace's report from a pass's findings, remembering when each finding
    was first seen (forgotten once it is gone)."""

    def __init__(self, *, max_results: int = MAX_RESULTS) -> None:
        self.max_results = max_results
        self._first_seen: dict[Seen, int] = {}

    def recall(self, reports: Iterable[Mapping[str, Any]]) -> None:
        """Take each result's first-found time from reports kpe wrote before (a new leader's,
        or a restarted kpe's, first pass): the same findings then give the same reports, and
        nothing is written again."""
        for report in reports:
            namespace = str((report.get("metadata") or {}).get("namespace") or "")
            for found in report.get("results") or []:
                resources = found.get("resources") or [{}]
                key = (namespace, str(resources[0].get("name") or ""), str(found.get("policy") or ""), str(found.get("rule") or ""))
                seconds = (found.get("timestamp") or {}).get("seconds")
                if isinstance(seconds, int):
                    self._first_seen.setdefault((key, str(found.get("message") or "")), seconds)

    def build(self, findings: Iterable[Finding], *, now_s: float) -> dict[str, dict[str, Any]]:
        """The PolicyReport of every namespace with findings, by namespace."""
        by_namespace: dict[str, list[Finding]] = {}
        seen: dict[Seen, int] = {}
        for finding in sorted(findings):
            key: Seen = (finding.key, finding.message)
            seen[key] = self._first_seen.get(key, int(now_s))
            by_namespace.setdefault(finding.namespace, []).append(finding)
        self._first_seen = seen
        return {ns: self._report(ns, found, seen) for ns, found in sorted(by_namespace.items())}

    def _report(self, namespace: str, found: list[Finding], seen: Mapping[Seen, int]) -> dict[str, Any]:
        listed = found[: self.max_results]
        metadata: dict[str, Any] = {"name": REPORT_NAME, "namespace": namespace, "labels": dict(MANAGED_BY)}
        if len(found) > len(listed):
            metadata["annotations"] = {LEFT_OUT: str(len(found) - len(listed))}
        return {
            "apiVersion": API_VERSION,
            "kind": "PolicyReport",
            "metadata": metadata,
            "summary": {
                "pass": 0,
                "fail": sum(1 for f in found if f.result == FAIL),
                "warn": 0,
                "error": sum(1 for f in found if f.result == ERROR),
                "skip": 0,
            },
            "results": [result(f, seen[(f.key, f.message)]) for f in listed],
        }


def result(finding: Finding, first_seen_s: int) -> dict[str, Any]:
    """One PolicyReportResult: the pod as its resource, kpe's policy and rule, the message."""
    properties = {"mode": "Audit"}
    if finding.node:
        properties["node"] = finding.node
    pod = {"apiVersion": "v1", "kind": "Pod", "namespace": finding.namespace, "name": finding.pod}
    if finding.uid:
        pod["uid"] = finding.uid
    return {
        "source": SOURCE,
        "policy": finding.policy,
        "rule": finding.rule,
        "category": finding.category,
        "result": finding.result,
        "scored": False,
        "message": finding.message,
        "properties": properties,
        "resources": [pod],
        "timestamp": {"seconds": first_seen_s, "nanos": 0},
    }


def same_report(written: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    """Whether the report in the cluster already says what ``wanted`` says (the API server's
    own metadata aside)."""
    meta, want = written.get("metadata") or {}, wanted.get("metadata") or {}
    return (
        written.get("summary") == wanted.get("summary")
        and (written.get("results") or []) == wanted.get("results")
        and (meta.get("annotations") or {}).get(LEFT_OUT) == (want.get("annotations") or {}).get(LEFT_OUT)
        and all((meta.get("labels") or {}).get(k) == v for k, v in MANAGED_BY.items())
    )
