"""A ``kpe serve`` given credentials but no ``--controllers`` reads the cluster and never
writes to it: no Lease, no gate lifted, no pod touched after a reload, no placeholder. The
fake API server's request log is the witness; the same scenario with the controllers a
deployment switches on shows each write happening, so the log would see them."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from server.app import create_app
from server.settings import Settings

from .fakeapi import FakeApiServer
from .serving import serve

POOL = """apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {{name: pool}}
spec:
  filters:
  - {{name: pool, expression: "node.metadata.?labels[?'pool'].orValue('') == '{pool}'", message: "not in pool {pool}"}}
"""
GATE = """apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: hold}
spec:
  admission:
    gate: kpe.dev/hold
    expression: "true"
    message: never held for long
"""
WRITES = ("POST", "PUT", "PATCH", "DELETE")


def wait_for(check: Callable[[], bool], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def gated_pod(api: FakeApiServer, name: str) -> dict[str, Any]:
    pod: dict[str, Any] = api.state.add_pod(
        {
            "metadata": {"name": name, "namespace": "demo", "annotations": {"kpe.dev/gates": "kpe.dev/hold"}},
            "spec": {"containers": [{"name": "c", "image": "x"}], "schedulingGates": [{"name": "kpe.dev/hold"}]},
        }
    )
    return pod


def run_scenario(tmp_path: Path, controllers: str) -> list[tuple[str, str]]:
    """Start kpe, let it sync, reject a pod, reload a policy; the writes it sent to the API."""
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "pool.yaml").write_text(POOL.format(pool="a"))
    (policies / "hold.yaml").write_text(GATE)
    with FakeApiServer(bookmark_interval=0.2) as api:
        api.state.add_node({"metadata": {"name": "b1", "labels": {"pool": "b"}}})
        gated_pod(api, "gated")
        waiting = api.state.add_pod({"metadata": {"name": "waiting", "namespace": "demo"}, "spec": {"containers": [{"name": "c", "image": "x"}]}})
        settings = Settings(
            policies=str(policies), kubeconfig=str(api.write_kubeconfig(tmp_path / "kubeconfig")), cluster="on", controllers=controllers,
            lease_duration_s=2, gate_resync_s=1, gate_debounce_ms=50, reload_debounce_ms=50,
        )
        with serve(create_app(settings)) as url:
            wait_for(lambda: httpx.get(url + "/readyz").status_code == 200)
            answer = httpx.post(url + "/scheduler/filter", json={"Pod": waiting, "NodeNames": ["b1"]}).json()
            assert {**answer["FailedNodes"], **answer["FailedAndUnresolvableNodes"]} == {"b1": "pool/pool: not in pool a"}, answer
            old = httpx.get(url + "/apis/v1/policies").json()["generation"]
            (policies / "pool.yaml").write_text(POOL.format(pool="b"))
            wait_for(lambda: httpx.get(url + "/apis/v1/policies").json()["generation"] != old)
            if controllers:
                # What each controller does, seen in the log: the test can tell a write when one happens.
                wait_for(lambda: any(r.path.startswith("/apis/coordination.k8s.io/") for r in writes(api)))
                wait_for(lambda: any(r.path.endswith("/pods/gated") for r in writes(api)))
                wait_for(lambda: any(r.path.endswith("/pods/waiting") for r in writes(api)))
            else:
                # A round trip through the cache after the reload: by then a controller that ran
                # would have campaigned, lifted the gate (resync 1 s, debounce 50 ms) and requeued.
                api.state.add_node({"metadata": {"name": "c1", "labels": {"pool": "c"}}})
                wait_for(lambda: httpx.get(url + "/apis/v1/nodes/c1").status_code == 200)
                time.sleep(2.0)  # longer than the Lease's first try, the gate resync and the requeue rate
            return [(r.method, r.path) for r in writes(api)]


def writes(api: FakeApiServer) -> list[Any]:
    return [r for r in api.state.requests if r.method in WRITES]


def test_kpe_started_with_credentials_but_no_controllers_never_writes_to_the_cluster(tmp_path: Path) -> None:
    assert run_scenario(tmp_path, "") == []


@pytest.mark.parametrize("controllers", ["gates,reservations,requeue"])
def test_the_controllers_a_deployment_switches_on_do_write_so_the_log_would_show_it(tmp_path: Path, controllers: str) -> None:
    written = run_scenario(tmp_path, controllers)
    assert any(path.startswith("/apis/coordination.k8s.io/") for _, path in written)
