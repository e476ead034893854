"""PolicyReports of an Audit-mode policy through the real API server and kube-scheduler: kpe
started with --policy-reports, holding only the deploy/policy-reports component's RBAC,
writes one report in the pods' namespace naming each pod and rule the policy would have
rejected, and the report shrinks as the pods go, then goes with the last of them."""

from __future__ import annotations

import json
import time
from typing import Any

import yaml

from .conftest import Cluster
from .controlplane import REPO, wait_until
from .crds import CRDS, established

CRD = REPO / "tests" / "data" / "crds" / "wgpolicyk8s.io_policyreports.yaml"
POLICY = """apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {{name: gpu-only}}
spec:
  mode: Audit
  match:
    namespaces: [{namespace}]
    podSelector: {{matchLabels: {{app: trainer}}}}
  filters:
  - name: gpu-node
    expression: "node.metadata.?labels[?'e2e/gpu'].orValue('') == 'true'"
    messageExpression: "'node ' + node.metadata.name + ' has no GPU'"
"""


def install_policy_report_crd(cluster: Cluster) -> None:
    crd = yaml.safe_load(CRD.read_text())
    cluster.api.apply(CRDS, crd)
    wait_until(lambda: established(cluster.plane, crd["metadata"]["name"]), 30, "the PolicyReport CRD to be established")
    wait_until(lambda: cluster.api.http.get("/apis/wgpolicyk8s.io/v1alpha2/policyreports").status_code == 200, 30, "policyreports to be served")


def report(cluster: Cluster) -> dict[str, Any] | None:
    answer = cluster.api.http.get(f"/apis/wgpolicyk8s.io/v1alpha2/namespaces/{cluster.namespace}/policyreports/kpe-audit")
    return answer.json() if answer.status_code == 200 else None


def named(found: dict[str, Any] | None) -> list[str]:
    return sorted(r["resources"][0]["name"] for r in (found or {}).get("results", []))


