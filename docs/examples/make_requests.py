#!/usr/bin/env python3
"""Write the extender request bodies the docs send with curl, from the example
pods, nodes and victims beside them, so the JSON cannot drift from the YAML:

- docs/examples/filter-request.json                  pod-gpu-training.yaml + nodes.yaml (README)
- docs/examples/explain-request.json                 pod-gpu-training.yaml + the names in nodes.yaml
- docs/examples/scores/prioritize-request.json       scores/pod.yaml + scores/nodes.yaml
- docs/examples/preemption/preempt-request.json      preemption/pod.yaml + preemption/victims.yaml
- docs/examples/admission/admission-review.json      admission/pod.yaml in an AdmissionReview (CREATE)

The extender bodies are what kube-scheduler sends with ``nodeCacheCapable:
false``: whole objects, Go field names (``Pod``, ``Nodes``,
``NodeNameToVictims``); explain-request.json has node names instead, as with
``nodeCacheCapable: true``. The AdmissionReview is what the API server sends the
webhook when the pod is created.

    python docs/examples/make_requests.py          # rewrite them
    python docs/examples/make_requests.py --check  # exit 1 if one is out of date

tests/test_guides.py runs the check.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent


def read(path: Path) -> list[Any]:
    return [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc is not None]


def extender_args(pod: Path, nodes: Path) -> dict[str, Any]:
    """ExtenderArgs with a whole NodeList."""
    [node_list] = read(nodes)
    return {"Pod": read(pod)[0], "Nodes": node_list}


def extender_args_by_name(pod: Path, nodes: Path) -> dict[str, Any]:
    """ExtenderArgs with node names only (nodeCacheCapable: true)."""
    [node_list] = read(nodes)
    return {"Pod": read(pod)[0], "NodeNames": [node["metadata"]["name"] for node in node_list["items"]]}


def preemption_args(pod: Path, victims: Path) -> dict[str, Any]:
    """ExtenderPreemptionArgs with whole victim pods, grouped by spec.nodeName."""
    by_node: dict[str, list[Any]] = {}
    for victim in read(victims):
        by_node.setdefault(victim["spec"]["nodeName"], []).append(victim)
    return {
        "Pod": read(pod)[0],
        "NodeNameToVictims": {node: {"Pods": pods, "NumPDBViolations": 0} for node, pods in by_node.items()},
    }


def admission_review(pod: Path) -> dict[str, Any]:
    """An admission.k8s.io/v1 AdmissionReview of a pod CREATE, as the API server sends it (trimmed)."""
    obj = read(pod)[0]
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": obj["metadata"]["namespace"],
            "operation": "CREATE",
            "object": obj,
        },
    }


def outputs() -> dict[Path, str]:
    bodies = {
        HERE / "filter-request.json": extender_args(HERE / "pod-gpu-training.yaml", HERE / "nodes.yaml"),
        HERE / "explain-request.json": extender_args_by_name(HERE / "pod-gpu-training.yaml", HERE / "nodes.yaml"),
        HERE / "scores" / "prioritize-request.json": extender_args(HERE / "scores" / "pod.yaml", HERE / "scores" / "nodes.yaml"),
        HERE / "preemption" / "preempt-request.json": preemption_args(HERE / "preemption" / "pod.yaml", HERE / "preemption" / "victims.yaml"),
        HERE / "admission" / "admission-review.json": admission_review(HERE / "admission" / "pod.yaml"),
    }
    return {path: json.dumps(body, indent=2) + "\n" for path, body in bodies.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="report files that are out of date instead of writing them")
    args = parser.parse_args(argv)
    stale = []
    for path, text in outputs().items():
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current == text:
            continue
        if args.check:
            stale.append(path)
        else:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path.relative_to(HERE.parent.parent)}")
    for path in stale:
        print(f"out of date: {path.relative_to(HERE.parent.parent)}; run: python docs/examples/make_requests.py", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
