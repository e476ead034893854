"""What kpe's cache keeps of a pod bound to a node: a ``Projection``, a tree of the
fields to keep, applied to a pod as it enters the cache.

Lists are transparent: a path
through a list applies to each element, and a list keeps its length. A kept
field keeps its type (a map stays a map, a list a list), so presence, sizes,
types and every value read are those of the whole pod: decisions are the same.

``KPE_READS`` is what kpe itself reads of cached pods; its readers are listed
in ``server.cluster.cache``'s docstring.

Which fields the loaded policies read is worked out from their compiled expressions
by ``engine.policy.reads``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from engine.cel.ext.kube import POD_REQUEST_READS

ITEM = "[]"
"""A path step into the elements of a list (or, for a map, its values: the map is then kept whole)."""


class Projection:
    """An immutable tree of what to keep of a value.

    ``whole``: keep the value as it is. Otherwise a map keeps only ``fields``
    (each projected by its own tree), unless ``map_whole`` (its keys are read:
    iterated, counted, indexed at run time), when it is kept whole; a list keeps
    every element, each projected by ``items`` (or, without ``items``, by these
    same ``fields``: lists are transparent); anything else is kept as it is.
    ``Projection()`` keeps a value's presence and type only: a map empty, a list
    of emptied elements, a scalar as it is.
    """

    __slots__ = ("_elements", "_key", "fields", "items", "map_whole", "whole")

    def __init__(self, *, whole: bool = False, map_whole: bool = False,
                 fields: Mapping[str, Projection] | None = None, items: Projection | None = None) -> None:
        self.whole = whole
        self.map_whole = map_whole and not whole
        self.fields: Mapping[str, Projection] = {} if whole else dict(sorted((fields or {}).items()))
        self.items = None if whole else items
        self._elements: Projection | None = None
        self._key: tuple[Any, ...] | None = None

    # -- identity --------------------------------------------------------------------
    def key(self) -> tuple[Any, ...]:
        """A canonical value: equal keys, equal trees."""
        if self._key is None:
            self._key = (self.whole, self.map_whole, tuple((k, v.key()) for k, v in self.fields.items()),
                         self.items.key() if self.items is not None else None)
        return self._key

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Projection) and self.key() == other.key()

    def __hash__(self) -> int:
        return hash(self.key())

    def __repr__(self) -> str:
        return f"Projection({', '.join(self.render()) or '(presence only)'})"

    # -- algebra ---------------------------------------------------------------------
    @property
    def elements(self) -> Projection:
        """What is kept of each element when the value is a list."""
        if self.items is not None:
            return self.items
        if self._elements is None:
            self._elements = Projection(fields=self.fields)
        return self._elements

    def union(self, other: Projection) -> Projection:
        """What keeps everything either keeps."""
        if self.whole or other is EMPTY:
            return self
        if other.whole or self is EMPTY:
            return other
        fields = dict(self.fields)
        for name, sub in other.fields.items():
            fields[name] = fields[name].union(sub) if name in fields else sub
        items: Projection | None = None
        if self.items is not None or other.items is not None:
            # A side without items projects list elements by its fields: keep that too.
            items = self.elements.union(other.elements)
        return Projection(map_whole=self.map_whole or other.map_whole, fields=fields, items=items)

    def covers(self, other: Projection) -> bool:
        """Whether everything ``other`` keeps is kept here (a reload that is not covered must relist)."""
        return self.union(other) == self

    # -- applying --------------------------------------------------------------------
    def apply(self, value: Any) -> Any:
        """The value projected: a new object where anything is dropped, shared where kept whole."""
        if self.whole:
            return value
        kind = type(value)
        if kind is dict:
            if self.map_whole:
                return value
            fields = self.fields
            if len(fields) <= len(value):
                return {name: sub.apply(value[name]) for name, sub in fields.items() if name in value}
            return {name: fields[name].apply(item) for name, item in value.items() if name in fields}
        if kind is list:
            elements = self.elements
            return [elements.apply(item) for item in value]
        return value

    # -- reading ---------------------------------------------------------------------
    def render(self) -> list[str]:
        """One line per thing kept, as field paths: ``a.b`` whole, ``a.b?`` present (type
        only), ``a.b{*}`` a map kept whole (a list there is followed), ``a[]`` the
        elements of a list; ``*`` the whole object. Sorted."""
        if self.whole:
            return ["*"]
        out: list[str] = []
        self._render("", out)
        return sorted(out)

    def _render(self, path: str, out: list[str]) -> None:
        if self.whole:
            out.append(path)
            return
        if self.map_whole:
            out.append(path + "{*}")
        for name, sub in self.fields.items():
            sub._render(_step(path, name), out)
        if self.items is not None:
            self.items._render(path + ITEM, out)
        if path and not self.map_whole and not self.fields and self.items is None:
            out.append(path + "?")


_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def _step(path: str, name: str) -> str:
    if _IDENT.match(name):
        return f"{path}.{name}" if path else name
    return f"{path}[{name!r}]"


EMPTY = Projection()
EVERYTHING = Projection(whole=True)


class Builder:
    """A mutable tree while paths are being recorded."""

    __slots__ = ("fields", "items", "map_whole", "whole")

    def __init__(self) -> None:
        self.whole = False
        self.map_whole = False
        self.fields: dict[str, Builder] = {}
        self.items: Builder | None = None

    def at(self, path: Sequence[str]) -> Builder | None:
        """The node at ``path`` (created present); None under a node already whole."""
        node = self
        for step in path:
            if node.whole:
                return None
            if step == ITEM:
                if node.items is None:
                    node.items = Builder()
                node = node.items
            else:
                node = node.fields.setdefault(step, Builder())
        return None if node.whole else node

    def freeze(self) -> Projection:
        if self.whole:
            return EVERYTHING
        if not self.map_whole and not self.fields and self.items is None:
            return EMPTY
        fields = {name: sub.freeze() for name, sub in self.fields.items()}
        items = None
        if self.items is not None:
            # Lists are transparent: what was selected at this level applies to elements too.
            items = self.items.freeze().union(Projection(fields=fields))
            if items.whole and self.map_whole:
                return EVERYTHING  # a map kept whole, a list of whole elements: the value as it is
        return Projection(map_whole=self.map_whole, fields=fields, items=items)


def from_paths(paths: Iterable[str | Sequence[str]]) -> Projection:
    """A projection keeping each path whole (lists transparent). A path is a tuple of field
    names, or a string of them joined with dots (``ITEM`` steps allowed in either)."""
    root = Builder()
    for path in paths:
        steps = tuple(path.split(".")) if isinstance(path, str) else tuple(path)
        node = root.at(steps)
        if node is not None:
            node.whole = True
    return root.freeze()


# What kpe itself reads of a cached pod (whoever reads it is listed in server.cluster.cache).
KPE_READS = from_paths([
    ("metadata", "name"),
    ("metadata", "namespace"),
    ("metadata", "uid"),  # pod_key; victims answered by UID
    ("metadata", "creationTimestamp"),
    ("metadata", "deletionTimestamp"),
    ("spec", "priority"),  # kube-scheduler's preemption dry run (engine.cluster.kubefilters): which pods are victims,
    ("status", "startTime"),  # and in which order (GET /apis/v1/explain?pod=)
    ("metadata", "annotations", "kpe.dev/gates"),  # held_by_kpe, is_admitted
    ("spec", "nodeName"),
    ("spec", "schedulingGates"),
    ("spec", "containers", "resources", "requests"),  # nodeInfo.requested (engine.cluster.nodeinfo.pod_requests)
    ("spec", "initContainers", "resources", "requests"),
    ("spec", "overhead"),
    *POD_REQUEST_READS,  # what kube.podRequests reads: sidecars, pod-level resources (pod_requests as kube-scheduler counts)
    ("status", "phase"),  # is_active: finished pods leave nodeInfo
    # Reservations (engine.reservations.slots): placeholders, the slots owners use, where owners were nominated.
    ("metadata", "labels", "kpe.dev/reservation"),
    ("metadata", "labels", "kpe.dev/slot"),
    ("metadata", "labels", "app.kubernetes.io/managed-by"),
    ("metadata", "annotations", "kpe.dev/reservation-slot"),
    ("metadata", "annotations", "kpe.dev/template"),
    ("status", "nominatedNodeName"),
])


_LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def namespace_view(namespace: Mapping[str, Any]) -> dict[str, Any]:
    """What ``namespaceObject`` holds of a Namespace, in the server's cache and in ``kpe test``
    and ``kpe explain`` alike: its name, labels and annotations (but kubectl's copy of the
    whole object, as snapshots drop it), and ``status.phase``. A policy decides by these; the
    rest (uid, finalizers, managedFields) only costs memory in a cache that keeps every
    namespace of the cluster."""
    meta = namespace.get("metadata") or {}
    kept: dict[str, Any] = {"name": meta.get("name", "")}
    for key in ("labels", "annotations"):
        values = {k: v for k, v in (meta.get(key) or {}).items() if k != _LAST_APPLIED}
        if values:
            kept[key] = values
    view: dict[str, Any] = {"apiVersion": "v1", "kind": "Namespace", "metadata": kept}
    phase = (namespace.get("status") or {}).get("phase")
    if phase:
        view["status"] = {"phase": phase}
    return view


def namespaces_by_name(namespaces: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Namespace objects (a file's, a test's) by name, each cut as ``namespace_view`` cuts it."""
    views = [namespace_view(n) for n in namespaces]
    return {v["metadata"]["name"]: v for v in views if v["metadata"]["name"]}
