"""``namespaceObject`` on the real API server: the shipped keep-general-off-gpu exempts the pods
of a namespace annotated ``kpe.dev/allow-gpu-nodes: "true"``. kpe watches namespaces with the
shipped RBAC, keeps a pod of another namespace off the GPU node, and sees an annotation added
to a namespace: the pod it kept off is prompted to retry and placed, and so is the next pod
of the same template (the equivalence cache's class changes with what the policy reads of
the namespace)."""

from __future__ import annotations

import time

from .conftest import Cluster
from .controlplane import wait_until

ANNOTATION = "kpe.dev/allow-gpu-nodes"


def test_a_namespace_annotation_opens_gpu_nodes_to_its_pods(cluster: Cluster) -> None:
    ns = cluster.namespace
    platform = f"{ns}-gpu"
    cluster.api.namespace(platform)
    cluster.api.patch(f"/api/v1/namespaces/{platform}", {"metadata": {"annotations": {ANNOTATION: "true"}}})
    cluster.copy_shipped("keep-general-off-gpu.yaml")
    cluster.node(f"{ns}-gpu", extra={"nvidia.com/gpu": "8"})
    kpe = cluster.start_kpe()
    cluster.start_scheduler(kpe)
    try:
        cluster.api.pod(platform, "bench-0")
        cluster.api.pod(ns, "web-0")
        wait_until(lambda: cluster.api.get_pod(platform, "bench-0")["spec"].get("nodeName"), 30, "the opted-in namespace's pod to be bound")
        assert cluster.api.get_pod(platform, "bench-0")["spec"]["nodeName"] == f"{ns}-gpu"

        def rejected() -> bool:
            conditions = cluster.api.get_pod(ns, "web-0").get("status", {}).get("conditions") or []
            return any(c.get("reason") == "Unschedulable" and "keep-general-off-gpu/no-gpus-on-node" in c.get("message", "") for c in conditions)

        wait_until(rejected, 30, "the other namespace's pod to be kept off the GPU node by kpe")
        assert not cluster.api.get_pod(ns, "web-0")["spec"].get("nodeName")

        # The namespace opts in: kpe prompts kube-scheduler about web-0, which it rejected there
        # (a namespace change is no event for kube-scheduler), and web-0 goes to the GPU node.
        cluster.api.patch(f"/api/v1/namespaces/{ns}", {"metadata": {"annotations": {ANNOTATION: "true"}}})
        started = time.monotonic()
        cluster.wait_bound(["web-0"], timeout=15)
        waited = time.monotonic() - started
        assert kpe.metric("kpe_requeued_pods_total", result="touched") >= 1
        # The next pod of the same template too (a remembered answer for the class would keep it off).
        cluster.api.pod(ns, "web-1")
        cluster.wait_bound(["web-1"])
        print(f"\n[e2e namespaces] web-0 bound {waited:.2f} s after the annotation; web-1 at once")
        assert cluster.bound()["web-0"] == cluster.bound()["web-1"] == f"{ns}-gpu"
    finally:
        cluster.api.patch(f"/api/v1/namespaces/{ns}", {"metadata": {"annotations": {ANNOTATION: None}}})
        for pod in cluster.api.pods(platform):
            cluster.api.delete(f"/api/v1/namespaces/{platform}/pods/{pod['metadata']['name']}", grace=0)
