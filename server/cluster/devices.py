"""The cluster's Dynamic Resource Allocation objects, for ``dra`` (``kube.podDevices``,
``kube.nodeDevices``): ResourceSlices, ResourceClaims, ResourceClaimTemplates and
DeviceClasses of resource.k8s.io/v1, one list+watch each, kept beside the node and pod
cache (``server.cluster.cache``).

Started only once a served policy set reads ``dra``, as namespaces are: claims grow with
the GPU pods and slices with the nodes, and a deployment whose policies never read them
needs neither the memory nor RBAC for resource.k8s.io. Before watching, kpe asks the API
server whether it serves resource.k8s.io/v1 (Kubernetes 1.34 and later, where DRA is GA;
1.32 serves v1beta1 only, and only with DRA enabled). Where it does not, kpe logs so once
and ``dra`` stays empty: the helpers see no devices, and the cache stays connected.

Each object is trimmed (strings interned, managedFields dropped: ``server.cluster.trim``) and
cut as it enters (``engine.cluster.devices.view``), and applied to ``dra`` at once
(``engine.cluster.devices.DeviceIndex``: a slice's devices selected by each class once per
slice change, a claim's allocation moving only its devices' counts); readers get a snapshot
made on the first read after a change, the same object until the next one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any

from engine.cluster.devices import EMPTY_DRA, GROUP, KINDS, VERSION, DeviceIndex, key, view
from engine.policy.model import PolicySet
from engine.policy.reads import reads_variable

from server.cluster.informer import Informer, cancelled, start_and_wait
from server.cluster.trim import trim
from server.cluster.kube import ApiError, KubeClient

log = logging.getLogger("kpe.cache")

Obj = dict[str, Any]
PREFIX = f"/apis/{GROUP}/{VERSION}"
# Asking whether the API is served, again after a failure other than "not found" or "forbidden".
BACKOFF_INITIAL_S = 0.5
BACKOFF_MAX_S = 30.0


def reads_dra(policy_set: PolicySet) -> bool:
    """Whether any expression of the set reads ``dra``."""
    return reads_variable(policy_set, "dra")


class Devices:
    """The four kinds by key, fed by their informers (each informer's sink)."""

    def __init__(self, client: KubeClient, informer: Callable[[str, str, Devices], Informer]) -> None:
        self._client = client
        self.informers = {kind: informer(kind, f"{PREFIX}/{kind}", self) for kind in KINDS}
        self.objects: dict[str, dict[str, Obj]] = {kind: {} for kind in KINDS}
        self.task: asyncio.Task[None] | None = None
        self.served: bool | None = None  # None until asked; False: the API server does not serve resource.k8s.io/v1
        self._index = DeviceIndex()  # dra, kept up to date event by event
        self.ready = asyncio.Event()  # set once listed, or once known not to be served

    @property
    def started(self) -> bool:
        return self.task is not None

    @property
    def watching(self) -> list[Informer]:
        """The informers that count for the cache's connection once started: until they have
        listed, the cache is not connected (a GPU node must not look empty); none where the
        API server does not serve resource.k8s.io/v1."""
        return [] if self.task is None or self.served is False else list(self.informers.values())

    def start(self, stop: asyncio.Event) -> None:
        """Start watching (once; on the event loop)."""
        if self.task is None:
            self.task = asyncio.create_task(self._run(stop), name="informer-dra")

    async def _run(self, stop: asyncio.Event) -> None:
        wait = BACKOFF_INITIAL_S
        while True:
            try:
                await self._client.list(PREFIX + "/deviceclasses", params={"limit": 1})
                break
            except ApiError as exc:
                if exc.status in (404, 403):
                    return self._not_served(exc.status)
                log.warning("asking the API server whether it serves resource.k8s.io/v1 failed, retrying in %.1f s: %s", wait, exc)
            await asyncio.sleep(wait)
            wait = min(wait * 2, BACKOFF_MAX_S)
        self.served = True
        log.info("a served policy reads dra: watching resourceslices, resourceclaims, resourceclaimtemplates and deviceclasses")
        await asyncio.gather(*(inf.run(stop) for inf in self.informers.values()))

    def _not_served(self, status: int) -> None:
        self.served = False
        why = "the API server does not serve resource.k8s.io/v1 (Kubernetes before 1.34, or DRA disabled)" if status == 404 \
            else "kpe may not list resource.k8s.io/v1 deviceclasses (RBAC: deploy/rbac.yaml)"
        log.warning("a served policy reads dra, but %s: kube.podDevices and kube.nodeDevices see no devices", why)
        self.ready.set()

    def start_before_swap(self, loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> None:
        """Start watching for a set that reads ``dra``, in the reload thread, and return once
        listed (or known not served): the set is held back until then, as for namespaces."""
        start_and_wait(loop, lambda: self.start(stop), self.ready)

    async def stop(self) -> None:
        await cancelled(self.task)

    def view(self) -> Mapping[str, Any]:
        """``dra`` now (the index's snapshot, made on the first read after a change); empty until listed."""
        if not self.served or not all(inf.listed for inf in self.informers.values()):
            return EMPTY_DRA
        return self._index.snapshot()

    # --- the informers' sink -------------------------------------------------------------

    def enter(self, kind: str, obj: Obj) -> Obj:
        return view(kind, trim(obj)) if isinstance(obj, dict) else obj

    def apply(self, informer: Informer, event: Obj) -> None:
        kind = event.get("type")
        raw = event.get("object")
        if not isinstance(raw, dict):
            return
        rv = str((raw.get("metadata") or {}).get("resourceVersion") or "")
        if kind in ("ADDED", "MODIFIED", "DELETED"):
            obj = self.enter(informer.kind, raw)
            name = key(informer.kind, obj)
            found = self.objects[informer.kind]
            if kind == "DELETED":
                found.pop(name, None)
                self._index.set(informer.kind, name, None)
            else:
                found[name] = obj
                self._index.set(informer.kind, name, obj)
        informer.heard(rv)

    def replace(self, informer: Informer, items: list[Obj], resource_version: str, *, refresh: bool) -> None:
        fresh = {key(informer.kind, obj): obj for obj in items}
        old = self.objects[informer.kind]
        self.objects[informer.kind] = fresh
        if informer.kind == "deviceclasses":
            self._index.set_classes(list(fresh.values()))
        else:
            for name in [n for n in old if n not in fresh]:
                self._index.set(informer.kind, name, None)
            for name, obj in fresh.items():
                if old.get(name) != obj:
                    self._index.set(informer.kind, name, obj)
        informer.listed = True
        informer.lists += 1
        informer.heard(resource_version)
        if all(inf.listed for inf in self.informers.values()):
            self.ready.set()
