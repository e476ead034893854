"""Policies kept in the cluster (``--policy-source cluster``): SchedulingPolicy and Reservation
objects, listed and watched, and served through the policy store like files are.

Two informers (one per kind, cluster-scoped) keep what ``engine.policy.objects`` compiles of
each object, and, for the status kpe writes (``server.cluster.policystatus``), its
resourceVersion and status. An object whose name or spec changed (created, edited, deleted)
asks for a reload after ``debounce_s`` (so a ``kubectl apply`` of a folder is one reload, not
one per object), which the store runs in a thread under the files' rule: the whole set
compiles or the last good set keeps serving. Nothing waits for a kubelet to copy a ConfigMap
into a volume: a write is served as soon as the watch delivers it and the set compiles.

Editing labels, annotations or status is no change of the set: status writes of kpe's own
never cause a reload. The store reads ``snapshot()`` from its reload thread; it is a tuple
replaced whole on the event loop, never changed in place.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from engine.policy.objects import KINDS, ObjectKey, PolicyObject, convert

from server.cluster.informer import Informer, Sink, first
from server.cluster.kube import ApiError, KubeClient

if TYPE_CHECKING:
    from server.reload.store import PolicyStore

log = logging.getLogger("kpe.policies")

Obj = dict[str, Any]
GROUP_VERSION = "kpe.dev/v1alpha1"
PLURALS = {"SchedulingPolicy": "schedulingpolicies", "Reservation": "reservations"}
DEBOUNCE_S = 0.02  # long enough to gather a `kubectl apply -f folder/`, far below the 1 s a write should take to serve
MakeInformer = Callable[[str, str, Sink], Informer]
"""``make(kind, path, sink)``: an informer of kpe's client, fed to ``sink``."""


def collection(kind: str) -> str:
    return f"/apis/{GROUP_VERSION}/{PLURALS[kind]}"


class PolicySourceError(Exception):
    """The cluster cannot be kpe's policy source: its kinds are not installed, or kpe may not read them."""


class _Kind:
    """One kind's objects, fed by its informer (the informer's sink)."""

    def __init__(self, owner: PolicyObjects, kind: str) -> None:
        self.owner = owner
        self.kind = kind
        self.listed = asyncio.Event()

    def enter(self, kind: str, obj: Obj) -> Obj:
        meta = obj.get("metadata") or {}
        kept: Obj = {
            "apiVersion": obj.get("apiVersion", GROUP_VERSION),
            "kind": self.kind,
            "metadata": {k: meta[k] for k in ("name", "uid", "resourceVersion", "generation", "creationTimestamp") if k in meta},
        }
        for part in ("spec", "status"):
            if part in obj:
                kept[part] = obj[part]
        return kept

    def apply(self, informer: Informer, event: Obj) -> None:
        kind, obj = event.get("type"), event.get("object")
        if isinstance(obj, dict) and kind in ("ADDED", "MODIFIED", "DELETED"):
            self.owner.put(self.enter(self.kind, obj), deleted=kind == "DELETED")
        if isinstance(obj, dict):
            informer.heard(str((obj.get("metadata") or {}).get("resourceVersion") or ""))

    def replace(self, informer: Informer, items: list[Obj], resource_version: str, *, refresh: bool) -> None:
        self.owner.relisted(self.kind, items)
        informer.listed = True
        informer.lists += 1
        informer.heard(resource_version)
        self.listed.set()


class PolicyObjects:
    """The store's ``ObjectSource`` under ``--policy-source cluster``."""

    def __init__(self, make: MakeInformer, *, debounce_s: float = DEBOUNCE_S) -> None:
        self.debounce_s = debounce_s
        self.sinks = {kind: _Kind(self, kind) for kind in KINDS}
        self.informers = {kind: make(kind.lower(), collection(kind), sink) for kind, sink in self.sinks.items()}
        self.objects: dict[ObjectKey, PolicyObject] = {}
        self.raw: dict[ObjectKey, Obj] = {}  # as the watch last delivered it: resourceVersion and status
        self._snapshot: tuple[PolicyObject, ...] = ()
        self.dirty = asyncio.Event()  # the set changed: reload
        self.observed = asyncio.Event()  # anything changed, status included: the status writer looks again
        self.reloads = 0
        self._tasks: list[asyncio.Task[None]] = []

    # --- the store's ObjectSource --------------------------------------------------

    def snapshot(self) -> tuple[PolicyObject, ...]:
        return self._snapshot

    # --- what the watches say -------------------------------------------------------

    def put(self, obj: Obj, *, deleted: bool = False) -> None:
        converted = convert(obj)
        key = converted.key
        old = self.objects.get(key)
        if deleted:
            self.objects.pop(key, None)
            self.raw.pop(key, None)
            changed = old is not None
        else:
            self.objects[key] = converted
            self.raw[key] = obj
            changed = old is None or old.data != converted.data or old.generation != converted.generation
        self._changed(changed)

    def relisted(self, kind: str, items: list[Obj]) -> None:
        fresh = {o.key: (o, item) for item in items for o in (convert(item),)}
        gone = [key for key in self.objects if key.kind == kind and key not in fresh]
        changed = bool(gone)
        for key in gone:
            self.objects.pop(key, None)
            self.raw.pop(key, None)
        for key, (converted, item) in fresh.items():
            old = self.objects.get(key)
            changed |= old is None or old.data != converted.data or old.generation != converted.generation
            self.objects[key], self.raw[key] = converted, item
        self._changed(changed)

    def record(self, obj: Obj) -> None:
        """An object as a write of kpe's returned it (its status), ahead of the watch's event."""
        key = convert(obj).key
        if key in self.raw:
            self.raw[key] = self.sinks[key.kind].enter(key.kind, obj)

    def _changed(self, content: bool) -> None:
        if content:
            self._snapshot = tuple(self.objects[k] for k in sorted(self.objects))
            self.dirty.set()
        self.observed.set()

    # --- running ----------------------------------------------------------------------

    async def start(self, client: KubeClient, stop: asyncio.Event) -> None:
        """Check that the kinds are served and kpe may list them, then list and watch both;
        returns once both are listed (the first set can then load)."""
        for kind in KINDS:
            try:
                await client.list(collection(kind), params={"limit": 1})
            except ApiError as exc:
                if exc.status == 404:
                    raise PolicySourceError(
                        f"--policy-source cluster: the API server does not serve {PLURALS[kind]}.kpe.dev: "
                        "install kpe's CRDs (kubectl apply -k deploy/crds)"
                    ) from None
                if exc.status in (401, 403):
                    raise PolicySourceError(
                        f"--policy-source cluster: kpe may not list {PLURALS[kind]}.kpe.dev ({exc.status} {exc.reason}): "
                        "grant it deploy/cluster-policies/rbac.yaml's ClusterRole"
                    ) from None
                # Anything else (no answer yet): the informers retry with backoff.
        for kind, informer in self.informers.items():
            self._tasks.append(asyncio.create_task(informer.run(stop), name=f"informer-{kind.lower()}"))
        await asyncio.gather(*(sink.listed.wait() for sink in self.sinks.values()))

    async def serve(self, store: PolicyStore, stop: asyncio.Event) -> None:
        """Reload ``store`` whenever the set changed, ``debounce_s`` after the first change, one
        reload at a time; changes during a reload make the next one."""
        while not stop.is_set():
            await first(stop, self.dirty)
            if stop.is_set():
                return
            await asyncio.sleep(self.debounce_s)
            self.dirty.clear()
            self.reloads += 1
            await asyncio.to_thread(store.reload)

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
