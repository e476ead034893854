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

Whether a pod owns a reservation is decided on the whole pod (labels and
namespace) before any claim is planned: kpe's cache keeps bound pods cut to what
the policies read, so a bound pod that may be a claimant and whose answer is not
known yet is read from the API server (once per pod and policy generation) and the
pass planned again with the answer; until it is known the slot is neither claimed
nor given a placeholder. What a pass publishes (``last``: the status, the metric
``kpe_reservation_slots``, the homes) is what it did: a claim the API refused shows
as not made. The controller tells its own deletions from others' by the UIDs it
deleted (``SlotMemory.deleted``): only a placeholder it deleted itself is replaced
without the grace period.

Every replica, leader or not, knows where each slot is at home (``homes``): the
leader from its passes, the others from looks of their own (``_track``) that judge
no pod an owner: a follower shows the slots as the leader recorded them in the
cluster (placeholders, owners' annotations), and the metric only on the leader.
A replica that starts leading carries on from its looks' memory (where each slot
was, since when its placeholder is missing), so an owner already running in a
slot's room is recognised (by node and ownership) before any placeholder is
created. Every replica's filter verb keeps non-owners out of a home's room while
no pod holds it (``engine.reservations.heldroom``).

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
from typing import Any, cast

from engine.decisions.evaluation import matching_scopes, request_inputs
from engine.reservations.heldroom import Home
from engine.policy.model import PolicySet
from engine.policy.reservation import CLAIM_ANNOTATION, RESERVATION_LABEL, SLOT_LABEL, Reservation, placeholder_pod
from engine.cluster.nodeinfo import pod_name
from engine.reservations.slots import Claim, Create, Delete, Plan, SlotMemory, plan

from server.cluster.kube import ApiError
from server.cluster.leader import first, micro_time, run_passes
from server.cluster.trim import is_projected
from server.state import ServerState

