"""The cluster's Dynamic Resource Allocation objects as policies see them: ``dra``, the
value ``kube.podDevices``, ``kube.nodeDevices`` and ``kube.nodeFreeDevices`` read
(engine/cel/ext/kube.py says its layout and what each helper counts).

kpe keeps four kinds (resource.k8s.io/v1): ResourceSlices (a node's devices, published
by its DRA driver), ResourceClaims (what a pod asks for, and once allocated which devices
it got), ResourceClaimTemplates (the claim a pod's template makes, before the claim
exists) and DeviceClasses (which devices a request of the class may get: CEL selectors
over each device, and the extended resource name the class backs, KEP-5004). Each is cut
to what the count needs as it enters (``view``): a large cluster has a slice per node
and driver and a claim per GPU pod.

``DeviceIndex`` counts, per node and class (kept up to date object by object), the devices the node's slices publish that the
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
from functools import lru_cache
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
        if type(attr) is not dict:
            continue
        value: Any = None
        for field, found in attr.items():  # one of int, bool, string, version (or a list kind kpe does not read)
            if field in _SCALAR_ATTRIBUTES:
                value = _version(str(found)) if field == "version" else found
                break
        if value is not None:
            domain, _, ident = name.rpartition("/")
            attributes.setdefault(domain or driver, {})[ident] = value
    capacity: dict[str, dict[str, Any]] = {}
    for name, cap in (device.get("capacity") or {}).items():
        q = _quantity(str(cap.get("value"))) if type(cap) is dict else None
        if q is not None:
            domain, _, ident = name.rpartition("/")
            capacity.setdefault(domain or driver, {})[ident] = q
    return {"driver": driver, "attributes": attributes, "capacity": capacity}


_SCALAR_ATTRIBUTES = frozenset(("int", "bool", "string", "version"))


# A driver publishes the same versions and capacities on every device: parsed once each.
@lru_cache(maxsize=4096)
def _version(text: str) -> Any:
    try:
        return parse_semver(text)
    except CelError:
        return None


@lru_cache(maxsize=4096)
def _quantity(text: str) -> Any:
    try:
        return parse_quantity(text)
    except CelError:
        return None


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


Located = tuple[str, str, str, str, tuple[str, ...]]  # node, driver, pool, device, the classes that select it


class DeviceIndex:
    """The ``dra`` value, kept up to date object by object (``set``) as watch events come, and
    handed out whole (``snapshot``): which devices a class selects (its CEL selectors per
    device, the costly part) is worked out once per slice change, and a claim's change moves
    only the counts of the devices it was and is allocated. A snapshot is never changed
    afterwards (a node's counts are replaced, not changed), so an evaluation reading one while
    events are applied sees one moment. ``build`` makes one from lists (a test's fixtures)."""

    def __init__(self) -> None:
        self._classes: dict[str, Obj] = {}
        self._selectors: dict[str, ClassSelector] = {}
        self._class_info: dict[str, dict[str, str]] = {}
        self._slices: dict[str, Obj] = {}
        self._pools: dict[tuple[str, str], dict[str, int]] = {}  # (driver, pool) -> slice key -> generation
        self._located: dict[str, list[Located]] = {}  # slice key -> its devices counted (newest generation only)
        self._claims: dict[str, dict[str, Any]] = {}
        self._claim_taken: dict[str, list[tuple[str, str, str]]] = {}
        self._taken: dict[tuple[str, str, str], int] = {}  # device -> how many claims hold it
        self._where: dict[tuple[str, str, str], tuple[str, tuple[str, ...]]] = {}  # device -> (node, classes)
        self._nodes: dict[str, dict[str, dict[str, int]]] = {}
        self._templates: dict[str, dict[str, Any]] = {}
        self._snapshot: dict[str, Any] | None = None

    @staticmethod
    def build(slices: Iterable[Obj], claims: Iterable[Obj], templates: Iterable[Obj], classes: Iterable[Obj]) -> dict[str, Any]:
        index = DeviceIndex()
        index.set_classes(list(classes))
        for kind, objects in (("resourceslices", slices), ("resourceclaims", claims), ("resourceclaimtemplates", templates)):
            for obj in objects:
                index.set(kind, key(kind, obj), obj)
        return index.snapshot()

    def snapshot(self) -> dict[str, Any]:
        if self._snapshot is None:
            self._snapshot = {"classes": dict(self._class_info), "nodes": dict(self._nodes), "claims": dict(self._claims),
                              "templates": dict(self._templates)}
        return self._snapshot

    # -- changes ------------------------------------------------------------------------------

    def set(self, kind: str, name: str, obj: Obj | None) -> None:
        """One object of ``kind`` (its view) added, changed (None: deleted)."""
        self._snapshot = None
        if kind == "resourceclaims":
            self._set_claim(name, obj)
        elif kind == "resourceclaimtemplates":
            if obj is None:
                self._templates.pop(name, None)
            else:
                self._templates[name] = template_entry(obj)
        elif kind == "resourceslices":
            self._set_slice(name, obj)
        elif kind == "deviceclasses":
            classes = dict(self._classes)
            if obj is None:
                classes.pop(name, None)
            else:
                classes[name] = obj
            self.set_classes(list(classes.values()))

    def set_classes(self, classes: list[Obj]) -> None:
        """Every DeviceClass: each slice's devices are selected again."""
        self._snapshot = None
        self._classes = {str((c.get("metadata") or {}).get("name") or ""): c for c in classes}
        self._selectors = {name: ClassSelector(c) for name, c in self._classes.items()}
        self._class_info = {}
        for name, c in self._classes.items():
            ext = (c.get("spec") or {}).get("extendedResourceName")
            self._class_info[name] = {"extendedResourceName": ext} if isinstance(ext, str) and ext else {}
        for name in list(self._located):
            self._uncount(name)
        self._nodes, self._where = {}, {}
        for name in list(self._slices):
            self._count(name)

    def _set_claim(self, name: str, claim: Obj | None) -> None:
        for device in self._claim_taken.pop(name, ()):
            self._take(device, -1)
        if claim is None:
            self._claims.pop(name, None)
            return
        self._claims[name] = claim_entry(claim)
        taken = _taken(claim)
        self._claim_taken[name] = taken
        for device in taken:
            self._take(device, 1)

    def _take(self, device: tuple[str, str, str], by: int) -> None:
        before = self._taken.get(device, 0)
        after = before + by
        if after > 0:
            self._taken[device] = after
        else:
            self._taken.pop(device, None)
        if (before > 0) != (after > 0) and device in self._where:
            node, classes = self._where[device]
            self._add(node, classes, 0, 1 if after > 0 else -1)

    def _set_slice(self, name: str, obj: Obj | None) -> None:
        self._uncount(name)
        old = self._slices.get(name)
        pools = {_pool_of(old)} if old is not None else set()
        if obj is None:
            self._slices.pop(name, None)
        else:
            self._slices[name] = obj
            pools.add(_pool_of(obj))
        for pool in pools:
            members = self._pools.setdefault(pool, {})
            members.pop(name, None)
            if obj is not None and _pool_of(obj) == pool:
                members[name] = _generation(obj)
            newest = max(members.values(), default=0)
            for member, generation in list(members.items()):
                self._uncount(member)
                if generation == newest:
                    self._count(member)
            if not members:
                del self._pools[pool]

    def _count(self, name: str) -> None:
        s = self._slices[name]
        pool = _pool_of(s)
        if pool in self._pools and self._pools[pool].get(name) != max(self._pools[pool].values()):
            return  # an older generation of its pool
        located = self._select(s, pool[1])
        self._located[name] = located
        for node, driver, pool_name, device, classes in located:
            self._where[(driver, pool_name, device)] = (node, classes)
            self._add(node, classes, 1, 1 if (driver, pool_name, device) in self._taken else 0)

    def _uncount(self, name: str) -> None:
        for node, driver, pool_name, device, classes in self._located.pop(name, ()):
            if self._where.get((driver, pool_name, device), (None,))[0] == node:
                del self._where[(driver, pool_name, device)]
            self._add(node, classes, -1, -1 if (driver, pool_name, device) in self._taken else 0)

    def _add(self, node: str, classes: tuple[str, ...], total: int, allocated: int) -> None:
        """Move a node's counts: its entry is replaced (snapshots handed out keep theirs)."""
        per_node = dict(self._nodes.get(node) or {})
        for cls in classes:
            counts = per_node.get(cls) or {"total": 0, "allocated": 0}
            counts = {"total": counts["total"] + total, "allocated": counts["allocated"] + allocated}
            if counts["total"] > 0:
                per_node[cls] = counts
            else:
                per_node.pop(cls, None)
        if per_node:
            self._nodes[node] = per_node
        else:
            self._nodes.pop(node, None)

    def _select(self, s: Obj, pool: str) -> list[Located]:
        """Each device of a slice that belongs to a node, with the classes that select it."""
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


def _pool_of(s: Obj) -> tuple[str, str]:
    spec = s.get("spec") or {}
    return str(spec.get("driver") or ""), str((spec.get("pool") or {}).get("name") or "")


def _generation(s: Obj) -> int:
    found = ((s.get("spec") or {}).get("pool") or {}).get("generation")
    return found if type(found) is int else 0


def _taken(claim: Obj) -> list[tuple[str, str, str]]:
    """The devices allocated to a claim, as (driver, pool, device); admin access takes none."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    return [(str(r.get("driver")), str(r.get("pool")), str(r.get("device")))
            for r in ((allocation.get("devices") or {}).get("results") or ()) if isinstance(r, Mapping) and r.get("adminAccess") is not True]


def dra_of(objects: Mapping[str, Iterable[Obj]]) -> dict[str, Any]:
    """``dra`` from lists of objects by kind (a test's fixtures, a snapshot), each cut to its view."""
    views = {kind: [view(kind, o) for o in objects.get(kind, ())] for kind in KINDS}
    return DeviceIndex.build(views["resourceslices"], views["resourceclaims"], views["resourceclaimtemplates"], views["deviceclasses"])


EMPTY_DRA: Mapping[str, Any] = {"classes": {}, "nodes": {}, "claims": {}, "templates": {}}

