"""kpe's own scheduler (deploy/scheduler/) beside the default one, on the real API server:
pods that name it obey kpe's policies, every other pod is scheduled by the default
scheduler without kpe ever hearing of it, and while kpe is down only the pods that
opted in wait, to be scheduled once kpe is back."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from .conftest import Cluster, Kpe
from .controlplane import wait_until

OWN = "kpe-scheduler"
POOL = "e2e.kpe.dev/pool"
POLICY = """apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {{name: kpe-pool-only}}
spec:
  match: {{namespaces: [{namespace}]}}
  filters:
  - name: kpe-pool
    expression: "node.metadata.?labels[?'{pool}'].orValue('') == 'kpe'"
    message: only nodes of the kpe pool
"""
OUTAGE_DEFAULT_PODS = 20
OUTAGE_OWN_PODS = 4


def opted_in(cluster: Cluster, name: str) -> None:
    cluster.api.pod(cluster.namespace, name, extra={"schedulerName": OWN})


def scheduled_by(cluster: Cluster, names: set[str]) -> dict[str, str]:
    """Pod name -> the scheduler whose Scheduled event names it (the event's reportingController is the profile's name)."""
    events = cluster.api.get(f"/apis/events.k8s.io/v1/namespaces/{cluster.namespace}/events")["items"]
    return {e["regarding"]["name"]: e["reportingController"] for e in events if e["reason"] == "Scheduled" and e["regarding"]["name"] in names}


def decided_pods(kpe: Kpe) -> set[str]:
    """The pods kube-scheduler asked kpe about, from kpe's decision log (the webhook's decisions are not the scheduler's)."""
    decisions = kpe.http.get("/apis/v1/decisions", params={"limit": "10000"}).json()["decisions"]
    return {d["pod"].partition("/")[2] for d in decisions if d["verb"] in ("filter", "prioritize", "preempt", "bind")}


def scheduling_failed(cluster: Cluster, name: str) -> dict[str, Any]:
    """The pod's PodScheduled condition once a scheduler has tried and failed it ({} until then)."""
    conditions = cluster.api.get_pod(cluster.namespace, name)["status"].get("conditions") or []
    return next((c for c in conditions if c["type"] == "PodScheduled" and c["status"] == "False"), {})


