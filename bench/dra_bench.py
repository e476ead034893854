"""What Dynamic Resource Allocation objects cost kpe: memory of what the cache keeps of them,
rebuilding ``dra`` after a change, and the shipped gpu-placement's filter over DRA nodes.

    python bench/dra_bench.py                    # 1,000 GPU nodes of 8 GPUs, 6,000 claims
    python bench/dra_bench.py --nodes 5000 --claims 30000
    python bench/dra_bench.py --quick            # fewer repeats

Generates what NVIDIA's DRA driver publishes (a ResourceSlice per node, 8 GPUs with the
driver's attributes), the gpu.nvidia.com DeviceClass, and allocated claims of one GPU each
(with the status the scheduler writes and the fields the API server adds: managedFields,
finalizers, reservedFor), then prints: bytes per object as sent and as kpe keeps it
(``engine.cluster.devices.view``); the time to build ``dra`` from the kept objects (what the
server does on the first read after any change: a claim allocated); and one pod's filter with
gpu-placement over every node, asking through a claim. It checks the counts first (every
allocated device counted once) and exits 1 if they are wrong.
"""

from __future__ import annotations

import argparse
import copy
import gc
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from engine.cluster.devices import DeviceIndex, key, view  # noqa: E402
from server.cluster.trim import trim  # noqa: E402
from engine.cluster.nodeinfo import node_info_map  # noqa: E402
from engine.decisions.filtering import filter_nodes  # noqa: E402
from engine.policy.loader import load  # noqa: E402

CLASS = "gpu.nvidia.com"
GPUS = 8


def device_class() -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
            "metadata": {"name": CLASS, "uid": "c0", "resourceVersion": "1", "creationTimestamp": "2026-02-20T09:55:00Z", "generation": 1},
            "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"}}],
                     "extendedResourceName": "nvidia.com/gpu"}}


def resource_slice(node: str) -> dict[str, Any]:
    devices = [{"name": f"gpu-{i}", "attributes": {
        "type": {"string": "gpu"}, "uuid": {"string": f"GPU-{node}-{i:04d}-4cf8db2d-06c0-7d70"}, "productName": {"string": "NVIDIA A100-SXM4-40GB"},
        "brand": {"string": "Nvidia"}, "architecture": {"string": "Ampere"}, "cudaComputeCapability": {"version": "8.0.0"},
        "driverVersion": {"version": "560.35.3"}, "cudaDriverVersion": {"version": "12.6.0"}, "index": {"int": i}, "minor": {"int": i},
        "pcieBusID": {"string": f"0000:{i:02x}:00.0"}, "resource.kubernetes.io/pcieRoot": {"string": f"pci0000:{i // 4:02x}"}},
        "capacity": {"memory": {"value": "40Gi"}}} for i in range(GPUS)]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-gpu.nvidia.com-x7k2q", "uid": f"s-{node}", "resourceVersion": "10", "generation": 1,
                         "creationTimestamp": "2026-02-20T10:02:11Z", "generateName": f"{node}-gpu.nvidia.com-",
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": node, "uid": f"n-{node}", "controller": True}],
                         "managedFields": [{"manager": "gpu-kubelet-plugin", "operation": "Update", "apiVersion": "resource.k8s.io/v1",
                                            "time": "2026-02-20T10:02:11Z", "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:devices": {}}}}]},
            "spec": {"driver": CLASS, "nodeName": node, "pool": {"name": node, "generation": 1, "resourceSliceCount": 1}, "devices": devices}}


