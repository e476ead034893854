"""Reservations in the engine: the document, its owners' decisions (cases/reservations.yaml),
the placeholder pod, and the slot bookkeeping (engine.reservations.slots) over plain pods."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from engine.errors import PolicyLoadError
from engine.decisions.filtering import filter_nodes
from engine.policy.loader import load_text
from engine.cluster.nodeinfo import node_info_map
from engine.decisions.preemption import preempt
from engine.policy.reservation import placeholder_pod
from engine.decisions.scoring import score_nodes
from engine.reservations.slots import Plan, SlotMemory, plan

CASES: list[dict[str, Any]] = yaml.safe_load((Path(__file__).parent / "cases" / "reservations.yaml").read_text())


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_reservation_decision_table(case: dict[str, Any]) -> None:
    policies = load_text(case["policies"], file="case.yaml")
    pod, nodes = case["pod"], case.get("nodes", [])
    info = node_info_map(nodes, case.get("clusterPods", []))
    expect = case["expect"]
    if "filter" in expect:
        result = filter_nodes(policies, pod, nodes, node_info=info)
        assert {"pass": result.passed, "fail": result.failed, "unresolvable": result.unresolvable} == expect["filter"]
    if "score" in expect:
        assert score_nodes(policies, pod, nodes, node_info=info).scores == expect["score"]
    if "preemption" in expect:
        result = preempt(policies, pod, case["victims"], nodes={n["metadata"]["name"]: n for n in nodes}, node_info=info)
        assert sorted(result.candidates) == expect["preemption"]["candidates"]
        assert result.rejected == expect["preemption"]["rejected"]


# -- the document and the placeholder pod -------------------------------------------------

RESERVATION = """
apiVersion: kpe.dev/v1alpha1
kind: Reservation
metadata: {name: train}
spec:
  slots: 2
  returnSlots: RETURN
  owners: {namespaces: [ml]}
  template:
    resources: {requests: {cpu: "1", nvidia.com/gpu: 1}}
    nodeSelector: {pool: gpu}
    tolerations: [{key: gpu, operator: Exists}]
    topologySpreadConstraints: [{maxSkew: 1, topologyKey: zone, whenUnsatisfiable: DoNotSchedule}]
