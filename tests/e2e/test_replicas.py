"""Two kpe replicas sharing a real coordination.k8s.io Lease: both serve, exactly one
(the Lease's holder) runs the gate controller, and when it stops the other takes
the Lease over and lifts the gates from then on."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

import pytest

from .conftest import Cluster, Kpe
from .controlplane import wait_until

GATE = "kpe.dev/wait-for-ready"
POLICY = """apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {{name: wait-for-ready}}
spec:
  match:
    namespaces: [{namespace}]
    podSelector: {{matchLabels: {{app: held}}}}
  admission:
    gate: {gate}
    expression: "pod.metadata.?labels[?'ready'].orValue('') == 'yes'"
    message: waiting for the label ready=yes
"""
LEASE_DURATION_S = 2  # kpe renews every third of it


@pytest.fixture
def lease(cluster: Cluster) -> Iterator[str]:
    """A Lease of this scenario's own (other scenarios' replicas use the default one), deleted afterwards."""
    name = f"kpe-gates-{cluster.namespace}"[:63]
    yield name
    cluster.api.delete(f"/apis/coordination.k8s.io/v1/namespaces/kpe-system/leases/{name}")


def holder(cluster: Cluster, lease: str) -> dict[str, Any]:
    found = cluster.api.http.get(f"/apis/coordination.k8s.io/v1/namespaces/kpe-system/leases/{lease}")
    return dict(found.json()["spec"]) if found.status_code == 200 else {}


def leading(kpe: Kpe) -> bool:
    return kpe.metric("kpe_gate_controller_leader") == 1


def kpe_gates(cluster: Cluster, pod: str) -> list[str]:
    spec = cluster.api.get_pod(cluster.namespace, pod)["spec"]
    return [g["name"] for g in spec.get("schedulingGates") or [] if g["name"] == GATE]


def held(kpe: Kpe) -> tuple[bool, list[str]]:
    """What /apis/v1/gated says: whether this replica leads, and the pods it holds."""
    body = kpe.http.get("/apis/v1/gated").json()
    return bool(body["leader"]), sorted(p["name"] for p in body["pods"])


def lifted_by(kpe: Kpe) -> float:
    """How many gates this replica lifted (one kpe_gate_wait_seconds observation each)."""
    return kpe.metric("kpe_gate_wait_seconds_count", policy="wait-for-ready")


def webhook_gates(cluster: Cluster) -> bool:
    """Whether the API server calls kpe's webhook yet: it picks a new configuration up
    a moment after it is written. A dry run calls mutating webhooks and stores nothing."""
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe", "labels": {"app": "held"}},
           "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}
    answer = cluster.api.create(f"/api/v1/namespaces/{cluster.namespace}/pods", pod, params={"dryRun": "All"})
    return GATE in [g["name"] for g in answer["spec"].get("schedulingGates") or []]


def lifted_events(cluster: Cluster, pod: str) -> list[str]:
    events = cluster.api.get(f"/api/v1/namespaces/{cluster.namespace}/events", params={"fieldSelector": f"involvedObject.name={pod}"})["items"]
    return [e["reason"] for e in events if (e.get("source") or {}).get("component") == "kpe"]


def seconds(micro_time: str) -> float:
    return datetime.strptime(micro_time, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc).timestamp()


def stop(kpe: Kpe, how: str) -> None:
    if how == "stopped":
        # A stopped process shuts down once its HTTPS connections close; this test's idle
        # keep-alive connections would hold it for asyncio's 30 s TLS shutdown timeout
        # (Go clients answer the close at once), so they go first.
        kpe.close()
        kpe.process.stop()
    else:
        os.kill(kpe.process.popen.pid, signal.SIGKILL)
        kpe.process.popen.wait(5)


# stopped: SIGTERM, the leader gives the Lease up on its way out; killed: SIGKILL, the Lease must expire first.
@pytest.mark.parametrize("how", ["stopped", "killed"])
def test_only_the_leader_lifts_gates_and_the_other_replica_takes_over_when_it_goes(cluster: Cluster, lease: str, how: str) -> None:
    ns, api = cluster.namespace, cluster.api
    cluster.write_policy("policy.yaml", POLICY.format(namespace=ns, gate=GATE))
    flags = ("--lease-name", lease, "--lease-duration-s", str(LEASE_DURATION_S), "--gate-debounce-ms", "100")
    replicas = {name: cluster.start_kpe(identity=name, extra=flags) for name in ("kpe-a", "kpe-b")}

    first = wait_until(lambda: holder(cluster, lease).get("holderIdentity"), 10, "a replica to take the Lease")
    leader, follower = replicas[first], next(k for name, k in replicas.items() if name != first)
    second = next(name for name in replicas if name != first)
    wait_until(lambda: leading(leader), 5, f"{first} to report itself leader")
    assert not leading(follower), "both replicas lead"
    # The webhook on the replica that stays up (any replica serves it).
    cluster.register_webhook(follower)
    wait_until(lambda: webhook_gates(cluster), 10, "the API server to call the new webhook")

    for pod in ("p1", "p2"):
        api.pod(ns, pod, labels={"app": "held"})
    for pod in ("p1", "p2"):
        assert kpe_gates(cluster, pod) == [GATE], f"the webhook did not gate {pod}"
    wait_until(lambda: held(leader) == (True, ["p1", "p2"]), 10, f"{first} to hold p1 and p2")
    assert held(follower) == (False, []), "the follower should hold nothing"
    assert follower.metric("kpe_admission_reviews_total") >= 2 and leader.metric("kpe_admission_reviews_total") == 0

    api.patch(f"/api/v1/namespaces/{ns}/pods/p1", {"metadata": {"labels": {"ready": "yes"}}})
    wait_until(lambda: not kpe_gates(cluster, "p1"), 10, "the leader to lift p1's gate")
    # The replica that lifted it counts it (and records the Event) once the API has answered its patch.
    wait_until(lambda: lifted_by(leader) == 1, 5, f"{first} to count the gate it lifted")
    assert lifted_by(follower) == 0, "the follower lifted a gate"
    wait_until(lambda: lifted_events(cluster, "p1") == ["SchedulingGateLifted"], 5, "the SchedulingGateLifted Event on p1")
    assert kpe_gates(cluster, "p2") == [GATE], "p2 is not ready and must stay gated"
    before = holder(cluster, lease)

    gone = time.monotonic()
    stop(leader, how)
    last = holder(cluster, lease)  # the stopped leader's release, or the killed one's last renewal
    wait_until(lambda: leading(follower), 10, f"{second} to take over the Lease")
    took_over = time.monotonic() - gone
    after = holder(cluster, lease)
    assert after["holderIdentity"] == second
    assert after["leaseTransitions"] == before["leaseTransitions"] + 1
    if how == "killed":
        assert last["holderIdentity"] == first
        # No takeover before the dead leader's Lease ran out.
        assert seconds(after["acquireTime"]) >= seconds(last["renewTime"]) + LEASE_DURATION_S
    released = last["holderIdentity"] in ("", second)
    wait_until(lambda: held(follower) == (True, ["p2"]), 10, f"{second} to hold p2")

    labelled = time.monotonic()
    api.patch(f"/api/v1/namespaces/{ns}/pods/p2", {"metadata": {"labels": {"ready": "yes"}}})
    wait_until(lambda: not kpe_gates(cluster, "p2"), 10, "the new leader to lift p2's gate")
    lifted = time.monotonic() - labelled
    wait_until(lambda: lifted_by(follower) == 1, 5, f"{second} to count the gate it lifted")
    wait_until(lambda: lifted_events(cluster, "p2") == ["SchedulingGateLifted"], 5, "the SchedulingGateLifted Event on p2")
    wait_until(lambda: held(follower) == (True, []), 5, f"{second} to hold nothing")
    print(f"\n[e2e replicas {how}] {first} led first; {second} led {took_over:.2f}s after {first} was {how} "
          f"(Lease {LEASE_DURATION_S}s, transitions {before['leaseTransitions']} -> {after['leaseTransitions']}); "
          f"it lifted p2's gate {lifted:.2f}s after the label")
    if how == "stopped":
        # A clean stop gives the Lease up, even when it lands during a renewal's request.
        assert released, f"{first} stopped without giving the Lease up"
