"""kpe's CRDs on the real API server: it accepts their schemas (structural, nothing it does not
support), serves the kinds, and its own validation refuses what the JSON Schemas refuse."""

from __future__ import annotations

from typing import Any

import yaml

from .controlplane import REPO, ControlPlane
from .crds import CRDS, POLICIES, RESERVATIONS, crd_documents, install_crds


def test_the_api_server_accepts_the_crds_as_structural_schemas(plane: ControlPlane) -> None:
    install_crds(plane)
    for doc in crd_documents():
        conditions = {c["type"]: c for c in plane.api.get(f"{CRDS}/{doc['metadata']['name']}")["status"]["conditions"]}
        assert conditions["NamesAccepted"]["status"] == "True"
        assert conditions["Established"]["status"] == "True"
        # A schema the API server cannot use is reported here rather than refused outright.
        assert "NonStructuralSchema" not in conditions, conditions["NonStructuralSchema"]["message"]


def test_every_shipped_policy_file_is_accepted_as_it_is(plane: ControlPlane) -> None:
    """One format: the YAML `kpe check` reads from a repository is what `kubectl apply` sends."""
    install_crds(plane)
    names = []
    for path in sorted((REPO / "policies").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc or doc.get("kind") not in ("SchedulingPolicy", "Reservation"):
                continue
            collection = POLICIES if doc["kind"] == "SchedulingPolicy" else RESERVATIONS
            name = doc["metadata"]["name"]
            created = plane.api.create(collection, doc, params={"dryRun": "All", "fieldValidation": "Strict"})
            assert created["spec"]["mode"] in ("Enforce", "Audit", "Required", "Preferred"), "the schemas' defaults are applied"
            names.append(name)
    assert len(names) >= 10


def refusal(plane: ControlPlane, collection: str, doc: dict[str, Any]) -> str:
    answer = plane.api.http.post(collection, json=doc, params={"dryRun": "All"})
    assert answer.status_code == 422, answer.text
    return str(answer.json()["message"])


def test_the_api_server_refuses_what_the_schema_refuses(plane: ControlPlane) -> None:
    install_crds(plane)
    policy = {"apiVersion": "kpe.dev/v1alpha1", "kind": "SchedulingPolicy", "metadata": {"name": "bad"},
              "spec": {"mode": "Sometimes", "filters": [{"name": "f", "expression": "true"}]}}
    assert 'spec.mode: Unsupported value: "Sometimes"' in refusal(plane, POLICIES, policy)
    no_rules = {**policy, "spec": {"mode": "Audit"}}
    assert "spec" in refusal(plane, POLICIES, no_rules)
    long_name = {**policy, "metadata": {"name": "x" * 64}, "spec": {"filters": [{"name": "f", "expression": "true"}]}}
    assert "metadata.name" in refusal(plane, POLICIES, long_name)
    reservation = {"apiVersion": "kpe.dev/v1alpha1", "kind": "Reservation", "metadata": {"name": "r" * 51},
                   "spec": {"slots": 1, "template": {"resources": {"requests": {"cpu": "1"}}}}}
    assert "metadata.name" in refusal(plane, RESERVATIONS, reservation)
    too_many = {**reservation, "metadata": {"name": "r"}, "spec": {"slots": 1001, "template": {"resources": {"requests": {"cpu": 0.5}}}}}
    assert "spec.slots" in refusal(plane, RESERVATIONS, too_many)
