"""The ConfigMaps that policies take their ``params`` from (``spec.paramsFrom``,
``engine.policy.params``), watched so that a change is picked up like a policy reload.

One list+watch per namespace that holds a named ConfigMap (kpe's RBAC grants ConfigMaps in
those namespaces only: deploy/rbac.yaml's ``kpe-params`` Role in kpe-system). Only the named
ConfigMaps' data is kept; the others of the namespace are dropped as they enter. When a named
one changes (created, its data edited, deleted), ``on_change`` asks for a reload: the store
compiles the policies again with the new values (``server.reload.store``; a first list that
finds one is a change too) and a changed
generation serves, which the gate controller and the requeue after a reload act on at once.

This is the store's ``ParamsSource``: ``values()`` for each load, and ``ensure(refs)``, called
in the reload thread when a new set names a ConfigMap not watched yet, which starts the watch
and returns once it is listed, so that set is compiled again with the values before it serves.
A namespace whose ConfigMaps cannot be read (no RBAC there, a typo) makes no replica unready
and keeps no node-name request from being answered: the policies naming it act on their
``parameterNotFoundAction``, and ``/readyz`` says so in its detail (``problems``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from engine.policy.params import Ref, Unreadable

from server.cluster.informer import Informer

if TYPE_CHECKING:
    from server.reload.store import PolicyStore

log = logging.getLogger("kpe.cache")

Obj = dict[str, Any]
ENSURE_TIMEOUT_S = 10.0  # a reload waits this long for a newly named ConfigMap's first list
MakeInformer = Callable[[str, "Namespace"], Informer]
"""``make(path, sink)``: an informer of the cache's client and settings, fed to ``sink``."""


def refs_of(policies: Iterable[Any]) -> frozenset[Ref]:
    """The ConfigMaps a policy set's ``paramsFrom`` names."""
    return frozenset(p.params_from for p in policies if p.params_from is not None)


class Namespace:
    """The named ConfigMaps of one namespace, fed by its informer (the informer's sink)."""

    def __init__(self, owner: ConfigMaps, namespace: str) -> None:
        self.owner = owner
        self.namespace = namespace
        self.listed = asyncio.Event()
        # Set by a list, or by a failure before any list: the server answered, so a reload that
        # waits for this namespace (ensure) waits no longer.
        self.answered = asyncio.Event()
        # Why its ConfigMaps cannot be read, while no list has succeeded (a 403 where kpe's RBAC
        # does not reach); the policies then say "cannot be read", not "not found". Once listed,
        # the values listed keep serving through later failures, as every cached kind does.
        self.unreadable: str | None = None

    def failed(self, why: str) -> None:
        """The informer's list or watch failed (``Informer.on_failure``)."""
        if self.listed.is_set():
            return
        first = self.unreadable is None
        self.unreadable = why
        self.answered.set()
        if first:
            log.warning("cannot read ConfigMaps for policy params: %s", why, extra={"namespace": self.namespace})
            self.owner.on_change()  # the policies naming them now say why, not "not found"

    def enter(self, kind: str, obj: Obj) -> Obj:
        meta = obj.get("metadata") or {}
        kept: Obj = {"metadata": {"name": meta.get("name", ""), "resourceVersion": meta.get("resourceVersion", "")}}
        if (self.namespace, meta.get("name")) in self.owner.named:
            kept["data"] = {str(k): str(v) for k, v in (obj.get("data") or {}).items()}
        return kept

    def apply(self, informer: Informer, event: Obj) -> None:
        kind, obj = event.get("type"), event.get("object")
        if isinstance(obj, dict) and kind in ("ADDED", "MODIFIED", "DELETED"):
            kept = self.enter("configmap", obj)
            name = str(kept["metadata"]["name"])
            if (self.namespace, name) in self.owner.named:
                self.owner.seen({(self.namespace, name): None if kind == "DELETED" else kept.get("data") or {}}, namespace=self.namespace)
        if isinstance(obj, dict):
            informer.heard(str((obj.get("metadata") or {}).get("resourceVersion") or ""))

    def replace(self, informer: Informer, items: list[Obj], resource_version: str, *, refresh: bool) -> None:
        found = {(self.namespace, str(o["metadata"]["name"])): o.get("data") or {} for o in items if "data" in o}
        wanted = {ref for ref in self.owner.named if ref[0] == self.namespace}
        readable_again = self.unreadable is not None
        self.unreadable = None
        self.owner.seen({ref: found.get(ref) for ref in wanted}, namespace=self.namespace, changed=readable_again)
        informer.listed = True
        informer.lists += 1
        informer.heard(resource_version)
        self.listed.set()
        self.answered.set()


