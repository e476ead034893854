"""The reservations' part in ``kpe explain pod``: for one pod, each reservation of the
policy set, whether the pod owns it, its slots (node, free or used by whom) and what the
reservation does to the decision:

- for an owner: where it may use a slot (a free slot's node, where kube-scheduler
  evicts the placeholder for it), the slot it already uses, or that it waits
  (``Required``, no free slot) or runs anywhere (``Preferred``);
- for anyone else: the nodes it is kept off because a slot's room there is in transit
  (``engine.reservations.heldroom``), and the placeholders and owners in their slots that it may not
  evict.

The slots come from the reservation controller's last pass (a running kpe) or, reading
the cluster directly, from a pass computed on the spot with nothing remembered
(``fresh_plan``): a placeholder that just vanished shows as missing, not at its node.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.decisions.evaluation import matching_scopes, request_inputs
from engine.reservations.heldroom import RULE as ROOM_RULE
from engine.policy.model import PolicySet
from engine.policy.reservation import Reservation, reservation_of
from engine.cluster.nodeinfo import pod_name
from engine.reservations.slots import Plan, Slot, SlotMemory, claim_of, plan


@dataclass
class ReservationPart:
    name: str
    policy: str
    mode: str
    owned: bool
    slots: list[Slot] = field(default_factory=list)
    decision: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "policy": self.policy, "mode": self.mode, "owned": self.owned,
            "slots": [s.to_dict() for s in self.slots], "decision": list(self.decision),
        }


def fresh_plan(policy_set: PolicySet, pods: Sequence[Mapping[str, Any]], *, namespace: str, namespaces: Mapping[str, Any] | None = None) -> Plan:
    """The slots as a controller's first pass would see them (nothing is done); ``namespaces``
    give owners' match expressions their ``namespaceObject``."""
    singles = {r.name: policy_set.subset((p,)) for p in policy_set.policies if (r := p.reservation) is not None}

    def owns(reservation: Reservation, pod: Mapping[str, Any]) -> bool:
        return bool(matching_scopes(singles[reservation.name], pod, request_inputs(pod, None, namespaces=namespaces)))

    return plan(policy_set.reservations, pods, SlotMemory(), namespace=namespace, owns=owns, now=0.0, grace_s=0.0)


def slot_text(slot: Slot) -> str:
    where = f" on {slot.node}" if slot.node else ""
    if slot.state == "free":
        return f"slot {slot.index}: free{where} ({slot.pod})"
    if slot.state == "pending":
        return f"slot {slot.index}: free, its placeholder {slot.pod} not placed yet"
    if slot.state == "used":
        return f"slot {slot.index}: used{where} by {slot.pod}"
    if slot.state == "consumed":
        return f"slot {slot.index}: used up{where} (returnSlots: false)"
    return f"slot {slot.index}: its placeholder is coming back" + (f", near {slot.node}" if slot.node else "")


def reservation_parts(
    policy_set: PolicySet,
    pod: Mapping[str, Any],
    matched: Sequence[str],
    slots: Mapping[str, Sequence[Slot]],
    verdicts: Mapping[str, tuple[str, str]],
) -> list[ReservationPart]:
    """Each reservation's part for ``pod``. ``verdicts``: kpe's filter verdict and reason by node."""
    me = pod_name(pod)
    mine = claim_of(pod)
    nominated = str((pod.get("status") or {}).get("nominatedNodeName") or "")
    parts: list[ReservationPart] = []
    for reservation in policy_set.reservations:
        name = reservation.name
        part = ReservationPart(name, reservation.policy, reservation.mode, reservation.policy in matched, list(slots.get(name) or []))
        free = [s for s in part.slots if s.state == "free"]
        if reservation_of(pod) == name:
            part.decision.append("this pod is a placeholder of the reservation: it holds a slot's room for the owners")
        elif part.owned:
            used = [s for s in part.slots if s.state == "used" and s.pod == me]
            if used or (mine is not None and mine[0] == name):
                index = used[0].index if used else mine[1] if mine else 0
                node = used[0].node if used else ""
                part.decision.append(f"owner: uses slot {index}" + (f" on node {node}" if node else ""))
            elif nominated and reservation.required:
                part.decision.append(f"owner: nominated to node {nominated}, where it may take the slot it preempted")
            for slot in free:
                part.decision.append(f"owner: may use slot {slot.index} on node {slot.node} (kube-scheduler evicts its placeholder for it)")
            if not free and not used and not nominated:
                if reservation.required:
                    part.decision.append("owner: no free slot, and a Required owner runs only in one: it waits until a slot is free")
                else:
                    part.decision.append("owner: no free slot; a Preferred owner may run anywhere")
            elif free and not reservation.required:
                part.decision.append("owner: nodes with a free slot score 100 for it, the others 0")
        else:
            for node, (verdict, reason) in sorted(verdicts.items()):
                if verdict != "pass" and reason.startswith(f"{reservation.policy}/{ROOM_RULE}:"):
                    holder = reason.split(" for ", 1)[1].split(";", 1)[0] if " for " in reason else "its owners"
                    part.decision.append(f"kept off {node}: the room it needs there is reserved for {holder}")
            for slot in free:
                part.decision.append(f"not an owner: may not evict the placeholder {slot.pod} on {slot.node}")
            for slot in (s for s in part.slots if s.state == "used"):
                part.decision.append(f"not an owner: may not evict {slot.pod}" + (f" from slot {slot.index} on {slot.node}" if slot.node else ""))
            if not part.decision:
                part.decision.append("not an owner: no slot of this reservation is in its way")
        parts.append(part)
    return parts


def part_lines(data: Sequence[Mapping[str, Any]]) -> list[str]:
    """The reservation section of the text report, from ``ReservationPart.to_dict``s."""
    lines: list[str] = []
    for part in data:
        whose = "this pod owns it" if part["owned"] else "this pod is not an owner"
        lines.append(f"reservation {part['name']} ({part['mode']}): {whose}")
        for slot in part["slots"]:
            lines.append("  " + slot_text(Slot(part["name"], slot["slot"], slot["state"], slot["node"] or "", slot["pod"] or "")))
        lines += [f"  {line}" for line in part["decision"]]
    return lines


__all__ = ["ReservationPart", "fresh_plan", "part_lines", "reservation_parts", "slot_text"]
