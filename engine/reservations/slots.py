"""Slot bookkeeping: from the cluster's pods to what the reservation controller must do.

A slot of a reservation is, at any time, one of

- ``free``: its placeholder pod exists (``pending`` until kube-scheduler binds it);
- ``used``: an owner carries the ``kpe.dev/reservation-slot: <reservation>/<slot>``
  annotation and has not finished;
- ``consumed``: an owner used it and ended, and the reservation does not return slots;
- ``missing``: none of these; a placeholder is created, at once if the slot is new
  or its owner just ended, after ``grace_s`` if its placeholder vanished (an owner
  that preempted it is nominated to its node only after the eviction, and claims
  the slot when it is).

An owner claims a slot when it runs on (or is nominated to) the node of one: the
node of a free placeholder of its reservation (which is then deleted: the owner
holds the capacity now), or the node a vanished placeholder was on. ``plan`` is
pure: it reads the pods and the controller's ``SlotMemory`` and says what to do;
``server.reservations.controller`` does it. Placeholders have fixed names
(``kpe-<reservation>-<slot>``), so two controllers cannot both create one.

The plan also says where every slot not used up is at home (``Plan.homes``, by
node): the node of its placeholder, of the owner using it (bound or nominated), or
where it last was while its placeholder is gone or not placed. The filter keeps
non-owners out of a home's room while no pod holds it (``engine.reservations.heldroom``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from engine.reservations.heldroom import Home
from engine.cluster.kubefilters import pod_requests
from engine.policy.reservation import (
    MANAGED_BY, SLOT_LABEL, TEMPLATE_ANNOTATION, Reservation, placeholder_name, placeholder_pod, reservation_of, slot_of,
)

Pod = Mapping[str, Any]
Key = tuple[str, int]  # (reservation, slot)
FINISHED = ("Succeeded", "Failed")


@dataclass
class SlotMemory:
    """What the leader remembers between passes. ``consumed`` is also kept in the
    cluster (``server.reservations.controller``); the rest a new leader starts without (it then
    recreates at once a placeholder evicted just before it took over)."""

    nodes: dict[Key, str] = field(default_factory=dict)  # where the slot last was
    live: set[Key] = field(default_factory=set)  # slots with a placeholder at the last pass
    missing_since: dict[Key, float] = field(default_factory=dict)
    used_by: dict[Key, str] = field(default_factory=dict)  # owner (namespace/name) at the last pass
    consumed: set[Key] = field(default_factory=set)
    deleted: set[Key] = field(default_factory=set)  # placeholders kpe deleted itself: no grace
    bound: set[str] = field(default_factory=set)  # candidate owners already on a node at the last pass


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

    @property
    def idle(self) -> bool:
        return not (self.creates or self.deletes or self.claims)


def key_of(pod: Pod) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', 'default')}/{meta.get('name', '?')}"


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


def plan(
    reservations: Iterable[Reservation],
    pods: Iterable[Pod],
    memory: SlotMemory,
    *,
    namespace: str,
    owns: Callable[[Reservation, Pod], bool],
    now: float,
    grace_s: float,
) -> Plan:
    """What to create, delete and claim so that every slot is free or used (see the module)."""
    out = Plan()
    by_name = {r.name: r for r in reservations}
    live: dict[Key, Pod] = {}
    terminating: set[Key] = set()
    used: dict[Key, Pod] = {}
    candidates: list[Pod] = []
    for pod in pods:
        if is_placeholder(pod, namespace):
            name = reservation_of(pod)
            index_text = str(((pod.get("metadata") or {}).get("labels") or {}).get(SLOT_LABEL, ""))
            reservation = by_name.get(name)
            key = (name, int(index_text)) if index_text.isdigit() else (name, -1)
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
                out.deletes.append(Delete(placeholder, f"its slot is used by {key_of(used[key])}", "taken"))
            else:
                out.deletes.append(Delete(placeholder, f"reservation {key[0]}'s template changed", "template"))
            del live[key]
            terminating.add(key)  # its name is taken until it is gone
            memory.deleted.add(key)
    for key, owner in used.items():
        memory.nodes[key] = _node(owner) or memory.nodes.get(key, "")
    _claim(out, by_name, live, used, terminating, candidates, memory, owns)
    for key, who in list(memory.used_by.items()):
        if key not in used:
            del memory.used_by[key]
            reservation = by_name.get(key[0])
            if reservation is not None:
                out.returned.append((key, who))
                if not reservation.return_slots:
                    memory.consumed.add(key)
    for key, owner in used.items():
        memory.used_by[key] = key_of(owner)
    for reservation in sorted(by_name.values(), key=lambda r: r.name):
        slots = out.slots[reservation.name] = []
        for index in range(reservation.slots):
            key = (reservation.name, index)
            slots.append(_slot(out, reservation, key, live, used, terminating, memory, now=now, grace_s=grace_s))
    out.homes = _homes(by_name, out.slots, memory, namespace, planned={(c.reservation, c.index) for c in out.claims})
    memory.live = set(live)
    memory.bound = {key_of(p) for p in candidates if _node(p)}
    for table in (memory.nodes, memory.missing_since, memory.used_by):
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
    owns: Callable[[Reservation, Pod], bool],
) -> None:
    """Owners on (or nominated to) the node of a free or vanished slot of theirs take it."""
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
        return
    ordered = sorted(candidates, key=lambda p: (str((p.get("metadata") or {}).get("creationTimestamp") or ""), key_of(p)))
    for pod in ordered:
        node = _node(pod) or str((pod.get("status") or {}).get("nominatedNodeName") or "")
        for key in sorted(by_node.get(node, [])):
            held = live.get(key)
            nominated = (pod.get("status") or {}).get("nominatedNodeName") == node
            if held is None and not nominated and key_of(pod) in memory.bound:
                continue  # it ran there before the placeholder went: it did not take the slot
            if key in used or not owns(by_name[key[0]], pod):
                continue
            out.claims.append(Claim(pod, key[0], key[1], node, held))
            used[key] = pod
            if held is not None:
                out.deletes.append(Delete(held, f"its slot is used by {key_of(pod)}", "taken"))
                del live[key]
                memory.deleted.add(key)
            by_node[node].remove(key)
            break


def _slot(
    out: Plan, reservation: Reservation, key: Key, live: Mapping[Key, Pod], used: Mapping[Key, Pod], terminating: set[Key],
    memory: SlotMemory, *, now: float, grace_s: float,
) -> Slot:
    name, index = key
    if key in live:
        memory.missing_since.pop(key, None)
        placeholder = live[key]
        return Slot(name, index, "free" if _node(placeholder) else "pending", _node(placeholder), key_of(placeholder))
    if key in used:
        memory.missing_since.pop(key, None)
        owner = used[key]
        return Slot(name, index, "used", _node(owner) or str((owner.get("status") or {}).get("nominatedNodeName") or ""), key_of(owner))
    near = memory.nodes.get(key, "")
    if key in memory.consumed:
        return Slot(name, index, "consumed", near)
    if key in terminating:
        return Slot(name, index, "missing", near, placeholder_name(*key))
    vanished = (key in memory.live and key not in memory.deleted) or key in memory.missing_since
    if vanished:
        since = memory.missing_since.setdefault(key, now)
        if now - since < grace_s:
            return Slot(name, index, "missing", near)
    replaced = key in memory.deleted
    memory.missing_since.pop(key, None)
    memory.deleted.discard(key)
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
    only ``planned`` to be claimed has no owner yet: a bound claimant is judged an owner by
    its namespace alone until the controller reads it whole, and a pod wrongly taken for
    one must not be counted as holding the slot's room."""
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

