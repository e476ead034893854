"""Admission through the real API server: the webhook over HTTPS adds kpe's gate at
creation, the gate controller lifts it when the quota has room, and a burst of pods
created at once never overruns the quota (the shipped gpu-quota policy)."""

from __future__ import annotations

import time

from .controlplane import wait_until
from .conftest import Cluster

GATE = "kpe.dev/gpu-quota"


def gpus_bound(cluster: Cluster) -> int:
    total = 0
    for pod in cluster.api.pods(cluster.namespace):
        if pod["spec"].get("nodeName") and not pod["metadata"].get("deletionTimestamp"):
            total += sum(int((c.get("resources") or {}).get("limits", {}).get("nvidia.com/gpu", "0")) for c in pod["spec"]["containers"])
    return total


def gated(cluster: Cluster) -> list[str]:
    return sorted(p["metadata"]["name"] for p in cluster.api.pods(cluster.namespace) if any(g["name"] == GATE for g in p["spec"].get("schedulingGates") or []))


def test_a_burst_of_training_pods_never_overruns_the_team_s_gpu_quota(cluster: Cluster) -> None:
    ns = cluster.namespace
    # The shipped policy, matching this test's namespace instead of ml-train.
    cluster.write_policy("gpu-quota.yaml", _shipped_quota(ns))
    for i in range(3):
        cluster.node(f"{ns}-gpu-{i}", extra={"nvidia.com/gpu": "8"})
    kpe = cluster.start_kpe()
    cluster.register_webhook(kpe)
    cluster.start_scheduler(None)

    labels = {"team": "vision", "kpe.dev/workload": "training"}
    for i in range(5):  # 5 x 4 GPUs against a quota of 16, all at once
        pod = cluster.api.pod(ns, f"train-{i}", labels=labels, limits={"nvidia.com/gpu": "4"})
        assert [g["name"] for g in pod["spec"]["schedulingGates"]] == [GATE], "the webhook gates every training pod at creation"
        assert pod["metadata"]["annotations"]["kpe.dev/gates"] == GATE
    wait_until(lambda: len(cluster.bound()) == 4, 30, "4 of the 5 pods to be released and bound")
    time.sleep(1.0)  # a second pass (resync, the binds' events) must not release the fifth
    assert gpus_bound(cluster) == 16
    assert len(gated(cluster)) == 1
    [held] = gated(cluster)
    assert held == "train-4", "oldest first: the last one created waits"
    waiting = kpe.http.get("/apis/v1/gated").json()["pods"]
    assert [p["name"] for p in waiting] == ["train-4"], kpe.http.get("/apis/v1/gated").json()
    assert "team vision uses 16 of its 16 GPUs; this pod needs 4 more" in str(waiting)

    # Quota freed: the held pod is released and scheduled.
    victim = sorted(cluster.bound())[0]
    deleted = time.monotonic()
    cluster.api.delete(f"/api/v1/namespaces/{ns}/pods/{victim}", grace=0)
    wait_until(lambda: not gated(cluster), 15, "the held pod's gate to be lifted after the delete")
    released = time.monotonic() - deleted
    cluster.wait_bound([held])
    assert gpus_bound(cluster) == 16
    events = cluster.api.get(f"/api/v1/namespaces/{ns}/events")["items"]
    assert any(e["reason"] == "SchedulingGateLifted" and e["involvedObject"]["name"] == held for e in events)
    print(f"\n[e2e admission] burst: 4 of 5 released, 16/16 GPUs bound; gate lifted {released:.2f}s after the delete")


def _shipped_quota(namespace: str) -> str:
    from .controlplane import REPO

    text = (REPO / "policies" / "gpu-quota.yaml").read_text()
    assert "namespaces: [ml-train]" in text
    return text.replace("namespaces: [ml-train]", f"namespaces: [{namespace}]")
