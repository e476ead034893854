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
memory is bounded (the oldest entries go first, and a pod is forgotten once the
cache sees it bound or deleted). A pod rejected again under
the new set is remembered again by the filter verb itself.

A change of a Namespace's labels or annotations (``server.cluster.namespaces``, watched while
a policy reads ``namespaceObject``) is no cluster event for kube-scheduler either: the pods
rejected in that namespace are touched the same way, whatever generation rejected them.

A reservation's slot coming back is a cluster event, the binding of its placeholder, but
kube-scheduler and kpe hear of it each on its own watch. A ``Required`` owner waiting for the
slot is retried by kube-scheduler at once (from 1.33 a pod whose backoff has passed goes
straight from the backoff queue to scheduling, SchedulerPopFromBackoffQ), within milliseconds
of the binding; when kpe's cache has not seen the binding yet, kpe's filter still finds no
free slot, the owner goes back to the unschedulable pods, and nothing more happens in the
cluster to retry it (without a kubelet updating the placeholder, not for five minutes). So
when kpe's cache shows a placeholder newly bound (``pod_event``), the pods that reservation's
rule rejected are touched too: kube-scheduler's retry then comes after kpe can see the slot.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engine.policy.reservation import POLICY_PREFIX, reservation_of

from server.cluster.kube import ApiError

if TYPE_CHECKING:
    from server.state import ServerState

log = logging.getLogger("kpe.requeue")
ANNOTATION = "kpe.dev/requeue"
REMEMBERED = 10_000  # pods; about 500 bytes each, forgotten once seen bound or deleted


@dataclass(frozen=True, slots=True)
class Rejected:
    namespace: str
    name: str
    uid: str
    generation: str
    policies: frozenset[str] = frozenset()  # the policies whose rules rejected a node for it


class Requeuer:
    def __init__(self, *, rate: float, limit: int = REMEMBERED) -> None:
        self.rate = rate
        self.limit = limit
        self.rejected: OrderedDict[str, Rejected] = OrderedDict()
        self.changed_namespaces: set[str] = set()
        self.returned_slots: set[str] = set()  # policies of reservations whose placeholder was just bound
        self.bound_placeholders: set[str] = set()  # uids of the placeholders seen bound
        self.prompts = 0  # in the annotation: an equal value would change nothing
        self._prompt: asyncio.Event | None = None

    def namespace_changed(self, namespace: str) -> None:
        """Called (on the event loop) when a namespace's labels or annotations changed."""
        self.changed_namespaces.add(namespace)
        if self._prompt is not None:
            self._prompt.set()

    def pod_event(self, kind: str, event_type: str, pod: Mapping[str, Any]) -> None:
        """The cache's ``on_event`` (on the event loop): a pod seen bound or deleted has nothing
        left to retry and is forgotten; a reservation's placeholder seen bound for the first time
        prompts a retry of the pods its reservation's rule rejected."""
        if kind != "pod":
            return
        meta = pod.get("metadata") or {}
        deleted = event_type == "DELETED" or bool(meta.get("deletionTimestamp"))
        bound = bool((pod.get("spec") or {}).get("nodeName"))
        if (deleted or bound) and self.rejected:
            # Nearly every pod has some node rejected on its way to being bound: kept until the
            # oldest went first, 10,000 such pods took about 5 MiB for nothing to retry.
            self.forget(pod)
        if not (reservation := reservation_of(pod)):
            return
        uid = str(meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}")
        if deleted or not bound:
            self.bound_placeholders.discard(uid)
            return
        if uid in self.bound_placeholders:
            return
        self.bound_placeholders.add(uid)
        policy = POLICY_PREFIX + reservation
        if any(policy in entry.policies for entry in self.rejected.values()):
            self.returned_slots.add(policy)
            if self._prompt is not None:
                self._prompt.set()

    def remember(self, pod: Mapping[str, Any], generation: str, *, policies: frozenset[str] = frozenset()) -> None:
        """Called by the filter verb for a pod it rejected at least one node for, with the
        policies whose rules rejected them."""
        meta = pod.get("metadata")
        if not isinstance(meta, Mapping) or not meta.get("name"):
            return
        namespace, name, uid = str(meta.get("namespace") or "default"), str(meta["name"]), str(meta.get("uid") or "")
        key = uid or f"{namespace}/{name}"
        self.rejected.pop(key, None)
        self.rejected[key] = Rejected(namespace, name, uid, generation, policies)
        while len(self.rejected) > self.limit:
            self.rejected.popitem(last=False)

    def forget(self, pod: Mapping[str, Any]) -> None:
        """Called by the filter verb when every node passed, and for a pod seen bound or deleted:
        nothing to retry for this pod."""
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
                policies, self.returned_slots = self.returned_slots, set()
                try:
                    if namespaces:
                        await self.requeue(state, namespaces=namespaces)
                    if policies:
                        await self.requeue(state, policies=policies)
                except Exception:  # noqa: BLE001 - one failed round must not end the task
                    log.exception("requeue after a namespace change or a returned slot failed")
                continue
            reloaded.clear()
            try:
                await self.requeue(state, reloaded)
            except Exception:  # noqa: BLE001 - one failed round must not end the task
                log.exception("requeue after reload failed")

    async def requeue(
        self, state: ServerState, reloaded: asyncio.Event | None = None, *, namespaces: set[str] | None = None, policies: set[str] | None = None
    ) -> int:
        """One round: touch every remembered pod rejected under another generation
        (with ``namespaces``: rejected in one of them, under any generation; with
        ``policies``: rejected by one of them, under any generation)
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
            if namespaces is not None:
                skip = entry.namespace not in namespaces
            elif policies is not None:
                skip = not entry.policies & policies
            else:
                skip = entry.generation == generation
            if skip:
                continue
            self.rejected.pop(key, None)
            if cache is not None:
                current = cache.pod_by_uid(entry.uid) if entry.uid else None
                if entry.uid and (current is None or (current.get("spec") or {}).get("nodeName")):
                    state.metrics.requeued.labels("gone").inc()
                    continue  # deleted or bound since: nothing to retry
            value = generation
            if namespaces is not None or policies is not None:
                self.prompts += 1
                value = f"{generation}-{'ns' if namespaces is not None else 'slot'}{self.prompts}"
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
