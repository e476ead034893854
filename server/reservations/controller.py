"""The reservation controller: keeps one placeholder pod per free slot of every reservation.

It runs beside the gate controller on the replica holding the Lease. Each pass
reads the cache's pods, asks ``engine.reservations.slots.plan`` what to do, and does it
through ``server.cluster.kube``: claims first (an owner on the node of a slot gets the
``kpe.dev/reservation-slot`` annotation and an Event), then deletes (only
placeholders: of removed or shrunk reservations, of slots an owner took, from
an older template; each with the pod's uid as precondition), then creates
(fixed names, so a second controller's create fails with 409 and does
nothing). Slots used up (``returnSlots: false``) are remembered in the
annotation ``kpe.dev/consumed-slots`` of the Lease ``<--lease-name>-reservations``,
so a new leader does not give them back. ``GET /apis/v1/reservations`` shows
every slot.

Every replica, leader or not, knows where each slot is at home (``homes``): the
leader from its passes, the others from passes of their own that only look
(``_track``). Every replica's filter verb keeps non-owners out of a home's room
while no pod holds it (``engine.reservations.heldroom``).

Events (``reportingComponent: kpe``), on placeholders: ``ReservedSlotHeld`` (created
for a new slot), ``ReservedSlotRestored`` (created again after it was deleted or
replaced), ``ReservedSlotReturned`` (created again after the slot's owner ended),
``ReservedSlotTaken`` (deleted: an owner uses its slot), ``ReservedSlotRemoved``
(deleted: the reservation was removed or shrunk); on owners: ``ReservedSlotTaken``.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from engine.decisions.evaluation import matching_scopes, request_inputs
from engine.reservations.heldroom import Home
from engine.policy.model import PolicySet
from engine.policy.reservation import CLAIM_ANNOTATION, RESERVATION_LABEL, SLOT_LABEL, Reservation, placeholder_pod
from engine.reservations.slots import Claim, Create, Delete, Plan, SlotMemory, key_of, plan

from server.cluster.kube import ApiError
from server.cluster.leader import first, micro_time, run_passes
from server.state import ServerState

log = logging.getLogger("kpe.reservations")
STATES = ("free", "pending", "used", "consumed", "missing")
CREATED = {"new": "ReservedSlotHeld", "restored": "ReservedSlotRestored", "returned": "ReservedSlotReturned"}  # Create.kind -> Event
DELETED = {"taken": "ReservedSlotTaken", "removed": "ReservedSlotRemoved"}  # Delete.kind -> Event (the others need none)
CONSUMED_ANNOTATION = "kpe.dev/consumed-slots"  # on the record Lease: "<reservation>/<slot>,..."


class ReservationController:
    def __init__(self, state: ServerState, *, resync_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        settings = state.settings
        self.state = state
        self.namespace = settings.reservation_namespace
        self.image = settings.placeholder_image
        self.priority_class = settings.placeholder_priority_class
        self.grace = settings.reservation_grace_s
        self.resync = resync_s
        self.clock = clock
        self.memory = SlotMemory()
        self.last: Plan | None = None  # the leader's last pass
        self.seen: Plan | None = None  # a follower's last look (``_track``)
        self.watching = SlotMemory()  # what a follower's looks remember
        self.homes: dict[str, list[Home]] = {}  # node -> slots at home there, from the last pass or look
        # Consumed slots (returnSlots: false) outlive a leader: kept as an annotation of a Lease
        # beside the gate controller's (the only objects kpe may write in its namespace).
        self.record = (settings.lease_namespace, f"{settings.lease_name}-reservations")
        self.saved: set[tuple[str, int]] | None = None  # consumed slots as last read or written; None: not read yet
        self.placeholders_seen = True  # until a pass has looked: leftovers of removed reservations
        self._owners: dict[tuple[str, str, str], bool] = {}  # (uid, generation, reservation) -> owns, from the whole pod
        self._singles: dict[str, tuple[str, PolicySet]] = {}
        self.slot_gauge = state.metrics.reservation_slots
        self.placeholder_changes = state.metrics.reservation_placeholders
        self.claims = state.metrics.reservation_claims

    # -- ownership -------------------------------------------------------------
    def _single(self, policy_set: PolicySet, reservation: Reservation) -> PolicySet:
        cached = self._singles.get(reservation.name)
        if cached is None or cached[0] != policy_set.generation:
            policy = policy_set.get(reservation.policy)
            assert policy is not None
            cached = (policy_set.generation, policy_set.subset((policy,)))
            self._singles[reservation.name] = cached
        return cached[1]

    def owns(self, policy_set: PolicySet, reservation: Reservation, pod: Mapping[str, Any]) -> bool:
        """Whether ``pod`` owns ``reservation``. The cache keeps bound pods cut to what the
        policies read of other pods, so a bound pod's answer is settled on the whole pod
        (``_verify``) before it claims anything; until then its namespace decides."""
        meta = pod.get("metadata") or {}
        known = self._owners.get((str(meta.get("uid") or ""), policy_set.generation, reservation.name))
        if known is not None:
            return known
        single = self._single(policy_set, reservation)
        if (pod.get("spec") or {}).get("nodeName"):
            namespaces = single.policies[0].match.namespaces
            return namespaces is None or (meta.get("namespace") or "default") in namespaces
        return bool(matching_scopes(single, pod, request_inputs(pod, None)))

    async def _verify(self, policy_set: PolicySet, claim: Claim) -> dict[str, Any] | None:
        """The owner, read whole, if it still owns the reservation and has no slot."""
        client = self.state.client
        assert client is not None
        meta = claim.owner.get("metadata") or {}
        try:
            pod = await client.get_pod(str(meta.get("namespace") or "default"), str(meta.get("name")))
        except ApiError as exc:
            if exc.status != 404:
                log.warning("could not read %s: %s", key_of(claim.owner), exc)
            return None
        reservation = next(r for r in policy_set.reservations if r.name == claim.reservation)
        single = self._single(policy_set, reservation)
        owns = bool(matching_scopes(single, pod, request_inputs(pod, None)))
        self._owners[(str((pod.get("metadata") or {}).get("uid") or ""), policy_set.generation, reservation.name)] = owns
        taken = ((pod.get("metadata") or {}).get("annotations") or {}).get(CLAIM_ANNOTATION)
        return pod if owns and not taken else None

    # -- a pass ----------------------------------------------------------------
    def compute(self, memory: SlotMemory) -> Plan:
        policy_set = self.state.store.current
        cache = self.state.cache
        assert cache is not None
        return plan(
            policy_set.reservations, cache.pods(), memory, namespace=self.namespace,
            owns=lambda r, p: self.owns(policy_set, r, p), now=self.clock(), grace_s=self.grace,
        )

    async def reconcile(self) -> Plan | None:
        policy_set = self.state.store.current
        if not policy_set.reservations and not self.placeholders_seen:
            self.homes = {}
            return None  # nothing reserved and nothing left over: no pass over every pod
        if self.saved is None and any(not r.return_slots for r in policy_set.reservations):
            await self._load_consumed()
        result = self.compute(self.memory)
        self.homes = result.homes
        self.placeholders_seen = bool(policy_set.reservations) or bool(result.deletes)
        failed: list[Any] = []
        for claim in result.claims:
            if not await self._take(policy_set, claim):
                failed.append(claim.placeholder)
                self.memory.used_by.pop((claim.reservation, claim.index), None)  # it never used the slot
        for delete in result.deletes:
            if any(delete.pod is p for p in failed if p is not None):
                continue
            await self._delete(delete)
        for create in result.creates:
            await self._create(create)
        for (name, index), owner in result.returned:
            log.info("slot %s/%d returned: %s ended", name, index, owner)
        self.last = result
        self._export(result)
        if self.saved is not None and self.memory.consumed != self.saved:
            await self._save_consumed()
        return result

    async def _load_consumed(self) -> None:
        client = self.state.client
        assert client is not None
        namespace, name = self.record
        try:
            lease = await client.get_lease(namespace, name)
        except ApiError as exc:
            if exc.status != 404:
                log.warning("could not read consumed slots from lease %s/%s: %s", namespace, name, exc)
                return  # read again next pass: without it consumed slots would get placeholders
            self.saved = set()
            return
        text = ((lease.get("metadata") or {}).get("annotations") or {}).get(CONSUMED_ANNOTATION, "")
        self.saved = {(k.rpartition("/")[0], int(k.rpartition("/")[2])) for k in text.split(",") if k.rpartition("/")[2].isdigit()}
        self.memory.consumed |= self.saved

    async def _save_consumed(self) -> None:
        client = self.state.client
        assert client is not None
        namespace, name = self.record
        value = ",".join(f"{r}/{i}" for r, i in sorted(self.memory.consumed))
        try:
            try:
                lease = await client.get_lease(namespace, name)
            except ApiError as exc:
                if exc.status != 404:
                    raise
                body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": name, "namespace": namespace, "annotations": {CONSUMED_ANNOTATION: value}}, "spec": {}}
                await client.create_lease(namespace, body)
            else:
                lease.setdefault("metadata", {}).setdefault("annotations", {})[CONSUMED_ANNOTATION] = value
                await client.replace_lease(namespace, name, lease)
        except ApiError as exc:
            log.warning("could not record consumed slots in lease %s/%s (next pass retries): %s", namespace, name, exc)
            return
        self.saved = set(self.memory.consumed)

    async def _take(self, policy_set: PolicySet, claim: Claim) -> bool:
        client = self.state.client
        assert client is not None
        pod = await self._verify(policy_set, claim)
        if pod is None:
            return False
        meta = pod["metadata"]
        value = f"{claim.reservation}/{claim.index}"
        try:
            await client.merge_patch_pod(meta["namespace"], meta["name"], {"metadata": {"uid": meta.get("uid"), "annotations": {CLAIM_ANNOTATION: value}}})
        except ApiError as exc:
            log.warning("could not record %s's slot %s: %s", key_of(pod), value, exc)
            return False
        self.claims.labels(claim.reservation).inc()
        log.info("%s took slot %s on %s", key_of(pod), value, claim.node)
        await self._event(pod, "ReservedSlotTaken", f"uses slot {claim.index} of reservation {claim.reservation} on node {claim.node}")
        return True

    async def _delete(self, delete: Delete) -> None:
        client = self.state.client
        assert client is not None
        pod, reason = delete.pod, delete.reason
        meta = pod.get("metadata") or {}
        try:
            await client.delete_pod(self.namespace, str(meta.get("name")), uid=str(meta.get("uid") or ""), grace_seconds=0)
        except ApiError as exc:
            if exc.status not in (404, 409):
                log.warning("could not delete placeholder %s: %s", key_of(pod), exc)
            return
        labels = meta.get("labels") or {}
        self.placeholder_changes.labels(str(labels.get(RESERVATION_LABEL, "")), "deleted").inc()
        log.info("deleted placeholder %s: %s", key_of(pod), reason)
        if delete.kind in DELETED:
            what = f"slot {labels.get(SLOT_LABEL, '?')} of reservation {labels.get(RESERVATION_LABEL, '?')}"
            await self._event(pod, DELETED[delete.kind], f"placeholder of {what} deleted: {reason}")

    async def _create(self, create: Create) -> None:
        client = self.state.client
        assert client is not None
        reservation, index, near, reason = create.reservation, create.index, create.near, create.reason
        pod = placeholder_pod(reservation, index, namespace=self.namespace, image=self.image, priority_class=self.priority_class, near=near)
        try:
            created = await client.create_pod(self.namespace, pod)
        except ApiError as exc:
            if exc.status != 409:  # 409: it exists (another replica's, or still terminating)
                log.warning("could not create placeholder %s/%s: %s", self.namespace, pod["metadata"]["name"], exc)
            return
        self.placeholder_changes.labels(reservation.name, "created").inc()
        log.info("created placeholder %s/%s: %s", self.namespace, pod["metadata"]["name"], reason)
        where = f" (preferring node {near}, where the slot was)" if near else ""
        message = {
            "new": f"holds slot {index} of reservation {reservation.name}",
            "restored": f"holds slot {index} of reservation {reservation.name} again ({reason}){where}",
            "returned": f"slot {index} of reservation {reservation.name} is free again ({reason}){where}",
        }[create.kind]
        await self._event(created, CREATED[create.kind], message)

    async def _event(self, pod: Mapping[str, Any], reason: str, message: str) -> None:
        client = self.state.client
        assert client is not None
        meta = pod.get("metadata") or {}
        namespace = str(meta.get("namespace") or "default")
        now = micro_time()[:19] + "Z"
        event = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": f"{meta.get('name')}.kpe-", "namespace": namespace},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": meta.get("name"), "namespace": namespace, "uid": meta.get("uid")},
            "reason": reason, "message": message, "type": "Normal",
            "source": {"component": "kpe"}, "reportingComponent": "kpe",
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        }
        try:
            await client.create_event(namespace, event)
        except ApiError as exc:
            log.warning("could not record event for %s: %s", key_of(pod), exc)

    def _export(self, result: Plan) -> None:
        self.slot_gauge.clear()
        for name, slots in result.slots.items():
            for state in STATES:
                self.slot_gauge.labels(name, state).set(sum(1 for s in slots if s.state == state))

    # -- loop ------------------------------------------------------------------
    async def run(self, stop: asyncio.Event, leading: asyncio.Event) -> None:
        cache = self.state.cache
        assert cache is not None

        def follow() -> None:
            self.memory = SlotMemory()  # a leader again later starts from the cluster
            self.saved = None

        tracking = asyncio.create_task(self._track(stop, leading), name="reservation-homes")
        try:
            await run_passes(
                stop, leading, synced=cache.synced, changed=cache.subscribe(), reloaded=self.state.store.subscribe(),
                reconcile=self.reconcile, follow=follow, name="reservation controller",
                wait_s=min(self.resync, max(self.grace, 0.2)), settle_s=0.05,
            )
        finally:
            tracking.cancel()

    async def _track(self, stop: asyncio.Event, leading: asyncio.Event) -> None:
        """While this replica follows: look at the slots as a pass would, without acting, so
        its filter knows the homes too (kube-scheduler may ask any replica)."""
        cache = self.state.cache
        assert cache is not None
        changed, reloaded = cache.subscribe(), self.state.store.subscribe()
        try:
            while not stop.is_set():
                # Without reservations no change of the cache can give a slot a home: waking for
                # each watch event (two per scheduled pod) only took the event loop from requests.
                await first(*((stop, changed, reloaded) if self.state.store.current.reservations else (stop, reloaded)), timeout=self.resync)
                changed.clear()
                reloaded.clear()
                if leading.is_set() or not cache.synced.is_set():
                    self.watching, self.seen = SlotMemory(), None  # the leader's passes keep the homes
                    continue
                try:
                    if self.state.store.current.reservations:
                        self.seen = self.compute(self.watching)
                        self.homes = self.seen.homes
                    else:
                        self.seen, self.homes = None, {}
                except Exception:  # noqa: BLE001 - one bad look must not end the tracking
                    log.exception("reservation homes: a look failed")
                await asyncio.sleep(0.05)
        finally:
            cache.unsubscribe(changed)

    def latest(self) -> Plan | None:
        """The last pass (leading) or look (following): the slots as this replica knows them."""
        leading = self.state.elector is not None and self.state.elector.is_leader
        return self.last if leading else self.seen

    def status(self) -> dict[str, Any]:
        """Every reservation and slot: as the leader's last pass saw them, or (a follower,
        or the set just changed) as a pass would see them now, without acting."""
        policy_set = self.state.store.current
        leading = self.state.elector is not None and self.state.elector.is_leader
        shape = {r.name: r.slots for r in policy_set.reservations}
        last = self.last
        if leading and last is not None and {name: len(slots) for name, slots in last.slots.items()} == shape:
            result = last  # what the controller itself saw at its last pass
        else:
            result = self.compute(copy.deepcopy(self.memory))
        return {
            "reservations": [
                {
                    "name": r.name,
                    "policy": r.policy,
                    "file": r.file,
                    "mode": r.mode,
                    "returnSlots": r.return_slots,
                    "slots": r.slots,
                    "free": sum(1 for s in result.slots[r.name] if s.state == "free"),
                    "used": sum(1 for s in result.slots[r.name] if s.state == "used"),
                    "slotStates": [s.to_dict() for s in result.slots[r.name]],
                }
                for r in policy_set.reservations
            ]
        }
