"""Sizes of the values a CEL expression reads: ``Shape``s (the longest string, the most
items, the shapes of items and fields), for the cost estimate (``engine.cel.checker.cost``).

Kubernetes objects carry no OpenAPI ``maxLength``/``maxItems`` in kpe, so
``kubernetes_roots()`` states the assumptions (the ``DEFAULT_*`` and ``*_MAX``
constants below, documented in docs/cel-functions.md); literals and ``params`` have
their exact sizes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# -- size assumptions for Kubernetes objects -----------------------------------
# Kubernetes sets no length or count limit on most fields; these are generous
# bounds on what real pods and nodes carry, so the estimate is a worst case for
# real objects without making every loop over a field look unbounded.
DEFAULT_STRING = 4096  # any string field not listed below (images, messages, values...)
DEFAULT_LIST = 64  # any list or map field not listed below (tolerations, taints, volumes, requests...)
CONTAINERS_MAX = 32  # a pod's containers, initContainers, ephemeralContainers: sidecar-heavy pods run a dozen
LABELS_MAX = 128  # labels on one object: no API limit; a busy cloud GPU node carries 40 to 60
LABEL_KEY_CHARS = 317  # a 253-character DNS prefix, '/', a 63-character name
LABEL_VALUE_CHARS = 63  # the API's limit
NAME_CHARS = 253  # metadata.name, namespace, generateName: DNS subdomains
ANNOTATIONS_MAX = 128
ANNOTATION_VALUE_CHARS = 256 * 1024  # the API limits all annotations of an object to 256 KiB together
NODE_IMAGES_MAX = 50  # kubelet's nodeStatusMaxImages default
PODS_PER_NODE_MAX = 110  # kubelet's maxPods default: nodeInfo.pods and preemption's victims
CLUSTER_NODES_MAX = 5_000  # Kubernetes' documented large-cluster limits: nodes...
CLUSTER_PODS_MAX = 150_000  # ...and pods (admission's `pods` and `admitted`)

ENUM_CHARS = 32  # a field Kubernetes limits to a few words (a toleration's operator, a taint's effect)
SCALAR_CHARS = 64  # the string form of a number, quantity, timestamp, IP...


@dataclass(frozen=True)
class Shape:
    """What the estimate knows of a value: the longest string it can be, the most
    items (list) or entries (map) it can have, and the shapes of its parts.
    ``item`` is a list's items or a map's values, ``key`` a map's keys; ``fields``
    the known fields of an object, ``other`` the shape of any other field
    (``None``: a generic Kubernetes field)."""

    kind: str = "any"  # "string", "list", "map", "scalar" or "any" (a field of unknown type)
    chars: int = 0
    items: int = 0
    item: Shape | None = None
    key: Shape | None = None
    fields: Mapping[str, Shape] = field(default_factory=dict)
    other: Shape | None = None

    def field(self, name: str) -> Shape:
        found = self.fields.get(name)
        if found is not None:
            return found
        return self.other if self.other is not None else GENERIC

    def element(self) -> Shape:
        return self.item if self.item is not None else GENERIC

    def map_key(self) -> Shape:
        return self.key if self.key is not None else STRING


SCALAR = Shape("scalar", chars=SCALAR_CHARS)
STRING = Shape("string", chars=DEFAULT_STRING)
GENERIC = Shape("any", chars=DEFAULT_STRING, items=DEFAULT_LIST)  # item, fields: generic again


def string(chars: int) -> Shape:
    return Shape("string", chars=chars)


def join(a: Shape, b: Shape) -> Shape:
    """A shape covering both (the branches of ``?:``, the items of a list literal)."""
    if a is b:
        return a
    kind = a.kind if a.kind == b.kind else "any"
    item = None if a.item is None or b.item is None else join(a.item, b.item)
    key = None if a.key is None or b.key is None else join(a.key, b.key)
    fields: dict[str, Shape] = dict(a.fields)
    for name, sub in b.fields.items():
        fields[name] = join(fields[name], sub) if name in fields else sub
    other = None if a.other is None or b.other is None else join(a.other, b.other)
    return Shape(kind, max(a.chars, b.chars), max(a.items, b.items), item, key, fields, other)


def of_value(value: Any) -> Shape:
    """The exact shape of a known value (``params``, literals)."""
    if isinstance(value, str):
        return string(len(value))
    if isinstance(value, bytes):
        return Shape("string", chars=len(value))
    if isinstance(value, (list, tuple)):
        item = None
        for v in value:
            s = of_value(v)
            item = s if item is None else join(item, s)
        return Shape("list", items=len(value), item=item or SCALAR)
    if isinstance(value, dict):
        fields = {str(k): of_value(v) for k, v in value.items()}
        item = None
        for s in fields.values():
            item = s if item is None else join(item, s)
        longest = max((len(str(k)) for k in value), default=0)
        return Shape("map", items=len(value), item=item or SCALAR, key=string(longest), fields=fields, other=SCALAR)
    return SCALAR


def _object(fields: Mapping[str, Shape]) -> Shape:
    return Shape("map", chars=DEFAULT_STRING, items=DEFAULT_LIST, fields=fields)


def _metadata() -> Shape:
    name = string(NAME_CHARS)
    labels = Shape("map", items=LABELS_MAX, item=string(LABEL_VALUE_CHARS), key=string(LABEL_KEY_CHARS), other=string(LABEL_VALUE_CHARS))
    annotations = Shape(
        "map", items=ANNOTATIONS_MAX, item=string(ANNOTATION_VALUE_CHARS), key=string(LABEL_KEY_CHARS), other=string(ANNOTATION_VALUE_CHARS)
    )
    return _object({"name": name, "namespace": name, "generateName": name, "labels": labels, "annotations": annotations})


# A container's requests and limits: resource names to quantities, whose text is a scalar's.
_QUANTITIES = Shape("map", items=DEFAULT_LIST, item=string(SCALAR_CHARS), key=string(LABEL_KEY_CHARS), other=string(SCALAR_CHARS))
_RESOURCES = _object({"requests": _QUANTITIES, "limits": _QUANTITIES})
_CONTAINERS = Shape("list", items=CONTAINERS_MAX, item=_object({"resources": _RESOURCES}))
# Taints and tolerations: keys and values are label keys and values, operators and effects
# short enum words (Kubernetes' string compares cost by the shorter string's length).
_ENUM = string(ENUM_CHARS)
_KEYED = {"key": string(LABEL_KEY_CHARS), "value": string(LABEL_VALUE_CHARS), "operator": _ENUM, "effect": _ENUM}
_TOLERATIONS = Shape("list", items=DEFAULT_LIST, item=_object(_KEYED))
_TAINTS = Shape("list", items=DEFAULT_LIST, item=_object(_KEYED))
POD = _object(
    {
        "metadata": _metadata(),
        "spec": _object(
            {"containers": _CONTAINERS, "initContainers": _CONTAINERS, "ephemeralContainers": _CONTAINERS, "tolerations": _TOLERATIONS}
        ),
    }
)
NODE = _object(
    {
        "metadata": _metadata(),
        "spec": _object({"taints": _TAINTS}),
        "status": _object({"images": Shape("list", items=NODE_IMAGES_MAX)}),
    }
)
NAMESPACE = _object({"metadata": _metadata()})
NODE_INFO = _object(
    {
        "pods": Shape("list", items=PODS_PER_NODE_MAX, item=POD),
        "podCount": SCALAR,
        "requested": Shape("map", items=DEFAULT_LIST, item=string(SCALAR_CHARS)),
    }
)


def kubernetes_roots(params: Any = None) -> dict[str, Shape]:
    """The shapes of every variable a kpe expression can read (``variables.*`` aside)."""
    return {
        "pod": POD,
        "namespaceObject": NAMESPACE,
        "node": NODE,
        "nodeInfo": NODE_INFO,
        "victim": POD,
        "victims": Shape("list", items=PODS_PER_NODE_MAX, item=POD),
        "nodes": Shape("list", items=CLUSTER_NODES_MAX, item=NODE),
        "pods": Shape("list", items=CLUSTER_PODS_MAX, item=POD),
        "admitted": Shape("list", items=CLUSTER_PODS_MAX, item=POD),
        "params": of_value(params if params is not None else {}),
        "now": SCALAR,
        "counts": SCALAR,  # its calls are lookups: one unit each, as any call
        "dra": Shape("map", items=DEFAULT_LIST),  # read through kube.podDevices and kube.nodeDevices, lookups
    }