def test_only_pods_that_name_kpe_s_scheduler_go_through_kpe_and_only_they_wait_while_it_is_down(cluster: Cluster) -> None:
    ns = cluster.namespace
    cluster.write_policy("kpe-pool-only.yaml", POLICY.format(namespace=ns, pool=POOL))
    allowed = [cluster.node(f"{ns}-kpe-{i}", labels={POOL: "kpe"})["metadata"]["name"] for i in range(2)]
    # Roomier, so the default scheduler's own scoring prefers them: pods it places land where kpe would refuse them.
    others = [cluster.node(f"{ns}-other-{i}", cpu="64", memory="256Gi")["metadata"]["name"] for i in range(2)]
    kpe = cluster.start_kpe()
    cluster.start_scheduler(None)  # no extender: the default scheduler's pods must never reach kpe
    cluster.start_own_scheduler(kpe, OWN)

    # -- both up: each scheduler takes its own pods -------------------------------------------
    own = [f"own-{i}" for i in range(4)]
    plain = [f"plain-{i}" for i in range(4)]
    for name in own:
        opted_in(cluster, name)
    for name in plain:
        cluster.api.pod(ns, name)
    bound = cluster.wait_bound(own + plain)
    assert {bound[n] for n in own} <= set(allowed), bound
    on_rejected = [n for n in plain if bound[n] in others]
    assert on_rejected, f"the default scheduler never asked kpe, so kpe's policy did not keep its pods off {others}: {bound}"
    by = wait_until(lambda: (s := scheduled_by(cluster, set(own + plain))) and len(s) == len(own + plain) and s, 30, "the Scheduled events")
    assert {n: by[n] for n in own} == dict.fromkeys(own, OWN)
    assert {n: by[n] for n in plain} == dict.fromkeys(plain, "default-scheduler")
    decided = decided_pods(kpe)
    assert set(own) <= decided and not decided & set(plain), decided
    assert kpe.metric("kpe_requests_total", verb="filter", code="200") >= len(own)

    # -- kpe down: the default scheduler carries on, the opted-in pods wait ---------------------
    os.kill(kpe.process.popen.pid, signal.SIGKILL)
    kpe.process.popen.wait(5)
    kpe.close()
    waiting = [f"waiting-{i}" for i in range(OUTAGE_OWN_PODS)]
    during = [f"during-{i}" for i in range(OUTAGE_DEFAULT_PODS)]
    for name in waiting:
        opted_in(cluster, name)
    for name in during:
        cluster.api.pod(ns, name)
    cluster.wait_bound(during, timeout=60)
    # kpe's scheduler tried each of them and could not reach kpe: not merely not yet looked at.
    failures: dict[str, dict[str, Any]] = {}
    for name in waiting:
        failures[name] = wait_until(lambda: scheduling_failed(cluster, name), 60, f"{OWN} to try {name}")  # noqa: B023 - called at once
    still = cluster.bound()
    assert not set(waiting) & set(still), still
    assert {f["reason"] for f in failures.values()} == {"SchedulerError"}, failures
    assert all(kpe.url.removeprefix("https://") in f["message"] for f in failures.values()), failures
    by = wait_until(lambda: (s := scheduled_by(cluster, set(during + waiting))) and len(s) == len(during) and s, 30, "the Scheduled events")
    outage = {OWN: sum(1 for s in by.values() if s == OWN), "default-scheduler": sum(1 for s in by.values() if s == "default-scheduler")}
    assert outage == {OWN: 0, "default-scheduler": OUTAGE_DEFAULT_PODS}

    # -- kpe back on the same address: the waiting pods are scheduled, by kpe's rules -------------
    restarted = time.monotonic()
    back = cluster.start_kpe(ports=kpe.ports)
    ready = time.monotonic()
    bound = cluster.wait_bound(waiting, timeout=60)
    after_ready = time.monotonic() - ready
    assert {bound[n] for n in waiting} <= set(allowed), bound
    by = wait_until(lambda: (s := scheduled_by(cluster, set(waiting))) and len(s) == len(waiting) and s, 30, "the Scheduled events")
    assert set(by.values()) == {OWN}
    decided = decided_pods(back)
    assert set(waiting) <= decided and not decided & set(plain + during), decided

    print(
        f"\n[e2e own scheduler] kpe up: {OWN} bound {len(own)} opted-in pods, all on {sorted(allowed)}; default-scheduler bound "
        f"{len(plain)} others ({len(on_rejected)} on nodes kpe rejects), kpe decided none of them"
        f"\n[e2e own scheduler] kpe down: default-scheduler bound {outage['default-scheduler']}/{OUTAGE_DEFAULT_PODS} pods, "
        f"{OWN} bound {outage[OWN]}/{OUTAGE_OWN_PODS} (each failed: {next(iter(failures.values()))['reason']})"
        f"\n[e2e own scheduler] kpe back: {OUTAGE_OWN_PODS}/{OUTAGE_OWN_PODS} opted-in pods bound {after_ready:.1f}s after kpe was ready "
        f"({ready - restarted:.1f}s from its start to ready)"
    )


TRAINING = """apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {{name: training-on-kpe-pool}}
spec:
  match:
    namespaces: [{namespace}]
    podSelector: {{matchLabels: {{workload: train}}}}
  filters:
  - name: kpe-pool
    expression: "node.metadata.?labels[?'{pool}'].orValue('') == 'kpe'"
"""


def test_the_webhook_routes_the_pods_a_policy_matches_to_kpe_s_scheduler_and_no_others(cluster: Cluster) -> None:
    ns = cluster.namespace
    cluster.write_policy("training.yaml", TRAINING.format(namespace=ns, pool=POOL))
    allowed = cluster.node(f"{ns}-kpe-0", labels={POOL: "kpe"})["metadata"]["name"]
    cluster.node(f"{ns}-other-0", cpu="64", memory="256Gi")
    kpe = cluster.start_kpe(extra=("--scheduler-name", OWN))
    cluster.register_webhook(kpe)
    cluster.start_scheduler(None)
    cluster.start_own_scheduler(kpe, OWN)

    train = cluster.api.pod(ns, "train-0", labels={"workload": "train"})
    web = cluster.api.pod(ns, "web-0")
    elsewhere = cluster.api.pod(ns, "train-elsewhere", labels={"workload": "train"}, extra={"schedulerName": "another-scheduler"})
    assert train["spec"]["schedulerName"] == OWN, "set at creation, the one time it may change"
    assert web["spec"]["schedulerName"] == "default-scheduler"
    assert elsewhere["spec"]["schedulerName"] == "another-scheduler", "a scheduler the pod named is never overridden"
    bound = cluster.wait_bound(["train-0", "web-0"])
    assert bound["train-0"] == allowed
    by = wait_until(lambda: (s := scheduled_by(cluster, {"train-0", "web-0"})) and len(s) == 2 and s, 30, "the Scheduled events")
    assert by == {"train-0": OWN, "web-0": "default-scheduler"}
    decided = decided_pods(kpe)
    assert "train-0" in decided and not decided & {"web-0", "train-elsewhere"}, decided
    print(f"\n[e2e own scheduler] webhook: train-0 routed to {OWN} and bound on {bound['train-0']}; web-0 by the default scheduler; train-elsewhere kept its scheduler")
