"""Kubernetes OpenAPI schemas → CEL types, for the typed check of policy expressions.

The schemas are the Kubernetes API's own (``schemas/kubernetes/core-v1-<version>.json``,
extracted by ``schemas/kubernetes/extract.py``; their README says from where and why
that version). kpe evaluates expressions over the objects' JSON, so the types are
those of the JSON values, as Kubernetes' CEL types them where they agree:

- ``type: object`` with ``properties`` → an object whose other fields are errors;
  with ``additionalProperties`` only → ``map(string, V)`` (labels, annotations,
  ``nodeSelector``, ``allocatable``); with neither, or
  ``x-kubernetes-preserve-unknown-fields`` → ``dyn``.
- ``string`` → ``string``, dates included (``creationTimestamp`` is text in the
  JSON: ``timestamp(pod.metadata.creationTimestamp)`` reads it); ``integer`` →
  ``int``; ``boolean`` → ``bool``; ``number`` → ``dyn`` (JSON writes ``1.0`` as ``1``).
- Quantities (``resources.requests['cpu']``, ``status.allocatable``) → ``string``,
  as the API server writes them (read them with ``quantity()``); int-or-string
  and anything else ``oneOf`` → ``dyn``.

``kubernetes_types(params)`` gives the type of every variable a kpe expression can read.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from engine.cel.checker.typemodel import (
    BOOL,
    DYN,
    INT,
    STRING,
    TIMESTAMP,
    DOUBLE,
    NULL,
    ObjectType,
    Type,
    join,
    list_of,
    map_of,
    named,
)

SCHEMA_DIR = Path(__file__).resolve().parents[3] / "schemas" / "kubernetes"
KUBERNETES_VERSION = "1.37"  # the schemas kpe types expressions against (see the README beside them)
SCHEMA_FILE = f"core-v1-{KUBERNETES_VERSION}.json"

_QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"
_CORE = "io.k8s.api.core.v1."
_META = "io.k8s.apimachinery.pkg.apis.meta.v1."

# Fields the schema calls optional that every stored object has all the same, so an expression
# may read them bare: the API server's defaulting (pkg/apis/core/v1/defaults.go), what it sets on
# create (names, uid, qosClass), the admission plugins on by default (Priority sets priority and
# preemptionPolicy, DefaultTolerationSeconds adds two tolerations to every pod) and the kubelet's
# node status. What the schema marks ``required`` or gives a ``default`` (a struct written even
# when empty: ``resources: {}``) needs no entry here. Labels are not listed: a pod may have none;
# nodes and namespaces always have some, which engine/policy/lints.py knows by path.
SET_BY_THE_SERVER: dict[str, frozenset[str]] = {
    _META + "ObjectMeta": frozenset(("name", "namespace", "uid", "creationTimestamp", "resourceVersion")),
    _CORE + "PodSpec": frozenset(
        ("schedulerName", "restartPolicy", "dnsPolicy", "terminationGracePeriodSeconds", "securityContext",
         "priority", "preemptionPolicy", "enableServiceLinks", "tolerations")
    ),
    _CORE + "Container": frozenset(("image", "imagePullPolicy", "terminationMessagePath", "terminationMessagePolicy")),
    _CORE + "PodStatus": frozenset(("phase", "qosClass")),
    _CORE + "NodeStatus": frozenset(("allocatable", "capacity", "conditions", "addresses")),
    _CORE + "NamespaceStatus": frozenset(("phase",)),
}


class _Builder:
    def __init__(self, definitions: dict[str, Any]) -> None:
        self.definitions = definitions
        self.made: dict[str, Type] = {}

    def definition(self, name: str) -> Type:
        found = self.made.get(name)
        if found is not None:
            return found
        schema = self.definitions.get(name)
        if schema is None:
            return DYN
        if name == _QUANTITY:
            self.made[name] = STRING
            return STRING
        if isinstance(schema.get("properties"), dict) and not schema.get("x-kubernetes-preserve-unknown-fields"):
            # Registered before its fields are made, so a definition that reaches itself ends.
            fields: dict[str, Type] = {}
            obj = ObjectType(name, fields=fields, label=name.rsplit(".", 1)[-1], present=_present(name, schema))
            self.made[name] = obj
            for field_name, sub in schema["properties"].items():
                fields[field_name] = self.type_of(sub)
            return obj
        made = self.type_of(schema)
        self.made[name] = made
        return made

    def type_of(self, schema: dict[str, Any]) -> Type:
        if "$ref" in schema:
            return self.definition(schema["$ref"])
        if schema.get("x-kubernetes-preserve-unknown-fields") or schema.get("x-kubernetes-int-or-string") or "oneOf" in schema:
            return DYN
        kind = schema.get("type")
        if kind == "string":
            return STRING
        if kind == "integer":
            return INT
        if kind == "boolean":
            return BOOL
        if kind == "array":
            items = schema.get("items")
            return list_of(self.type_of(items) if isinstance(items, dict) else DYN)
        if kind == "object":
            if isinstance(schema.get("properties"), dict):
                fields = {name: self.type_of(sub) for name, sub in schema["properties"].items()}
                return ObjectType("object", fields=fields, label="object")
            extra = schema.get("additionalProperties")
            if isinstance(extra, dict):
                return map_of(STRING, self.type_of(extra))
        return DYN


def _present(name: str, schema: dict[str, Any]) -> frozenset[str]:
    """The fields of definition ``name`` every stored object has."""
    properties: dict[str, Any] = schema["properties"]
    defaulted = {field for field, sub in properties.items() if isinstance(sub, dict) and sub.get("default")}
    return frozenset(schema.get("required") or ()) | defaulted | SET_BY_THE_SERVER.get(name, frozenset())


@lru_cache(maxsize=None)
def kubernetes_objects(file: str = SCHEMA_FILE) -> dict[str, Type]:
    """The CEL types of ``Pod``, ``Node`` and ``Namespace`` from one schema file."""
    data = json.loads((SCHEMA_DIR / file).read_text())
    builder = _Builder(data["definitions"])
    return {kind: builder.definition(name) for kind, name in data["roots"].items()}


def value_type(value: Any) -> Type:
    """The type of a known value (``params``). Objects are open: a key that is not
    there is ``dyn``, not an error (``has(params.x)`` tests for it)."""
    if value is None:
        return NULL
    if isinstance(value, bool):
        return BOOL
    if isinstance(value, int):
        return INT
    if isinstance(value, float):
        return DOUBLE
    if isinstance(value, str):
        return STRING
    if isinstance(value, list):
        item: Type | None = None
        for v in value:
            t = value_type(v)
            item = t if item is None else join(item, t)
        return list_of(item if item is not None and item != NULL else DYN)
    if isinstance(value, dict):
        fields = {str(k): value_type(v) for k, v in value.items()}
        return ObjectType("params", fields=fields, label="params", open=True)
    return DYN


def kubernetes_types(params: Any = None) -> dict[str, Type]:
    """The type of every variable a kpe expression can read (``variables.*`` aside):
    docs/policy-format.md, "What each expression can read"."""
    objects = kubernetes_objects()
    pod, node = objects["Pod"], objects["Node"]
    node_info = ObjectType(
        "nodeInfo",
        fields={"pods": list_of(pod), "podCount": INT, "requested": map_of(STRING, STRING)},
        label="nodeInfo",
    )
    return {
        "pod": pod,
        "namespaceObject": objects["Namespace"],  # null when kpe does not know the namespace
        "node": node,
        "nodeInfo": node_info,
        "victim": pod,
        "victims": list_of(pod),
        "nodes": list_of(node),
        "pods": list_of(pod),
        "admitted": list_of(pod),
        "params": value_type(params if params is not None else {}),
        "now": TIMESTAMP,
        "counts": named("kpe.Counts"),  # engine/cel/types/counts.py
        "dra": map_of(STRING, DYN),  # engine/cluster/devices.py: read through kube.podDevices and kube.nodeDevices
    }
