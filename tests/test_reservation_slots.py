"""Slot bookkeeping as a decision table over runs of passes (cases/reservation-slots.yaml):
which claims, deletes and creates ``engine.reservations.slots.plan`` asks for, pass after
pass, as the controller does them (refused claims, placeholders it deleted)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from engine.policy.loader import load_text
from engine.policy.reservation import placeholder_pod
from engine.cluster.nodeinfo import pod_name
from engine.reservations.slots import Plan, SlotMemory, plan

CASES: list[dict[str, Any]] = yaml.safe_load((Path(__file__).parent / "cases" / "reservation-slots.yaml").read_text())
NS = "kpe-system"
RESERVATION = """
apiVersion: kpe.dev/v1alpha1
kind: Reservation
metadata: {name: train}
spec:
  slots: SLOTS
  owners: {namespaces: [ml, web]}
  template: {resources: {requests: {cpu: "1"}}}
"""


def build(spec: dict[str, Any], order: int, res: Any) -> dict[str, Any]:
    if "placeholder" in spec:
        pod = placeholder_pod(res, int(spec["placeholder"]), namespace=NS, image="pause", priority_class="low")
        meta = pod["metadata"]
        meta["uid"] = spec["uid"]
        if "template" in spec:
            meta["annotations"]["kpe.dev/template"] = spec["template"]
        if spec.get("terminating"):
            meta["deletionTimestamp"] = "2026-11-23T09:00:00Z"
        pod["spec"]["nodeName"] = spec.get("node", "")
        return pod
    namespace, _, name = str(spec["pod"]).partition("/")
    meta = {"name": name, "namespace": namespace, "uid": f"uid-{name}", "creationTimestamp": f"2026-11-23T09:00:{order:02d}Z"}
    if "claim" in spec:
        meta["annotations"] = {"kpe.dev/reservation-slot": spec["claim"]}
    status: dict[str, Any] = {"phase": "Running" if spec.get("node") else "Pending"}
    if "nominated" in spec:
        status["nominatedNodeName"] = spec["nominated"]
    return {"metadata": meta, "spec": {"nodeName": spec.get("node", "")}, "status": status}


def seen(result: Plan) -> dict[str, list[str]]:
    return {
        "creates": [f"{c.index} near {c.near or '-'}: {c.reason}" for c in result.creates],
        "claims": [f"{pod_name(c.owner)} takes {c.index} on {c.node}" for c in result.claims],
        "deletes": [f"{d.pod['metadata']['name']}: {d.reason}" for d in result.deletes],
        "slots": [f"{s.index} {s.state} {s.node or '-'} {s.pod or '-'}" for s in result.slots["train"]],
        "undecided": [pod_name(p) for p in result.undecided],
    }


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_slot_bookkeeping_over_a_run_of_passes(case: dict[str, Any]) -> None:
    [res] = load_text(RESERVATION.replace("SLOTS", str(case.get("slots", 1)))).reservations
    memory = SlotMemory()
    for number, step in enumerate(case["passes"]):
        pods = [build(spec, order, res) for order, spec in enumerate(step["pods"])]
        answers = {k: (None if v == "unknown" else bool(v)) for k, v in (step.get("owners") or {}).items()}

        def owns(_: Any, pod: dict[str, Any]) -> bool | None:
            return answers.get(pod_name(pod), pod["metadata"]["namespace"] == "ml")

        result = plan([res], pods, memory, namespace=NS, owns=owns, now=float(step["at"]), grace_s=5.0)
        expected = step.get("expect") or {}
        got = seen(result) if expected else {}
        assert {k: got[k] for k in expected} == expected, f"pass {number} (at {step['at']})"
        for name in step.get("claimsFail") or []:
            claim = next(c for c in result.claims if pod_name(c.owner) == name)
            result.unclaim(claim, memory)
        memory.deleted.update(step.get("kpeDeleted") or [])
        for index, uid in (step.get("kpeCreated") or {}).items():
            memory.created(("train", int(index)), uid)
