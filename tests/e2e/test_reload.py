"""A reload that admits pending pods gets them scheduled: kube-scheduler retries a pod an
extender rejected only on a cluster event (or after 5 minutes), so kpe prompts it."""

from __future__ import annotations

import time

import pytest

from .controlplane import wait_until
from .conftest import Cluster, Kpe

POOL = """apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {{name: pool}}
spec:
  filters:
  - {{name: pool, expression: "node.metadata.?labels[?'pool'].orValue('') == '{pool}'", message: not in pool {pool}}}
"""
QUIET_S = 10.5  # kube-scheduler's longest backoff is 10 s: by then every pod waits only for an event


def settle(kpe: Kpe) -> None:
    """Wait until kube-scheduler has stopped retrying: no filter call for QUIET_S seconds."""
    last, since = -1.0, time.monotonic()
    while time.monotonic() - since < QUIET_S:
        now = kpe.metric("kpe_requests_total", verb="filter")
        if now != last:
            last, since = now, time.monotonic()
        time.sleep(0.2)


@pytest.mark.parametrize("requeue", [True, False], ids=["requeue-on", "requeue-off"])
def test_pending_pods_that_a_reload_admits_are_scheduled_within_two_seconds(cluster: Cluster, requeue: bool) -> None:
    ns = cluster.namespace
    cluster.write_policy("pool.yaml", POOL.format(pool="a"))
    cluster.node(f"{ns}-b1", labels={"pool": "b"})
    cluster.node(f"{ns}-b2", labels={"pool": "b"})
    kpe = cluster.start_kpe(extra=() if requeue else ("--requeue-rate", "0"))
    cluster.start_scheduler(kpe)
    names = [f"web-{i}" for i in range(4)]
    for name in names:
        cluster.api.pod(ns, name)
    wait_until(lambda: kpe.metric("kpe_requests_total", verb="filter") >= 4, 30, "kube-scheduler to ask kpe about the pods")
    settle(kpe)
    assert cluster.bound() == {}

    old = kpe.generation()
    written = time.monotonic()
    cluster.write_policy("pool.yaml", POOL.format(pool="b"))
    wait_until(lambda: kpe.generation() != old, 10, "kpe to reload")
    reloaded = time.monotonic()
    if requeue:
        cluster.wait_bound(names, timeout=10)
        scheduled = time.monotonic() - reloaded
        assert scheduled < 2.0, f"scheduled {scheduled:.2f}s after the reload"
        # Each touch (and each bind) is itself a cluster event that moves the other rejected pods,
        # so some are bound before their turn: those count as gone, none as an error.
        wait_until(lambda: kpe.metric("kpe_requeued_pods_total") == 4, 5, "every remembered pod to be looked at")
        touched, gone = kpe.metric("kpe_requeued_pods_total", result="touched"), kpe.metric("kpe_requeued_pods_total", result="gone")
        assert touched >= 1 and kpe.metric("kpe_requeued_pods_total", result="error") == 0
        print(f"\n[e2e reload] reload {reloaded - written:.2f}s after the write; 4 pods bound {scheduled:.2f}s after the reload "
              f"({touched:.0f} touched, {gone:.0f} bound before their turn)")
    else:
        # What the issue saw: nothing moves until some unrelated cluster event (or 5 minutes).
        time.sleep(5.0)
        assert cluster.bound() == {}
