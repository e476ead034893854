"""Requeue after a reload: prompt kube-scheduler to retry the pods kpe rejected under an older policy set.

kube-scheduler retries a pod that an extender rejected only on the next
cluster event (any node or pod change), or after five minutes. A policy
reload is no cluster event, so a change that admits pending pods would leave
them waiting. kpe therefore remembers the pending pods its filter rejected
nodes for, with the generation that rejected them, and after every swap
touches each one still pending with a one-annotation merge patch
(``kpe.dev/requeue: <generation>``), at most ``--requeue-rate`` pods a second.
kube-scheduler sees an update of an unschedulable pod that an extender
rejected, and retries it once its backoff (1 to 10 s) has passed.

Only pods are touched, never nodes, and only pods this replica rejected; the
memory is bounded (the oldest entries go first). A pod rejected again under
the new set is remembered again by the filter verb itself.

A change of a Namespace's labels or annotations (``server.cluster.namespaces``, watched while
a policy reads ``namespaceObject``) is no cluster event for kube-scheduler either: the pods
rejected in that namespace are touched the same way, whatever generation rejected them.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from server.cluster.kube import ApiError

if TYPE_CHECKING:
    from server.state import ServerState

log = logging.getLogger("kpe.requeue")
ANNOTATION = "kpe.dev/requeue"
REMEMBERED = 10_000  # pods; about 200 bytes each


@dataclass(frozen=True, slots=True)
class Rejected:
    namespace: str
    name: str
    uid: str
    generation: str


class Requeuer:
    def __init__(self, *, rate: float, limit: int = REMEMBERED) -> None:
        self.rate = rate
        self.limit = limit
        self.rejected: OrderedDict[str, Rejected] = OrderedDict()
        self.changed_namespaces: set[str] = set()
        self.namespace_changes = 0  # in the annotation: an equal value would change nothing
        self._prompt: asyncio.Event | None = None

    def namespace_changed(self, namespace: str) -> None:
        """Called (on the event loop) when a namespace's labels or annotations changed."""
        self.changed_namespaces.add(namespace)
        if self._prompt is not None:
            self._prompt.set()

    def remember(self, pod: Mapping[str, Any], generation: str) -> None:
        """Called by the filter verb for a pod it rejected at least one node for."""
        meta = pod.get("metadata")
        if not isinstance(meta, Mapping) or not meta.get("name"):
            return
        namespace, name, uid = str(meta.get("namespace") or "default"), str(meta["name"]), str(meta.get("uid") or "")
        key = uid or f"{namespace}/{name}"
        self.rejected.pop(key, None)
        self.rejected[key] = Rejected(namespace, name, uid, generation)
        while len(self.rejected) > self.limit:
            self.rejected.popitem(last=False)

    def forget(self, pod: Mapping[str, Any]) -> None:
        """Called by the filter verb when every node passed: nothing to retry for this pod."""
        meta = pod.get("metadata")
        if isinstance(meta, Mapping):
            self.rejected.pop(str(meta.get("uid") or f"{meta.get('namespace') or 'default'}/{meta.get('name')}"), None)

    async def run(self, state: ServerState, stop: asyncio.Event) -> None:
        """Touch the pods rejected under an older generation after every reload."""
        reloaded = state.store.subscribe()
        prompt = self._prompt = asyncio.Event()
        while not stop.is_set():
            waiters = [asyncio.create_task(reloaded.wait()), asyncio.create_task(stop.wait()), asyncio.create_task(prompt.wait())]
            try:
                await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waiters:
                    w.cancel()
            if stop.is_set():
                return
            if prompt.is_set() and not reloaded.is_set():
                prompt.clear()
                namespaces, self.changed_namespaces = self.changed_namespaces, set()
                try:
                    await self.requeue(state, namespaces=namespaces)
                except Exception:  # noqa: BLE001 - one failed round must not end the task
                    log.exception("requeue after a namespace change failed")
                continue
            reloaded.clear()
            try:
                await self.requeue(state, reloaded)
            except Exception:  # noqa: BLE001 - one failed round must not end the task
                log.exception("requeue after reload failed")

    async def requeue(self, state: ServerState, reloaded: asyncio.Event | None = None, *, namespaces: set[str] | None = None) -> int:
        """One round: touch every remembered pod rejected under another generation
        (with ``namespaces``: rejected in one of them, under any generation)
        that the cache still shows pending. Stops early when another reload comes
        (the next round covers the rest). Returns how many were touched."""
        client, cache = state.client, state.cache
        if client is None or self.rate <= 0:
            return 0
        generation = state.store.current.generation
        touched = 0
        for key, entry in list(self.rejected.items()):
            if reloaded is not None and reloaded.is_set():
                break
            if (entry.namespace not in namespaces) if namespaces is not None else entry.generation == generation:
                continue
            self.rejected.pop(key, None)
            if cache is not None:
                current = cache.pod_by_uid(entry.uid) if entry.uid else None
                if entry.uid and (current is None or (current.get("spec") or {}).get("nodeName")):
                    state.metrics.requeued.labels("gone").inc()
                    continue  # deleted or bound since: nothing to retry
            value = generation
            if namespaces is not None:
                self.namespace_changes += 1
                value = f"{generation}-ns{self.namespace_changes}"
            patch = {"metadata": {"annotations": {ANNOTATION: value}}}
            try:
                await client.merge_patch_pod(entry.namespace, entry.name, patch)
            except ApiError as exc:
                state.metrics.requeued.labels("gone" if exc.status == 404 else "error").inc()
                if exc.status != 404:
                    log.warning("could not prompt a retry of %s/%s: %s", entry.namespace, entry.name, exc)
                continue
            state.metrics.requeued.labels("touched").inc()
            touched += 1
            await asyncio.sleep(1 / self.rate)
        if touched:
            log.info("prompted kube-scheduler to retry pods rejected under an older policy set", extra={"pods": touched, "generation": generation})
        return touched
