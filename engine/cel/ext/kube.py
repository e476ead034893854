"""kpe's Kubernetes helpers: what kube-scheduler computes about pods and nodes, as
CEL functions under ``kube.`` (documented in docs/cel-functions.md, "Kubernetes helpers").

Policies used to spell these out by hand and got them wrong (a toleration's
effect and value ignored, GPUs summed over regular containers only). Each
function follows the upstream code it names, case by case, in one of two modules:

engine/cel/ext/kuberesources.py
    ``kube.podRequests(pod)``, ``kube.podRequests(pod, name)`` and
    ``kube.nodeFree(node, nodeInfo, name)``: a pod's requests and a node's
    free capacity.
engine/cel/ext/kubedevices.py
    ``kube.podDevices(pod, dra, class)`` and ``kube.nodeDevices(node, nodeInfo, dra, class)``:
    devices under Dynamic Resource Allocation, a pod's and a node's, per DeviceClass.
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

from collections.abc import Callable
from typing import Any, Final

from engine.cel.ext.kubedevices import node_devices_fn, pod_devices_fn
from engine.cel.ext.kuberesources import node_free_fn, pod_requests_fn
from engine.cel.ext.kubescheduling import (
    node_selector_matches_fn,
    pod_node_affinity_matches_fn,
    pod_tolerates_node_taints_fn,
    pod_tolerates_taint_fn,
    tolerates_taint_fn,
    untolerated_taints_fn,
)


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
    pods = node_info.get("pods") if isinstance(node_info, dict) else None
    if not isinstance(pods, (list, tuple)):
        return 0
    return sum(1 + _claims_cost(p) + _requests_cost(p) for p in pods)


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
# What kube.podDevices and kube.nodeDevices read of a pod: its claims, the claims the
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
    "kube.nodeDevices": (("metadata.name", "status.allocatable"), NODE_CLAIM_READS, None, None),
}

COSTS: dict[str, Callable[..., int]] = {
    "kube.podRequests": _requests_cost,
    "kube.podToleratesTaint": _tolerations_cost,
    "kube.untoleratedTaints": _pair_cost,
    "kube.podToleratesNodeTaints": _pair_cost,
    "kube.nodeSelectorMatches": _selector_cost,
    "kube.podNodeAffinityMatches": _affinity_cost,
    "kube.podDevices": _claims_cost,
    "kube.nodeDevices": _node_claims_cost,
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
}
