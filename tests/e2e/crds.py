"""kpe's CRDs (deploy/crds/) installed on a test control plane, as ``kubectl apply -k deploy/crds`` does."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from .controlplane import CACHE, REPO, Binaries, ControlPlane, wait_until

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


def kubectl(binaries: Binaries) -> Path | None:
    """The kubectl of this Kubernetes version (tests/e2e/build-control-plane.sh builds it into
    ~/.cache/kpe-k8s/<version>/bin): beside the control plane, else in that version's folder."""
    for path in (binaries / "kubectl", CACHE / binaries.version / "bin" / "kubectl"):
        if path.is_file() and os.access(path, os.X_OK):
            return path
    return None


def delete_all(plane: ControlPlane) -> None:
    """Remove every SchedulingPolicy and Reservation: they are cluster-scoped, and the control plane is shared."""
    for path in (POLICIES, RESERVATIONS):
        for item in plane.api.get(path)["items"]:
            plane.api.delete(f"{path}/{item['metadata']['name']}")
        wait_until(lambda: not plane.api.get(path)["items"], 30, f"{path} to be empty")


def status_of(plane: ControlPlane, path: str) -> dict[str, Any]:
    return dict(plane.api.get(path).get("status") or {})


def ready_of(status: dict[str, Any]) -> dict[str, Any]:
    return next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), {})
