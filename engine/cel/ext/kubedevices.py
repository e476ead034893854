"""``kube.podDevices`` and ``kube.nodeDevices``: devices under Dynamic Resource Allocation
(DRA, resource.k8s.io/v1, GA in Kubernetes 1.34), counted per DeviceClass.

Under DRA a GPU is not in ``node.status.allocatable``: a driver publishes a node's devices
in ResourceSlices, a pod names ResourceClaims (``spec.resourceClaims``: a claim, or a
ResourceClaimTemplate the resourceclaim controller makes a claim from), and kube-scheduler
allocates devices to the claims in its own DynamicResources plugin (Filter, Reserve) and
writes the allocation in PreBind: after kpe has answered its filter. So these helpers read
``dra``, the cluster's DRA objects as kpe keeps them (engine/cluster/devices.py builds it):

    {"classes": {class: {"extendedResourceName": name}},
     "nodes": {node: {class: {"total": n, "allocated": n}}},
     "claims": {"namespace/name": {"requests": {request: {class: n}}, "allocated": {class: n}}},
     "templates": {"namespace/name": {"requests": {request: {class: n}}}}}

``kube.podDevices(pod, dra, class)``
    The devices of ``class`` a pod's claims ask for: per claim (``resourceClaimName``, or
    the claim made from ``resourceClaimTemplateName``, named in
    ``status.resourceClaimStatuses``; before it exists, the template), its allocation once
    allocated, else its requests: ``exactly`` with ``count`` (ExactCount, 1 by default;
    ``All`` counts 1, at least one device, until allocated), ``firstAvailable`` the most
    one of its subrequests of the class asks (kpe cannot know which the scheduler picks).
    A claim or template kpe has not seen counts nothing. Extended resources (a device
    plugin's, or one a DeviceClass backs, KEP-5004) are ``kube.podRequests``' part.
``kube.nodeDevices(node, nodeInfo, dra, class)``
    ``{"total", "allocated", "free"}`` devices of ``class`` on the node: its ResourceSlices'
    devices the class selects, those allocated to any claim, and ``free`` = total minus
    allocated minus what the node's pods whose claims are not allocated yet ask for
    (``nodeInfo.pods``: pods in flight that kpe passed, and bound pods whose allocation
    kpe has not seen yet); with KEP-5004, a pod's request of the class's
    ``extendedResourceName`` counts there too when the node's allocatable does not have
    it (kube-scheduler then leaves it to DRA: noderesources' shouldDelegateResourceToDRA)
    and kpe has not seen its claim (``status.extendedResourceClaimStatus``) allocated.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from engine.cel.errors import EvalError
from engine.cel.ext.kuberesources import _list, _map, _no_overload, _resource, _text, pod_requests
from engine.cel.ext.quantity import scaled_value

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


def node_devices(node: _Obj, node_info: _Obj, dra: _Obj, cls: str, fn: str = "kube.nodeDevices") -> dict[str, int]:
    name = _text(_map(node.get("metadata"), fn, "node.metadata").get("name"), fn, "node.metadata.name")
    per_node = _map(_map(dra.get("nodes"), fn, "dra.nodes").get(name), fn, "dra.nodes[node]")
    entry = per_node.get(cls)
    total, allocated = (entry.get("total", 0), entry.get("allocated", 0)) if type(entry) is dict else (0, 0)
    if type(total) is not int or type(allocated) is not int:
        raise EvalError(f"{fn}: dra.nodes[{name!r}][{cls!r}] must count devices in ints")
    klass = _map(dra.get("classes"), fn, "dra.classes").get(cls)
    extended = _text(klass.get("extendedResourceName"), fn, "extendedResourceName") if type(klass) is dict else ""
    allocatable = _map(_map(node.get("status"), fn, "node.status").get("allocatable"), fn, "node.status.allocatable")
    node_has_it = bool(extended) and _resource(allocatable, extended, fn, "node.status.allocatable").sign() > 0
    pending = 0
    for pod in _list(node_info.get("pods"), fn, "nodeInfo.pods"):
        if type(pod) is dict:
            pending += _pending(pod, dra, cls, extended, node_has_it, fn)
    return {"total": total, "allocated": allocated, "free": total - allocated - pending}


def _args(fn: str, args: tuple[Any, ...], objects: int) -> bool:
    return len(args) == objects + 1 and all(type(a) is dict for a in args[:objects]) and type(args[objects]) is str


def pod_devices_fn(*args: Any) -> int:
    if not _args("kube.podDevices", args, 2):
        raise _no_overload("kube.podDevices", *args)
    return pod_devices(args[0], args[1], args[2])


def node_devices_fn(*args: Any) -> dict[str, int]:
    if not _args("kube.nodeDevices", args, 3):
        raise _no_overload("kube.nodeDevices", *args)
    return node_devices(args[0], args[1], args[2], args[3])
