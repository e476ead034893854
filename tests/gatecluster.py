"""A fake cluster with kpe serving its webhook and leading the gate controller,
for the gate tests: the ml-quota policy, pod manifests and what to look at."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from server.app import create_app
from server.settings import Settings

from .fakeapi import FakeApiServer, Request, State
from .serving import serve

POLICY = """apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: ml-quota}
spec:
  match: {podSelector: {matchLabels: {team: ml}}}
  admission:
    gate: example.com/ml-quota
    expression: "pods.filter(p, p.metadata.?labels[?'team'].orValue('') == 'ml' && p.spec.?nodeName.orValue('') != '').size() < 1"
    messageExpression: "'team ml already runs ' + string(pods.filter(p, p.metadata.?labels[?'team'].orValue('') == 'ml' && p.spec.?nodeName.orValue('') != '').size()) + ' pod'"
"""


def wait_for(check: Callable[[], bool], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


PODS = "/api/v1/namespaces/demo/pods"


def manifest(name: str, *, gates: tuple[str, ...] = (), team: str = "ml", node: str = "", labels: dict[str, str] | None = None,
             annotations: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "trainer"}]}
    if gates:
        spec["schedulingGates"] = [{"name": g} for g in gates]
    if node:
        spec["nodeName"] = node
    meta: dict[str, Any] = {"name": name, "namespace": "demo", "labels": {"team": team, **(labels or {})}}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


@dataclass
class Cluster:
    api: FakeApiServer
    kpe: str

    @property
    def state(self) -> State:
        return self.api.state

    def create(self, name: str, *gates: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
        """Create a pod through the API, so kpe's webhook gates it."""
        created = httpx.post(self.api.url + PODS, json=manifest(name, gates=gates, labels=labels))
        assert created.status_code == 201, created.text
        body: dict[str, Any] = created.json()
        return body

    def gates(self, name: str) -> list[str]:
        pod = self.state.get_pod("demo", name)
        assert pod is not None, f"pod {name} is gone"
        return [g["name"] for g in pod["spec"].get("schedulingGates") or []]

    def held(self) -> dict[str, str]:
        """kpe's held pods with their messages."""
        pods = httpx.get(self.kpe + "/apis/v1/gated").json()["pods"]
        return {p["name"]: " ".join(g["message"] for g in p["gates"]) for p in pods}

    def lifted(self, name: str) -> list[dict[str, Any]]:
        return [e for e in self.state.events if e.get("reason") == "SchedulingGateLifted" and e["involvedObject"]["name"] == name]

    def requests_for(self, name: str) -> list[Request]:
        """Requests to exactly this pod (not its subresources, not pods whose names start alike)."""
        return [r for r in self.state.requests_to(None, f"{PODS}/{name}") if r.path == f"{PODS}/{name}"]

    def before_patch_of(self, name: str, change: Callable[[State], Any]) -> None:
        self.state.before_next(change, method="PATCH", path=f"{PODS}/{name}")


@contextlib.contextmanager
def cluster(tmp_path: Path, *, policy: str = POLICY, quota_taken: bool = True, resync_s: float = 1) -> Iterator[Cluster]:
    """kpe (webhook and leading gate controller) on a fake cluster; with ``quota_taken`` one ml pod runs,
    so under POLICY new ml pods stay gated until the test deletes it."""
    (tmp_path / "policy.yaml").write_text(policy)
    with FakeApiServer(bookmark_interval=0.2) as api:
        api.state.add_node({"metadata": {"name": "node-1"}, "status": {"allocatable": {"cpu": "4"}}})
        if quota_taken:
            api.state.add_pod(manifest("running", node="node-1"))
        settings = Settings(
            policies=str(tmp_path / "policy.yaml"),
            kubeconfig=api.write_kubeconfig(tmp_path / "kubeconfig"),
            cluster="on",
            controllers="gates,reservations,requeue",
            lease_duration_s=2,
            gate_resync_s=resync_s,
            gate_debounce_ms=50,
        )
        with serve(create_app(settings)) as url:
            wait_for(lambda: httpx.get(url + "/readyz").status_code == 200)
            wait_for(lambda: httpx.get(url + "/apis/v1/gated").json()["leader"] is True)
            api.state.add_mutating_webhook("kpe", url + "/admission/pods")
            yield Cluster(api, url)
