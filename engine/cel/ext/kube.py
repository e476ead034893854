"""kpe's Kubernetes helpers: what kube-scheduler computes about pods and nodes, as
CEL functions under ``kube.`` (documented in docs/cel-functions.md, "Kubernetes helpers").

Policies used to spell these out by hand and got them wrong (a toleration's
effect and value ignored, GPUs summed over regular containers only). Each
function follows the upstream code it names, case by case, in one of two modules
(the DRA helpers, which read kpe's own ``dra`` value, are at the end of this one):

engine/cel/ext/kuberesources.py
    ``kube.podRequests(pod)``, ``kube.podRequests(pod, name)`` and
    ``kube.nodeFree(node, nodeInfo, name)``: a pod's requests and a node's
    free capacity.
engine/cel/ext/kubescheduling.py
    ``kube.toleratesTaint(toleration, taint)``, ``kube.podToleratesTaint(pod, taint)``,
    ``kube.untoleratedTaints(pod, node)``, ``kube.podToleratesNodeTaints(pod, node)``,
    ``kube.nodeSelectorMatches(nodeSelector, node)`` and
    ``kube.podNodeAffinityMatches(pod, node)``: taints, tolerations, node
    selectors and required node affinity.

Objects are the Kubernetes JSON (plain dicts). A missing field is its Go zero
value (no tolerations, no labels, an empty key). A value of a type the API
cannot hold (a list where a map belongs, a number as a label value) is an
evaluation error naming the function and the field; a value the API types allow
but the scheduler cannot parse (an unknown operator, a ``Gt`` bound that is not
an integer) does what it does in kube-scheduler (that selector term matches no
node).

This module is the library engine/cel/__init__.py loads as ``ext.kube``: its
tables name the functions (``FUNCTIONS``, ``RESULT_TYPES``), what a call is
charged before it runs (``COSTS``) and what it reads of its arguments
(``READS``; library.py describes all four).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from engine.cel.errors import EvalError
from engine.cel.ext.kuberesources import _list, _map, _no_overload, _resource, _text, node_free_fn, pod_requests, pod_requests_fn
from engine.cel.ext.quantity import scaled_value
from engine.cel.ext.kubescheduling import (
    node_selector_matches_fn,
    pod_node_affinity_matches_fn,
    pod_tolerates_node_taints_fn,
    pod_tolerates_taint_fn,
    tolerates_taint_fn,
    untolerated_taints_fn,
)


# -- Dynamic Resource Allocation ------------------------------------------------------------
# ``kube.podDevices``, ``kube.nodeDevices`` and ``kube.nodeFreeDevices``: devices under Dynamic Resource Allocation
# (DRA, resource.k8s.io/v1, GA in Kubernetes 1.34), counted per DeviceClass.
#
# Under DRA a GPU is not in ``node.status.allocatable``: a driver publishes a node's devices
# in ResourceSlices, a pod names ResourceClaims (``spec.resourceClaims``: a claim, or a
# ResourceClaimTemplate the resourceclaim controller makes a claim from), and kube-scheduler
# allocates devices to the claims in its own DynamicResources plugin (Filter, Reserve) and
# writes the allocation in PreBind: after kpe has answered its filter. So these helpers read
# ``dra``, the cluster's DRA objects as kpe keeps them (engine/cluster/devices.py builds it):
#
#     {"classes": {class: {"extendedResourceName": name}},
#      "nodes": {node: {class: {"total": n, "allocated": n}}},
#      "claims": {"namespace/name": {"requests": {request: {class: n}}, "allocated": {class: n}}},
#      "templates": {"namespace/name": {"requests": {request: {class: n}}}}}
#
# ``kube.podDevices(pod, dra, class)``
#     The devices of ``class`` a pod's claims ask for: per claim (``resourceClaimName``, or
#     the claim made from ``resourceClaimTemplateName``, named in
#     ``status.resourceClaimStatuses``; before it exists, the template), its allocation once
#     allocated, else its requests: ``exactly`` with ``count`` (ExactCount, 1 by default;
#     ``All`` counts 1, at least one device, until allocated), ``firstAvailable`` the most
#     one of its subrequests of the class asks (kpe cannot know which the scheduler picks).
#     A claim or template kpe has not seen counts nothing. Extended resources (a device
#     plugin's, or one a DeviceClass backs, KEP-5004) are ``kube.podRequests``' part.
# ``kube.nodeDevices(node, dra, class)``
#     ``{"total", "allocated"}`` devices of ``class`` on the node: its ResourceSlices'
#     devices the class selects, and those of them allocated to any claim.
# ``kube.nodeFreeDevices(node, nodeInfo, dra, class)``
#     Total minus allocated minus what the node's pods whose claims are not allocated yet ask for
#     (``nodeInfo.pods``: pods in flight that kpe passed, and bound pods whose allocation
#     kpe has not seen yet); with KEP-5004, a pod's request of the class's
#     ``extendedResourceName`` counts there too when the node's allocatable does not have
#     it (kube-scheduler then leaves it to DRA: noderesources' shouldDelegateResourceToDRA)
#     and kpe has not seen its claim (``status.extendedResourceClaimStatus``) allocated.

_Obj = Mapping[str, Any]
NO_DEVICES: Final[dict[str, int]] = {"total": 0, "allocated": 0, "free": 0}


def _claim_count(claim: _Obj, cls: str, fn: str) -> int:
    """A claim's (or template's) devices of ``cls``: its allocation, else its requests."""
    allocated = claim.get("allocated")
    if allocated is not None:
        n = _map(allocated, fn, "dra claim allocation").get(cls, 0)
        return n if type(n) is int else 0
    total = 0
    for per_class in _map(claim.get("requests"), fn, "dra claim requests").values():
        n = per_class.get(cls, 0) if type(per_class) is dict else 0
        total += n if type(n) is int else 0
    return total


def _claims_of(pod: _Obj, dra: _Obj, fn: str) -> list[tuple[_Obj | None, bool]]:
    """Each claim the pod names: (its entry in ``dra`` or None, whether it is allocated)."""
    meta = _map(pod.get("metadata"), fn, "pod.metadata")
    namespace = _text(meta.get("namespace"), fn, "pod.metadata.namespace") or "default"
    spec = _map(pod.get("spec"), fn, "pod.spec")
    refs = spec.get("resourceClaims")
    if not refs:
        return []
    status = _map(pod.get("status"), fn, "pod.status")
    generated = {s.get("name"): s.get("resourceClaimName") for s in _list(status.get("resourceClaimStatuses"), fn, "pod.status.resourceClaimStatuses")
                 if type(s) is dict}
    claims = _map(dra.get("claims"), fn, "dra.claims")
    templates = _map(dra.get("templates"), fn, "dra.templates")
    out: list[tuple[_Obj | None, bool]] = []
    for ref in _list(refs, fn, "pod.spec.resourceClaims"):
        ref = _map(ref, fn, "pod.spec.resourceClaims[]")
        name = ref.get("resourceClaimName") or generated.get(ref.get("name"))
        entry = claims.get(f"{namespace}/{name}") if name else None
        if entry is None and ref.get("resourceClaimTemplateName"):
            entry = templates.get(f"{namespace}/{ref['resourceClaimTemplateName']}")
        out.append((entry, entry is not None and entry.get("allocated") is not None))
    return out


def pod_devices(pod: _Obj, dra: _Obj, cls: str, fn: str = "kube.podDevices") -> int:
    return sum(_claim_count(entry, cls, fn) for entry, _ in _claims_of(pod, dra, fn) if entry is not None)


def _pending(pod: _Obj, dra: _Obj, cls: str, extended: str, node_has_it: bool, fn: str) -> int:
    """What a pod on the node asks of ``cls`` that no allocation kpe has seen accounts for."""
    need = sum(_claim_count(entry, cls, fn) for entry, allocated in _claims_of(pod, dra, fn) if entry is not None and not allocated)
    if extended and not node_has_it:
        status = pod.get("status")
        ext = status.get("extendedResourceClaimStatus") if type(status) is dict else None
        name = ext.get("resourceClaimName") if type(ext) is dict else None
        namespace = (pod.get("metadata") or {}).get("namespace") or "default"
        seen = _map(dra.get("claims"), fn, "dra.claims").get(f"{namespace}/{name}") if name else None
        if seen is None or seen.get("allocated") is None:
            asked = pod_requests(pod, strict=False).get(extended)
            need += scaled_value(asked, 0) if asked is not None else 0
    return need


def node_devices(node: _Obj, dra: _Obj, cls: str, fn: str = "kube.nodeDevices") -> dict[str, int]:
    name = _text(_map(node.get("metadata"), fn, "node.metadata").get("name"), fn, "node.metadata.name")
    per_node = _map(_map(dra.get("nodes"), fn, "dra.nodes").get(name), fn, "dra.nodes[node]")
    entry = per_node.get(cls)
    total, allocated = (entry.get("total", 0), entry.get("allocated", 0)) if type(entry) is dict else (0, 0)
    if type(total) is not int or type(allocated) is not int:
        raise EvalError(f"{fn}: dra.nodes[{name!r}][{cls!r}] must count devices in ints")
    return {"total": total, "allocated": allocated}


def node_free_devices(node: _Obj, node_info: _Obj, dra: _Obj, cls: str, fn: str = "kube.nodeFreeDevices") -> int:
    found = node_devices(node, dra, cls, fn)
    klass = _map(dra.get("classes"), fn, "dra.classes").get(cls)
    extended = _text(klass.get("extendedResourceName"), fn, "extendedResourceName") if type(klass) is dict else ""
    allocatable = _map(_map(node.get("status"), fn, "node.status").get("allocatable"), fn, "node.status.allocatable")
    node_has_it = bool(extended) and _resource(allocatable, extended, fn, "node.status.allocatable").sign() > 0
    pending = 0
    for pod in _list(node_info.get("pods"), fn, "nodeInfo.pods"):
        if type(pod) is dict:
            pending += _pending(pod, dra, cls, extended, node_has_it, fn)
    return found["total"] - found["allocated"] - pending


def _args(fn: str, args: tuple[Any, ...], objects: int) -> bool:
    return len(args) == objects + 1 and all(type(a) is dict for a in args[:objects]) and type(args[objects]) is str


def pod_devices_fn(*args: Any) -> int:
    if not _args("kube.podDevices", args, 2):
        raise _no_overload("kube.podDevices", *args)
    return pod_devices(args[0], args[1], args[2])


def node_devices_fn(*args: Any) -> dict[str, int]:
    if not _args("kube.nodeDevices", args, 2):
        raise _no_overload("kube.nodeDevices", *args)
    return node_devices(args[0], args[1], args[2])


def node_free_devices_fn(*args: Any) -> int:
    if not _args("kube.nodeFreeDevices", args, 3):
        raise _no_overload("kube.nodeFreeDevices", *args)
    return node_free_devices(args[0], args[1], args[2], args[3])


# -- run-time budget ----------------------------------------------------------------------------
# Charged before the call (limits.py): one unit per container, toleration x taint pair and
# selector term or expression the call can visit, as a comprehension over them would be.


def _size_at(obj: Any, first: str, second: str = "") -> int:
    """The length of the list or map at ``obj[first][second]`` (0 for anything else)."""
    if type(obj) is not dict:
        return 0
    obj = obj.get(first)
    if second:
        if type(obj) is not dict:
            return 0
        obj = obj.get(second)
    return len(obj) if type(obj) in (list, tuple, dict) else 0


def _requests_cost(pod: Any = None, *_: Any) -> int:
    containers = _size_at(pod, "spec", "containers") + _size_at(pod, "spec", "initContainers")
    return containers + _size_at(pod, "status", "containerStatuses") + _size_at(pod, "status", "initContainerStatuses")


def _claims_cost(pod: Any = None, *_: Any) -> int:
    return _size_at(pod, "spec", "resourceClaims")


def _node_claims_cost(node: Any = None, node_info: Any = None, *_: Any) -> int:
    # One unit per pod on the node: the claims it visits are a pod's few (and evaluated for
    # every node of a request, so counting them here would cost more than visiting them).
    pods = node_info.get("pods") if type(node_info) is dict else None
    return len(pods) if type(pods) is list or type(pods) is tuple else 0


def _pair_cost(pod: Any = None, node: Any = None, *_: Any) -> int:
    return _size_at(pod, "spec", "tolerations") * _size_at(node, "spec", "taints")


def _tolerations_cost(pod: Any = None, *_: Any) -> int:
    return _size_at(pod, "spec", "tolerations")


def _terms_cost(selector: Any) -> int:
    terms = selector.get("nodeSelectorTerms") if isinstance(selector, dict) else None
    if not isinstance(terms, (list, tuple)):
        return 0
    return sum(1 + _size_at(t, "matchExpressions") + _size_at(t, "matchFields") for t in terms)


def _selector_cost(selector: Any = None, *_: Any) -> int:
    return _terms_cost(selector)


def _affinity_cost(pod: Any = None, *_: Any) -> int:
    spec = pod.get("spec") if isinstance(pod, dict) else None
    if not isinstance(spec, dict):
        return 0
    affinity = spec.get("affinity")
    node_affinity = affinity.get("nodeAffinity") if isinstance(affinity, dict) else None
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") if isinstance(node_affinity, dict) else None
    return _size_at(spec, "nodeSelector") + _terms_cost(required)


# What each function reads of its arguments (library.py's READS contract: kpe's cache keeps
# only what policies read of the pods bound to nodes). Lists are transparent.
POD_REQUEST_READS: Final = (
    "spec.containers.resources.requests",
    "spec.containers.resources.limits",
    "spec.initContainers.resources.requests",
    "spec.initContainers.resources.limits",
    "spec.initContainers.restartPolicy",
    "spec.resources.requests",
    "spec.resources.limits",
    "spec.overhead",
    "spec.nodeName",  # an in-place resize counts once the pod is bound: each container's status, by name (kuberesources._Resize)
    "spec.containers.name",
    "spec.initContainers.name",
    "status.conditions.type",
    "status.conditions.reason",
    "status.containerStatuses.name",
    "status.containerStatuses.allocatedResources",
    "status.containerStatuses.resources.requests",
    "status.initContainerStatuses.name",
    "status.initContainerStatuses.allocatedResources",
    "status.initContainerStatuses.resources.requests",
    "status.allocatedResources",
    "status.resources.requests",
)
# What kube.podDevices and kube.nodeFreeDevices read of a pod: its claims, the claims the
# resourceclaim controller made for it, and (KEP-5004) the claim the scheduler made for its
# extended resources along with the requests themselves.
POD_CLAIM_READS: Final = (
    "metadata.namespace",
    "spec.resourceClaims",
    "status.resourceClaimStatuses",
)
NODE_CLAIM_READS: Final = (
    *(f"pods.{p}" for p in POD_CLAIM_READS),
    "pods.status.extendedResourceClaimStatus.resourceClaimName",
    *(f"pods.{p}" for p in POD_REQUEST_READS),
)
_TOLERATION: Final = ("key", "operator", "value", "effect")
_POD_TOLERATIONS: Final = tuple(f"spec.tolerations.{f}" for f in _TOLERATION)
_TAINT: Final = ("key", "value", "effect")
_NODE_TAINTS: Final = tuple(f"spec.taints.{f}" for f in _TAINT)
_NODE_LABELS: Final = ("metadata.name", "metadata.labels")

READS: dict[str, tuple[tuple[str, ...] | None, ...]] = {
    "kube.podRequests": (POD_REQUEST_READS, None),
    "kube.toleratesTaint": (_TOLERATION, _TAINT),
    "kube.podToleratesTaint": (_POD_TOLERATIONS, _TAINT),
    "kube.untoleratedTaints": (_POD_TOLERATIONS, ("spec.taints",)),  # returns copies of whole taints
    "kube.podToleratesNodeTaints": (_POD_TOLERATIONS, _NODE_TAINTS),
    "kube.nodeSelectorMatches": (("nodeSelectorTerms",), _NODE_LABELS),
    "kube.podNodeAffinityMatches": (
        ("spec.nodeSelector", "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"),
        _NODE_LABELS,
    ),
    "kube.nodeFree": (("status.allocatable",), ("requested", "podCount"), None),
    "kube.podDevices": (POD_CLAIM_READS, None, None),
    "kube.nodeDevices": (("metadata.name",), None, None),
    "kube.nodeFreeDevices": (("metadata.name", "status.allocatable"), NODE_CLAIM_READS, None, None),
}

COSTS: dict[str, Callable[..., int]] = {
    "kube.podRequests": _requests_cost,
    "kube.podToleratesTaint": _tolerations_cost,
    "kube.untoleratedTaints": _pair_cost,
    "kube.podToleratesNodeTaints": _pair_cost,
    "kube.nodeSelectorMatches": _selector_cost,
    "kube.podNodeAffinityMatches": _affinity_cost,
    "kube.podDevices": _claims_cost,
    "kube.nodeFreeDevices": _node_claims_cost,
}

FUNCTIONS: dict[str, Callable[..., Any]] = {
    "kube.podRequests": pod_requests_fn,
    "kube.toleratesTaint": tolerates_taint_fn,
    "kube.podToleratesTaint": pod_tolerates_taint_fn,
    "kube.untoleratedTaints": untolerated_taints_fn,
    "kube.podToleratesNodeTaints": pod_tolerates_node_taints_fn,
    "kube.nodeSelectorMatches": node_selector_matches_fn,
    "kube.podNodeAffinityMatches": pod_node_affinity_matches_fn,
    "kube.nodeFree": node_free_fn,
    "kube.podDevices": pod_devices_fn,
    "kube.nodeDevices": node_devices_fn,
    "kube.nodeFreeDevices": node_free_devices_fn,
}

# kube.podRequests is left out: a map with one argument, a Quantity with two.
RESULT_TYPES: dict[str, str] = {
    "kube.toleratesTaint": "bool",
    "kube.podToleratesTaint": "bool",
    "kube.untoleratedTaints": "list",
    "kube.podToleratesNodeTaints": "bool",
    "kube.nodeSelectorMatches": "bool",
    "kube.podNodeAffinityMatches": "bool",
    "kube.nodeFree": "kubernetes.Quantity",
    "kube.podDevices": "int",
    "kube.nodeDevices": "map",
    "kube.nodeFreeDevices": "int",
}
