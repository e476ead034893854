"""A generated cluster for the benchmarks: realistic nodes (a GPU and a CPU fleet,
three zones, team pools, a few in maintenance) and pods placed on them."""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path
from typing import Any

DATA = Path(__file__).parent / "data"
ZONES = ["us-east-1a", "us-east-1b", "us-east-1c"]
TEAMS = ["ml-training", "vision", "search", "ads"]


def sample_node() -> dict[str, Any]:
    node: dict[str, Any] = json.loads((DATA / "node.json").read_text())
    return node


def sample_pod() -> dict[str, Any]:
    pod: dict[str, Any] = json.loads((DATA / "pod.json").read_text())
    return pod


def nodes(count: int, *, seed: int = 7) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    base = sample_node()
    out = []
    for i in range(count):
        node = copy.deepcopy(base)
        gpu = i % 4 == 0
        zone = ZONES[i % len(ZONES)]
        name = f"{'gpu' if gpu else 'cpu'}-{zone}-{i:05d}"
        meta = node["metadata"]
        meta["name"] = name
        meta["uid"] = f"uid-node-{i}"
        labels = meta["labels"]
        labels["kubernetes.io/hostname"] = name
        labels["topology.kubernetes.io/zone"] = zone
        labels["topology.kubernetes.io/region"] = "us-east-1"
        labels["node.kubernetes.io/instance-type"] = "p5.48xlarge" if gpu else "m6i.8xlarge"
        if rng.random() < 0.3:
            labels["node.kpe.dev/team"] = rng.choice(TEAMS)
        else:
            labels.pop("node.kpe.dev/team", None)
        if rng.random() < 0.02:
            labels["kpe.dev/maintenance"] = "true"
        alloc = node["status"]["allocatable"]
        if gpu:
            alloc["nvidia.com/gpu"] = str(rng.choice([4, 8]))
        else:
            alloc.pop("nvidia.com/gpu", None)
            node["spec"]["taints"] = [t for t in node["spec"].get("taints", []) if t.get("key") != "nvidia.com/gpu"]
            for key in list(labels):
                if key.startswith("nvidia.com/"):
                    del labels[key]
        out.append(node)
    return out


def pods_on(nodes_: list[dict[str, Any]], per_node: int = 3, *, seed: int = 11) -> list[dict[str, Any]]:
    """Running pods: a few CPU services per node, and one GPU each on some GPU nodes."""
    rng = random.Random(seed)
    out = []
    for n, node in enumerate(nodes_):
        gpu_node = "nvidia.com/gpu" in node["status"]["allocatable"]
        for k in range(per_node):
            requests = {"cpu": rng.choice(["500m", "2", "4"]), "memory": rng.choice(["1Gi", "8Gi", "16Gi"])}
            if gpu_node and k == 0 and rng.random() < 0.5:
                requests["nvidia.com/gpu"] = str(rng.choice([1, 2, 4]))
            out.append(
                {
                    "metadata": {"name": f"p-{n}-{k}", "namespace": "apps", "uid": f"uid-pod-{n}-{k}", "labels": {"team": rng.choice(TEAMS)}},
                    "spec": {"nodeName": node["metadata"]["name"], "containers": [{"name": "main", "resources": {"requests": requests}}]},
                    "status": {"phase": "Running"},
                }
            )
    return out


def scheduling_pod(*, gpus: int = 1) -> dict[str, Any]:
    """The pod the benchmarks schedule: the sample training pod, asking for ``gpus`` GPUs."""
    pod = sample_pod()
    pod["metadata"]["namespace"] = "ml-train"
    pod["metadata"]["labels"].update({"team": "vision", "kpe.dev/zone": "us-east-1a", "kpe.dev/workload": "training"})
    for c in pod["spec"]["containers"]:
        for section in ("requests", "limits"):
            if "nvidia.com/gpu" in c["resources"].get(section, {}):
                c["resources"][section]["nvidia.com/gpu"] = str(gpus)
    return pod
