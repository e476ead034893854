"""GPUs under Dynamic Resource Allocation against the real API server and kube-scheduler,
with the shipped gpu-placement and gpu-quota served by kpe: a DeviceClass, ResourceSlices
published for two fake GPU nodes as a DRA driver would, and pods asking for a GPU through a
ResourceClaimTemplate. The test plays the resourceclaim controller (there is no
kube-controller-manager here): it makes each pod's claim from its template and names it in
the pod's status, as the controller does. A burst of pods never gets more devices than the
nodes publish, kpe's filter counts the allocated devices, gpu-quota gates a team's pods by
the GPUs its claims ask for, and ``kpe explain pod`` shows the device counts. Pods asking
``nvidia.com/gpu`` in their resources get DRA devices of the class that backs the name
(KEP-5004), through claims kube-scheduler makes, and kpe counts them.

resource.k8s.io/v1 is served from Kubernetes 1.34 (DRA GA, on by default; 1.37 locks its
feature gates on, DRAExtendedResource included): no flag is needed there. Kubernetes 1.32
serves only v1beta1, and only with the DynamicResourceAllocation gate: there kpe's part is
that it does not serve v1, which kpe logs once while device-plugin GPUs are placed as before.
"""

from __future__ import annotations

import json
import subprocess
import time
from typing import Any

import pytest

from .conftest import Cluster
from .controlplane import REPO, Binaries, kpe_executable, wait_until

CLASS = "gpu.nvidia.com"  # gpu-placement's and gpu-quota's params.gpuDeviceClass
GATE = "kpe.dev/gpu-quota"
RESOURCE = "/apis/resource.k8s.io/v1"
DEVICES_PER_NODE = 2


def _needs_v1(binaries: Binaries) -> None:
    if tuple(int(x) for x in binaries.version.split(".")) < (1, 34):
        pytest.skip(f"Kubernetes {binaries.version} does not serve resource.k8s.io/v1 (DRA is GA from 1.34; 1.32 serves v1beta1 "
                    "behind the DynamicResourceAllocation gate): tests/e2e/test_dra.py's other test covers it")


def _device_class() -> dict[str, Any]:
    found: dict[str, Any] = json.loads((REPO / "policies" / "tests" / "fixtures" / "deviceclass-gpu-nvidia.json").read_text())
    found["metadata"] = {"name": CLASS}
    return found


def _slice(node: str) -> dict[str, Any]:
    """What NVIDIA's DRA driver publishes for a node with two GPUs (the attributes the class selects by)."""
    devices = [{"name": f"gpu-{i}", "attributes": {"type": {"string": "gpu"}, "index": {"int": i},
                                                   "productName": {"string": "NVIDIA A100-SXM4-40GB"}},
                "capacity": {"memory": {"value": "40Gi"}}} for i in range(DEVICES_PER_NODE)]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"{node}-{CLASS}"},
            "spec": {"driver": CLASS, "nodeName": node, "pool": {"name": node, "generation": 1, "resourceSliceCount": 1}, "devices": devices}}


def _template(namespace: str, name: str, count: int) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": name, "namespace": namespace},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpus", "exactly": {"deviceClassName": CLASS, "count": count}}]}}}}


