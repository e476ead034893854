"""Cost of one pass of the PolicyReports of Audit-mode policies (``--policy-reports``):
``engine.reports.audit.audit_findings`` over the pods the reporter keeps, then the reports
(``engine.reports.policyreport``), with every shipped policy switched to Audit.

    python bench/audit_reports_bench.py                           # 1,000 nodes, 3 pods each, 100 pending
    python bench/audit_reports_bench.py --nodes 5000 --per-node 30 --pending 1000

Bound pods are judged on their own node (one evaluation per matching rule, with the pod
taken out of its node's ``nodeInfo``); pending ones on every node until a rule keeps one,
and at their gates. The pass runs on the reporter's own thread, at most once per
``--policy-report-interval-s``; it prints the wall time of the findings and of the
reports, best of ``--repeat``, and how many findings and reports a pass made.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(Path(__file__).parent)]

import cluster  # noqa: E402
from engine.cluster.nodeinfo import node_info_map  # noqa: E402
from engine.decisions.evaluation import current_time  # noqa: E402
from engine.policy.loader import load  # noqa: E402
from engine.reports.audit import FindingsMemo, audit_findings  # noqa: E402
from engine.reports.policyreport import AuditReports  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--per-node", type=int, default=3)
    parser.add_argument("--pending", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--audit", default="", help="the shipped policies to switch to Audit, comma-separated (default: all)")
    args = parser.parse_args()
    shipped = load([ROOT / "policies"])
    chosen = set(args.audit.split(",")) if args.audit else {p.name for p in shipped.policies}
    audit = dataclasses.replace(shipped, policies=tuple(dataclasses.replace(p, enforce=False) for p in shipped.policies if p.name in chosen))
    nodes = cluster.nodes(args.nodes)
    bound = cluster.pods_on(nodes, args.per_node)
    pending = []
    for i in range(args.pending):
        pod = cluster.scheduling_pod()
        pod["metadata"].update(name=f"pending-{i}", uid=f"uid-pending-{i}")
        pending.append(pod)
    pods = bound + pending
    info = node_info_map(nodes, bound)
    best_find = best_again = best_build = float("inf")
    findings: list = []
    reports: dict = {}
    memo = FindingsMemo()
    for _ in range(args.repeat):
        memo.keep_only(set())
        start = time.perf_counter()
        findings = audit_findings(audit, pods, nodes, node_info=info, now=current_time(), cluster_pods=pods, memo=memo)
        middle = time.perf_counter()
        again = audit_findings(audit, pods, nodes, node_info=info, now=current_time(), cluster_pods=pods, memo=memo)
        after = time.perf_counter()
        assert again == findings
        reports = AuditReports().build(findings, now_s=0)
        end = time.perf_counter()
        best_find, best_again, best_build = min(best_find, middle - start), min(best_again, after - middle), min(best_build, end - after)
    print(f"{len(audit)} Audit policies, {len(nodes)} nodes, {len(bound)} bound pods, {len(pending)} pending")
    print(f"first pass: {best_find * 1000:.0f} ms ({best_find / len(pods) * 1e6:.0f} us a pod), {len(findings)} findings")
    print(f"next pass, nothing changed: {best_again * 1000:.0f} ms (bound pods' findings remembered)")
    print(f"reports: {best_build * 1000:.1f} ms, {len(reports)} report(s), {sum(len(r['results']) for r in reports.values())} results listed")


if __name__ == "__main__":
    main()