def claim(i: int, node: str, device: int) -> dict[str, Any]:
    pod = f"train-{i}"
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": f"{pod}-gpu-abcde", "namespace": "ml-train", "uid": f"rc-{i}", "resourceVersion": str(100 + i),
                         "creationTimestamp": "2026-02-21T08:00:00Z", "generateName": f"{pod}-gpu-",
                         "annotations": {"resource.kubernetes.io/pod-claim-name": "gpu"},
                         "finalizers": ["resource.kubernetes.io/delete-protection"],
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": f"p-{i}", "controller": True, "blockOwnerDeletion": True}],
                         "managedFields": [{"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "resource.k8s.io/v1",
                                            "time": "2026-02-21T08:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {}, "f:spec": {}}},
                                           {"manager": "kube-scheduler", "operation": "Update", "apiVersion": "resource.k8s.io/v1", "subresource": "status",
                                            "time": "2026-02-21T08:00:01Z", "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {}}}]},
            "spec": {"devices": {"requests": [{"name": "gpus", "exactly": {"deviceClassName": CLASS, "allocationMode": "ExactCount", "count": 1}}]}},
            "status": {"allocation": {"devices": {"results": [{"request": "gpus", "driver": CLASS, "pool": node, "device": f"gpu-{device}"}]},
                                      "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]},
                                      "allocationTimestamp": "2026-02-21T08:00:01Z"},
                       "reservedFor": [{"resource": "pods", "name": pod, "uid": f"p-{i}"}]}}


def size(make: Callable[[], Any]) -> int:
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    kept = make()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del kept
    return after - before


def best(fn: Callable[[], Any], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--claims", type=int, default=6000)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    repeats = 2 if args.quick else 5
    claims_n = min(args.claims, args.nodes * GPUS)
    names = [f"gpu-{i:05d}" for i in range(args.nodes)]
    slices = [resource_slice(n) for n in names]
    claims = [claim(i, names[i // GPUS], i % GPUS) for i in range(claims_n)]
    classes = [device_class()]

    # As the server keeps them: trimmed (strings interned) and cut (server.cluster.devices.enter).
    kept_slices = [view("resourceslices", trim(copy.deepcopy(s))) for s in slices]
    kept_claims = [view("resourceclaims", trim(copy.deepcopy(c))) for c in claims]
    kept_classes = [view("deviceclasses", c) for c in classes]
    dra = DeviceIndex.build(kept_slices, kept_claims, [], kept_classes)
    counted = sum(per[CLASS]["allocated"] for per in dra["nodes"].values())
    total = sum(per[CLASS]["total"] for per in dra["nodes"].values())
    if counted != claims_n or total != args.nodes * GPUS:
        print(f"wrong counts: {counted} allocated of {total}, expected {claims_n} of {args.nodes * GPUS}")
        return 1

    print(f"DRA objects: {args.nodes:,} ResourceSlices of {GPUS} GPUs, {claims_n:,} allocated ResourceClaims, 1 DeviceClass")
    print(f"{'object':<16}{'as sent (B)':>14}{'kept (B)':>12}")
    for kind, raw in (("resourceslices", slices[:200]), ("resourceclaims", claims[:200])):
        sent = size(lambda: [copy.deepcopy(o) for o in raw]) / len(raw)
        kept = size(lambda: [view(kind, trim(copy.deepcopy(o))) for o in raw]) / len(raw)  # what stays of a fresh copy
        print(f"{kind:<16}{sent:>14,.0f}{kept:>12,.0f}")
    dra_bytes = size(lambda: DeviceIndex.build(kept_slices, kept_claims, [], kept_classes))
    print(f"dra itself: {dra_bytes / 1024:,.0f} KiB")

    cold = best(lambda: DeviceIndex.build(kept_slices, kept_claims, [], kept_classes), repeats)
    print(f"building dra from every object (first list; a DeviceClass changed): {cold * 1000:,.1f} ms "
          f"({cold / (args.nodes * GPUS) * 1e6:.2f} us per device)")

    # As the server keeps it: one watch event at a time, a snapshot read after each.
    index = DeviceIndex()
    index.set_classes(kept_classes)
    for kind, kept in (("resourceslices", kept_slices), ("resourceclaims", kept_claims)):
        for obj in kept:
            index.set(kind, key(kind, obj), obj)
    if index.snapshot() != dra:
        print("the index kept event by event differs from the one built at once")
        return 1
    events = [view("resourceclaims", c) for c in claims[: min(1000, claims_n)]]

    def claim_events() -> None:
        for obj in events:
            index.set("resourceclaims", key("resourceclaims", obj), obj)
            index.snapshot()

    warm = best(claim_events, repeats) / len(events)
    print(f"a claim's watch event applied and dra read again: {warm * 1e6:,.1f} us")
    slice_events = [view("resourceslices", s) for s in slices[:100]]

    def slice_events_applied() -> None:
        for obj in slice_events:
            index.set("resourceslices", key("resourceslices", obj), obj)
            index.snapshot()

    per_slice = best(slice_events_applied, repeats) / len(slice_events)
    print(f"a slice's watch event applied (its {GPUS} devices selected again) and dra read again: {per_slice * 1e6:,.1f} us")

    policies = load([ROOT / "policies" / "gpu-placement.yaml"])
    nodes = [{"metadata": {"name": n}, "status": {"allocatable": {"cpu": "96", "pods": "110"}}} for n in names]
    info = node_info_map(nodes, [])
    pod = {"metadata": {"name": "p", "namespace": "ml-train", "uid": "p"},
           "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimName": "train-new-gpu"}], "containers": [{"name": "c", "resources": {"claims": [{"name": "gpu"}]}}]}}
    dra_with = {**dra, "claims": {**dra["claims"], "ml-train/train-new-gpu": {"requests": {"gpus": {CLASS: 1}}}}}
    result = filter_nodes(policies, pod, nodes, node_info=info, dra=dra_with)
    free_nodes = sum(1 for per in dra["nodes"].values() if per[CLASS]["total"] > per[CLASS]["allocated"])
    if len(result.passed) != free_nodes:
        print(f"wrong filter: {len(result.passed)} nodes passed, {free_nodes} have a free GPU")
        return 1
    filtered = best(lambda: filter_nodes(policies, pod, nodes, node_info=info, dra=dra_with), repeats)
    print(f"gpu-placement filter of a claim's pod over {args.nodes:,} DRA nodes: {filtered * 1000:,.1f} ms "
          f"({filtered / args.nodes * 1e6:.1f} us per node; {len(result.passed):,} passed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
