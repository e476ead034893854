"""Reserved room in transit: a slot's room that no pod on its node holds right now,
which only the reservation's owners may use.

kube-scheduler counts a slot's room while its placeholder runs on the node (then only
an owner can have it: the preempt verb vetoes everyone else) and while the owner that
took the slot runs there. In between, nothing holds it in the scheduler's books:

- an owner preempted the placeholder and is only nominated to the node, and
  kube-scheduler keeps a nominated pod's room only from pods of its own priority or
  lower;
- the owner ended, or someone deleted the placeholder, and the placeholder is not
  back yet (or back but not placed).

So kpe's filter counts it. Every slot has a *home*, the node it is on, as the
reservation controller last saw it (``engine.reservations.slots`` keeps them). On a node, a home
that no pod there accounts for (the slot's placeholder, an owner carrying the slot's
claim, the owner known to use it) is room in transit; a pod that owns none of those
reservations is kept off the node when it fits only by using that room (``keep_off``,
after the filter), and a node stops being a preemption candidate for it when it would
fit there only by using that room once the victims are gone (``keep_evictions_off``:
kube-scheduler's dry run counts the room as free).
A slot's room is counted exactly once, through the pod holding it while kpe's cache
still has that pod, through the template's requests when not, so the verdict does not
depend on whether kpe's cache or kube-scheduler's saw a placeholder go first.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.cel.ext.quantity import Quantity
from engine.decisions.evaluation import Outcome, matching_scopes, request_inputs
from engine.decisions.filtering import FilterResult
from engine.cluster.kubefilters import _Room, pod_requests
from engine.cluster.nodeinfo import node_name, pod_name
from engine.policy.model import PolicySet
from engine.decisions.preemption import PreemptionResult, without_victims
from engine.policy.reservation import POLICY_PREFIX, SLOT_LABEL, reservation_of, slot_of

RULE = "reserved-room"


@dataclass(frozen=True)
class Home:
    """Where one slot is, and who (if anyone) took it."""

    reservation: str
    index: int
    node: str
    placeholder: str  # namespace/name of the slot's placeholder
    owner: str = ""  # namespace/name of the owner that took the slot; "" while it is free
    requests: Mapping[str, Quantity] = field(default_factory=dict, compare=False, repr=False)

    @property
    def policy(self) -> str:
        return POLICY_PREFIX + self.reservation

    def holder(self, gone: bool) -> str:
        """Who the room is kept for, in words; ``gone``: no pod on the node holds it."""
        if self.owner:
            return f"its owner {self.owner}"
        return f"its owners (its placeholder {self.placeholder} is not there)" if gone else "its owners"


Homes = Mapping[str, Sequence[Home]]  # by node name



def _holdings(homes: Sequence[Home], info: Mapping[str, Any] | None) -> tuple[list[Home], list[Mapping[str, Any]]]:
    """The homes on a node that none of its pods (``nodeInfo.pods``) holds, and the pods
    that hold the others (a slot's placeholder, an owner with its claim or known to use it)."""
    wanted = {(h.reservation, h.index): h for h in homes}
    owners = {h.owner: h for h in homes if h.owner}
    held: set[tuple[str, int]] = set()
    holders: list[Mapping[str, Any]] = []
    for pod in (info or {}).get("pods") or []:
        meta = pod.get("metadata") or {}
        name = reservation_of(pod)
        index = str((meta.get("labels") or {}).get(SLOT_LABEL, ""))
        slots = {(name, int(index))} if name and index.isdigit() else set()
        claim = slot_of(pod)
        if claim is not None:
            slots.add(claim)
        owner = owners.get(pod_name(pod))
        if owner is not None:
            slots.add((owner.reservation, owner.index))
        if slots & wanted.keys():
            held |= slots
            holders.append(pod)
    return [h for key, h in wanted.items() if key not in held], holders


def in_transit(homes: Sequence[Home], info: Mapping[str, Any] | None) -> list[Home]:
    """The slots at home on a node that none of the node's pods (``nodeInfo.pods``) holds."""
    return _holdings(homes, info)[0]


def kept_off(pod: Mapping[str, Any], owned: Collection[str], node: Mapping[str, Any], info: Mapping[str, Any] | None, homes: Sequence[Home]) -> str:
    """Why ``pod`` may not use ``node`` (it fits there only in a slot's room), or ""."""
    me = pod_name(pod)
    # Owners may use their reservations' room; a placeholder coming back may use its own slot's.
    theirs = [h for h in homes if h.reservation not in owned and h.placeholder != me]
    if not theirs:
        return ""
    gone, holders = _holdings(theirs, info)
    requests = pod_requests(pod)
    # Only where the slots' room makes the difference: a pod that would not fit even with
    # every slot's pod gone is kube-scheduler's own filters' to reject, not the reservation's.
    # A slot whose pod kpe's cache still has counts too: kube-scheduler may have seen the
    # placeholder go first, and offer the node because of the room it left.
    emptied = _Room(node, info or {}, requests)
    for holder in holders:
        emptied.take(pod_requests(holder), -1)
    if emptied.short():
        return ""
    room = _Room(node, info or {}, requests)
    for home in gone:
        room.take(home.requests, +1)
    short = room.short()
    if not short:
        return ""
    first = gone[0] if gone else theirs[0]
    return (
        f"{first.policy}/{RULE}: slot {first.index} of reservation {first.reservation} keeps room on this node "
        f"for {first.holder(bool(gone))}; without it: {', '.join(short)}"
    )


def owned_by(matched: Sequence[str]) -> frozenset[str]:
    """The reservations a pod owns, from the policies that matched it."""
    return frozenset(m[len(POLICY_PREFIX):] for m in matched if m.startswith(POLICY_PREFIX))


def keep_off(
    result: FilterResult,
    pod: Mapping[str, Any],
    nodes: Sequence[Mapping[str, Any]],
    node_info: Mapping[str, Any] | None,
    homes: Homes | None,
    *,
    reservations: Collection[str] | None = None,
) -> FilterResult:
    """Move the nodes where ``pod`` fits only in room in transit from passing to
    unresolvable (evicting other pods there would not give the room back to the owner
    either). ``reservations``: the names the policy set still has (homes of others are
    left over from before a reload). The result's lists may be shared with the
    equivalence cache: they are replaced, never changed."""
    if not homes or not result.passed:
        return result
    near = {name for name in result.passed if name in homes}
    if not near:
        return result
    owned = owned_by(result.matched)
    rejected: dict[str, str] = {}
    for node in nodes:
        name = node_name(node)
        if name in near:
            info = node_info.get(name) if node_info is not None else None
            here = [h for h in homes[name] if reservations is None or h.reservation in reservations]
            reason = kept_off(pod, owned, node, info if isinstance(info, Mapping) else None, here)
            if reason:
                rejected[name] = reason
    if not rejected:
        return result
    result.passed = [n for n in result.passed if n not in rejected]
    result.unresolvable = {**result.unresolvable, **rejected}
    rejections = dict(result.rejections)
    for reason in rejected.values():
        label = reason.split(":", 1)[0]
        rejections[label] = rejections.get(label, 0) + 1
    result.rejections = rejections
    for verdict in result.explanation or []:
        if verdict.node in rejected:
            verdict.verdict, verdict.reason = "unresolvable", rejected[verdict.node]
            policy, _, rule = verdict.reason.split(":", 1)[0].partition("/")
            verdict.outcomes.append(Outcome(policy, rule, "filter", value=False, effect="rejected", message=verdict.reason))
    return result


def keep_evictions_off(
    result: PreemptionResult,
    policy_set: PolicySet,
    pod: Mapping[str, Any],
    nodes: Mapping[str, Mapping[str, Any]],
    node_info: Mapping[str, Any] | None,
    homes: Homes | None,
    namespaces: Mapping[str, Any] | None = None,
) -> PreemptionResult:
    """Drop the preemption candidates where ``pod`` would fit, once its victims are
    gone, only by using room in transit of a reservation it does not own (``namespaces``:
    for owners' match expressions that read ``namespaceObject``)."""
    near = [name for name in result.candidates if homes and name in homes and name in nodes]
    if not homes or not near:
        return result
    known = {r.name for r in policy_set.reservations}
    owned = owned_by([s.policy.name for s in matching_scopes(policy_set, pod, request_inputs(pod, None, namespaces=namespaces))])
    for name in near:
        info = node_info.get(name) if node_info is not None else None
        after = without_victims(info if isinstance(info, Mapping) else None, result.candidates[name])
        reason = kept_off(pod, owned, nodes[name], after, [h for h in homes[name] if h.reservation in known])
        if reason:
            del result.candidates[name]
            result.rejected[name] = reason
            label = reason.split(":", 1)[0]
            result.rejections[label] = result.rejections.get(label, 0) + 1
    return result


__all__ = ["RULE", "Home", "Homes", "in_transit", "keep_evictions_off", "keep_off", "kept_off", "owned_by"]
