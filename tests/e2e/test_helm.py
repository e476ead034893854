"""kpe's Helm chart on the real API server, with the real helm (tests/e2e/build-helm.sh):
install, upgrade with changed values, uninstall, and nothing of kpe's left. The control plane
here runs no kubelet, so kpe's pods never start: what is checked is what the API server
accepts and keeps, the webhooks it calls, and what a kpe that is not running does to writes,
which is what an install, an upgrade or an uninstall looks like in the moments kpe is down.

A control plane of its own: the chart's cluster-scoped objects have fixed names (ClusterRole
kpe, the webhook configurations kpe, PriorityClass kpe-placeholder), which the other scenarios'
shared control plane holds already."""

from __future__ import annotations

import base64
import json
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.helm import CHART, need_helm

from .controlplane import REPO, Binaries, ControlPlane, control_plane, wait_until

NAMESPACE = "kpe-system"
HOOKS = {"mutating": "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
         "validating": "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"}
CLUSTER_SCOPED = ["/apis/rbac.authorization.k8s.io/v1/clusterroles", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
                  "/apis/scheduling.k8s.io/v1/priorityclasses", *HOOKS.values()]
NAMESPACED = ["/api/v1/namespaces/{ns}/secrets", "/api/v1/namespaces/{ns}/configmaps", "/api/v1/namespaces/{ns}/services",
              "/api/v1/namespaces/{ns}/serviceaccounts", "/apis/apps/v1/namespaces/{ns}/deployments",
              "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles", "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
              "/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets", "/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies"]


@pytest.fixture
def own_plane(binaries: Binaries, tmp_path: Path) -> Iterator[ControlPlane]:
    (tmp_path / "plane").mkdir()
    with control_plane(tmp_path / "plane", binaries) as plane:
        # The plane grants the shipped RBAC to the user kpe runs as in the other scenarios; the
        # chart brings its own, under the same names.
        for doc in yaml.safe_load_all((REPO / "deploy" / "rbac.yaml").read_text()):
            if doc:
                plural = {"ClusterRole": "clusterroles", "ClusterRoleBinding": "clusterrolebindings", "Role": "roles", "RoleBinding": "rolebindings"}[doc["kind"]]
                scope = "" if doc["kind"].startswith("Cluster") else f"namespaces/{NAMESPACE}/"
                plane.api.delete(f"/apis/rbac.authorization.k8s.io/v1/{scope}{plural}/{doc['metadata']['name']}")
        yield plane


