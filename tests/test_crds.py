"""deploy/crds/ is what deploy/crds/generate.py makes of schemas/*.json, so the API server
and `kpe check` judge the same fields (the e2e tests apply the CRDs to a real API server)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "deploy" / "crds"))
import generate  # noqa: E402

sys.path.remove(str(ROOT / "deploy" / "crds"))


def test_the_checked_in_crds_are_the_generator_s_output() -> None:
    assert generate.differences() == [], "run: python deploy/crds/generate.py"


def walk(node: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    if not isinstance(node, dict):
        return []
    found = [(path, node)]
    for name, child in node.get("properties", {}).items():
        found += walk(child, f"{path}.{name}")
    for key in ("items", "additionalProperties"):
        found += walk(node.get(key), f"{path}[{key}]")
    return found


@pytest.mark.parametrize("kind", generate.KINDS, ids=lambda k: k["kind"])
def test_every_node_of_the_schema_is_structural(kind: dict[str, Any]) -> None:
    schema = generate.crd(kind)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for path, node in walk(schema):
        assert "$ref" not in node and "const" not in node and node.get("additionalProperties") is not False, path
        assert "type" in node or node.get("x-kubernetes-preserve-unknown-fields") or node.get("x-kubernetes-int-or-string"), path
        assert not ("properties" in node and "additionalProperties" in node), path


def test_a_quantity_of_several_json_types_keeps_any_value_and_an_open_object_keeps_its_fields() -> None:
    (reservation,) = [k for k in generate.KINDS if k["kind"] == "Reservation"]
    spec = generate.crd(reservation)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    template = spec["properties"]["template"]["properties"]
    assert template["resources"]["properties"]["requests"]["additionalProperties"] == {"x-kubernetes-preserve-unknown-fields": True}
    assert template["affinity"]["x-kubernetes-preserve-unknown-fields"] is True
    # $defs are inlined where they are used: the owners' label selector is the JSON Schema's.
    owners = spec["properties"]["owners"]["properties"]["podSelector"]["properties"]["matchExpressions"]["items"]
    assert owners["properties"]["operator"] == {"enum": ["In", "NotIn", "Exists", "DoesNotExist"], "description": "How the label's value relates to values.", "type": "string"}


def test_the_printer_columns_name_what_kubectl_get_shows() -> None:
    columns = {k["kind"]: [(c["name"], c["jsonPath"]) for c in generate.crd(k)["spec"]["versions"][0]["additionalPrinterColumns"]] for k in generate.KINDS}
    ready = '.status.conditions[?(@.type=="Ready")].status'
    assert columns["SchedulingPolicy"] == [("Mode", ".spec.mode"), ("Decisions", ".status.decisions"), ("Ready", ready),
                                           ("Served", ".status.servedGeneration"), ("Age", ".metadata.creationTimestamp")]
    assert columns["Reservation"] == [("Slots", ".spec.slots"), ("Mode", ".spec.mode"), ("Ready", ready),
                                      ("Served", ".status.servedGeneration"), ("Age", ".metadata.creationTimestamp")]


def test_the_kustomization_lists_every_crd() -> None:
    kustomization = yaml.safe_load((ROOT / "deploy" / "crds" / "kustomization.yaml").read_text())
    assert sorted(kustomization["resources"]) == sorted(p.name for p in (ROOT / "deploy" / "crds").glob("*.yaml") if p.name != "kustomization.yaml")