log = logging.getLogger("kpe.reservations")
STATES = ("free", "pending", "used", "consumed", "missing")
CREATED = {"new": "ReservedSlotHeld", "restored": "ReservedSlotRestored", "returned": "ReservedSlotReturned"}  # Create.kind -> Event
DELETED = {"taken": "ReservedSlotTaken", "removed": "ReservedSlotRemoved"}  # Delete.kind -> Event (the others need none)
CONSUMED_ANNOTATION = "kpe.dev/consumed-slots"  # on the record Lease: "<reservation>/<slot>,..."
SOURCES = {  # GET /apis/v1/reservations: whose slots a replica shows
    "leader": "this replica leads: the slots as its controller's last pass left them (owners read whole, claims recorded)",
    "recorded": "this replica does not lead: the slots as the leader recorded them in the cluster "
    "(its placeholders and the owners' kpe.dev/reservation-slot annotations)",
}
READS = 8  # owners read whole at a time


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
        self.led = False  # whether ``memory`` is a leader's (else the looks' ``watching`` is the one kept up)
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
        self._owner_generation = ""
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

    def owns(self, policy_set: PolicySet, reservation: Reservation, pod: Mapping[str, Any]) -> bool | None:
        """Whether ``pod`` owns ``reservation``, judged on the whole pod; None: not known yet.
        The cache keeps pending and gated pods whole, bound ones cut to what the policies read:
        a bound pod is judged by an answer from when it was read whole (``_read_whole``), or
        found not to own a reservation whose owners are in other namespaces."""
        meta = pod.get("metadata") or {}
        key = (str(meta.get("uid") or ""), policy_set.generation, reservation.name)
        known = self._owners.get(key)
        if known is not None:
            return known
        single = self._single(policy_set, reservation)
        cache = self.state.cache
        if not is_projected(cast(dict[str, Any], pod)) or (cache is not None and cache.projection.whole):
            answer = bool(matching_scopes(single, pod, request_inputs(pod, None, namespaces=self.state.namespaces())))
            self._owners[key] = answer
            return answer
        namespaces = single.policies[0].match.namespaces
        if namespaces is not None and (meta.get("namespace") or "default") not in namespaces:
            return False
        return None

    async def _read_whole(self, policy_set: PolicySet, pods: list[Any]) -> None:
        """Read ``pods`` from the API server and remember whether each owns each reservation."""
        client = self.state.client
        assert client is not None
        wanted = {str((p.get("metadata") or {}).get("uid") or ""): p for p in pods}
        limit = asyncio.Semaphore(READS)

        async def read(uid: str, cached: Mapping[str, Any]) -> None:
            meta = cached.get("metadata") or {}
            async with limit:
                try:
                    pod = await client.get_pod(str(meta.get("namespace") or "default"), str(meta.get("name")))
                except ApiError as exc:
                    if exc.status != 404:
                        log.warning("could not read %s to tell whether it owns a reservation: %s", pod_name(cached), exc)
                        return  # still not known: its slot waits for the next pass
                    pod = None
            same = pod is not None and str((pod.get("metadata") or {}).get("uid") or "") == uid
            for reservation in policy_set.reservations:
                owns = same and pod is not None and bool(matching_scopes(self._single(policy_set, reservation), pod, request_inputs(pod, None, namespaces=self.state.namespaces())))
                self._owners[(uid, policy_set.generation, reservation.name)] = owns
            log.debug("read %s whole: owns %s", pod_name(cached), sorted(r.name for r in policy_set.reservations if self._owners.get((uid, policy_set.generation, r.name))) or "no reservation")

        await asyncio.gather(*(read(uid, pod) for uid, pod in wanted.items() if uid))

    async def _verify(self, policy_set: PolicySet, claim: Claim) -> dict[str, Any] | None:
        """The owner, read whole, if it still owns the reservation and has no slot."""
        client = self.state.client
        assert client is not None
        meta = claim.owner.get("metadata") or {}
        try:
            pod = await client.get_pod(str(meta.get("namespace") or "default"), str(meta.get("name")))
        except ApiError as exc:
            if exc.status != 404:
                log.warning("could not read %s: %s", pod_name(claim.owner), exc)
            return None
        reservation = next(r for r in policy_set.reservations if r.name == claim.reservation)
        single = self._single(policy_set, reservation)
        owns = bool(matching_scopes(single, pod, request_inputs(pod, None, namespaces=self.state.namespaces())))
        self._owners[(str((pod.get("metadata") or {}).get("uid") or ""), policy_set.generation, reservation.name)] = owns
        taken = ((pod.get("metadata") or {}).get("annotations") or {}).get(CLAIM_ANNOTATION)
        return pod if owns and not taken else None

    # -- a pass ----------------------------------------------------------------
    def compute(self, memory: SlotMemory, *, look: bool = False, pods: list[Any] | None = None) -> Plan:
        """A pass's plan over the cache's pods. ``look``: judge no pod an owner (what a
        follower shows: only the claims the leader recorded make a slot used)."""
        policy_set = self.state.store.current
        cache = self.state.cache
        assert cache is not None
        if policy_set.generation != self._owner_generation:
            self._owners = {k: v for k, v in self._owners.items() if k[1] == policy_set.generation}
            self._owner_generation = policy_set.generation
        return plan(
            policy_set.reservations, cache.pods() if pods is None else pods, memory, namespace=self.namespace,
            owns=(lambda r, p: None) if look else (lambda r, p: self.owns(policy_set, r, p)), now=self.clock(), grace_s=self.grace,
        )

    async def reconcile(self) -> Plan | None:
        policy_set = self.state.store.current
        if not self.led:
            # Leading from now on: carry on from what this replica's looks remembered, so a slot
            # whose placeholder vanished is still known where it was (and since when).
            self.memory, self.watching, self.seen, self.led = self.watching, SlotMemory(), None, True
        if not policy_set.reservations and not self.placeholders_seen:
            self.homes = {}
            return None  # nothing reserved and nothing left over: no pass over every pod
        if self.saved is None and any(not r.return_slots for r in policy_set.reservations):
            await self._load_consumed()
        cache = self.state.cache
        assert cache is not None
        pods = cache.pods()
        if len(self._owners) > 4 * len(pods) + 1000:  # answers for pods long gone
            present = {str((p.get("metadata") or {}).get("uid") or "") for p in pods}
            self._owners = {k: v for k, v in self._owners.items() if k[0] in present}
        trial = copy.deepcopy(self.memory)
        result = self.compute(trial, pods=pods)
        if result.undecided:
            # Ownership first: read the pods that may claim a slot whole, then plan with the answers.
            await self._read_whole(policy_set, result.undecided)
            result = self.compute(self.memory, pods=pods)
        else:
            self.memory = trial
        self.homes = result.homes
        self.placeholders_seen = bool(policy_set.reservations) or bool(result.deletes)
        for claim in list(result.claims):
            if not await self._take(policy_set, claim):
                result.unclaim(claim, self.memory)  # it never used the slot: the status and metric say so
        for delete in result.deletes:
            await self._delete(delete)
        for create in result.creates:
            await self._create(create)
        for (name, index), owner in result.returned:
            log.info("slot %s/%d returned: %s ended", name, index, owner)
        self.homes = result.homes
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
            log.warning("could not record %s's slot %s: %s", pod_name(pod), value, exc)
            return False
        self.claims.labels(claim.reservation).inc()
        log.info("%s took slot %s on %s", pod_name(pod), value, claim.node)
        await self._event(pod, "ReservedSlotTaken", f"uses slot {claim.index} of reservation {claim.reservation} on node {claim.node}")
        return True

    async def _delete(self, delete: Delete) -> None:
        client = self.state.client
        assert client is not None
        pod, reason = delete.pod, delete.reason
        meta = pod.get("metadata") or {}
        uid = str(meta.get("uid") or "")
        self.memory.deleted.add(uid)  # kpe's own: its slot needs no grace period once it is gone
        try:
            await client.delete_pod(self.namespace, str(meta.get("name")), uid=uid, grace_seconds=0)
        except ApiError as exc:
            self.memory.deleted.discard(uid)  # 404: someone else deleted it; 409: another pod by now
            if exc.status not in (404, 409):
                log.warning("could not delete placeholder %s: %s", pod_name(pod), exc)
            return
        labels = meta.get("labels") or {}
        self.placeholder_changes.labels(str(labels.get(RESERVATION_LABEL, "")), "deleted").inc()
        log.info("deleted placeholder %s: %s", pod_name(pod), reason)
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
        self.memory.created((reservation.name, index), str((created.get("metadata") or {}).get("uid") or ""))
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
            log.warning("could not record event for %s: %s", pod_name(pod), exc)

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
            if self.led:  # just stopped leading: the looks carry on from the leader's memory
                self.watching, self.memory, self.led = self.memory, SlotMemory(), False
                self.last = None
                self.slot_gauge.clear()  # the metric is the leader's
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
                if leading.is_set() or self.led or not cache.synced.is_set():
                    continue  # the leader's passes keep the homes (and ``watching`` is handed to them)
                try:
                    if self.state.store.current.reservations:
                        self.seen = self.compute(self.watching, look=True)
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
        return self.last if self.led else self.seen

    def status(self) -> dict[str, Any]:
        """Every reservation and slot. Leading: as the controller's last pass left them;
        following: as the leader recorded them in the cluster (this replica's last look).
        When the set just changed, a look now (no pod judged an owner, nothing done)."""
        policy_set = self.state.store.current
        leading = self.led and self.state.elector is not None and self.state.elector.is_leader
        shape = {r.name: r.slots for r in policy_set.reservations}
        last = self.last if leading else self.seen
        if last is not None and {name: len(slots) for name, slots in last.slots.items()} == shape:
            result = last
        else:
            result = self.compute(copy.deepcopy(self.memory if leading else self.watching), look=True)
        source = "leader" if leading else "recorded"
        return {
            "source": source,
            "sourceNote": SOURCES[source],
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
