"""Slot bookkeeping: from the cluster's pods to what the reservation controller must do.

A slot of a reservation is, at any time, one of

- ``free``: its placeholder pod exists (``pending`` until kube-scheduler binds it);
- ``used``: an owner carries the ``kpe.dev/reservation-slot: <reservation>/<slot>``
  annotation and has not finished;
- ``consumed``: an owner used it and ended, and the reservation does not return slots;
- ``missing``: none of these; a placeholder is created, at once if the slot is new,
  its owner just ended or kpe itself deleted the last one (a template change), after
  ``grace_s`` if its placeholder vanished otherwise (an owner that preempted it is
  nominated to its node only after the eviction, and claims the slot when it is).
  Which deletions were kpe's own the controller says by their UIDs
  (``SlotMemory.deleted``), once the API server took them: nothing else marks a slot.

An owner claims a slot when it runs on (or is nominated to) the node of one: the
node of a free placeholder of its reservation (which is then deleted: the owner
holds the capacity now), or the node a vanished placeholder was on, unless it already
ran there beside the slot's placeholder or owner (it did not take that room). Whether a
pod owns a reservation is asked of ``owns`` with the whole pod (labels and namespace);
``None`` says it is not known yet (kpe's cache keeps bound pods cut to what policies
read): no claim is planned for the pod, its slot is neither taken by another nor given
a placeholder this pass, and the plan lists the pod in ``undecided`` for the controller
to read whole before its next pass. ``plan`` is pure: it reads the pods and the
controller's ``SlotMemory`` and says what to do; ``server.reservations.controller`` does
it (``Plan.unclaim`` when the API refuses a claim). Placeholders have fixed names
(``kpe-<reservation>-<slot>``), so two controllers cannot both create one.

The plan also says where every slot not used up is at home (``Plan.homes``, by
node): the node of its placeholder, of the owner using it (bound or nominated), or
where it last was while its placeholder is gone or not placed. The filter keeps
non-owners out of a home's room while no pod holds it (``engine.reservations.heldroom``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from engine.reservations.heldroom import Home
from engine.cluster.kubefilters import pod_requests
from engine.cluster.nodeinfo import pod_name
from engine.policy.reservation import (
    MANAGED_BY, SLOT_LABEL, TEMPLATE_ANNOTATION, Reservation, placeholder_name, placeholder_pod, reservation_of, slot_of,
)

Pod = Mapping[str, Any]
Key = tuple[str, int]  # (reservation, slot)
FINISHED = ("Succeeded", "Failed")


@dataclass
class SlotMemory:
    """What the leader remembers between passes. ``consumed`` is also kept in the
    cluster (``server.reservations.controller``); a new leader starts from what its
    looks as a follower remembered (where each slot was, since when it is missing)."""

    nodes: dict[Key, str] = field(default_factory=dict)  # where the slot last was
    live: dict[Key, str] = field(default_factory=dict)  # slot -> UID of its placeholder (terminating too) at the last pass
    missing_since: dict[Key, float] = field(default_factory=dict)
    used_by: dict[Key, str] = field(default_factory=dict)  # owner (namespace/name) at the last pass
    consumed: set[Key] = field(default_factory=set)
    deleted: set[str] = field(default_factory=set)  # UIDs of placeholders kpe itself deleted (the controller adds them): no grace
    beside: dict[Key, frozenset[str]] = field(default_factory=dict)  # pods on the slot's node the last time something held it there

    def created(self, key: Key, uid: str) -> None:
        """The controller created the slot's placeholder: should it vanish before a pass sees it
        (an owner's preemption), it vanished like one seen, and waits out the grace period."""
        self.live[key] = uid


@dataclass
class Slot:
    reservation: str
    index: int
    state: str  # free | pending | used | consumed | missing
    node: str = ""
    pod: str = ""  # the placeholder or the owner, namespace/name

    def to_dict(self) -> dict[str, Any]:
        return {"slot": self.index, "state": self.state, "node": self.node or None, "pod": self.pod or None}


@dataclass(frozen=True)
class Create:
    reservation: Reservation
    index: int
    near: str  # the node the slot was on ("" for none)
    reason: str
    kind: str = "new"  # new (slot) | restored (its placeholder was deleted or replaced) | returned (its owner ended)


@dataclass(frozen=True)
class Delete:
    pod: Pod
    reason: str
    kind: str = "stale"  # removed (reservation gone or shrunk) | taken (an owner uses the slot) | template | stale


@dataclass(frozen=True)
class Claim:
    owner: Pod
    reservation: str
    index: int
    node: str
    placeholder: Pod | None  # the placeholder it replaces, deleted after the claim


@dataclass
class Plan:
    creates: list[Create] = field(default_factory=list)
    deletes: list[Delete] = field(default_factory=list)
    claims: list[Claim] = field(default_factory=list)
    slots: dict[str, list[Slot]] = field(default_factory=dict)
    returned: list[tuple[Key, str]] = field(default_factory=list)  # slots whose owner ended, with the owner
    homes: dict[str, list[Home]] = field(default_factory=dict)  # node -> the slots at home there (engine.reservations.heldroom)
    undecided: list[Pod] = field(default_factory=list)  # pods that may own a slot's reservation, to be read whole

    @property
    def idle(self) -> bool:
        return not (self.creates or self.deletes or self.claims)

    def unclaim(self, claim: Claim, memory: SlotMemory) -> None:
        """The API refused ``claim``: the slot is not used (what the plan shows says so), its
        placeholder stays (its delete is dropped), and no owner ended when it is not seen next."""
        key = (claim.reservation, claim.index)
        self.claims = [c for c in self.claims if c is not claim]
        memory.used_by.pop(key, None)
        held = claim.placeholder
        if held is not None:
            self.deletes = [d for d in self.deletes if d.pod is not held]
        for slot in self.slots.get(claim.reservation, []):
            if slot.index == claim.index:
                if held is not None:
                    slot.state, slot.node, slot.pod = ("free" if _node(held) else "pending"), _node(held), pod_name(held)
                else:
                    slot.state, slot.pod = "missing", ""
        for node, homes in self.homes.items():
            self.homes[node] = [replace(h, owner="") if (h.reservation, h.index) == key else h for h in homes]



def is_placeholder(pod: Pod, namespace: str) -> bool:
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    return meta.get("namespace") == namespace and bool(reservation_of(pod)) and labels.get(MANAGED_BY[0]) == MANAGED_BY[1]


def claim_of(pod: Pod) -> Key | None:
    return slot_of(pod)


def _terminating(pod: Pod) -> bool:
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def _finished(pod: Pod) -> bool:
    return (pod.get("status") or {}).get("phase") in FINISHED


def _node(pod: Pod) -> str:
    return str((pod.get("spec") or {}).get("nodeName") or "")


def _uid(pod: Pod) -> str:
    return str((pod.get("metadata") or {}).get("uid") or pod_name(pod))


def _ident(pod: Pod) -> str:
    """A pod as ``SlotMemory.beside`` knows it: a pod recreated under the same name is another."""
    return _uid(pod)


def plan(
    reservations: Iterable[Reservation],
    pods: Iterable[Pod],
    memory: SlotMemory,
    *,
    namespace: str,
    owns: Callable[[Reservation, Pod], bool | None],
    now: float,
    grace_s: float,
) -> Plan:
    """What to create, delete and claim so that every slot is free or used (see the module)."""
    out = Plan()
    by_name = {r.name: r for r in reservations}
    live: dict[Key, Pod] = {}
    terminating: set[Key] = set()
    uids: dict[Key, str] = {}  # the placeholder seen for each slot, terminating or not
    used: dict[Key, Pod] = {}
    candidates: list[Pod] = []
    for pod in pods:
        if is_placeholder(pod, namespace):
            name = reservation_of(pod)
            index_text = str(((pod.get("metadata") or {}).get("labels") or {}).get(SLOT_LABEL, ""))
            reservation = by_name.get(name)
            key = (name, int(index_text)) if index_text.isdigit() else (name, -1)
            uids.setdefault(key, _uid(pod))
            if _terminating(pod):
                terminating.add(key)
            elif reservation is None:
                out.deletes.append(Delete(pod, f"reservation {name} was removed", "removed"))
            elif not 0 <= key[1] < reservation.slots:
                out.deletes.append(Delete(pod, f"reservation {name} has {reservation.slots} slots now", "removed"))
            elif key in live or _finished(pod):
                out.deletes.append(Delete(pod, "not a free placeholder of its slot (duplicate or finished)"))
            else:
                live[key] = pod
                uids[key] = _uid(pod)
            continue
        if _finished(pod):
            continue
        claim = claim_of(pod)
        if claim is not None:
            if claim[0] in by_name and claim[1] < by_name[claim[0]].slots and claim not in used:
                used[claim] = pod
        elif _node(pod) or (pod.get("status") or {}).get("nominatedNodeName"):
            candidates.append(pod)
    for key, placeholder in list(live.items()):
        reservation = by_name[key[0]]
        stale = ((placeholder.get("metadata") or {}).get("annotations") or {}).get(TEMPLATE_ANNOTATION) != reservation.template_hash
        if _node(placeholder):
            memory.nodes[key] = _node(placeholder)  # a replaced placeholder comes back near it
        if key in used or stale:
            if key in used:
                out.deletes.append(Delete(placeholder, f"its slot is used by {pod_name(used[key])}", "taken"))
            else:
                out.deletes.append(Delete(placeholder, f"reservation {key[0]}'s template changed", "template"))
            del live[key]
            terminating.add(key)  # its name is taken until it is gone
    for key, owner in used.items():
        memory.nodes[key] = _node(owner) or memory.nodes.get(key, "")
    held_on = {key: _node(pod) for key, pod in [*live.items(), *used.items()] if _node(pod)}
    waiting = _claim(out, by_name, live, used, terminating, candidates, memory, owns)
    for key, who in list(memory.used_by.items()):
        if key not in used:
            del memory.used_by[key]
            reservation = by_name.get(key[0])
            if reservation is not None:
                out.returned.append((key, who))
                if not reservation.return_slots:
                    memory.consumed.add(key)
    for key, owner in used.items():
        memory.used_by[key] = pod_name(owner)
    for reservation in sorted(by_name.values(), key=lambda r: r.name):
        slots = out.slots[reservation.name] = []
        for index in range(reservation.slots):
            key = (reservation.name, index)
            slots.append(_slot(out, reservation, key, live, used, terminating, waiting, memory, now=now, grace_s=grace_s))
    out.homes = _homes(by_name, out.slots, memory, namespace, planned={(c.reservation, c.index) for c in out.claims})
    # Who ran beside each slot while something held it there: they did not take its room when it left.
    on_node: dict[str, set[str]] = {}
    for pod in candidates:
        if _node(pod):
            on_node.setdefault(_node(pod), set()).add(_ident(pod))
    for key, node in held_on.items():
        memory.beside[key] = frozenset(on_node.get(node, ()))
    memory.live = {key: uid for key, uid in uids.items() if key in live or key in terminating}
    memory.deleted &= set(memory.live.values())  # a UID is judged the pass after its pod is gone, then forgotten
    for table in (memory.nodes, memory.missing_since, memory.used_by, memory.beside):
        for key in [k for k in table if k[0] not in by_name or k[1] >= by_name[k[0]].slots]:
            del table[key]
    memory.consumed = {k for k in memory.consumed if k[0] in by_name and k[1] < by_name[k[0]].slots}
    return out


def _claim(
    out: Plan,
    by_name: Mapping[str, Reservation],
    live: dict[Key, Pod],
    used: dict[Key, Pod],
    terminating: set[Key],
    candidates: list[Pod],
    memory: SlotMemory,
    owns: Callable[[Reservation, Pod], bool | None],
) -> set[Key]:
    """Owners on (or nominated to) the node of a free or vanished slot of theirs take it.
    Returns the slots held back for a pod whose ownership is not known yet."""
    waiting: set[Key] = set()
    by_node: dict[str, list[Key]] = {}
    for key, placeholder in live.items():
        # A placeholder not placed yet belongs to the node its slot was on: it may have been
        # recreated after the grace period while the owner that preempted the last one waited.
        node = _node(placeholder) or memory.nodes.get(key, "")
        if node:
            by_node.setdefault(node, []).append(key)
    for key, node in memory.nodes.items():
        if key not in live and key not in used and key not in memory.consumed and key[0] in by_name and key[1] < by_name[key[0]].slots:
            by_node.setdefault(node, []).append(key)
    if not by_node:
        return waiting
    ordered = sorted(candidates, key=lambda p: (str((p.get("metadata") or {}).get("creationTimestamp") or ""), pod_name(p)))
    for pod in ordered:
        node = _node(pod) or str((pod.get("status") or {}).get("nominatedNodeName") or "")
        for key in sorted(by_node.get(node, [])):
            held = live.get(key)
            nominated = (pod.get("status") or {}).get("nominatedNodeName") == node
            if held is None and not nominated and _ident(pod) in memory.beside.get(key, ()):
                continue  # it ran there beside the slot before the slot's room was freed: it did not take it
            if key in used:
                continue
            verdict = owns(by_name[key[0]], pod)
            if verdict is None:
                # Read whole first; meanwhile nobody takes the slot and nothing replaces it (every
                # such pod is listed in one pass, so the controller reads them all at once).
                out.undecided.append(pod)
                waiting.add(key)
                break
            if not verdict or key in waiting:
                continue  # not an owner, or an earlier pod not read yet may be one
            out.claims.append(Claim(pod, key[0], key[1], node, held))
            used[key] = pod
            if held is not None:
                out.deletes.append(Delete(held, f"its slot is used by {pod_name(pod)}", "taken"))
                del live[key]
            by_node[node].remove(key)
            break
    return waiting


def _slot(
    out: Plan, reservation: Reservation, key: Key, live: Mapping[Key, Pod], used: Mapping[Key, Pod], terminating: set[Key],
    waiting: set[Key], memory: SlotMemory, *, now: float, grace_s: float,
) -> Slot:
    name, index = key
    if key in live:
        memory.missing_since.pop(key, None)
        placeholder = live[key]
        return Slot(name, index, "free" if _node(placeholder) else "pending", _node(placeholder), pod_name(placeholder))
    if key in used:
        memory.missing_since.pop(key, None)
        owner = used[key]
        return Slot(name, index, "used", _node(owner) or str((owner.get("status") or {}).get("nominatedNodeName") or ""), pod_name(owner))
    near = memory.nodes.get(key, "")
    if key in memory.consumed:
        return Slot(name, index, "consumed", near)
    if key in terminating:
        return Slot(name, index, "missing", near, placeholder_name(*key))
    gone = memory.live.get(key)  # the UID of the placeholder seen last pass, if one was
    replaced = gone is not None and gone in memory.deleted
    vanished = (gone is not None and not replaced) or key in memory.missing_since
    if vanished:
        since = memory.missing_since.setdefault(key, now)
        if now - since < grace_s:
            return Slot(name, index, "missing", near)
    if key in waiting:
        return Slot(name, index, "missing", near)  # a pod there may own it: known next pass
    memory.missing_since.pop(key, None)
    if any(k == key for k, _ in out.returned):
        out.creates.append(Create(reservation, index, near, "slot returned: its owner ended", "returned"))
    elif vanished:
        out.creates.append(Create(reservation, index, near, "placeholder deleted", "restored"))
    elif replaced and near:
        out.creates.append(Create(reservation, index, near, "placeholder replaced", "restored"))
    else:
        out.creates.append(Create(reservation, index, near, "new slot"))
    return Slot(name, index, "missing", near)


def _homes(
    by_name: Mapping[str, Reservation], slots: Mapping[str, list[Slot]], memory: SlotMemory, namespace: str, *, planned: set[Key]
) -> dict[str, list[Home]]:
    """Where each slot not used up is at home: its own node, or where it last was. A slot
    only ``planned`` to be claimed has no owner to name yet: until the claim is recorded
    (the API may refuse it) its room is kept for the reservation's owners, not for the pod."""
    homes: dict[str, list[Home]] = {}
    for name, states in slots.items():
        reservation = by_name[name]
        requests = pod_requests(placeholder_pod(reservation, 0, namespace=namespace, image="", priority_class=""))
        for slot in states:
            node = slot.node or memory.nodes.get((name, slot.index), "")
            if slot.state == "consumed" or not node:
                continue
            owner = slot.pod if slot.state == "used" and (name, slot.index) not in planned else ""
            placeholder = f"{namespace}/{placeholder_name(name, slot.index)}"
            homes.setdefault(node, []).append(Home(name, slot.index, node, placeholder, owner, requests))
    return homes

