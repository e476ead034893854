"""kpe's CRDs (deploy/crds/) installed on a test control plane, as ``kubectl apply -k deploy/crds`` does."""

from __future__ import annotations

from typing import Any

import yaml

from .controlplane import REPO, ControlPlane, wait_until

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
POLICIES = "/apis/kpe.dev/v1alpha1/schedulingpolicies"
RESERVATIONS = "/apis/kpe.dev/v1alpha1/reservations"


def crd_documents() -> list[dict[str, Any]]:
    return [yaml.safe_load((REPO / "deploy" / "crds" / name).read_text()) for name in ("schedulingpolicies.yaml", "reservations.yaml")]


def established(plane: ControlPlane, name: str) -> bool:
    conditions = plane.api.get(f"{CRDS}/{name}").get("status", {}).get("conditions", [])
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions or [])


def install_crds(plane: ControlPlane) -> None:
    """Create or replace the CRDs as shipped and wait until the API server serves them.
    The control plane is shared by a session's scenarios: installing twice is harmless."""
    for doc in crd_documents():
        plane.api.apply(CRDS, doc)
    for doc in crd_documents():
        wait_until(lambda: established(plane, doc["metadata"]["name"]), 30, f"{doc['metadata']['name']} to be established")
        # Established can come a moment before the group's discovery and its REST paths answer.
        plural = doc["spec"]["names"]["plural"]
        wait_until(lambda: plane.api.http.get(f"/apis/kpe.dev/v1alpha1/{plural}").status_code == 200, 30, f"{plural} to be served")