def _gpu_pod(cluster: Cluster, name: str, template: str, labels: dict[str, str]) -> dict[str, Any]:
    """A pod asking for GPUs through a claim made from ``template``, and its claim made as the
    resourceclaim controller makes it (owned by the pod, named in its status)."""
    ns = cluster.namespace
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns, "labels": labels},
           "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}], "terminationGracePeriodSeconds": 30,
                    "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10", "resources": {"requests": {"cpu": "100m"}, "claims": [{"name": "gpu"}]}}]}}
    created: dict[str, Any] = cluster.api.create(f"/api/v1/namespaces/{ns}/pods", pod)
    spec = cluster.api.get(f"{RESOURCE}/namespaces/{ns}/resourceclaimtemplates/{template}")["spec"]["spec"]
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
             "metadata": {"name": f"{name}-gpu", "namespace": ns, "annotations": {"resource.kubernetes.io/pod-claim-name": "gpu"},
                          "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": name, "uid": created["metadata"]["uid"],
                                               "controller": True, "blockOwnerDeletion": True}]},
             "spec": spec}
    cluster.api.create(f"{RESOURCE}/namespaces/{ns}/resourceclaims", claim)
    cluster.api.patch(f"/api/v1/namespaces/{ns}/pods/{name}/status", {"status": {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": f"{name}-gpu"}]}})
    return created


def _allocations(cluster: Cluster) -> dict[str, list[tuple[str, str]]]:
    """Claim name -> the (pool, device) pairs the scheduler allocated it."""
    claims = cluster.api.get(f"{RESOURCE}/namespaces/{cluster.namespace}/resourceclaims")["items"]
    return {c["metadata"]["name"]: [(r["pool"], r["device"]) for r in ((c.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results", [])]
            for c in claims}


def _unschedulable(cluster: Cluster, name: str) -> bool:
    conditions = cluster.api.get_pod(cluster.namespace, name).get("status", {}).get("conditions") or []
    return any(c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable" for c in conditions)


def _gated(cluster: Cluster) -> list[str]:
    return sorted(p["metadata"]["name"] for p in cluster.api.pods(cluster.namespace) if any(g["name"] == GATE for g in p["spec"].get("schedulingGates") or []))


def _kpe(*argv: str) -> str:
    done = subprocess.run([kpe_executable(), *argv], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"kpe {' '.join(argv)} exited {done.returncode}:\n{done.stderr}"
    return done.stdout


def test_gpu_pods_asking_through_claims_are_placed_quota_gated_and_explained(cluster: Cluster, binaries: Binaries) -> None:
    _needs_v1(binaries)
    ns, api = cluster.namespace, cluster.api
    nodes = [f"{ns}-dra-a", f"{ns}-dra-b"]
    for name in nodes:
        cluster.node(name)
    cluster.node(f"{ns}-cpu")
    api.apply(f"{RESOURCE}/deviceclasses", _device_class())
    for name in nodes:
        api.apply(f"{RESOURCE}/resourceslices", _slice(name))
    api.create(f"{RESOURCE}/namespaces/{ns}/resourceclaimtemplates", _template(ns, "one-gpu", 1))
    api.create(f"{RESOURCE}/namespaces/{ns}/resourceclaimtemplates", _template(ns, "two-gpus", 2))
    cluster.copy_shipped("gpu-placement.yaml")
    quota = (REPO / "policies" / "gpu-quota.yaml").read_text()
    cluster.write_policy("gpu-quota.yaml", quota.replace("namespaces: [ml-train]", f"namespaces: [{ns}]"))
    try:
        kpe = cluster.start_kpe()
        cluster.register_webhook(kpe)
        cluster.start_scheduler(kpe)

        # A burst: 6 pods of one GPU each (team vision, quota 16) for the 4 GPUs of two nodes.
        burst = [f"train-{i}" for i in range(6)]
        for name in burst:
            _gpu_pod(cluster, name, "one-gpu", {"team": "vision", "kpe.dev/workload": "training"})
        wait_until(lambda: len(cluster.bound()) == 4, 60, "4 of the 6 pods to be bound")
        pending = sorted(set(burst) - set(cluster.bound()))
        wait_until(lambda: all(_unschedulable(cluster, p) for p in pending), 30, "kube-scheduler to give up on the other 2")
        time.sleep(1.0)  # another pass (the binds' events) must not place a fifth
        bound = cluster.bound()
        assert sorted(bound.values()) == sorted(nodes * DEVICES_PER_NODE), bound
        allocations = _allocations(cluster)
        given = [device for name in bound for device in allocations[f"{name}-gpu"]]
        assert len(given) == 4 and len(set(given)) == 4, allocations  # every device once
        assert all(pool == bound[name] for name in bound for pool, _ in allocations[f"{name}-gpu"])
        assert all(allocations[f"{p}-gpu"] == [] for p in pending)

        # kpe's filter counts the allocated devices: each pending pod fails on both nodes.
        explained = json.loads(_kpe("explain", "pod", f"{ns}/{pending[0]}", "--server", str(kpe.http.base_url), "--ca-file", str(cluster.ca_file),
                                    "--output", "json"))
        verdicts = {n["node"]: (n["verdict"], n["reason"]) for n in explained["nodes"]}
        for name in nodes:
            assert verdicts[name] == ("fail", f"gpu-placement/enough-free-gpus: node has 0 of {DEVICES_PER_NODE} GPUs free, pod needs 1"), verdicts
        assert verdicts[f"{ns}-cpu"] == ("unresolvable", "gpu-placement/gpu-node: node has no GPUs")
        assert explained["devices"] == {"pod": {CLASS: {"claims": 1, "extendedResource": 0}},
                                        "nodes": {name: {CLASS: {"total": 2, "allocated": 2, "free": 0}} for name in nodes}}
        # From the cluster itself, printed for people.
        text = _kpe("explain", "pod", f"{ns}/{pending[0]}", "--kubeconfig", str(cluster.plane.kubeconfig), "--policies", str(cluster.policies))
        assert f"devices: the pod asks for 1 of DeviceClass {CLASS} (1 through its claims)" in text, text
        for name in nodes:
            assert f"  {name}: 0 of 2 {CLASS} free (2 allocated to claims)" in text, text

        # gpu-quota counts claimed GPUs: team audio (default quota 4), three pods of two GPUs each.
        audio = [f"audio-{i}" for i in range(3)]
        for name in audio:
            _gpu_pod(cluster, name, "two-gpus", {"team": "audio", "kpe.dev/workload": "training"})
        wait_until(lambda: len([p for p in audio if p not in _gated(cluster)]) == 2, 30, "2 of the 3 audio pods to be released")
        time.sleep(1.0)  # a second pass must not release the third
        assert _gated(cluster) == ["audio-2"], "oldest first: the last one created waits"
        waiting = kpe.http.get("/apis/v1/gated").json()["pods"]
        assert "team audio uses 4 of its 4 GPUs; this pod needs 2 more" in str(waiting), waiting
        print(f"\n[e2e dra] burst of 6 one-GPU claims on 2x{DEVICES_PER_NODE} devices: bound {sorted(bound.values())}, "
              f"{len(set(given))} distinct devices allocated; audio quota 4: released {sorted(set(audio) - set(_gated(cluster)))}")
    finally:
        for pod in api.pods(ns):  # no garbage collector here: the claims go with their pods by hand
            api.delete(f"{RESOURCE}/namespaces/{ns}/resourceclaims/{pod['metadata']['name']}-gpu")
        for template in ("one-gpu", "two-gpus"):
            api.delete(f"{RESOURCE}/namespaces/{ns}/resourceclaimtemplates/{template}")
        for name in nodes:
            api.delete(f"{RESOURCE}/resourceslices/{name}-{CLASS}")
        api.delete(f"{RESOURCE}/deviceclasses/{CLASS}")  # it backs nvidia.com/gpu (KEP-5004): other tests' device-plugin pods must not see it


def test_an_extended_resource_request_is_served_by_dra_devices_and_counted_by_kpe(cluster: Cluster, binaries: Binaries) -> None:
    """KEP-5004 (DRAExtendedResource, GA in 1.37): pods asking nvidia.com/gpu in their resources
    on a node without it in allocatable get devices of the class that backs the name, through a
    claim kube-scheduler makes in PreBind; kpe counts them there."""
    _needs_v1(binaries)
    ns, api = cluster.namespace, cluster.api
    node = f"{ns}-dra"
    cluster.node(node)
    api.apply(f"{RESOURCE}/deviceclasses", _device_class())
    api.apply(f"{RESOURCE}/resourceslices", _slice(node))
    cluster.copy_shipped("gpu-placement.yaml")
    try:
        kpe = cluster.start_kpe()
        cluster.start_scheduler(kpe)
        names = [f"ext-{i}" for i in range(3)]
        for name in names:
            api.pod(ns, name, limits={"nvidia.com/gpu": "1"})
        wait_until(lambda: len(cluster.bound()) == DEVICES_PER_NODE, 60, "2 of the 3 pods to be bound")
        [pending] = sorted(set(names) - set(cluster.bound()))
        wait_until(lambda: _unschedulable(cluster, pending), 30, "kube-scheduler to give up on the third")
        allocations = _allocations(cluster)
        for name in cluster.bound():
            claim = api.get_pod(ns, name)["status"]["extendedResourceClaimStatus"]["resourceClaimName"]
            assert len(allocations[claim]) == 1 and allocations[claim][0][0] == node, allocations
        assert len({d for a in allocations.values() for d in a}) == DEVICES_PER_NODE

        explained = json.loads(_kpe("explain", "pod", f"{ns}/{pending}", "--server", str(kpe.http.base_url), "--ca-file", str(cluster.ca_file),
                                    "--output", "json"))
        verdicts = {n["node"]: (n["verdict"], n["reason"]) for n in explained["nodes"]}
        assert verdicts[node] == ("fail", f"gpu-placement/enough-free-gpus: node has 0 of {DEVICES_PER_NODE} GPUs free, pod needs 1"), verdicts
        assert explained["devices"] == {"pod": {CLASS: {"claims": 0, "extendedResource": 1}},
                                        "nodes": {node: {CLASS: {"total": 2, "allocated": 2, "free": 0}}}}
        print(f"\n[e2e dra] KEP-5004: nvidia.com/gpu pods bound {sorted(cluster.bound())} through claims kube-scheduler made; {pending} left pending")
    finally:
        for claim in api.get(f"{RESOURCE}/namespaces/{ns}/resourceclaims")["items"]:
            api.delete(f"{RESOURCE}/namespaces/{ns}/resourceclaims/{claim['metadata']['name']}")
        api.delete(f"{RESOURCE}/resourceslices/{node}-{CLASS}")
        api.delete(f"{RESOURCE}/deviceclasses/{CLASS}")


def test_without_resource_k8s_io_v1_kpe_says_so_and_places_device_plugin_gpus(cluster: Cluster, binaries: Binaries) -> None:
    if tuple(int(x) for x in binaries.version.split(".")) >= (1, 34):
        pytest.skip(f"Kubernetes {binaries.version} serves resource.k8s.io/v1: the other test of tests/e2e/test_dra.py runs instead")
    ns = cluster.namespace
    cluster.copy_shipped("gpu-placement.yaml")
    cluster.node(f"{ns}-gpu", extra={"nvidia.com/gpu": "2"})
    cluster.node(f"{ns}-cpu")
    kpe = cluster.start_kpe()
    cluster.start_scheduler(kpe)
    for i in range(3):
        cluster.api.pod(ns, f"gpu-{i}", limits={"nvidia.com/gpu": "1"})
    wait_until(lambda: len(cluster.bound()) == 2, 30, "2 of the 3 one-GPU pods to be bound")
    wait_until(lambda: _unschedulable(cluster, next(p for p in ("gpu-0", "gpu-1", "gpu-2") if p not in cluster.bound())), 30, "the third to be left pending")
    assert set(cluster.bound().values()) == {f"{ns}-gpu"}
    log = kpe.process.tail(400)
    assert log.count("does not serve resource.k8s.io/v1") == 1, log
    assert kpe.health.get("/readyz").status_code == 200
