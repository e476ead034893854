"""A heterogeneous cluster for the benchmarks, generated from a seed: pods as a platform team's
cluster runs them, not replicas of a few templates.

The benchmark's other shapes build every pod from a handful of templates, so every pod after the
first few is a replica of one the equivalence cache has seen. Here every team's pods differ in
namespace, labels, requests, selectors and tolerations, so hardly two pending pods are alike:

- nodes: four sizes, five zones, a twentieth GPU nodes and a tenth arm64 nodes (both tainted,
  as such pools are), a fifth dedicated to a team (``node.kpe.dev/team``), a few in maintenance
  or with a maintenance window announced;
- pods: ``TEAMS`` team namespaces of very different sizes (a Zipf-like spread), one to six apps a
  team, four CPU and four memory request sizes drawn per pod around the app's own, a tenth of
  the apps labelled ``kpe.dev/spread: zone`` (``app-zone-cap``, a ``counts`` rule; such an app
  is several small Deployments, so every pod fits two of an app a zone), a tenth with
  a ``kpe.dev/zone`` preference (``zone-affinity``), a tenth with a ``nodeSelector`` (a zone, an
  instance type, or arm64 with its toleration), a few percent in the namespaces the shipped
  policies single out (``batch``, ``ml-train``, ``analytics``, ``sandbox``) and a few GPU pods.

Deterministic in the seed and the pod's index, so a run before and after a change sees the same
pods. Nothing here is tuned to the shipped policies' cache: the distributions are those of the
issue that asked for this shape (many teams, apps, request sizes and counts).
"""

from __future__ import annotations

import random
import zlib
from typing import Any

ZONES = [f"us-east-1{z}" for z in "abcde"]
SIZES = [("m6i.xlarge", "4", "16Gi"), ("m6i.2xlarge", "8", "32Gi"), ("m6i.4xlarge", "16", "64Gi"), ("m6i.8xlarge", "32", "128Gi")]
CPUS = ["100m", "250m", "500m", "2"]
MEMORIES = ["128Mi", "512Mi", "1Gi", "4Gi"]
TEAMS = 30
# Namespaces the shipped policies single out (bin-packing, gpu-quota, team-node-cap, team-pod-cap).
SPECIAL = ["batch", "ml-train", "analytics", "sandbox"]
DEDICATED = ["vision", "search", "ads", "ml-training", "payments"]  # the teams that own node pools
SEED = 42
SPREAD_PODS = 5  # pods a thousand of each spread Deployment (``workload``)


def team_name(k: int) -> str:
    return DEDICATED[k] if k < len(DEDICATED) else f"team-{k:02d}"


def node_object(i: int, *, seed: int = SEED, now: str = "2026-01-01T00:00:00Z") -> tuple[dict[str, Any], dict[str, Any]]:
    """Node ``i`` and its status (``realcluster.create_nodes`` posts the one and patches the other)."""
    rng = random.Random(seed * 7_919 + i)
    zone = ZONES[i % len(ZONES)]
    gpu = rng.random() < 0.05
    arm = not gpu and rng.random() < 0.10
    kind, cpu, memory = ("p5.48xlarge", "192", "2048Gi") if gpu else SIZES[rng.randrange(len(SIZES))]
    if arm:
        kind = kind.replace("m6i", "m7g")
    name = f"{'gpu' if gpu else 'arm' if arm else 'cpu'}-{zone}-{i:05d}"
    labels = {
        "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "arm64" if arm else "amd64",
        "topology.kubernetes.io/zone": zone, "topology.kubernetes.io/region": "us-east-1", "node.kubernetes.io/instance-type": kind,
    }
    annotations: dict[str, str] = {}
    if not gpu and rng.random() < 0.20:
        labels["node.kpe.dev/team"] = DEDICATED[rng.randrange(len(DEDICATED))]
    roll = rng.random()
    if roll < 0.02:
        labels["kpe.dev/maintenance"] = "draining"
    elif roll < 0.04:
        annotations["kpe.dev/maintenance-window-start"] = "2030-01-01T00:00:00Z"
    taints = []
    if gpu:
        taints.append({"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"})
    if arm:
        taints.append({"key": "kubernetes.io/arch", "value": "arm64", "effect": "NoSchedule"})
    allocatable = {"cpu": cpu, "memory": memory, "pods": "110", "ephemeral-storage": "100Gi"}
    if gpu:
        allocatable["nvidia.com/gpu"] = "8"
    metadata: dict[str, Any] = {"name": name, "labels": labels}
    if annotations:
        metadata["annotations"] = annotations
    node = {"apiVersion": "v1", "kind": "Node", "metadata": metadata, "spec": {"taints": taints} if taints else {}}
    status = {"status": {
        "capacity": allocatable, "allocatable": allocatable,
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status",
                        "lastHeartbeatTime": now, "lastTransitionTime": now}],
        "addresses": [{"type": "InternalIP", "address": f"10.{i // 65536 % 256}.{i // 256 % 256}.{i % 256}"}, {"type": "Hostname", "address": name}],
        "nodeInfo": {"architecture": "arm64" if arm else "amd64", "operatingSystem": "linux", "kubeletVersion": "v1.32.0",
                     "containerRuntimeVersion": "containerd://1.7.22", "kernelVersion": "6.1.0", "osImage": "Bottlerocket OS 1.20",
                     "kubeProxyVersion": "", "machineID": f"m{i}", "systemUUID": f"s{i}", "bootID": f"b{i}"},
    }}
    return node, status


