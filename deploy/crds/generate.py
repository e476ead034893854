#!/usr/bin/env python3
"""Write kpe's CustomResourceDefinitions (deploy/crds/*.yaml) from schemas/*.json.

One source: the JSON Schemas that ``kpe check`` validates files against are the
CRDs' OpenAPI schemas too, so a field added to a kind reaches the API server the
same day, and a file that passes ``kpe check`` can be ``kubectl apply``'d.
tests/test_crds.py fails when the checked-in CRDs differ from what this prints.

The API server wants a structural schema, which JSON Schema is not quite:

- no ``$ref``: every ``$defs`` entry is inlined where it is used;
- every node has a ``type``: a ``const`` or ``enum`` gets the type of its values; a
  value of several types (a quantity: string or number) keeps any value
  (``x-kubernetes-preserve-unknown-fields``), and kpe's own schema check judges it;
- ``additionalProperties: false`` is left out (the API server prunes unknown fields
  instead of refusing them: ``kubectl apply`` warns, ``kpe check`` refuses);
- an object without properties (``params``, a PodSpec's ``affinity``) keeps its
  content (``x-kubernetes-preserve-unknown-fields``);
- ``metadata`` may restrict only ``name``; ``apiVersion`` and ``kind`` are the API
  server's to check.

The ``status`` kpe writes (server/cluster/policystatus.py) is defined here, not in
schemas/: files never carry one.

    python deploy/crds/generate.py          # rewrite deploy/crds/
    python deploy/crds/generate.py --check  # exit 1 if it is out of date (CI)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = ROOT / "schemas"
TARGET = Path(__file__).resolve().parent
GROUP = "kpe.dev"
VERSION = "v1alpha1"
KUSTOMIZATION = "kustomization.yaml"

Schema = dict[str, Any]

# What kpe says about an object it serves (or refuses); the printer columns read it.
CONDITION: Schema = {
    "type": "object",
    "required": ["type", "status", "reason", "message", "lastTransitionTime"],
    "properties": {
        "type": {"type": "string", "description": "Ready: the object is part of the set kpe serves."},
        "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
        "observedGeneration": {"type": "integer", "format": "int64", "minimum": 0, "description": "The metadata.generation the condition was worked out for."},
        "lastTransitionTime": {"type": "string", "format": "date-time", "description": "When status last changed."},
        "reason": {"type": "string", "description": "CamelCase: Served, Invalid (this object is refused), SetNotServed (another object broke the set)."},
        "message": {"type": "string", "description": "Why, naming the field path of each error."},
    },
}
STATUS: Schema = {
    "type": "object",
    "description": "Written by kpe's leader when kpe reads its policies from the cluster (--policy-source cluster); never by users.",
    "properties": {
        "observedGeneration": {"type": "integer", "format": "int64", "minimum": 0, "description": "The metadata.generation this status is about."},
        "servedGeneration": {"type": "string", "description": "The generation (content hash) of the policy set kpe serves: the same on every object in that set."},
        "decisions": {"type": "string", "description": "The decisions the object takes part in, e.g. filter,score."},
        "conditions": {
            "type": "array",
            "items": CONDITION,
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["type"],
        },
        "warnings": {"type": "array", "items": {"type": "string"}, "description": "What `kpe check` warns about for this object."},
    },
}
READY = '.status.conditions[?(@.type=="Ready")].status'
COMMON_COLUMNS = [
    {"name": "Ready", "type": "string", "jsonPath": READY},
    {"name": "Served", "type": "string", "jsonPath": ".status.servedGeneration", "description": "The generation of the set kpe serves."},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]
KINDS: list[dict[str, Any]] = [
    {
        "schema": "schedulingpolicy-v1alpha1.json",
        "kind": "SchedulingPolicy",
        "plural": "schedulingpolicies",
        "shortNames": ["spol"],
        "columns": [
            {"name": "Mode", "type": "string", "jsonPath": ".spec.mode"},
            {"name": "Decisions", "type": "string", "jsonPath": ".status.decisions", "description": "filter, score, admission, preemption."},
            *COMMON_COLUMNS,
        ],
    },
    {
        "schema": "reservation-v1alpha1.json",
        "kind": "Reservation",
        "plural": "reservations",
        "shortNames": ["kres"],
        "columns": [
            {"name": "Slots", "type": "integer", "jsonPath": ".spec.slots"},
            {"name": "Mode", "type": "string", "jsonPath": ".spec.mode"},
            *COMMON_COLUMNS,
        ],
    },
]
DROPPED = ("$schema", "$id", "$defs", "title", "additionalProperties", "const")
JSON_TYPES = {str: "string", bool: "boolean", int: "integer", float: "number"}


def structural(node: Schema, defs: Schema) -> Schema:
    """One JSON Schema node as a structural OpenAPI v3 node."""
    if "$ref" in node:
        name = node["$ref"].removeprefix("#/$defs/")
        merged = {**defs[name], **{k: v for k, v in node.items() if k != "$ref"}}
        return structural(merged, defs)
    out: Schema = {k: v for k, v in node.items() if k not in DROPPED}
    if "const" in node:
        out["enum"] = [node["const"]]
    if "properties" in node:
        out["properties"] = {name: structural(child, defs) for name, child in node["properties"].items()}
    if "items" in node:
        out["items"] = structural(node["items"], defs)
    if "anyOf" in node:
        out["anyOf"] = [structural(option, defs) for option in node["anyOf"]]
    extra = node.get("additionalProperties")
    if isinstance(extra, dict):
        out["additionalProperties"] = structural(extra, defs)
    kind = node.get("type")
    if isinstance(kind, list):
        del out["type"]
        out["x-kubernetes-preserve-unknown-fields"] = True
    elif kind is None and "enum" in out:
        (out["type"],) = {JSON_TYPES[type(v)] for v in out["enum"]}
    elif kind == "object" and "properties" not in node and not isinstance(extra, dict):
        out["x-kubernetes-preserve-unknown-fields"] = True
    return out


def openapi(schema: Schema) -> Schema:
    """The object's schema: the kind's spec as the JSON Schema says, metadata the API server's."""
    defs = schema.get("$defs", {})
    spec = structural(schema["properties"]["spec"], defs)
    name = schema["properties"]["metadata"]["properties"]["name"]
    return {
        "type": "object",
        "description": schema["description"],
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {
                "type": "object",
                "properties": {"name": {"type": "string", "pattern": name["pattern"], "maxLength": name["maxLength"]}},
            },
            "spec": spec,
            "status": STATUS,
        },
    }


