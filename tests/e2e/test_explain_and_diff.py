"""Live explain and impact preview against a real API server and kube-scheduler: a pod
the scheduler left pending is explained from the cluster and through kpe's introspection
listener, and policy changes are previewed with ``kpe diff`` on a snapshot of that cluster."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from .conftest import Cluster
from .controlplane import kpe_executable, wait_until

POOLS = """apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {{name: pools}}
spec:
  match: {{namespaces: [{ns}]}}
  filters:
  - name: dedicated-pool
    expression: "node.metadata.?labels[?'kpe.dev/pool'].orValue('') in ['', pod.metadata.?labels[?'team'].orValue('')]"
    messageExpression: "'node pool is dedicated to team %s'.format([node.metadata.labels['kpe.dev/pool']])"
    unresolvable: true
"""

RETIRE = """apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {{name: retire}}
spec:
  match: {{namespaces: [{ns}]}}
  filters:
  - name: not-shared
    expression: "node.metadata.name != '{ns}-shared'"
    message: the shared node is being retired
"""


def kpe(*argv: str) -> tuple[int, str]:
    done = subprocess.run([kpe_executable(), *argv], capture_output=True, text=True, timeout=120)
    assert done.returncode in (0, 1), f"kpe {' '.join(argv)} exited {done.returncode}:\n{done.stderr}"
    return done.returncode, done.stdout


def unschedulable(cluster: Cluster, name: str) -> bool:
    conditions = cluster.api.get_pod(cluster.namespace, name).get("status", {}).get("conditions") or []
    return any(c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable" for c in conditions)


def test_a_pending_pod_explained_live_and_policy_changes_previewed_on_a_snapshot(cluster: Cluster, tmp_path: Path) -> None:
    ns = cluster.namespace
    cluster.write_policy("pools.yaml", POOLS.format(ns=ns))
    cluster.node(f"{ns}-pool-a", cpu="4", labels={"kpe.dev/pool": "a"})
    cluster.node(f"{ns}-shared", cpu="4")
    for i in range(4):  # the shared node is full of team b's pods
        cluster.api.pod(ns, f"b-{i}", cpu="1", priority_class="e2e-low", labels={"team": "b"}, node=f"{ns}-shared")
    server = cluster.start_kpe()
    cluster.start_scheduler(server)
    cluster.api.pod(ns, "b-new", cpu="2", priority_class="e2e-low", labels={"team": "b"})
    wait_until(lambda: unschedulable(cluster, "b-new"), 30, "kube-scheduler to give up on b-new")

    # Through the kpe replica kube-scheduler asked: its generation, its cache.
    tls = ["--ca-file", str(cluster.ca_file)]
    code, out = kpe("explain", "pod", f"{ns}/b-new", "--server", str(server.http.base_url), *tls, "--output", "json")
    served: dict[str, Any] = json.loads(out)
    assert code == 0 and served["generation"] == server.generation()
    nodes = {n["node"]: n for n in served["nodes"]}
    assert nodes[f"{ns}-pool-a"]["verdict"] == "unresolvable"
    assert nodes[f"{ns}-pool-a"]["reason"] == "pools/dedicated-pool: node pool is dedicated to team a"
    assert nodes[f"{ns}-shared"]["verdict"] == "pass"
    assert nodes[f"{ns}-shared"]["kubeScheduler"] == {"reasons": ["Insufficient cpu"], "unresolvable": False}
    assert nodes[f"{ns}-shared"]["eviction"] == {"possible": False, "reason": "no pod of lower priority runs there", "victims": []}
    assert served["feasibleNodes"] == [] and served["status"]["state"] == "pending"
    # What kube-scheduler recorded agrees: kpe's reason for pool-a, its own for the shared node.
    message = next(c["message"] for c in cluster.api.get_pod(ns, "b-new")["status"]["conditions"] if c["type"] == "PodScheduled")
    assert "node pool is dedicated to team a" in message and "Insufficient cpu" in message, message

    # From the cluster with the same policies: the same verdicts, printed for people.
    code, text = kpe("explain", "pod", f"{ns}/b-new", "--kubeconfig", str(cluster.plane.kubeconfig), "--policies", str(cluster.policies))
    assert code == 0
    assert "verdict: no node can take the pod now: 1 of 2 rejected by kpe's policies, 1 more by kube-scheduler's own filters (not kpe's)" in text
    assert f"{ns}-shared" in text and "Insufficient cpu" in text

    # Two proposed changes: the pool opened to every team, the shared node retired.
    opened, retired = tmp_path / "opened", tmp_path / "retired"
    opened.mkdir()
    retired.mkdir()
    (opened / "pools.yaml").write_text(POOLS.format(ns=ns).replace("in ['', pod.metadata.?labels[?'team'].orValue('')]", "in ['', 'a', 'b']"))
    (retired / "pools.yaml").write_text(POOLS.format(ns=ns))
    (retired / "retire.yaml").write_text(RETIRE.format(ns=ns))

    # A snapshot of this cluster with kpe's view; another anonymised but for the names the policies read.
    snapshot = tmp_path / "snapshot.json.gz"
    code, out = kpe("snapshot", "-o", str(snapshot), "--kubeconfig", str(cluster.plane.kubeconfig), "--server", str(server.http.base_url), *tls)
    assert code == 0 and f"kpe generation {server.generation()}" in out
    anonymised = tmp_path / "anonymised.json"
    assert kpe("snapshot", "-o", str(anonymised), "--kubeconfig", str(cluster.plane.kubeconfig), "--anonymise",
               "--keep-names-from", str(cluster.policies), "--keep-names-from", str(retired))[0] == 0

    # Opening the pool: the pending pod can go there, and team b's running pods could too.
    code, out = kpe("diff", "--from", str(cluster.policies), "--to", str(opened), "--snapshot", str(snapshot), "--output", "json")
    preview = json.loads(out)
    assert code == 1 and preview["counts"] == {"nodes-gained": 4, "schedulable": 1}
    opened_counts = preview["counts"]
    change = next(c for c in preview["changes"] if c["kind"] == "schedulable")
    assert change["pod"] == f"{ns}/b-new" and f"no longer rejected by pools/dedicated-pool (1: {ns}-pool-a)" in change["summary"]
    assert kpe("diff", "--from", str(cluster.policies), "--to", str(opened), "--snapshot", str(snapshot), "--fail-on", "unschedulable")[0] == 0

    # Retiring the shared node: team b's running pods could not be placed again anywhere.
    argv = ["diff", "--from", str(cluster.policies), "--to", str(retired), "--fail-on", "unschedulable", "--output", "json"]
    code, out = kpe(*argv, "--snapshot", str(snapshot))
    preview = json.loads(out)
    assert code == 1
    assert preview["counts"] == {"unschedulable": 4}
    assert preview["unschedulablePods"] == [f"{ns}/b-{i}" for i in range(4)]
    assert all(f"(including {ns}-shared, where it runs)" in c["summary"] for c in preview["changes"] if c["kind"] == "unschedulable")
    hidden = json.loads(kpe(*argv, "--snapshot", str(anonymised))[1])
    assert hidden["counts"] == preview["counts"], "anonymised, the same decisions"
    live = json.loads(kpe(*argv, "--kubeconfig", str(cluster.plane.kubeconfig))[1])
    assert live["counts"] == preview["counts"] and live["unschedulablePods"] == preview["unschedulablePods"]
    print(f"\n[e2e explain+diff] explained {ns}/b-new via kpe and the API; previews: opened {opened_counts}, retired {live['counts']}")
