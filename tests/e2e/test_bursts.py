"""Bursts of pods under policies that count pods on a node (``nodeInfo``), through the real
kube-scheduler: it places a pod in its own cache and goes on to the next while the binding
is written, so kpe must count the pods it passed and has not yet seen bound
(engine.cluster.inflight). Sampled every 100 ms while the burst schedules, no node ever holds
more than a policy allows, and every pod the policies admit somewhere ends up bound.

``KPE_E2E_IN_FLIGHT_S=0`` runs kpe with the accounting off (``--in-flight-s 0``): the
limits break, which is how this test was shown to fail without it.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from .conftest import Cluster
from .controlplane import wait_until

# The policy: at most ``max-per-node`` pods of an app on a node, from the pod's annotation.
APP_CAP = """apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: app-per-node-cap}
spec:
  match: {podSelector: {matchExpressions: [{key: app, operator: Exists}]}}
  filters:
  - name: cap
    expression: >-
      nodeInfo.pods.filter(p, p.metadata.?labels[?'app'].orValue('') == pod.metadata.labels['app']).size()
      < int(pod.metadata.?annotations[?'max-per-node'].orValue('1'))
    message: the node has as many pods of this app as the app allows
"""

# At most TEAM_CAP pods of a team on a node, whatever their app.
TEAM_CAP = """apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: team-per-node-cap}
spec:
  match: {podSelector: {matchExpressions: [{key: team, operator: Exists}]}}
  params: {cap: 3}
  filters:
  - name: cap
    expression: "nodeInfo.pods.filter(p, p.metadata.?labels[?'team'].orValue('') == pod.metadata.labels['team']).size() < params.cap"
    message: the node has as many pods of this team as a team may have there
"""

NODES = 8
TEAM_CAP_VALUE = 3
APPS = {"api": 1, "web": 2, "batch": 3}  # app -> max-per-node
TEAMS = ["red", "blue", "green"]


def burst(seed: int, size: int) -> list[dict[str, Any]]:
    """``size`` pods, seeded: an app (with its cap) and a team each."""
    rng = random.Random(seed)
    pods = []
    for i in range(size):
        app = rng.choice(list(APPS))
        pods.append({"name": f"p{seed}-{i:03d}", "app": app, "team": rng.choice(TEAMS), "cap": APPS[app]})
    return pods


def violations(bound: dict[str, str], pods: dict[str, dict[str, Any]]) -> list[str]:
    """Every node holding more pods of an app or a team than the policies allow."""
    apps: Counter[tuple[str, str]] = Counter()
    teams: Counter[tuple[str, str]] = Counter()
    for name, node in bound.items():
        apps[(node, pods[name]["app"])] += 1
        teams[(node, pods[name]["team"])] += 1
    found = [f"{node}: {n} pods of app {app} (cap {APPS[app]})" for (node, app), n in apps.items() if n > APPS[app]]
    found += [f"{node}: {n} pods of team {team} (cap {TEAM_CAP_VALUE})" for (node, team), n in teams.items() if n > TEAM_CAP_VALUE]
    return found


def admissible(pod: dict[str, Any], bound: dict[str, str], pods: dict[str, dict[str, Any]], nodes: list[str]) -> list[str]:
    """The nodes the policies would admit ``pod`` on, given what is bound."""
    out = []
    for node in nodes:
        here = [pods[name] for name, n in bound.items() if n == node]
        if sum(p["app"] == pod["app"] for p in here) < pod["cap"] and sum(p["team"] == pod["team"] for p in here) < TEAM_CAP_VALUE:
            out.append(node)
    return out


@pytest.mark.parametrize(("seed", "size"), [(1, 50), (2, 120), (3, 200)])
def test_a_burst_never_puts_more_pods_on_a_node_than_its_policies_allow(cluster: Cluster, seed: int, size: int) -> None:
    cluster.write_policy("app.yaml", APP_CAP)
    cluster.write_policy("team.yaml", TEAM_CAP)
    nodes = [f"{cluster.namespace}-n{i}" for i in range(NODES)]
    for node in nodes:
        cluster.node(node, cpu="64", pods="250")
    in_flight = os.environ.get("KPE_E2E_IN_FLIGHT_S")
    kpe = cluster.start_kpe(extra=("--in-flight-s", in_flight) if in_flight else ())
    cluster.start_scheduler(kpe)

    pods = {p["name"]: p for p in burst(seed, size)}
    seen: list[str] = []
    samples = [0]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            seen.extend(violations(cluster.bound(), pods))
            samples[0] += 1
            done.wait(0.1)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()

    def create(p: dict[str, Any]) -> None:
        cluster.api.create(f"/api/v1/namespaces/{cluster.namespace}/pods", {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": p["name"], "namespace": cluster.namespace, "labels": {"app": p["app"], "team": p["team"]},
                         "annotations": {"max-per-node": str(p["cap"])}},
            "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10", "resources": {"requests": {"cpu": "10m"}}}]},
        })

    started = time.monotonic()
    with ThreadPoolExecutor(8) as pool:  # in one go: as fast as the API server takes them
        list(pool.map(create, pods.values()))

    def settled() -> bool:
        bound = cluster.bound()
        pending = [p for name, p in pods.items() if name not in bound]
        return all(not admissible(p, bound, pods, nodes) for p in pending)

    try:
        wait_until(settled, 180, "every pod the policies admit to be bound", interval=0.5)
    finally:
        done.set()
        sampler.join()
    bound = cluster.bound()
    took = time.monotonic() - started
    seen.extend(violations(bound, pods))
    print(f"\nburst {seed}: {size} pods, {len(bound)} bound in {took:.1f} s, {samples[0]} samples, {len(set(seen))} violations")
    assert not seen, f"{len(set(seen))} violations in {samples[0]} samples: " + "; ".join(sorted(set(seen))[:10])
    assert samples[0] >= 5
