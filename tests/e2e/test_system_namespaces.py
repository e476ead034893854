"""kube-system is out of kpe's reach on the real API server: a policy without ``match`` that
gates every pod and rejects every node leaves a kube-system pod alone (no gate, bound at
once, no policy in kpe's decisions for it), while a pod of the test's namespace is held.
The webhook is registered here for kube-system too, past the NotIn that deploy/ ships, so
what is checked is kpe's own --excluded-namespaces and not only the API server's selector."""

from __future__ import annotations

import base64
import uuid

from .conftest import Cluster, shipped_webhook
from .controlplane import wait_until

EVERYTHING = """apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: everything}
spec:
  admission:
    gate: kpe.dev/hold
    expression: "false"
    message: every pod waits
  filters:
  - {name: nowhere, expression: "false", message: no node for any pod}
  scores:
  - {name: flat, expression: "0"}
"""


def test_a_policy_without_match_never_gates_filters_or_scores_a_kube_system_pod(cluster: Cluster) -> None:
    ns = cluster.namespace
    cluster.write_policy("everything.yaml", EVERYTHING)
    cluster.node(f"{ns}-n1")
    kpe = cluster.start_kpe()
    doc = shipped_webhook("MutatingWebhookConfiguration")
    hook = doc["webhooks"][0]
    hook["clientConfig"] = {"url": kpe.webhook_url + "/admission/pods", "caBundle": base64.b64encode(cluster.ca.cert_pem.bytes()).decode()}
    hook["namespaceSelector"] = {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": [ns, "kube-system"]}]}
    doc["metadata"] = {"name": f"kpe-e2e-system-{ns}"}
    cluster.api.apply("/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations", doc)
    system_pod = f"system-{uuid.uuid4().hex[:6]}"
    try:
        before = kpe.metric("kpe_admission_reviews_total")
        probe = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe"}, "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}

        def called() -> bool:
            cluster.api.create(f"/api/v1/namespaces/{ns}/pods", probe, params={"dryRun": "All"})
            return kpe.metric("kpe_admission_reviews_total") > before

        wait_until(called, 15, "the API server to call kpe's webhook", interval=0.2)
        cluster.start_scheduler(kpe)
        held = cluster.api.pod(ns, "held")
        assert [g["name"] for g in held["spec"].get("schedulingGates") or []] == ["kpe.dev/hold"]
        system = cluster.api.pod("kube-system", system_pod)
        assert not system["spec"].get("schedulingGates"), "kpe gates no kube-system pod"
        node = wait_until(lambda: cluster.api.get(f"/api/v1/namespaces/kube-system/pods/{system_pod}")["spec"].get("nodeName"), 30, "the kube-system pod to be bound")
        assert node == f"{ns}-n1", "bound to the node the policy rejects for everyone else"
        decisions = kpe.http.get("/apis/v1/decisions", params={"pod": f"kube-system/{system_pod}", "limit": "100"}).json()["decisions"]
        assert decisions and all(d.get("policies", []) == [] for d in decisions), decisions
        assert "held" not in cluster.bound()
    finally:
        cluster.api.delete(f"/api/v1/namespaces/kube-system/pods/{system_pod}", grace=0)
        cluster.api.delete(f"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{doc['metadata']['name']}")