def test_an_audit_policy_s_report_names_the_pods_it_would_have_rejected_and_shrinks_as_they_go(cluster: Cluster) -> None:
    ns = cluster.namespace
    install_policy_report_crd(cluster)
    cluster.plane.apply_rbac(REPO / "deploy" / "policy-reports" / "rbac.yaml")
    cluster.write_policy("gpu-only.yaml", POLICY.format(namespace=ns))
    for i in range(2):
        cluster.node(f"{ns}-plain-{i}")  # no GPU node: the Audit rule rejects both, and decides nothing
    kpe = cluster.start_kpe(extra=("--policy-reports", "--policy-report-interval-s", "0.5"))
    cluster.start_scheduler(kpe)
    pods = ["trainer-0", "trainer-1", "trainer-2"]
    for name in pods:
        cluster.api.pod(ns, name, labels={"app": "trainer"})
    cluster.api.pod(ns, "web-0", labels={"app": "web"})
    bound = cluster.wait_bound([*pods, "web-0"])

    found = wait_until(lambda: (r := report(cluster)) and named(r) == pods and r, 30, "a report naming the three trainers")
    shown = {k: found[k] for k in ("apiVersion", "kind", "summary", "results")}
    shown["metadata"] = {k: found["metadata"][k] for k in ("name", "namespace", "labels")}
    print(f"\n[e2e policy reports] {cluster.plane.binaries.version}: the PolicyReport as read back:\n{json.dumps(shown, indent=2)}")
    assert found["summary"] == {"pass": 0, "fail": 3, "warn": 0, "error": 0, "skip": 0}
    assert found["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "kpe"}
    for result in found["results"]:
        pod = result["resources"][0]["name"]
        node = bound[pod]
        assert {k: v for k, v in result.items() if k not in ("resources", "timestamp")} == {
            "source": "kpe", "policy": "gpu-only", "rule": "gpu-node", "category": "filter", "result": "fail", "scored": False,
            "message": f"would have kept the pod off its node {node}: gpu-only/gpu-node: node {node} has no GPU",
            "properties": {"mode": "Audit", "node": node},
        }
        assert result["resources"][0]["uid"] == cluster.api.get_pod(ns, pod)["metadata"]["uid"]

    cluster.api.delete(f"/api/v1/namespaces/{ns}/pods/trainer-1", grace=0)
    wait_until(lambda: named(report(cluster)) == ["trainer-0", "trainer-2"], 30, "the report to drop the deleted pod")
    assert report(cluster)["summary"]["fail"] == 2  # type: ignore[index]
    for name in ("trainer-0", "trainer-2"):
        cluster.api.delete(f"/api/v1/namespaces/{ns}/pods/{name}", grace=0)
    wait_until(lambda: report(cluster) is None, 30, "the report to go with the last pod it named")
    # Batched: the namespace's one report was created once, then replaced or deleted, never written per pod event.
    assert kpe.metric("kpe_policy_report_writes_total", action="created") == 1
    assert kpe.metric("kpe_policy_report_writes_total", action="deleted") >= 1
    assert kpe.metric("kpe_policy_report_writes_total", action="failed") == 0


def test_the_report_covers_pods_created_bound_and_survives_a_restart_and_a_leader_change(cluster: Cluster) -> None:
    """A background scan: pods kpe never saw pending (created bound, as a static pod or another
    scheduler's) are reported too, and a restarted kpe or a new leader computes before it
    writes: sampled every 0.5 s, the report never holds fewer results than the pods it names."""
    import threading

    ns = cluster.namespace
    install_policy_report_crd(cluster)
    cluster.plane.apply_rbac(REPO / "deploy" / "policy-reports" / "rbac.yaml")
    cluster.write_policy("gpu-only.yaml", POLICY.format(namespace=ns))
    nodes = [f"{ns}-plain-{i}" for i in range(2)]
    for node in nodes:
        cluster.node(node)
    lease = f"{ns}-reports"[-63:]
    flags = ("--policy-reports", "--policy-report-interval-s", "0.5", "--lease-name", lease, "--lease-duration-s", "3")
    first = cluster.start_kpe(identity="kpe-a", extra=flags)
    cluster.start_scheduler(first)
    scheduled = ["trainer-0", "trainer-1"]
    for name in scheduled:
        cluster.api.pod(ns, name, labels={"app": "trainer"})
    created_bound = ["trainer-static-0", "trainer-static-1"]
    for i, name in enumerate(created_bound):
        cluster.api.pod(ns, name, labels={"app": "trainer"}, node=nodes[i % 2])
    cluster.wait_bound(scheduled + created_bound)
    everyone = sorted(scheduled + created_bound)
    wait_until(lambda: named(report(cluster)) == everyone, 30, "a report naming the scheduled and the created-bound trainers")

    counts: list[int] = []
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            counts.append(len(named(report(cluster))))
            done.wait(0.5)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        # A restart of the only replica (SIGTERM: it gives the Lease up), then a second replica,
        # and the Lease moved to it by stopping the first.
        first.process.stop()
        first = cluster.start_kpe(identity="kpe-a", extra=flags, ports=first.ports)
        second = cluster.start_kpe(identity="kpe-b", extra=flags)
        wait_until(lambda: first.metric("kpe_gate_controller_leader") == 1, 30, "the restarted replica to lead")
        time.sleep(2)  # its passes run
        first.process.stop()
        wait_until(lambda: second.metric("kpe_gate_controller_leader") == 1, 30, "the Lease to move to the second replica")
        time.sleep(2)
        assert named(report(cluster)) == everyone
        # It shrinks as pods go, and only then.
        cluster.api.delete(f"/api/v1/namespaces/{ns}/pods/trainer-static-0", grace=0)
        wait_until(lambda: len(named(report(cluster))) == 3, 30, "the report to drop the deleted pod")
        time.sleep(1)
    finally:
        done.set()
        sampler.join()
    print(f"\n[e2e policy reports across restarts] {cluster.plane.binaries.version}: results sampled every 0.5 s: {counts}")
    assert counts and counts[0] == 4 and min(counts[: counts.index(3)] if 3 in counts else counts) == 4, counts
    assert counts == sorted(counts, reverse=True), "never fewer, then more"
    assert second.metric("kpe_policy_report_writes_total", action="created") == 0, "the new leader found the report as it would write it"
