"""``kpe explain pod`` and reservations (engine.reports.diagnosis.slots): for a pod, each reservation
it owns or not, the slots (node, free or used by whom), and the reservation's part in the
decision: where an owner may use a slot, which nodes a non-owner is kept off because a slot's
room there is in transit, which placeholders and owners it may not evict."""

from __future__ import annotations

from typing import Any

from engine.reports.diagnosis.diagnose import diagnose
from engine.reports.diagnosis.view import render_markdown, render_text
from engine.policy.loader import load_text
from engine.policy.model import PolicySet
from engine.policy.reservation import placeholder_pod
from engine.reservations.slots import Plan, SlotMemory, plan

NS = "kpe-system"
RESERVATION = """
apiVersion: kpe.dev/v1alpha1
kind: Reservation
metadata: {name: train}
spec:
  slots: 3
  mode: MODE
  owners: {namespaces: [ml]}
  template:
    resources: {requests: {cpu: "2"}}
"""
NODES = [{"metadata": {"name": n}, "status": {"allocatable": {"cpu": "4", "pods": "10"}}} for n in ("n1", "n2", "n3")]


def policies(mode: str = "Required") -> PolicySet:
    return load_text(RESERVATION.replace("MODE", mode))


def pod(name: str, namespace: str = "web", *, node: str = "", nominated: str = "", claim: str = "", cpu: str = "2") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": name, "creationTimestamp": "2026-11-23T09:00:00Z"}
    if claim:
        meta["annotations"] = {"kpe.dev/reservation-slot": claim}
    status = {"phase": "Running" if node else "Pending", **({"nominatedNodeName": nominated} if nominated else {})}
    return {"metadata": meta, "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]}, "status": status}


def placeholder(set_: PolicySet, index: int, node: str) -> dict[str, Any]:
    made = placeholder_pod(set_.reservations[0], index, namespace=NS, image="pause", priority_class="low")
    made["metadata"]["uid"] = f"p{index}"
    made["spec"]["nodeName"] = node
    made["status"] = {"phase": "Running"}
    return made


def controller_view(set_: PolicySet) -> tuple[list[dict[str, Any]], Plan]:
    """Two passes: every slot placed, then slot 0's placeholder evicted for ml/o2, nominated to n1
    (and recorded as its owner)."""
    memory = SlotMemory()
    owns = lambda r, p: p["metadata"]["namespace"] == "ml"  # noqa: E731
    used = pod("o1", "ml", node="n2", claim="train/1")
    plan(set_.reservations, [placeholder(set_, 0, "n1"), used, placeholder(set_, 2, "n3")], memory, namespace=NS, owns=owns, now=0.0, grace_s=5.0)
    pods = [used, placeholder(set_, 2, "n3"), pod("o2", "ml", nominated="n1", claim="train/0")]
    return pods, plan(set_.reservations, pods, memory, namespace=NS, owns=owns, now=1.0, grace_s=5.0)


def section(text: str) -> list[str]:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("reservation "))
    end = next(i for i, line in enumerate(lines) if line.startswith("verdict:"))
    return lines[start:end]


def test_a_non_owner_is_told_where_a_reservation_keeps_it_off_and_what_it_may_not_evict() -> None:
    set_ = policies()
    pods, view = controller_view(set_)
    intruder = pod("x", cpu="3")  # n1 has 4 CPUs free, 2 of them slot 0's
    intruder["spec"]["priority"] = 1000  # above everyone: only the reservation stops its evictions
    data = diagnose(set_, intruder, NODES, cluster_pods=pods, slots=view.slots, homes=view.homes).to_dict()
    assert section(render_text(data)) == [
        "reservation train (Required): this pod is not an owner",
        "  slot 0: used on n1 by ml/o2",
        "  slot 1: used on n2 by ml/o1",
        "  slot 2: free on n3 (kpe-system/kpe-train-2)",
        "  kept off n1: the room it needs there is reserved for its owner ml/o2",
        # It would fit on n2 and n3 only in the room their slots' pods hold (kube-scheduler's own filters reject them too).
        "  kept off n2: the room it needs there is reserved for its owner ml/o1",
        "  kept off n3: the room it needs there is reserved for its owners",
        "  not an owner: may not evict the placeholder kpe-system/kpe-train-2 on n3",
        "  not an owner: may not evict ml/o2 from slot 0 on n1",
        "  not an owner: may not evict ml/o1 from slot 1 on n2",
    ]
    n1 = next(n for n in data["nodes"] if n["node"] == "n1")
    assert (n1["verdict"], n1["reason"]) == (
        "unresolvable", "reservation.train/reserved-room: slot 0 of reservation train keeps room on this node for its owner ml/o2; without it: Insufficient cpu"
    )
    assert n1["eviction"] == {"possible": False, "reason": "kpe's rule reservation.train/reserved-room is unresolvable: no eviction helps", "victims": []}
    n2 = next(n for n in data["nodes"] if n["node"] == "n2")
    assert n2["kubeScheduler"] == {"reasons": ["Insufficient cpu"], "unresolvable": False}
    assert data["reservations"][0]["owned"] is False and data["reservations"][0]["slots"][1] == {"slot": 1, "state": "used", "node": "n2", "pod": "ml/o1"}
    assert "- kept off n1: the room it needs there is reserved for its owner ml/o2" in render_markdown(data).splitlines()


