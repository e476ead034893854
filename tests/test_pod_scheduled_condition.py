"""What ``kpe explain pod`` makes of a pending pod's PodScheduled condition: the API server's
``SchedulingGated`` (written at creation when the pod has gates, and left there after they go) is
no rejection by kube-scheduler or kpe; ``Unschedulable`` is kube-scheduler's last attempt."""

from __future__ import annotations

from typing import Any

import pytest

from engine.reports.diagnosis.diagnose import pod_state, scheduled_condition
from engine.reports.diagnosis.view import headline

GATED_MESSAGE = "Scheduling is blocked due to non-empty scheduling gates"  # kube-apiserver's, 1.32 and 1.37


def pod(*, gates: list[str] = (), reason: str | None = None, message: str = "", status: str = "False") -> dict[str, Any]:  # type: ignore[assignment]
    out: dict[str, Any] = {"metadata": {"name": "p", "namespace": "ml", "annotations": {"kpe.dev/gates": ",".join(gates)}},
                           "spec": {"schedulingGates": [{"name": g} for g in gates]}, "status": {"phase": "Pending"}}
    if reason is not None:
        out["status"]["conditions"] = [{"type": "PodScheduled", "status": status, "reason": reason, "message": message}]
    return out


@pytest.mark.parametrize(
    ("case", "meaning"),
    [
        (pod(gates=["kpe.dev/quota"], reason="SchedulingGated", message=GATED_MESSAGE),
         "written by the API server when the pod was created with scheduling gates: not a rejection, kube-scheduler has not tried the pod"),
        (pod(reason="SchedulingGated", message=GATED_MESSAGE),
         "written by the API server at creation, when the pod still had scheduling gates: not a rejection; the gates are gone and "
         "kube-scheduler has not written the condition since (it has not tried the pod yet, or another PreEnqueue plugin holds it, "
         "such as a pod group waiting for its members)"),
        (pod(reason="Unschedulable", message="0/3 nodes are available: 3 quota/fits: no room."),
         "kube-scheduler's last attempt found no node (its plugins' and extenders' reasons, kpe's among them)"),
        (pod(reason="SchedulerError", message="binding rejected"),
         "kube-scheduler's last attempt failed with an error, not a decision about nodes"),
    ],
)
def test_each_podscheduled_reason_says_who_wrote_it_and_whether_it_is_a_rejection(case: dict[str, Any], meaning: str) -> None:
    found = scheduled_condition(case)
    assert found is not None and found["meaning"] == meaning
    assert found["message"] == case["status"]["conditions"][0]["message"]


def test_a_pod_without_a_false_podscheduled_condition_has_nothing_to_say() -> None:
    assert scheduled_condition(pod()) is None
    assert scheduled_condition(pod(reason="", status="True")) is None


def test_the_report_prints_the_condition_under_the_state_with_the_scheduler_s_message() -> None:
    state = pod_state(pod(reason="SchedulingGated", message=GATED_MESSAGE), ["quota"], "g1")
    assert state.state == "pending" and state.kpe_decides
    data = {"pod": "ml/p", "generation": "g1", "status": state.to_dict(), "nodes": [], "feasibleNodes": []}
    lines = headline(data)
    assert lines[1:4] == [
        "state: pending",
        "PodScheduled: False, reason SchedulingGated - written by the API server at creation, when the pod still had scheduling gates: "
        "not a rejection; the gates are gone and kube-scheduler has not written the condition since (it has not tried the pod yet, "
        "or another PreEnqueue plugin holds it, such as a pod group waiting for its members)",
        f"  message: {GATED_MESSAGE}",
    ]