def helm(plane: ControlPlane, *args: str) -> str:
    result = subprocess.run([need_helm(), "--kubeconfig", str(plane.kubeconfig), *args], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"helm {' '.join(args)}:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def kpe_objects(plane: ControlPlane) -> list[str]:
    """Everything labelled part of kpe, cluster-wide and in kpe's namespace, as ``kind/name``."""
    found = []
    for path in CLUSTER_SCOPED + [p.format(ns=NAMESPACE) for p in NAMESPACED]:
        for item in plane.api.get(path, params={"labelSelector": "app.kubernetes.io/part-of=kpe"})["items"]:
            found.append(f"{path.rsplit('/', 1)[1]}/{item['metadata']['name']}")
    return sorted(found)


def create_pod(plane: ControlPlane, namespace: str, name: str) -> httpx.Response:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
           "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}
    return plane.api.http.post(f"/api/v1/namespaces/{namespace}/pods?dryRun=All", json=pod)


class Deletions:
    """Watches the pod webhook's configuration until it is deleted; keeps its last state."""

    def __init__(self, plane: ControlPlane) -> None:
        listed = plane.api.get(HOOKS["mutating"])
        self.plane, self.version = plane, listed["metadata"]["resourceVersion"]
        self.deleted: dict[str, Any] | None = None
        self.thread = threading.Thread(target=self.watch, daemon=True)
        self.thread.start()

    def watch(self) -> None:
        params = {"watch": "true", "resourceVersion": self.version, "fieldSelector": "metadata.name=kpe", "timeoutSeconds": "60"}
        with self.plane.api.http.stream("GET", HOOKS["mutating"], params=params, timeout=70) as stream:
            for line in stream.iter_lines():
                event = json.loads(line)
                if event["type"] == "DELETED":
                    self.deleted = event["object"]
                    return


def test_install_upgrade_and_uninstall_with_helm_leave_nothing_and_no_webhook_that_blocks_pods_on_a_kpe_that_is_gone(own_plane: ControlPlane) -> None:
    plane = own_plane
    plane.api.namespace("team-a")
    version = plane.binaries.version

    # Install: the policies as objects (the chart's CRDs), the chart's certificates, and the pod
    # webhook set to Fail, as a team that must never bypass admission policies would.
    helm(plane, "install", "kpe", str(CHART), "--namespace", NAMESPACE, "--create-namespace",
         "--set", "policies.source=cluster", "--set", "certificates.source=helm", "--set", "webhooks.pods.failurePolicy=Fail")
    manifest = [d for d in yaml.safe_load_all(helm(plane, "get", "manifest", "kpe", "--namespace", NAMESPACE)) if d]
    installed = kpe_objects(plane)
    print(f"\n[e2e helm] {version}: helm install made {len(installed)} objects: {', '.join(installed)}")
    assert len(installed) == len(manifest), "every object of the release was accepted and is labelled part of kpe"
    for crd in ("schedulingpolicies.kpe.dev", "reservations.kpe.dev"):
        wait_until(lambda crd=crd: any(c["type"] == "Established" and c["status"] == "True"
                                       for c in plane.api.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd}")["status"].get("conditions", [])),
                   20, f"the CRD {crd}")
    ca = plane.api.get(f"/api/v1/namespaces/{NAMESPACE}/secrets/kpe-ca")["data"]["ca.crt"]
    for kind, path in HOOKS.items():
        hook = plane.api.get(f"{path}/kpe")["webhooks"][0]
        assert hook["clientConfig"]["caBundle"] == ca, f"the {kind} webhook trusts the chart's CA"
        assert hook["clientConfig"]["service"] == {"name": "kpe", "namespace": NAMESPACE, "path": hook["clientConfig"]["service"]["path"], "port": 9443}
    # kpe is not running (no kubelet): under Fail the API server refuses pods that kpe would gate,
    # and never kpe's own namespace.
    refused = create_pod(plane, "team-a", "web-1")
    print(f"[e2e helm] pod webhook Fail, kpe not running: {refused.status_code} {refused.json().get('message', '')[:140]}")
    assert refused.status_code >= 400 and "gates.kpe.dev" in refused.json()["message"]
    assert create_pod(plane, NAMESPACE, "own-1").status_code == 201

    # Upgrade with changed values: the documented first step of an uninstall (the pod webhook to
    # Ignore), three replicas, the bind verb. The chart's certificates are read back, not remade.
    helm(plane, "upgrade", "kpe", str(CHART), "--namespace", NAMESPACE, "--reuse-values",
         "--set", "webhooks.pods.failurePolicy=Ignore", "--set", "replicas=3", "--set", "bind=true")
    deployment = plane.api.get(f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/kpe")
    env = {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert (deployment["spec"]["replicas"], env["KPE_BIND"], env["KPE_WEBHOOK_ON_ERROR"], env["KPE_POLICY_SOURCE"]) == (3, "true", "allow", "cluster")
    assert "clusterroles/kpe-bind" in kpe_objects(plane)
    assert plane.api.get(f"/api/v1/namespaces/{NAMESPACE}/secrets/kpe-ca")["data"]["ca.crt"] == ca, "the CA kube-scheduler and the API server trust stays"
    assert plane.api.get(f"{HOOKS['mutating']}/kpe")["webhooks"][0]["clientConfig"]["caBundle"] == ca
    assert create_pod(plane, "team-a", "web-2").status_code == 201, "with Ignore a kpe that is down blocks no pod"
    revision = helm(plane, "history", "kpe", "--namespace", NAMESPACE, "--output", "json")
    assert [r["status"] for r in json.loads(revision)] == ["superseded", "deployed"]

    # Uninstall: nothing of kpe's left but the CRDs (Helm never deletes a chart's CRDs: that
    # would delete every SchedulingPolicy; docs/install.md says how to remove them).
    watching = Deletions(plane)
    helm(plane, "uninstall", "kpe", "--namespace", NAMESPACE, "--wait")
    watching.thread.join(timeout=30)
    assert watching.deleted is not None, "the pod webhook's configuration was deleted"
    assert watching.deleted["webhooks"][0]["failurePolicy"] == "Ignore", "it blocked no pod while kpe went away"
    left = kpe_objects(plane)
    crds = [c["metadata"]["name"] for c in plane.api.get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions")["items"] if c["spec"]["group"] == "kpe.dev"]
    print(f"[e2e helm] {version}: after helm uninstall: {left or 'nothing of kpe'}; CRDs kept: {crds}")
    assert left == []
    assert sorted(crds) == ["reservations.kpe.dev", "schedulingpolicies.kpe.dev"]
    assert create_pod(plane, "team-a", "web-3").status_code == 201
    assert all(plane.api.http.get(f"{path}/kpe").status_code == 404 for path in HOOKS.values())
    assert base64.b64decode(ca).startswith(b"-----BEGIN CERTIFICATE-----")