def crd(kind: dict[str, Any]) -> Schema:
    schema = json.loads((SCHEMAS / kind["schema"]).read_text(encoding="utf-8"))
    assert schema["properties"]["apiVersion"]["const"] == f"{GROUP}/{VERSION}"
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{kind['plural']}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Cluster",
            "names": {
                "kind": kind["kind"],
                "listKind": kind["kind"] + "List",
                "plural": kind["plural"],
                "singular": kind["kind"].lower(),
                "shortNames": kind["shortNames"],
                "categories": ["kpe"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": kind["columns"],
                    "schema": {"openAPIV3Schema": openapi(schema)},
                }
            ],
        },
    }


def file_name(kind: dict[str, Any]) -> str:
    return f"{kind['plural']}.yaml"


def expected() -> dict[str, str]:
    """Every file deploy/crds/ should hold (besides this script), by name, with its content."""
    head = f"# Generated by deploy/crds/generate.py from schemas/; do not edit.\n"
    files = {file_name(k): head + yaml.safe_dump(crd(k), sort_keys=False, width=1000) for k in KINDS}
    files[KUSTOMIZATION] = (
        head
        + "# kpe's kinds (SchedulingPolicy, Reservation): `kubectl apply -k deploy/crds`, or as a resource of yours.\n"
        + "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n"
        + "".join(f"- {file_name(k)}\n" for k in KINDS)
    )
    return files


def differences(target: Path = TARGET) -> list[str]:
    problems = []
    for name, text in expected().items():
        path = target / name
        if not path.exists():
            problems.append(f"missing {name}")
        elif path.read_text(encoding="utf-8") != text:
            problems.append(f"differs {name}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only report whether deploy/crds/ is up to date")
    args = parser.parse_args(argv)
    problems = differences()
    if args.check:
        for problem in problems:
            print(f"deploy/crds: {problem}", file=sys.stderr)
        if problems:
            print("run: python deploy/crds/generate.py", file=sys.stderr)
        return 1 if problems else 0
    for name, text in expected().items():
        (TARGET / name).write_text(text, encoding="utf-8")
    for problem in problems:
        print(f"deploy/crds: {problem.replace('missing', 'added').replace('differs', 'updated')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