def test_an_owner_is_told_which_slot_it_may_use_or_uses() -> None:
    set_ = policies()
    pods, view = controller_view(set_)
    data = diagnose(set_, pod("o3", "ml"), NODES, cluster_pods=pods, slots=view.slots, homes=view.homes).to_dict()
    assert section(render_text(data))[0] == "reservation train (Required): this pod owns it"
    assert section(render_text(data))[4:] == ["  owner: may use slot 2 on node n3 (kube-scheduler evicts its placeholder for it)"]
    nominated = diagnose(set_, pods[2], NODES, cluster_pods=pods, slots=view.slots, homes=view.homes).to_dict()
    assert section(render_text(nominated))[4:] == [
        "  owner: uses slot 0 on node n1",
        "  owner: may use slot 2 on node n3 (kube-scheduler evicts its placeholder for it)",
    ]
    # Preferred, with no slot free: the owner runs anywhere.
    preferred = policies("Preferred")
    full = [pod("o1", "ml", node="n2", claim="train/1"), pod("o2", "ml", node="n1", claim="train/0"), pod("o4", "ml", node="n3", claim="train/2")]
    data = diagnose(preferred, pod("o3", "ml"), NODES, cluster_pods=full).to_dict()
    assert section(render_text(data))[4:] == ["  owner: no free slot; a Preferred owner may run anywhere"]


def test_without_the_controller_s_view_the_slots_are_read_from_the_cluster_s_pods() -> None:
    set_ = policies()
    pods = [placeholder(set_, 0, "n1"), pod("o1", "ml", node="n2", claim="train/1")]
    data = diagnose(set_, placeholder(set_, 2, ""), NODES, cluster_pods=pods).to_dict()
    assert section(render_text(data)) == [
        "reservation train (Required): this pod is not an owner",
        "  slot 0: free on n1 (kpe-system/kpe-train-0)",
        "  slot 1: used on n2 by ml/o1",
        "  slot 2: its placeholder is coming back",
        "  this pod is a placeholder of the reservation: it holds a slot's room for the owners",
    ]


def test_a_pod_no_policy_matches_is_still_kpe_s_to_decide_when_reservations_apply() -> None:
    set_ = policies()
    data = diagnose(set_, pod("x"), NODES, cluster_pods=[]).to_dict()
    assert data["status"] == {
        "state": "pending", "kpeDecides": True,
        "notes": [f"No policy of generation {set_.generation} matches this pod: only the reservations below apply to it (it may not take their slots' room)."],
        "podScheduled": None,
    }


def test_owners_chosen_by_their_namespace_object_are_owners_in_the_diagnosis_too() -> None:
    set_ = load_text(RESERVATION.replace("MODE", "Required").replace(
        "owners: {namespaces: [ml]}", "owners: {expression: \"namespaceObject != null && namespaceObject.metadata.?labels[?'team'].orValue('') == 'ml'\"}"))
    pods = [pod("o1", "ml", node="n2", claim="train/1")]
    ml = {"ml": {"metadata": {"name": "ml", "labels": {"team": "ml"}}}}
    owner = section(render_text(diagnose(set_, pod("o3", "ml"), NODES, cluster_pods=pods, namespaces=ml).to_dict()))
    assert owner[0] == "reservation train (Required): this pod owns it"
    assert "  slot 1: used on n2 by ml/o1" in owner
    stranger = section(render_text(diagnose(set_, pod("o3", "ml"), NODES, cluster_pods=pods).to_dict()))
    assert stranger[0] == "reservation train (Required): this pod is not an owner"
