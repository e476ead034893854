"""A gated pod's PodScheduled condition on the real control planes, and how ``kpe explain pod``
reads it. The API server writes ``SchedulingGated`` when a pod is created with gates; kube-scheduler
runs its PreEnqueue plugins (SchedulingGates rejects the pod) and, on 1.32 as on 1.37.2, writes
nothing of that rejection into the pod's status (1.37.2 has no SchedulerPreEnqueuePodStatus
feature). The condition changes only when kube-scheduler has tried the pod: ``Unschedulable``, with
kpe's reason in the message. ``kpe explain pod`` must call the first no rejection and the second
kube-scheduler's last attempt."""

from __future__ import annotations

import re
import time

from .conftest import Cluster
from .controlplane import wait_until
from .test_explain_and_diff import kpe

GATE = "kpe.dev/ready"
POLICY = """apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {{name: ready}}
spec:
  match:
    namespaces: [{ns}]
    podSelector: {{matchLabels: {{app: held}}}}
  admission:
    gate: {gate}
    expression: "pod.metadata.?labels[?'ready'].orValue('') == 'yes'"
    message: waiting for the label ready=yes
  filters:
  - name: open-node
    expression: "node.metadata.?labels[?'open'].orValue('') == 'yes'"
    message: the node is closed
"""
APISERVER_MESSAGE = "Scheduling is blocked due to non-empty scheduling gates"


def scheduled(cluster: Cluster, name: str) -> dict[str, str]:
    conditions = cluster.api.get_pod(cluster.namespace, name).get("status", {}).get("conditions") or []
    found = next((c for c in conditions if c["type"] == "PodScheduled"), {})
    return {k: found.get(k, "") for k in ("status", "reason", "message")}


def test_a_gated_pod_s_condition_is_the_api_server_s_not_a_rejection_and_explain_pod_says_so(cluster: Cluster) -> None:
    ns = cluster.namespace
    cluster.write_policy("ready.yaml", POLICY.format(ns=ns, gate=GATE))
    cluster.node(f"{ns}-closed")
    server = cluster.start_kpe()
    cluster.register_webhook(server)
    # -v 4: kube-scheduler logs each PreEnqueue verdict, so the test knows it has judged the pod.
    cluster.start_scheduler(server, flags=("-v", "4"))
    created = cluster.api.pod(ns, "waits", labels={"app": "held"})
    assert [g["name"] for g in created["spec"]["schedulingGates"]] == [GATE]

    pre_enqueue = re.compile(rf'"Status after running PreEnqueue plugin" pod="{ns}/waits" plugin="SchedulingGates"')
    wait_until(lambda: pre_enqueue.search(cluster.scheduler_log()), 30, "kube-scheduler's SchedulingGates plugin to reject the pod")
    time.sleep(1.0)  # a status write would follow the verdict within the API dispatcher's round trip
    assert scheduled(cluster, "waits") == {"status": "False", "reason": "SchedulingGated", "message": APISERVER_MESSAGE}

    args = ("--kubeconfig", str(cluster.plane.kubeconfig), "--policies", str(cluster.policies))
    code, text = kpe("explain", "pod", f"{ns}/waits", *args)
    assert code == 0
    lines = text.splitlines()
    assert lines[1:4] == [
        "state: gated",
        "PodScheduled: False, reason SchedulingGated - written by the API server when the pod was created with scheduling gates: "
        "not a rejection, kube-scheduler has not tried the pod",
        f"  message: {APISERVER_MESSAGE}",
    ], text
    assert f"gate {GATE} (kpe's, policy ready): held - ready: waiting for the label ready=yes" in lines

    # Admitted: kpe lifts its gate, kube-scheduler tries the pod and kpe's filter rejects the only node.
    cluster.api.patch(f"/api/v1/namespaces/{ns}/pods/waits", {"metadata": {"labels": {"ready": "yes"}}})
    wait_until(lambda: scheduled(cluster, "waits")["reason"] == "Unschedulable", 30, "kube-scheduler to try the admitted pod")
    assert "ready/open-node: the node is closed" in scheduled(cluster, "waits")["message"]
    code, text = kpe("explain", "pod", f"{ns}/waits", *args)
    lines = text.splitlines()
    assert lines[1:3] == [
        "state: pending",
        "PodScheduled: False, reason Unschedulable - kube-scheduler's last attempt found no node (its plugins' and extenders' reasons, kpe's among them)",
    ], text
    assert lines[3].startswith("  message: 0/1 nodes are available: ") and "ready/open-node: the node is closed" in lines[3]
    print(f"\n[e2e scheduling status] {cluster.plane.binaries.version}: gated pod kept the API server's SchedulingGated condition after kube-scheduler's PreEnqueue rejection")
