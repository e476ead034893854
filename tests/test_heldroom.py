"""Reserved room in transit (engine.reservations.heldroom): while a slot's room is held by no pod on
its node (its placeholder evicted for an owner only nominated there, or its owner ended
and the placeholder not back), the filter keeps non-owners that fit only in that room off
the node; owners, and the slot's own placeholder coming back, are not kept off. A slot's
room counts once whether or not kpe's cache still has the pod that held it."""

from __future__ import annotations

from typing import Any

from engine.decisions.filtering import filter_nodes
from engine.reservations.heldroom import keep_evictions_off, keep_off, kept_off
from engine.policy.loader import load_text
from engine.cluster.nodeinfo import node_info_map
from engine.policy.model import PolicySet
from engine.decisions.preemption import preempt
from engine.policy.reservation import placeholder_pod
from engine.reservations.slots import Plan, SlotMemory, plan

NS = "kpe-system"
POLICIES = """
apiVersion: kpe.dev/v1alpha1
kind: Reservation
metadata: {name: train}
spec:
  slots: 1
  returnSlots: RETURN
  owners: {namespaces: [ml]}
  template:
    resources: {requests: {cpu: "2"}}
"""
# 5 CPUs: a bystander's 2, the slot's 2, and 1 for anyone.
NODES = [{"metadata": {"name": "n1"}, "status": {"allocatable": {"cpu": "5", "pods": "110"}}}, {"metadata": {"name": "n2"}, "status": {"allocatable": {"cpu": "1", "pods": "110"}}}]
BYSTANDER = {"metadata": {"name": "bystander", "namespace": "web", "uid": "b"}, "spec": {"nodeName": "n1", "containers": [{"name": "c", "resources": {"requests": {"cpu": "2"}}}]}, "status": {"phase": "Running"}}


def policies(return_slots: bool = True) -> PolicySet:
    return load_text(POLICIES.replace("RETURN", str(return_slots).lower()))