"""


def reservation(return_slots: bool = True, slots: int = 2) -> Any:
    text = RESERVATION.replace("RETURN", str(return_slots).lower()).replace("slots: 2", f"slots: {slots}")
    [res] = load_text(text).reservations
    return res


def test_a_reservation_loads_as_its_owners_policy_and_its_errors_point_into_the_document() -> None:
    res = reservation()
    assert (res.name, res.slots, res.mode, res.return_slots, res.policy) == ("train", 2, "Required", True, "reservation.train")
    with pytest.raises(PolicyLoadError) as caught:
        load_text(RESERVATION.replace("RETURN", "true").replace("slots: 2", "slots: -1"), file="r.yaml")
    rendered = [e.render().split("\n")[0] for e in caught.value.errors]
    assert rendered == ["r.yaml:6:10: error[KPE200] train: spec.slots: -1 is less than the minimum of 0"]
    with pytest.raises(PolicyLoadError) as caught:
        load_text(RESERVATION.replace("RETURN", "true").replace("namespaces: [ml]", "expression: 'pod.metadata.name =='"), file="r.yaml")
    [error] = caught.value.errors
    assert (error.code, error.policy, error.path, error.location.line) == ("KPE300", "train", "spec.owners.expression", 8)
    with pytest.raises(PolicyLoadError) as caught:
        load_text(2 * (RESERVATION.replace("RETURN", "true") + "---\n"), file="r.yaml")
    assert [e.code for e in caught.value.errors] == ["KPE400"]
    with pytest.raises(PolicyLoadError) as caught:
        load_text(RESERVATION.replace("RETURN", "true").replace('cpu: "1"', 'cpu: "1 core"'), file="r.yaml")
    [error] = caught.value.errors
    assert (error.code, error.path, error.location.line) == ("KPE403", "spec.template.resources.requests.cpu", 10)
    assert error.message.startswith("cpu: '1 core' is not a quantity (")


def test_a_placeholder_holds_the_template_at_low_priority_and_prefers_the_node_its_slot_was_on() -> None:
    pod = placeholder_pod(reservation(), 1, namespace="kpe-system", image="pause", priority_class="kpe-placeholder", near="n7")
    assert pod["metadata"]["name"] == "kpe-train-1" and pod["metadata"]["namespace"] == "kpe-system"
    assert pod["metadata"]["labels"] == {"kpe.dev/reservation": "train", "kpe.dev/slot": "1", "app.kubernetes.io/managed-by": "kpe"}
    spec = pod["spec"]
    assert (spec["priorityClassName"], spec["terminationGracePeriodSeconds"]) == ("kpe-placeholder", 0)
    assert spec["containers"] == [{"name": "placeholder", "image": "pause", "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": 1}}}]
    assert spec["nodeSelector"] == {"pool": "gpu"} and spec["tolerations"] == [{"key": "gpu", "operator": "Exists"}]
    assert spec["topologySpreadConstraints"][0]["labelSelector"] == {"matchLabels": {"kpe.dev/reservation": "train"}}
    [preferred] = spec["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert preferred["preference"]["matchExpressions"][0]["values"] == ["n7"]


# -- slot bookkeeping ---------------------------------------------------------------------

NS = "kpe-system"


def placeholder(res: Any, index: int, node: str = "", **meta: Any) -> dict[str, Any]:
    pod = placeholder_pod(res, index, namespace=NS, image="pause", priority_class="low")
    pod["metadata"].update(meta)
    pod["spec"]["nodeName"] = node
    return pod


def owner(name: str, node: str = "", *, nominated: str = "", claim: str = "", phase: str = "Running", namespace: str = "ml") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "creationTimestamp": f"2026-11-23T09:00:0{len(name) % 10}Z"}
    if claim:
        meta["annotations"] = {"kpe.dev/reservation-slot": claim}
    return {"metadata": meta, "spec": {"nodeName": node}, "status": {"phase": phase, **({"nominatedNodeName": nominated} if nominated else {})}}


def run(res: Any, pods: list[dict[str, Any]], memory: SlotMemory, now: float = 0.0) -> Plan:
    return plan([res], pods, memory, namespace=NS, owns=lambda r, p: p["metadata"]["namespace"] == "ml", now=now, grace_s=5.0)


def states(result: Plan) -> list[tuple[str, str, str]]:
    return [(s.state, s.node, s.pod) for s in result.slots["train"]]


def test_new_slots_get_placeholders_and_placed_ones_are_free() -> None:
    res, memory = reservation(), SlotMemory()
    first = run(res, [], memory)
    assert [(c.index, c.near, c.reason) for c in first.creates] == [(0, "", "new slot"), (1, "", "new slot")]
    settled = run(res, [placeholder(res, 0, "n1"), placeholder(res, 1)], memory)
    assert settled.idle and states(settled) == [("free", "n1", "kpe-system/kpe-train-0"), ("pending", "", "kpe-system/kpe-train-1")]


def test_an_owner_nominated_after_preempting_a_placeholder_claims_its_slot_and_the_slot_returns_when_it_ends() -> None:
    res, memory = reservation(), SlotMemory()
    run(res, [placeholder(res, 0, "n1"), placeholder(res, 1, "n2")], memory)
    # kube-scheduler evicted kpe-train-0 for the owner: gone before the nomination shows.
    early = run(res, [placeholder(res, 1, "n2")], memory, now=1.0)
    assert early.idle and states(early)[0] == ("missing", "n1", "")
    nominated = run(res, [placeholder(res, 1, "n2"), owner("o1", nominated="n1")], memory, now=2.0)
    [claim] = nominated.claims
    assert (claim.reservation, claim.index, claim.node, claim.placeholder) == ("train", 0, "n1", None) and not nominated.creates
    # The controller annotated it; it runs on n1 and uses slot 0.
    running = run(res, [placeholder(res, 1, "n2"), owner("o1", "n1", claim="train/0")], memory, now=3.0)
    assert running.idle and states(running)[0] == ("used", "n1", "ml/o1")
    ended = run(res, [placeholder(res, 1, "n2"), owner("o1", "n1", claim="train/0", phase="Succeeded")], memory, now=4.0)
    assert [(c.index, c.near, c.reason) for c in ended.creates] == [(0, "n1", "slot returned: its owner ended")]
    assert ended.returned == [(("train", 0), "ml/o1")]


def test_a_slot_that_is_not_returned_stays_consumed() -> None:
    res, memory = reservation(return_slots=False), SlotMemory()
    run(res, [placeholder(res, 1, "n2"), owner("o1", "n1", claim="train/0")], memory)
    ended = run(res, [placeholder(res, 1, "n2")], memory, now=1.0)
    assert ended.idle and states(ended)[0] == ("consumed", "n1", "")


def test_an_owner_bound_beside_a_free_placeholder_takes_its_slot_and_the_placeholder_goes() -> None:
    res, memory = reservation(), SlotMemory()
    slot = placeholder(res, 0, "n1")
    result = run(res, [slot, placeholder(res, 1, "n2"), owner("o1", "n1")], memory)
    [claim] = result.claims
    assert claim.placeholder is slot and [d.pod for d in result.deletes] == [slot]


def test_a_placeholder_deleted_by_someone_else_comes_back_after_the_grace_period_near_its_node() -> None:
    res, memory = reservation(), SlotMemory()
    # An owner that already ran on n1 beside the slot's placeholder (it was not read whole
    # yet) does not take the vanished slot, nor does a non-owner.
    pods = [placeholder(res, 1, "n2"), owner("old", "n1"), owner("web", "n1", namespace="web")]
    plan([res], [placeholder(res, 0, "n1"), *pods], memory, namespace=NS, owns=lambda r, p: None, now=0.0, grace_s=5.0)
    waiting = run(res, pods, memory, now=1.0)
    assert waiting.idle and states(waiting)[0] == ("missing", "n1", "")
    back = run(res, pods, memory, now=6.0)
    assert [(c.index, c.near, c.reason) for c in back.creates] == [(0, "n1", "placeholder deleted")]


def test_shrinking_or_removing_a_reservation_deletes_only_its_placeholders() -> None:
    res, memory = reservation(), SlotMemory()
    pods = [placeholder(res, 0, "n1"), placeholder(res, 1, "n2"), owner("o1", "n3", claim="train/1"), owner("bystander", "n1", namespace="web")]
    shrunk = run(reservation(slots=1), pods, memory)
    assert sorted(d.pod["metadata"]["name"] for d in shrunk.deletes) == ["kpe-train-1"]
    removed = plan([], pods, SlotMemory(), namespace=NS, owns=lambda r, p: True, now=0.0, grace_s=5.0)
    assert sorted(d.pod["metadata"]["name"] for d in removed.deletes) == ["kpe-train-0", "kpe-train-1"]
    assert not removed.creates and not removed.claims


def test_a_placeholder_from_an_older_template_is_replaced() -> None:
    res, memory = reservation(), SlotMemory()
    old = placeholder(res, 0, "n1", annotations={"kpe.dev/template": "older"}, uid="u-old")
    result = run(res, [old, placeholder(res, 1, "n2")], memory)
    assert [d.pod for d in result.deletes] == [old] and not result.creates
    memory.deleted.add("u-old")  # the controller deleted it
    again = run(res, [placeholder(res, 1, "n2")], memory, now=0.1)
    assert [(c.index, c.reason, c.kind) for c in again.creates] == [(0, "placeholder replaced", "restored")]


def test_an_owner_nominated_late_takes_the_slot_from_a_placeholder_recreated_meanwhile() -> None:
    res, memory = reservation(), SlotMemory()
    run(res, [placeholder(res, 0, "n1"), placeholder(res, 1, "n2")], memory)
    run(res, [placeholder(res, 1, "n2")], memory, now=1.0)
    [create] = run(res, [placeholder(res, 1, "n2")], memory, now=7.0).creates
    assert (create.index, create.near) == (0, "n1")
    recreated = placeholder(res, 0)  # not placed: the owner's nomination holds n1's room
    late = run(res, [recreated, placeholder(res, 1, "n2"), owner("o1", nominated="n1")], memory, now=8.0)
    [claim] = late.claims
    assert (claim.index, claim.placeholder) == (0, recreated) and [d.pod for d in late.deletes] == [recreated]
