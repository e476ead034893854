"""A vetoed preemption is visible on the pod: when kpe's preempt verb keeps a node out because
a policy's rule would still reject the pod there (or forbids the evictions), the pending pod
gets one PreemptionVetoed Event naming the policy and rule, at most one per pod a minute."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from server.app import create_app
from server.settings import Settings
from server.state import ServerState
from server.verbs.vetoes import EVERY_S, VetoEvents, message

from .fakeapi import FakeApiServer
from .serving import serve

POLICY = """apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: accel-only}
spec:
  match: {podSelector: {matchLabels: {needs: accel}}}
  filters:
  - name: accelerated
    expression: "node.metadata.?labels[?'kpe.dev/accelerated'].orValue('') == 'true'"
    message: node is not accelerated
---
apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: spare-web}
spec:
  preemption:
    victim: "victim.metadata.?labels[?'app'].orValue('') != 'web'"
"""


def wait_for(check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def node(name: str, accelerated: bool) -> dict[str, Any]:
    labels = {"kpe.dev/accelerated": "true"} if accelerated else {}
    return {"metadata": {"name": name, "labels": labels}, "status": {"allocatable": {"cpu": "4", "pods": "110"}}}


def pod(name: str, uid: str, labels: dict[str, str] | None = None, node_name: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "x"}]}
    if node_name:
        spec["nodeName"] = node_name
    return {"metadata": {"name": name, "namespace": "demo", "uid": uid, "labels": labels or {}}, "spec": spec}


URGENT = pod("urgent", "u-urgent", {"needs": "accel"})


class Kpe:
    def __init__(self, url: str, api: FakeApiServer, state: ServerState) -> None:
        self.url, self.api, self.state = url, api, state
        self.now = 1000.0
        state.vetoes = VetoEvents(clock=lambda: self.now)

    def preempt(self, victims: dict[str, list[dict[str, Any]]], preemptor: dict[str, Any] = URGENT) -> list[str]:
        request = {"Pod": preemptor, "NodeNameToVictims": {n: {"Pods": ps, "NumPDBViolations": 0} for n, ps in victims.items()}}
        answer = httpx.post(self.url + "/scheduler/preempt", json=request)
        assert answer.status_code == 200, answer.text
        return sorted(answer.json()["NodeNameToMetaVictims"])

    def events(self) -> list[dict[str, Any]]:
        wait_for(lambda: self.state.vetoes.pending == 0)  # each Event is posted by a task of its own
        return [e for e in self.api.state.events if e["reason"] == "PreemptionVetoed"]


@pytest.fixture
def kpe(tmp_path: Path) -> Iterator[Kpe]:
    (tmp_path / "policy.yaml").write_text(POLICY)
    with FakeApiServer(bookmark_interval=0.2) as api:
        api.state.add_node(node("n1", accelerated=False))
        api.state.add_node(node("n2", accelerated=True))
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
        app = create_app(Settings(policies=str(tmp_path / "policy.yaml"), kubeconfig=kubeconfig, cluster="on", controllers="requeue", relist_backoff_max_s=0.2))
        with serve(app) as url:
            wait_for(lambda: httpx.get(url + "/readyz").status_code == 200)
            yield Kpe(url, api, app.state.kpe)


def test_a_node_a_filter_keeps_out_of_preemption_is_named_in_one_event_on_the_pod(kpe: Kpe) -> None:
    assert kpe.preempt({"n1": [pod("low-1", "u-low-1", node_name="n1")]}) == []
    events = kpe.events()
    assert [(e["reason"], e["type"], e["message"]) for e in events] == [
        ("PreemptionVetoed", "Normal", "kpe kept node n1 out of preemption: accel-only/accelerated: node is not accelerated")
    ]
    assert events[0]["involvedObject"] == {"apiVersion": "v1", "kind": "Pod", "name": "urgent", "namespace": "demo", "uid": "u-urgent"}
    assert events[0]["source"] == {"component": "kpe"}


def test_a_preemption_rule_s_veto_is_named_too(kpe: Kpe) -> None:
    kept = kpe.preempt({"n2": [pod("web-1", "u-web-1", {"app": "web"}, node_name="n2")]})
    assert kept == []
    assert [e["message"] for e in kpe.events()] == ["kpe kept node n2 out of preemption: spare-web/preemption.victim: victim demo/web-1 may not be preempted"]


def test_one_event_per_pod_within_the_rate_limit_and_another_after_it(kpe: Kpe) -> None:
    victims = {"n1": [pod("low-1", "u-low-1", node_name="n1")]}
    kpe.preempt(victims)
    kpe.now += EVERY_S - 1
    kpe.preempt(victims)
    kpe.preempt(victims)
    assert len(kpe.events()) == 1
    other = pod("urgent-2", "u-urgent-2", {"needs": "accel"})
    kpe.preempt(victims, other)  # another pod is told at once
    assert [e["involvedObject"]["name"] for e in kpe.events()] == ["urgent", "urgent-2"]
    kpe.now += 1
    kpe.preempt(victims)
    assert [e["involvedObject"]["name"] for e in kpe.events()] == ["urgent", "urgent-2", "urgent"]


def test_no_event_when_no_rule_kept_a_node_out(kpe: Kpe) -> None:
    assert kpe.preempt({"n2": [pod("low-2", "u-low-2", node_name="n2")], "n1": []}) == ["n2"]  # n1: no victims, not a veto
    assert kpe.events() == []
    assert httpx.get(kpe.url + "/apis/v1/decisions", params={"verb": "preempt"}).json()["decisions"][0]["rejected"] == {
        "n1": "no victims: preemption would not free anything on this node"
    }


def test_several_nodes_are_named_first_few_then_counted() -> None:
    vetoed = {f"n{i}": "accel-only/accelerated: node is not accelerated" for i in range(1, 6)}
    assert message(vetoed) == (
        "kpe kept 5 nodes out of preemption: n1: accel-only/accelerated: node is not accelerated; "
        "n2: accel-only/accelerated: node is not accelerated; n3: accel-only/accelerated: node is not accelerated; and 2 more"
    )


class FailingClient:
    """A client whose API server refuses every Event."""

    def __init__(self) -> None:
        self.calls = 0

    async def create_event(self, namespace: str, event: dict[str, Any]) -> dict[str, Any]:
        self.calls += 1
        raise RuntimeError("403 Forbidden: events is forbidden")


def test_a_refused_event_is_a_warning_and_without_write_access_none_is_posted(caplog: pytest.LogCaptureFixture) -> None:
    rejected = {"n1": "still rejected with the victims evicted: accel-only/accelerated: node is not accelerated"}

    async def run() -> int:
        events = VetoEvents()
        client = FailingClient()
        events.notice(client, False, URGENT, rejected)  # --controllers none: kpe never writes
        await events.drain()
        assert client.calls == 0
        events.notice(client, True, URGENT, rejected)
        await events.drain()
        return client.calls

    with caplog.at_level(logging.WARNING, logger="kpe.extender"):
        assert asyncio.run(run()) == 1
    assert "could not record the PreemptionVetoed event for demo/urgent: 403 Forbidden" in caplog.text