class App:
    """One Deployment of the workload: where it runs and what its pods look like."""

    def __init__(self, namespace: str, team: str, name: str, rng: random.Random) -> None:
        self.namespace, self.team, self.name = namespace, team, name
        self.hash = f"{zlib.crc32(f'{namespace}/{name}'.encode()):08x}"[:10]
        self.cpu = rng.randrange(len(CPUS))
        self.memory = rng.randrange(len(MEMORIES))
        self.spread = rng.random() < 0.10
        self.shards = 1  # spread apps: how many small Deployments (``workload``)
        self.zone = ZONES[rng.randrange(len(ZONES))] if rng.random() < 0.10 else None
        self.multi_arch = rng.random() < 0.15
        self.containers = 1 + (rng.random() < 0.3)
        self.gpus = 0
        self.selector: dict[str, str] = {}
        if rng.random() < 0.10:
            choice = rng.randrange(3)
            if choice == 0:
                self.selector = {"topology.kubernetes.io/zone": ZONES[rng.randrange(len(ZONES))]}
            elif choice == 1:
                self.selector = {"node.kubernetes.io/instance-type": SIZES[rng.randrange(len(SIZES))][0]}
            else:
                self.selector = {"kubernetes.io/arch": "arm64"}
                self.multi_arch = True
        self.version = f"1.{rng.randrange(20)}.{rng.randrange(10)}"
        if "topology.kubernetes.io/zone" in self.selector:
            self.spread = False  # two of an app in its one zone: no more pods could run


def workload(seed: int = SEED) -> list[tuple[App, float]]:
    """Every app of the cluster with its share of the pods (teams of very different sizes)."""
    rng = random.Random(seed)
    apps: list[tuple[App, float]] = []
    for k in range(TEAMS):
        team = team_name(k)
        weight = 1.0 / (1 + k) ** 0.8  # a few large teams, a long tail of small ones
        count = 1 + rng.randrange(6)
        for a in range(count):
            apps.append((App(f"team-{k:02d}", team, f"{team}-{['api', 'worker', 'web', 'cron', 'cache', 'ingest'][a]}", rng), weight / count))
    # The namespaces the shipped policies single out, a few percent of the pods together.
    for namespace, team in (("batch", "data"), ("analytics", "analytics"), ("sandbox", "dev"), ("ml-train", "vision")):
        app = App(namespace, team, f"{namespace}-job", rng)
        if namespace == "ml-train":
            app.gpus = 1
        apps.append((app, 0.02))
    # A Deployment spread across zones is a small one (app-zone-cap allows two of an app a zone):
    # a spread app of many pods is many small Deployments, each its own app label, of about
    # SPREAD_PODS pods a thousand.
    total = sum(w for _, w in apps)
    for app, weight in apps:
        if app.spread:
            app.shards = max(1, round(1000 * weight / total / SPREAD_PODS))
    return apps


_WORKLOADS: dict[int, tuple[list[App], list[float]]] = {}


def _apps(seed: int) -> tuple[list[App], list[float]]:
    found = _WORKLOADS.get(seed)
    if found is None:
        pairs = workload(seed)
        found = _WORKLOADS[seed] = ([a for a, _ in pairs], [w for _, w in pairs])
    return found


def namespaces(seed: int = SEED) -> list[str]:
    return sorted({app.namespace for app in _apps(seed)[0]})


def pod(i: int, round_: int, *, seed: int = SEED, scheduler_name: str = "") -> dict[str, Any]:
    """Pending pod ``i`` of round ``round_``: an app drawn by its share, its requests drawn around the app's."""
    apps, weights = _apps(seed)
    rng = random.Random(seed * 1_000_003 + i)
    app = rng.choices(apps, weights)[0]
    name = app.name if app.shards == 1 else f"{app.name}-{rng.randrange(app.shards)}"
    labels = {"app": name, "team": app.team, "pod-template-hash": app.hash, "app.kubernetes.io/version": app.version}
    if app.spread:
        labels["kpe.dev/spread"] = "zone"
    if app.zone is not None:
        labels["kpe.dev/zone"] = app.zone
    if app.namespace == "ml-train":
        labels["kpe.dev/workload"] = "training"
    containers = []
    for c in range(app.containers):
        # Requests drift around the app's own (vertical autoscaling, several releases live at once).
        cpu = CPUS[min(len(CPUS) - 1, max(0, app.cpu + rng.choice((-1, 0, 0, 1))))]
        memory = MEMORIES[min(len(MEMORIES) - 1, max(0, app.memory + rng.choice((-1, 0, 0, 1))))]
        requests = {"cpu": cpu, "memory": memory}
        limits = {"memory": memory}
        if app.gpus and c == 0:
            requests["nvidia.com/gpu"] = limits["nvidia.com/gpu"] = str(app.gpus)
        containers.append({"name": "main" if c == 0 else f"sidecar-{c}", "image": f"registry.example.com/{app.team}/{app.name}:{app.version}",
                           "resources": {"requests": requests, "limits": limits}})
    spec: dict[str, Any] = {"containers": containers, "terminationGracePeriodSeconds": 30}
    if app.selector:
        spec["nodeSelector"] = dict(app.selector)
    tolerations = []
    if app.selector.get("kubernetes.io/arch") == "arm64":
        tolerations.append({"key": "kubernetes.io/arch", "operator": "Equal", "value": "arm64", "effect": "NoSchedule"})
    if app.gpus:
        tolerations.append({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"})
    if tolerations:
        spec["tolerations"] = tolerations
    if scheduler_name:
        spec["schedulerName"] = scheduler_name
    metadata: dict[str, Any] = {"name": f"{name}-r{round_}-{i:05d}", "namespace": app.namespace, "labels": labels}
    if app.multi_arch:
        metadata["annotations"] = {"kpe.dev/multi-arch": "true"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}