def pod(name: str, cpu: str, *, namespace: str = "web", node: str = "", nominated: str = "", claim: str = "", phase: str = "Pending") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": name, "creationTimestamp": "2026-11-23T09:00:00Z"}
    if claim:
        meta["annotations"] = {"kpe.dev/reservation-slot": claim}
    status: dict[str, Any] = {"phase": phase, **({"nominatedNodeName": nominated} if nominated else {})}
    return {"metadata": meta, "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]}, "status": status}


def placeholder(set_: PolicySet, node: str = "") -> dict[str, Any]:
    made = placeholder_pod(set_.reservations[0], 0, namespace=NS, image="pause", priority_class="low")
    made["metadata"]["uid"] = "p0"
    made["spec"]["nodeName"] = node
    made["status"] = {"phase": "Running" if node else "Pending"}
    return made


def look(set_: PolicySet, pods: list[dict[str, Any]], memory: SlotMemory, now: float = 0.0) -> Plan:
    return plan(set_.reservations, pods, memory, namespace=NS, owns=lambda r, p: p["metadata"]["namespace"] == "ml", now=now, grace_s=5.0)


def verdict(set_: PolicySet, subject: dict[str, Any], on_nodes: list[dict[str, Any]], homes: Any) -> dict[str, Any]:
    info = node_info_map(NODES, on_nodes)
    result = keep_off(filter_nodes(set_, subject, NODES, node_info=info), subject, NODES, info, homes, reservations={"train"})
    return {"pass": result.passed, "fail": result.failed, "unresolvable": result.unresolvable}


def test_a_non_owner_that_fits_only_in_the_room_an_owner_s_preemption_freed_is_kept_off_until_the_owner_binds() -> None:
    set_, memory = policies(), SlotMemory()
    look(set_, [BYSTANDER, placeholder(set_, "n1")], memory)
    # kube-scheduler evicted the placeholder for the owner and nominated it to n1.
    owner = pod("o1", "2", namespace="ml", nominated="n1")
    homes = look(set_, [BYSTANDER, owner], memory, now=1.0).homes
    intruder = pod("x", "2")
    held_for = "for its owners (its placeholder kpe-system/kpe-train-0 is not there); without it: Insufficient cpu"
    assert verdict(set_, intruder, [BYSTANDER], homes)["unresolvable"]["n1"].endswith(held_for)
    # The controller recorded the owner's claim.
    owner = pod("o1", "2", namespace="ml", nominated="n1", claim="train/0")
    homes = look(set_, [BYSTANDER, owner], memory, now=1.5).homes
    assert verdict(set_, intruder, [BYSTANDER], homes) == {
        "pass": ["n2"], "fail": {},
        "unresolvable": {"n1": "reservation.train/reserved-room: slot 0 of reservation train keeps room on this node for its owner ml/o1; without it: Insufficient cpu"},
    }
    # What is left beside the slot is anyone's; the owner itself is not kept off.
    assert verdict(set_, pod("small", "1"), [BYSTANDER], homes)["pass"] == ["n1", "n2"]
    assert verdict(set_, owner, [BYSTANDER], homes)["pass"] == ["n1"]
    # Once the owner runs there with its claim, its room counts through it, not twice.
    bound = pod("o1", "2", namespace="ml", node="n1", claim="train/0", phase="Running")
    homes = look(set_, [BYSTANDER, bound], memory, now=2.0).homes
    assert kept_off(pod("small", "1"), frozenset(), NODES[0], node_info_map(NODES, [BYSTANDER, bound])["n1"], homes["n1"]) == ""


def test_a_placeholder_still_in_kpe_s_cache_counts_its_room_once() -> None:
    set_, memory = policies(), SlotMemory()
    held = placeholder(set_, "n1")
    look(set_, [BYSTANDER, held], memory)
    homes = look(set_, [BYSTANDER, pod("o1", "2", namespace="ml", nominated="n1", claim="train/0")], memory, now=1.0).homes
    # kube-scheduler saw the eviction first: the placeholder's 2 CPUs count, the slot's not again.
    assert verdict(set_, pod("small", "1"), [BYSTANDER, held], homes)["pass"] == ["n1", "n2"]


def test_between_an_owner_ending_and_its_placeholder_returning_the_room_stays_the_reservation_s() -> None:
    set_, memory = policies(), SlotMemory()
    running = pod("o1", "2", namespace="ml", node="n1", claim="train/0", phase="Running")
    homes = look(set_, [BYSTANDER, running], memory).homes
    intruder = pod("x", "2")
    # The owner just ended; the controller's next pass has not run yet.
    assert verdict(set_, intruder, [BYSTANDER], homes)["unresolvable"]["n1"].endswith("keeps room on this node for its owner ml/o1; without it: Insufficient cpu")
    after = look(set_, [BYSTANDER, dict(running, status={"phase": "Succeeded"})], memory, now=1.0)
    assert [(c.index, c.near, c.kind) for c in after.creates] == [(0, "n1", "returned")]
    held_for = "for its owners (its placeholder kpe-system/kpe-train-0 is not there); without it: Insufficient cpu"
    assert verdict(set_, intruder, [BYSTANDER], after.homes)["unresolvable"]["n1"].endswith(held_for)
    # Back but not placed yet: still kept off, and the placeholder itself may go there.
    returning = placeholder(set_)
    homes = look(set_, [BYSTANDER, returning], memory, now=2.0).homes
    assert verdict(set_, intruder, [BYSTANDER], homes)["unresolvable"]["n1"].endswith(held_for)
    assert "n1" in verdict(set_, returning, [BYSTANDER], homes)["pass"]


def test_a_used_up_slot_and_a_removed_reservation_hold_no_room() -> None:
    set_, memory = policies(return_slots=False), SlotMemory()
    look(set_, [BYSTANDER, pod("o1", "2", namespace="ml", node="n1", claim="train/0", phase="Running")], memory)
    consumed = look(set_, [BYSTANDER], memory, now=1.0)
    assert [s.state for s in consumed.slots["train"]] == ["consumed"] and consumed.homes == {}
    homes = look(policies(), [BYSTANDER, pod("o1", "2", namespace="ml", nominated="n1", claim="train/0")], SlotMemory()).homes
    info = node_info_map(NODES, [BYSTANDER])
    result = keep_off(filter_nodes(PolicySet((), "g"), pod("x", "2"), NODES, node_info=info), pod("x", "2"), NODES, info, homes, reservations=set())
    assert result.passed == ["n1", "n2"]


def test_the_plan_says_where_each_slot_is_at_home() -> None:
    set_, memory = policies(), SlotMemory()
    free = look(set_, [placeholder(set_, "n1")], memory).homes
    assert [(h.node, h.index, h.owner, h.placeholder) for h in free["n1"]] == [("n1", 0, "", "kpe-system/kpe-train-0")]
    assert {k: str(v.cel_string()) for k, v in free["n1"][0].requests.items()} == {"cpu": "2"}
    nominated = look(set_, [pod("o1", "2", namespace="ml", nominated="n1")], memory, now=1.0).homes
    assert [(h.node, h.owner) for h in nominated["n1"]] == [("n1", "")]  # claimed, not recorded yet: no owner to name
    recorded = look(set_, [pod("o1", "2", namespace="ml", nominated="n1", claim="train/0")], memory, now=2.0).homes
    assert [(h.node, h.owner) for h in recorded["n1"]] == [("n1", "ml/o1")]
    assert look(set_, [], SlotMemory()).homes == {}  # a slot never placed is at home nowhere


def test_a_non_owner_may_not_evict_an_owner_from_its_slot_but_may_evict_other_pods() -> None:
    set_ = policies()
    info = node_info_map(NODES, [])
    using = pod("o1", "2", namespace="ml", node="n1", claim="train/0", phase="Running")
    result = preempt(set_, pod("x", "2"), {"n1": [using], "n2": [BYSTANDER]}, nodes={n["metadata"]["name"]: n for n in NODES}, node_info=info)
    assert result.rejected == {"n1": "reservation.train/placeholders: ml/o1 uses slot 0 of reservation train, which only its owners may use"}
    assert sorted(result.candidates) == ["n2"]


def test_a_non_owner_may_not_evict_others_to_fit_beside_room_in_transit() -> None:
    set_, memory = policies(), SlotMemory()
    look(set_, [BYSTANDER, placeholder(set_, "n1")], memory)
    homes = look(set_, [BYSTANDER, pod("o1", "2", namespace="ml", nominated="n1", claim="train/0")], memory, now=1.0).homes
    # kube-scheduler's dry run counts the slot's 2 CPUs as free: evicting the small pod frees the 3 the intruder needs.
    small = pod("small", "1", node="n1", phase="Running")
    info = node_info_map(NODES, [BYSTANDER, small])
    nodes = {n["metadata"]["name"]: n for n in NODES}
    intruder = pod("x", "3")
    result = keep_evictions_off(preempt(set_, intruder, {"n1": [small]}, nodes=nodes, node_info=info), set_, intruder, nodes, info, homes)
    assert result.candidates == {}
    assert result.rejected == {"n1": "reservation.train/reserved-room: slot 0 of reservation train keeps room on this node for its owner ml/o1; without it: Insufficient cpu"}
    assert result.rejections == {"reservation.train/reserved-room": 1}
    # Where the evictions alone make room, they stand.
    result = keep_evictions_off(preempt(set_, pod("y", "1"), {"n1": [small]}, nodes=nodes, node_info=info), set_, pod("y", "1"), nodes, info, homes)
    assert list(result.candidates) == ["n1"]


def test_a_node_offered_for_room_kpe_s_cache_still_sees_a_placeholder_in_is_refused() -> None:
    set_, memory = policies(), SlotMemory()
    held = placeholder(set_, "n1")
    homes = look(set_, [BYSTANDER, held], memory).homes
    # kube-scheduler saw the eviction, kpe's cache not yet: the intruder fits only in the placeholder's room.
    assert verdict(set_, pod("x", "2"), [BYSTANDER, held], homes)["unresolvable"] == {
        "n1": "reservation.train/reserved-room: slot 0 of reservation train keeps room on this node for its owners; without it: Insufficient cpu"
    }
