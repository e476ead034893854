"""Regenerate core-v1-<version>.json from a Kubernetes OpenAPI v3 document.

    python schemas/kubernetes/extract.py \
        /root/go/pkg/mod/k8s.io/kubernetes@v1.37.2/api/openapi-spec/v3/api__v1_openapi.json 1.37.2

Keeps the definitions reachable from Pod, Node and Namespace, trimmed to what
typing needs (type, format, properties, items, additionalProperties, $ref,
oneOf, and the x-kubernetes-* extensions that change a type) and what tells a
field every object has (``required``, and ``default`` reduced to ``true``: the
value is not needed, only that the API server always writes the field);
descriptions and enums are dropped. See README.md beside this script.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOTS = ("io.k8s.api.core.v1.Pod", "io.k8s.api.core.v1.Node", "io.k8s.api.core.v1.Namespace")
KEEP = ("type", "format", "x-kubernetes-preserve-unknown-fields", "x-kubernetes-int-or-string", "x-kubernetes-embedded-resource")
PREFIX = "#/components/schemas/"


def trim(schema: dict[str, Any]) -> dict[str, Any]:
    """One schema, with ``allOf: [{$ref}]`` (how OpenAPI v3 attaches defaults to a reference) flattened."""
    out: dict[str, Any] = {}
    ref = schema.get("$ref")
    all_of = schema.get("allOf")
    if ref is None and isinstance(all_of, list) and len(all_of) == 1 and "$ref" in all_of[0]:
        ref = all_of[0]["$ref"]
    if ref is not None:
        out["$ref"] = ref.removeprefix(PREFIX)
    for key in KEEP:
        if key in schema:
            out[key] = schema[key]
    if isinstance(schema.get("required"), list):
        out["required"] = sorted(schema["required"])
    if "default" in schema:
        # OpenAPI v3 marks a Go struct field that is not a pointer with ``default: {}``: it is
        # written even when empty (``resources: {}``). engine/cel/checker/schema.py reads this
        # as "present on every object", which the lints of unguarded reads rely on.
        out["default"] = True
    if "properties" in schema:
        out["properties"] = {name: trim(sub) for name, sub in sorted(schema["properties"].items())}
    if isinstance(schema.get("items"), dict):
        out["items"] = trim(schema["items"])
    if isinstance(schema.get("additionalProperties"), dict):
        out["additionalProperties"] = trim(schema["additionalProperties"])
    if "oneOf" in schema:
        out["oneOf"] = [trim(sub) for sub in schema["oneOf"]]
    return out


def refs(schema: Any) -> list[str]:
    if isinstance(schema, dict):
        found = [schema["$ref"]] if "$ref" in schema else []
        return found + [r for key, value in schema.items() if key != "$ref" for r in refs(value)]
    if isinstance(schema, list):
        return [r for value in schema for r in refs(value)]
    return []


def extract(openapi: dict[str, Any], version: str, source: str) -> dict[str, Any]:
    schemas = openapi["components"]["schemas"]
    definitions: dict[str, Any] = {}
    pending = list(ROOTS)
    while pending:
        name = pending.pop()
        if name in definitions:
            continue
        definitions[name] = trim(schemas[name])
        pending.extend(refs(definitions[name]))
    return {
        "source": source,
        "kubernetes": version,
        "license": "Apache-2.0 (the Kubernetes Authors); trimmed to type information by schemas/kubernetes/extract.py",
        "roots": {"Pod": ROOTS[0], "Node": ROOTS[1], "Namespace": ROOTS[2]},
        "definitions": dict(sorted(definitions.items())),
    }


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    path, version = Path(argv[0]), argv[1]
    source = f"kubernetes v{version}: api/openapi-spec/v3/{path.name}"
    data = extract(json.loads(path.read_text()), version, source)
    minor = ".".join(version.split(".")[:2])
    out = Path(__file__).resolve().parent / f"core-v1-{minor}.json"
    out.write_text(json.dumps(data, indent=1, sort_keys=False) + "\n")
    print(f"{out}: {len(data['definitions'])} definitions, {out.stat().st_size:,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
