"""The cluster's Dynamic Resource Allocation objects as policies see them: ``dra``, the
value ``kube.podDevices`` and ``kube.nodeDevices`` read (engine/cel/ext/kube.py
says its layout and what each helper counts).

kpe keeps four kinds (resource.k8s.io/v1): ResourceSlices (a node's devices, published
by its DRA driver), ResourceClaims (what a pod asks for, and once allocated which devices
it got), ResourceClaimTemplates (the claim a pod's template makes, before the claim
exists) and DeviceClasses (which devices a request of the class may get: CEL selectors
over each device, and the extended resource name the class backs, KEP-5004). Each is cut
to what the count needs as it enters (``*_view``): a large cluster has a slice per node
and driver and a claim per GPU pod.

``DeviceIndex`` counts, per node and class, the devices the node's slices publish that the
class selects and those allocated to a claim. A device belongs to the node its slice
names (``spec.nodeName``, or the device's own ``nodeName`` with
``perDeviceNodeSelection``); slices for many nodes (``allNodes``, a ``nodeSelector``:
network-attached devices) are not counted for any node. Of a pool published in several
generations only the newest counts, as the scheduler's allocator ignores outdated slices.
A class's selectors are evaluated with kpe's CEL against each device (``device.driver``,
``device.attributes[domain].name``, ``device.capacity[domain].name``); a selector that
fails to compile or evaluate selects nothing, as the scheduler's allocator treats a
failing selector as no match. Results with ``adminAccess`` take no device.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from engine import cel
from engine.cel.errors import CelError
from engine.cel.ext.quantity import parse_quantity
from engine.cel.ext.semver import parse_semver
from engine.cluster.projection import from_paths

Obj = Mapping[str, Any]
GROUP = "resource.k8s.io"
VERSION = "v1"
KINDS = ("resourceslices", "resourceclaims", "resourceclaimtemplates", "deviceclasses")

_META = ("metadata.name", "metadata.namespace", "metadata.resourceVersion")
_REQUEST = ("name", "exactly.deviceClassName", "exactly.allocationMode", "exactly.count", "exactly.adminAccess",
            "firstAvailable.name", "firstAvailable.deviceClassName", "firstAvailable.allocationMode", "firstAvailable.count")
SLICE = from_paths([*_META, "spec.driver", "spec.pool.name", "spec.pool.generation", "spec.nodeName", "spec.perDeviceNodeSelection",
                    "spec.devices.name", "spec.devices.attributes", "spec.devices.capacity", "spec.devices.nodeName"])
CLAIM = from_paths([*_META, *(f"spec.devices.requests.{p}" for p in _REQUEST),
                    *(f"status.allocation.devices.results.{f}" for f in ("request", "driver", "pool", "device", "adminAccess"))])
TEMPLATE = from_paths([*_META, *(f"spec.spec.devices.requests.{p}" for p in _REQUEST)])
CLASS = from_paths([*_META, "metadata.creationTimestamp", "spec.selectors.cel.expression", "spec.extendedResourceName"])
VIEWS = {"resourceslices": SLICE, "resourceclaims": CLAIM, "resourceclaimtemplates": TEMPLATE, "deviceclasses": CLASS}


def view(kind: str, obj: Obj) -> dict[str, Any]:
    """What kpe keeps of one object of ``kind`` (one of ``KINDS``)."""
    kept: dict[str, Any] = VIEWS[kind].apply(obj)
    return kept


def key(kind: str, obj: Obj) -> str:
    meta = obj.get("metadata") or {}
    name = str(meta.get("name") or "")
    return name if kind in ("resourceslices", "deviceclasses") else f"{meta.get('namespace') or 'default'}/{name}"


# -- what a claim asks for -------------------------------------------------------------------


def _requests(spec: Obj) -> dict[str, dict[str, int]]:
    """Per request name, the devices it asks of each class (the rules in engine/cel/ext/kube.py)."""
    out: dict[str, dict[str, int]] = {}
    for request in ((spec.get("devices") or {}).get("requests") or ()):
        if not isinstance(request, Mapping):
            continue
        name = str(request.get("name") or "")
        exactly = request.get("exactly")
        if isinstance(exactly, Mapping):
            out[name] = {str(exactly.get("deviceClassName") or ""): _count(exactly)}
            continue
        per_class: dict[str, int] = {}
        for sub in request.get("firstAvailable") or ():
            if isinstance(sub, Mapping):
                cls = str(sub.get("deviceClassName") or "")
                per_class[cls] = max(per_class.get(cls, 0), _count(sub))
                out[f"{name}/{sub.get('name') or ''}"] = {cls: _count(sub)}
        out[name] = per_class
    return out


def _count(request: Obj) -> int:
    if request.get("adminAccess") is True:
        return 0  # admin access takes no device from anyone
    if request.get("allocationMode") == "All":
        return 1  # every matching device on the node: at least one, known only once allocated
    count = request.get("count")
    return count if type(count) is int and count > 0 else 1


def claim_entry(claim: Obj) -> dict[str, Any]:
    """A claim as ``dra.claims`` holds it: its requests per class, and once allocated the
    devices it got per class (by the request each result answers)."""
    requests = _requests(claim.get("spec") or {})
    entry: dict[str, Any] = {"requests": {name: per for name, per in requests.items() if "/" not in name}}
    allocation = (claim.get("status") or {}).get("allocation")
    if isinstance(allocation, Mapping):
        got: dict[str, int] = {}
        for result in ((allocation.get("devices") or {}).get("results") or ()):
            if not isinstance(result, Mapping) or result.get("adminAccess") is True:
                continue
            per = requests.get(str(result.get("request") or ""), {})
            for cls in per:
                got[cls] = got.get(cls, 0) + 1
        entry["allocated"] = got
    return entry


def template_entry(template: Obj) -> dict[str, Any]:
    spec = (template.get("spec") or {}).get("spec") or {}
    return {"requests": {name: per for name, per in _requests(spec).items() if "/" not in name}}


# -- which devices a class selects -----------------------------------------------------------


def device_value(driver: str, device: Obj) -> dict[str, Any]:
    """A device as a class's CEL selectors see it (``device``): attributes and capacity by
    domain (a name without one is the driver's), attributes as typed values."""
    attributes: dict[str, dict[str, Any]] = {}
    for name, attr in (device.get("attributes") or {}).items():
        domain, _, ident = str(name).rpartition("/")
        value: Any = None
        if isinstance(attr, Mapping):
            for field in ("int", "bool", "string", "version"):
                if field in attr:
                    value = attr[field]
                    if field == "version":
                        try:
                            value = parse_semver(str(value))
                        except CelError:
                            value = None
                    break
        if value is not None:
            attributes.setdefault(domain or driver, {})[ident] = value
    capacity: dict[str, dict[str, Any]] = {}
    for name, cap in (device.get("capacity") or {}).items():
        domain, _, ident = str(name).rpartition("/")
        try:
            capacity.setdefault(domain or driver, {})[ident] = parse_quantity(str((cap or {}).get("value")))
        except CelError:
            continue
    return {"driver": driver, "attributes": attributes, "capacity": capacity}


class ClassSelector:
    """One DeviceClass's selectors, compiled once: ``selects(device)`` when every one is true."""

    def __init__(self, cls: Obj) -> None:
        self.programs: list[Any] = []
        self.broken = False
        for selector in ((cls.get("spec") or {}).get("selectors") or ()):
            expression = ((selector or {}).get("cel") or {}).get("expression") if isinstance(selector, Mapping) else None
            if not isinstance(expression, str):
                self.broken = True  # a selector kpe cannot read (a newer kind): select nothing rather than too much
                continue
            try:
                self.programs.append(cel.compile(expression, variables=["device"], check=False))
            except CelError:
                self.broken = True

    def selects(self, device: dict[str, Any]) -> bool:
        if self.broken:
            return False
        try:
            return all(program.evaluate({"device": device}) is True for program in self.programs)
        except CelError:
            return False


class DeviceIndex:
    """Builds the ``dra`` value from the four kinds' views (``build``), again after every
    change. Which devices a class selects (its CEL selectors, per device: the costly part) is
    remembered per slice view, and a claim's entry per claim view, for as long as the same
    view object is handed in (the cache replaces a view when its object changes) and the
    classes are the same: a claim allocated costs a count, not every selector again."""

    def __init__(self) -> None:
        self._classes_key: tuple[Any, ...] | None = None
        self._selectors: dict[str, ClassSelector] = {}
        # id(view) -> (the view, kept so its id is not reused; what was worked out of it)
        self._slices: dict[int, tuple[Obj, list[tuple[str, str, str, str, tuple[str, ...]]]]] = {}
        self._claims: dict[int, tuple[Obj, dict[str, Any], list[tuple[str, str, str]]]] = {}

    def build(self, slices: Iterable[Obj], claims: Iterable[Obj], templates: Iterable[Obj], classes: Iterable[Obj]) -> dict[str, Any]:
        classes = list(classes)
        classes_key = tuple((str((c.get("metadata") or {}).get("name") or ""), repr((c.get("spec") or {}).get("selectors"))) for c in classes)
        if classes_key != self._classes_key:
            self._classes_key, self._slices = classes_key, {}
            self._selectors = {name: ClassSelector(c) for (name, _), c in zip(classes_key, classes)}
        class_info = {}
        for (name, _), c_obj in zip(classes_key, classes):
            ext = (c_obj.get("spec") or {}).get("extendedResourceName")
            class_info[name] = {"extendedResourceName": ext} if isinstance(ext, str) and ext else {}
        claim_entries: dict[str, Any] = {}
        taken: set[tuple[str, str, str]] = set()
        seen_claims: dict[int, tuple[Obj, dict[str, Any], list[tuple[str, str, str]]]] = {}
        for claim in claims:
            found = self._claims.get(id(claim))
            if found is None or found[0] is not claim:
                found = (claim, claim_entry(claim), _taken(claim))
            seen_claims[id(claim)] = found
            claim_entries[key("resourceclaims", claim)] = found[1]
            taken.update(found[2])
        self._claims = seen_claims
        nodes: dict[str, dict[str, dict[str, int]]] = {}
        seen_slices: dict[int, tuple[Obj, list[tuple[str, str, str, str, tuple[str, ...]]]]] = {}
        for s, pool in _current(slices):
            selected = self._slices.get(id(s))
            if selected is None or selected[0] is not s:
                selected = (s, self._selected(s, pool))
            seen_slices[id(s)] = selected
            for node, driver, pool_name, device, in_classes in selected[1]:
                used = (driver, pool_name, device) in taken
                per_node = nodes.setdefault(node, {})
                for cls in in_classes:
                    counts = per_node.setdefault(cls, {"total": 0, "allocated": 0})
                    counts["total"] += 1
                    counts["allocated"] += used
        self._slices = seen_slices
        return {"classes": class_info, "nodes": nodes, "claims": claim_entries,
                "templates": {key("resourceclaimtemplates", t): template_entry(t) for t in templates}}

    def _selected(self, s: Obj, pool: str) -> list[tuple[str, str, str, str, tuple[str, ...]]]:
        """Each device of a slice that belongs to a node: (node, driver, pool, device, the classes that select it)."""
        spec = s.get("spec") or {}
        driver = str(spec.get("driver") or "")
        per_device = spec.get("perDeviceNodeSelection") is True
        out = []
        for device in spec.get("devices") or ():
            if not isinstance(device, Mapping):
                continue
            node = device.get("nodeName") if per_device else spec.get("nodeName")
            if not isinstance(node, str) or not node:
                continue
            value = device_value(driver, device)
            in_classes = tuple(cls for cls, selector in self._selectors.items() if selector.selects(value))
            if in_classes:
                out.append((node, driver, pool, str(device.get("name") or ""), in_classes))
        return out


def _taken(claim: Obj) -> list[tuple[str, str, str]]:
    """The devices allocated to a claim, as (driver, pool, device); admin access takes none."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    return [(str(r.get("driver")), str(r.get("pool")), str(r.get("device")))
            for r in ((allocation.get("devices") or {}).get("results") or ()) if isinstance(r, Mapping) and r.get("adminAccess") is not True]


def _current(slices: Iterable[Obj]) -> list[tuple[Obj, str]]:
    """The slices of each pool's newest generation, with their pool's name."""
    newest: dict[tuple[str, str], int] = {}
    listed: list[tuple[Obj, str, str, int]] = []
    for s in slices:
        spec = s.get("spec") or {}
        pool = spec.get("pool") or {}
        driver, name = str(spec.get("driver") or ""), str(pool.get("name") or "")
        found = pool.get("generation")
        generation = found if type(found) is int else 0
        listed.append((s, driver, name, generation))
        newest[(driver, name)] = max(newest.get((driver, name), generation), generation)
    return [(s, name) for s, driver, name, generation in listed if generation == newest[(driver, name)]]


def dra_of(objects: Mapping[str, Iterable[Obj]]) -> dict[str, Any]:
    """``dra`` from lists of objects by kind (a test's fixtures, a snapshot), each cut to its view."""
    views = {kind: [view(kind, o) for o in objects.get(kind, ())] for kind in KINDS}
    return DeviceIndex().build(views["resourceslices"], views["resourceclaims"], views["resourceclaimtemplates"], views["deviceclasses"])


EMPTY_DRA: Mapping[str, Any] = {"classes": {}, "nodes": {}, "claims": {}, "templates": {}}


def device_summary(pod: Obj, nodes: Iterable[Obj], node_info: Mapping[str, Any], dra: Mapping[str, Any]) -> dict[str, Any] | None:
    """What ``kpe explain pod`` shows of DRA: the devices the pod asks of each DeviceClass (its
    claims', and its requests of the extended resource a class backs, KEP-5004), and per node
    that has any of them its devices of those classes: total, allocated, free (as
    ``kube.nodeFreeDevices`` counts them, pods in flight aside). None when the pod asks for none."""
    from engine.cel.ext.kube import node_devices, node_free_devices, pod_devices
    from engine.cel.ext.kuberesources import pod_requests, scheduler_units

    asked: dict[str, dict[str, int]] = {}
    requests = pod_requests(pod, strict=False)
    for cls, info in sorted((dra.get("classes") or {}).items()):
        claimed = pod_devices(pod, dra, cls)
        extended = info.get("extendedResourceName") if isinstance(info, Mapping) else None
        q = requests.get(extended) if isinstance(extended, str) else None
        by_resource = scheduler_units(str(extended), q) if q is not None else 0
        if claimed or by_resource:
            asked[cls] = {"claims": claimed, "extendedResource": by_resource}
    if not asked:
        return None
    per_node: dict[str, dict[str, dict[str, int]]] = {}
    for node in nodes:
        name = str((node.get("metadata") or {}).get("name") or "")
        for cls in asked:
            found = node_devices(node, dra, cls)
            if found["total"]:
                free = node_free_devices(node, node_info.get(name) or {"pods": []}, dra, cls)
                per_node.setdefault(name, {})[cls] = {**found, "free": free}
    return {"pod": asked, "nodes": per_node}
