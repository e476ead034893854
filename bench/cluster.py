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
        labels["node.kubernetes.io/instance-type"] = "p5.48xlarge" if gpu else "m6i.8xlarge"
        if rng.random() < 0.3:
            labels["kpe.dev/team"] = rng.choice(TEAMS)
        else:
            labels.pop("kpe.dev/team", None)
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
    rng = random.Random(seed)
    base = sample_pod()
    out = []
    for n, node in enumerate(nodes_):
        for k in range(per_node):
            pod = copy.deepcopy(base)
            pod["metadata"]["name"] = f"p-{n}-{k}"
            pod["metadata"]["uid"] = f"uid-pod-{n}-{k}"
            pod["metadata"]["labels"]["team"] = rng.choice(TEAMS)
            pod["spec"]["nodeName"] = node["metadata"]["name"]
            pod.setdefault("status", {})["phase"] = "Running"
            out.append(pod)
    return out