class ConfigMaps:
    def __init__(self, make: MakeInformer) -> None:
        self._make = make
        self.named: frozenset[Ref] = frozenset()
        self.data: dict[Ref, dict[str, str]] = {}
        self.namespaces: dict[str, tuple[Namespace, Informer, asyncio.Task[None]]] = {}
        self.on_change: Callable[[], None] = lambda: None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.stop: asyncio.Event | None = None
        self._reloads: set[asyncio.Task[Any]] = set()

    @property
    def informers(self) -> list[Informer]:
        return [informer for _, informer, _ in self.namespaces.values()]

    # --- the store's ParamsSource --------------------------------------------------

    def values(self) -> Mapping[Ref, Mapping[str, str] | Unreadable | None]:
        out: dict[Ref, Mapping[str, str] | Unreadable | None] = dict(self.data)
        for ref in self.named:
            watched = self.namespaces.get(ref[0])
            if watched is not None and watched[0].unreadable is not None:
                out[ref] = Unreadable(watched[0].unreadable)
        return out

    def covers(self, refs: frozenset[Ref]) -> bool:
        """Whether ``refs`` are watched and their namespaces listed, or their lists failed (a
        namespace kpe may not read: its ConfigMaps are not found, and a reload does not wait
        ``ENSURE_TIMEOUT_S`` for them each time; the list that succeeds later is a change)."""
        return refs <= self.named and all(
            ns in self.namespaces and (self.namespaces[ns][0].listed.is_set() or self.namespaces[ns][1].error is not None) for ns, _ in refs
        )

    def problems(self) -> dict[str, str]:
        """Namespaces whose ConfigMaps are not current, and why (a 403: the RBAC of deploy/ does
        not cover them). They make no replica unready: only the policies that take params from
        there are affected, as their parameterNotFoundAction says."""
        return {ns: informer.error or informer.why for ns, (_, informer, _) in sorted(self.namespaces.items()) if not informer.connected}

    def ensure(self, refs: frozenset[Ref]) -> None:
        """Watch ``refs`` too, and return once they are listed (in the reload thread; at once
        when the cache is not running, and after ``ENSURE_TIMEOUT_S`` when the API server does
        not answer: their values are then not known, and the list, when it comes, is a change)."""
        loop = self.loop
        if loop is None or loop.is_closed() or self.covers(refs):
            return
        try:
            on_loop = asyncio.get_running_loop() is loop
        except RuntimeError:
            on_loop = False
        if on_loop:
            # A synchronous load on the event loop cannot wait for a list: watched from now on,
            # and the first list, a change, reloads.
            loop.create_task(self.watch(refs))
            return
        with contextlib.suppress(concurrent.futures.CancelledError, concurrent.futures.TimeoutError, RuntimeError):
            asyncio.run_coroutine_threadsafe(self.watch(refs), loop).result(timeout=ENSURE_TIMEOUT_S)

    # --- running ------------------------------------------------------------------------

    async def serve(self, store: PolicyStore, stop: asyncio.Event) -> None:
        """Be ``store``'s source from now on (on the event loop): its set's ConfigMaps watched,
        and each change a reload in a thread, as the file watcher reloads. Returns once they are
        listed; the watches run until ``stop``."""
        self.loop, self.stop = asyncio.get_running_loop(), stop
        self.on_change = lambda: self._reload(store)
        refs = refs_of(store.current.policies) if store.ready else frozenset()
        if refs:
            await self.watch(refs)

    def _reload(self, store: PolicyStore) -> None:
        assert self.loop is not None
        task = self.loop.create_task(asyncio.to_thread(store.reload))
        self._reloads.add(task)  # held until done: the loop keeps only weak references to tasks
        task.add_done_callback(self._reloads.discard)

    async def watch(self, refs: frozenset[Ref]) -> None:
        """Watch the namespaces of ``refs`` (on the event loop) until they are listed, or their
        first list failed (they cannot be read: the policies naming them say so)."""
        assert self.stop is not None
        new = refs - self.named
        self.named |= refs
        for namespace in sorted({ns for ns, _ in new}):
            if namespace in self.namespaces:
                # Already watched, for other names: listed again for the new one's data.
                sink, informer, _ = self.namespaces[namespace]
                sink.listed.clear()
                sink.answered.clear()
                informer.relist_wanted.set()
                continue
            sink = Namespace(self, namespace)
            informer = self._make(f"/api/v1/namespaces/{namespace}/configmaps", sink)
            informer.on_failure = sink.failed
            task = asyncio.create_task(informer.run(self.stop), name=f"informer-configmaps-{namespace}")
            self.namespaces[namespace] = (sink, informer, task)
            log.info("watching ConfigMaps for policy params", extra={"namespace": namespace, "names": sorted(n for ns, n in refs if ns == namespace)})
        await asyncio.gather(*(self.namespaces[ns][0].answered.wait() for ns, _ in refs))

    async def close(self) -> None:
        tasks = [task for _, _, task in self.namespaces.values()] + list(self._reloads)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def seen(self, found: Mapping[Ref, Mapping[str, str] | None], *, namespace: str, changed: bool = False) -> None:
        """What the watch says of the named ConfigMaps; a reload when any changed (or ``changed``:
        the namespace became readable)."""
        for ref, data in found.items():
            old = self.data.get(ref)
            if data is None:
                changed |= self.data.pop(ref, None) is not None
            elif old != data:
                self.data[ref] = dict(data)
                changed = True
        if changed:
            log.info("policy params changed in a ConfigMap: reloading", extra={"namespace": namespace})
            self.on_change()
