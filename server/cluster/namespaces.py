"""The cluster's Namespaces, for ``namespaceObject``: one list+watch kept beside the node and
pod cache (``server.cluster.cache``), started only once a served policy set reads
``namespaceObject``, so a deployment whose policies never do needs no namespace RBAC and
pays nothing.

Each namespace is kept as ``engine.cluster.projection.namespace_view`` cuts it: name,
labels, annotations and phase. A namespace is replaced whole on every change, so the
equivalence cache (which fingerprints what a policy reads of it) sees new labels at once.
A relist replaces the map whole too: clusters have hundreds of namespaces, not thousands of
objects per change. While the informer is not connected, the cache as a whole is not
(``ClusterCache.connected``): a stale namespace must not decide silently.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any

from engine.cluster.projection import namespace_view
from engine.policy.model import PolicySet
from engine.policy.reads import reads_variable

from server.cluster.informer import Informer, cancelled, start_and_wait

log = logging.getLogger("kpe.cache")

Obj = dict[str, Any]
PATH = "/api/v1/namespaces"


def reads_namespace(policy_set: PolicySet) -> bool:
    """Whether any expression of the set reads ``namespaceObject``."""
    return reads_variable(policy_set, "namespaceObject")


class Namespaces:
    """Namespace views by name, fed by their own informer (the informer's sink)."""

    def __init__(self, informer: Callable[[Namespaces], Informer]) -> None:
        self.informer = informer(self)  # made by the cache, with its client and settings, fed here
        self.by_name: dict[str, Obj] = {}
        self.task: asyncio.Task[None] | None = None
        self.listed = asyncio.Event()
        # Called with a namespace's name when its labels or annotations changed (the requeue
        # controller prompts kube-scheduler about the pods kpe rejected there).
        self.on_change: Callable[[str], None] = lambda name: None

    @property
    def started(self) -> bool:
        return self.task is not None

    def start(self, stop: asyncio.Event) -> None:
        """Start watching (once; on the event loop)."""
        if self.task is None:
            log.info("a served policy reads namespaceObject: watching namespaces")
            self.task = asyncio.create_task(self.informer.run(stop), name="informer-namespace")

    def start_before_swap(self, loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> None:
        """Start watching for a set that reads namespaceObject, in the reload thread, and return
        once the namespaces are listed: the set is held back until then, as for pod fields the
        cache dropped (on the loop itself it cannot wait, and only starts)."""
        start_and_wait(loop, lambda: self.start(stop), self.listed)

    async def stop(self) -> None:
        await cancelled(self.task)

    def view(self) -> Mapping[str, Obj] | None:
        """The namespaces by name once listed; None before (``namespaceObject`` is then null)."""
        return self.by_name if self.listed.is_set() else None

    # --- the informer's sink -----------------------------------------------------

    def enter(self, kind: str, obj: Obj) -> Obj:
        return namespace_view(obj) if isinstance(obj, dict) else obj

    def apply(self, informer: Informer, event: Obj) -> None:
        kind = event.get("type")
        raw = event.get("object")
        if not isinstance(raw, dict):
            return
        rv = str((raw.get("metadata") or {}).get("resourceVersion") or "")
        if kind in ("ADDED", "MODIFIED", "DELETED"):
            obj = namespace_view(raw)
            name = obj["metadata"]["name"]
            if kind == "DELETED":
                self.by_name.pop(name, None)
                return informer.heard(rv)
            old = self.by_name.get(name)
            self.by_name[name] = obj
            if old is not None and old["metadata"] != obj["metadata"]:
                self.on_change(name)
        informer.heard(rv)

    def replace(self, informer: Informer, items: list[Obj], resource_version: str, *, refresh: bool) -> None:
        self.by_name = {obj["metadata"]["name"]: obj for obj in items}
        informer.listed = True
        informer.lists += 1
        informer.heard(resource_version)
        self.listed.set()
