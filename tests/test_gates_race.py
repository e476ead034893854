"""The gate controller against writers it races with: another controller's gate
changes, a hand-made gate that only looks like kpe's, a pod deleted or replaced
between kpe's read and its patch. Each race is staged in the fake API server so
the other write lands just before kpe's PATCH, as it can on a real one."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from .fakeapi import Request, State
from .gatecluster import cluster, manifest, wait_for

QUOTA = "example.com/ml-quota"  # the gate of the ml-quota policy in POLICY
READY = "example.com/ready"
READINESS = """apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: readiness}
spec:
  match: {podSelector: {matchLabels: {team: ml}}}
  admission:
    gate: example.com/ready
    expression: "pod.metadata.?labels[?'ready'].orValue('') == 'yes'"
    message: not ready yet
"""
def without_gates(name: str, *gates: str) -> Callable[[State], None]:
    """Another client removing ``gates`` from the pod (the only gate change the API allows)."""

    def change(state: State) -> None:
        def drop(pod: dict[str, Any]) -> None:
            pod["spec"]["schedulingGates"] = [g for g in pod["spec"]["schedulingGates"] if g["name"] not in gates]

        state.update("pods", name, "demo", mutate=drop)

    return change


def ops(request: Request) -> dict[str, Any]:
    """A gate-lifting JSONPatch by op (test, replace) -> value."""
    return {op["op"]: op["value"] for op in request.json() if op["path"] == "/spec/schedulingGates"}


def named(*gates: str) -> list[dict[str, str]]:
    return [{"name": g} for g in gates]


def test_a_patch_racing_a_gate_change_is_retried_on_the_fresh_pod_and_keeps_every_foreign_gate(tmp_path: Path) -> None:
    with cluster(tmp_path) as c:
        c.create("waiting", "other.io/a", "other.io/b")
        assert c.gates("waiting") == ["other.io/a", "other.io/b", QUOTA]
        wait_for(lambda: "waiting" in c.held())
        c.before_patch_of("waiting", without_gates("waiting", "other.io/a"))

        c.state.delete("pods", "running", "demo")
        wait_for(lambda: c.lifted("waiting") != [])
        assert c.gates("waiting") == ["other.io/b"]
        log = c.requests_for("waiting")
        # The stale patch failed its test (422), kpe re-read the pod and patched what it found.
        assert [r.method for r in log[:3]] == ["PATCH", "GET", "PATCH"]
        assert ops(log[0]) == {"test": named("other.io/a", "other.io/b", QUOTA), "replace": named("other.io/a", "other.io/b")}
        assert ops(log[2]) == {"test": named("other.io/b", QUOTA), "replace": named("other.io/b")}
        wait_for(lambda: c.held() == {})
        [event] = c.lifted("waiting")
        assert f"lifted scheduling gate {QUOTA}" in event["message"]


def test_a_gate_someone_else_lifts_first_gets_no_second_patch_and_no_event(tmp_path: Path) -> None:
    with cluster(tmp_path) as c:
        c.create("waiting", "other.io/a")
        wait_for(lambda: "waiting" in c.held())
        c.before_patch_of("waiting", without_gates("waiting", QUOTA))

        c.state.delete("pods", "running", "demo")
        wait_for(lambda: len(c.requests_for("waiting")) >= 2 and c.held() == {})
        assert c.gates("waiting") == ["other.io/a"]
        assert [r.method for r in c.requests_for("waiting")] == ["PATCH", "GET"]
        assert c.lifted("waiting") == []


def test_a_gate_named_like_kpes_but_not_added_by_kpe_is_never_lifted(tmp_path: Path) -> None:
    with cluster(tmp_path, quota_taken=False) as c:
        # Created with the gate already in the manifest, so kpe's webhook did not add (or record) it.
        c.state.add_pod(manifest("handmade", gates=(QUOTA,)))
        c.state.add_pod(manifest("other-team", gates=(QUOTA,), team="web"))
        c.create("admitted")
        wait_for(lambda: c.lifted("admitted") != [])
        c.create("admitted-later")  # released by a later pass, so the one that saw every pod above has ended
        wait_for(lambda: c.lifted("admitted-later") != [])
        assert c.gates("handmade") == [QUOTA] and c.gates("other-team") == [QUOTA]
        assert c.lifted("handmade") == c.lifted("other-team") == []
        assert c.requests_for("handmade") == c.requests_for("other-team") == []
        assert len(c.lifted("admitted")) == 1


def test_a_pod_deleted_between_read_and_patch_is_skipped_and_other_pods_are_still_released(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with cluster(tmp_path) as c:
        c.create("doomed")
        c.create("kept")
        wait_for(lambda: set(c.held()) == {"doomed", "kept"})
        c.before_patch_of("doomed", lambda state: state.delete("pods", "doomed", "demo"))

        c.state.delete("pods", "running", "demo")
        wait_for(lambda: c.gates("kept") == [])
        assert c.state.get_pod("demo", "doomed") is None and [r.method for r in c.requests_for("doomed")][:1] == ["PATCH"]
        c.create("later")
        wait_for(lambda: c.lifted("later") != [])  # recorded after the gate is lifted
        assert c.gates("later") == [] and c.lifted("doomed") == [] and len(c.lifted("kept")) == len(c.lifted("later")) == 1
        assert c.held() == {}
    # A pod that is gone is nothing to warn about, and no pass may have failed on it.
    assert [r.getMessage() for r in caplog.records if r.name == "kpe.gates" and r.levelno >= logging.WARNING] == []


def test_a_pod_replaced_under_the_same_name_between_read_and_patch_is_decided_again(tmp_path: Path) -> None:
    with cluster(tmp_path, policy=READINESS, quota_taken=False) as c:
        first = c.create("web-0", labels={"ready": "no"})
        assert c.gates("web-0") == [READY]
        wait_for(lambda: "web-0" in c.held())

        def replace(state: State) -> None:
            # As a StatefulSet does: same name, new uid, gated by kpe's webhook again, and not ready yet.
            state.delete("pods", "web-0", "demo")
            state.add_pod(manifest("web-0", gates=(READY,), labels={"ready": "no"}, annotations={"kpe.dev/gates": READY}))

        c.before_patch_of("web-0", replace)
        c.state.update("pods", "web-0", "demo", merge={"metadata": {"labels": {"ready": "yes"}}})
        wait_for(lambda: len(c.requests_for("web-0")) >= 2 or c.lifted("web-0") != [])
        c.create("marker", labels={"ready": "yes"})  # released by a later pass than the one that raced
        wait_for(lambda: c.lifted("marker") != [])
        wait_for(lambda: "web-0" in c.held() or c.gates("web-0") == [])
        second = c.state.get_pod("demo", "web-0")
        assert second is not None and second["metadata"]["uid"] != first["metadata"]["uid"]
        assert c.gates("web-0") == [READY], "the old pod's decision was applied to its replacement"
        assert c.lifted("web-0") == []
        assert [r.method for r in c.requests_for("web-0")][:2] == ["PATCH", "GET"]


def test_a_pod_created_while_a_pass_is_lifting_a_gate_gets_a_pass_of_its_own(tmp_path: Path) -> None:
    # Resync far away: only the change itself can bring the second pod's pass.
    with cluster(tmp_path, policy=READINESS, quota_taken=False, resync_s=300) as c:
        def create_second(state: State) -> None:
            # As the webhook would have gated it.
            state.add_pod(manifest("second", gates=(READY,), labels={"ready": "yes"}, annotations={"kpe.dev/gates": READY}))

        c.before_patch_of("first", create_second)
        c.create("first", labels={"ready": "yes"})
        wait_for(lambda: c.lifted("first") != [])
        wait_for(lambda: c.lifted("second") != [])
        assert c.gates("second") == []
