"""Requeue after a reload: the pending pods kpe rejected under the old policy set are
touched, so kube-scheduler retries them; bound, deleted and still-accepted pods are not."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from server.admission.requeue import Requeuer
from server.app import create_app
from server.settings import Settings

from .fakeapi import FakeApiServer
from .serving import serve

POLICY = """apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {{name: pool}}
spec:
  filters:
  - {{name: pool, expression: "node.metadata.?labels[?'pool'].orValue('') == '{pool}'", message: "not in pool {pool}"}}
"""


def wait_for(check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def pending(api: FakeApiServer, name: str) -> dict[str, Any]:
    pod: dict[str, Any] = api.state.add_pod({"metadata": {"name": name, "namespace": "demo"}, "spec": {"containers": [{"name": "c", "image": "x"}]}})
    return pod


def annotation(api: FakeApiServer, name: str) -> str | None:
    value = ((api.state.get_pod("demo", name)["metadata"].get("annotations") or {})).get("kpe.dev/requeue")
    return str(value) if value is not None else None


def test_a_reload_touches_the_pending_pods_the_old_set_rejected_and_nothing_else(tmp_path: Path) -> None:
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "pool.yaml").write_text(POLICY.format(pool="a"))
    with FakeApiServer(bookmark_interval=0.2) as api:
        api.state.add_node({"metadata": {"name": "b1", "labels": {"pool": "b"}}})
        api.state.add_node({"metadata": {"name": "a1", "labels": {"pool": "a"}}})
        rejected, accepted, bound = pending(api, "rejected"), pending(api, "accepted"), pending(api, "bound")
        settings = Settings(policies=str(policies), kubeconfig=str(api.write_kubeconfig(tmp_path / "kubeconfig")), cluster="on", controllers="gates,reservations,requeue", gate_resync_s=0, reload_debounce_ms=50)
        with serve(create_app(settings)) as url:
            wait_for(lambda: httpx.get(url + "/readyz").status_code == 200)
            wait_for(lambda: len(httpx.get(url + "/apis/v1/nodes/a1").json().get("pods", [])) == 0)
            for pod, names in ((rejected, ["b1"]), (accepted, ["a1"]), (bound, ["b1"])):
                answer = httpx.post(url + "/scheduler/filter", json={"Pod": pod, "NodeNames": names}).json()
                assert answer["Error"] == ""
            api.state.bind("demo", "bound", "b1")
            old = httpx.get(url + "/apis/v1/policies").json()["generation"]

            (policies / "pool.yaml").write_text(POLICY.format(pool="b"))
            wait_for(lambda: httpx.get(url + "/apis/v1/policies").json()["generation"] != old)
            new = httpx.get(url + "/apis/v1/policies").json()["generation"]
            wait_for(lambda: annotation(api, "rejected") == new)
            metrics = httpx.get(url + "/metrics").text
            # The bound one was forgotten when the cache saw it bound: the round never looked at it.
            assert 'kpe_requeued_pods_total{result="touched"} 1.0' in metrics and 'result="gone"' not in metrics
            assert annotation(api, "accepted") is None and annotation(api, "bound") is None


NAMESPACED = """apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: opt-in}
spec:
  filters:
  - name: opted-in
    expression: "namespaceObject != null && namespaceObject.metadata.?labels[?'pool'].orValue('') == node.metadata.labels['pool']"
"""


def test_a_namespace_change_touches_the_pending_pods_rejected_in_that_namespace(tmp_path: Path) -> None:
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "opt-in.yaml").write_text(NAMESPACED)
    with FakeApiServer(bookmark_interval=0.2) as api:
        api.state.add_node({"metadata": {"name": "b1", "labels": {"pool": "b"}}})
        api.state.add("namespaces", {"metadata": {"name": "demo", "labels": {"pool": "a"}}})
        api.state.add("namespaces", {"metadata": {"name": "other", "labels": {"pool": "a"}}})
        rejected = pending(api, "rejected")
        elsewhere = api.state.add_pod({"metadata": {"name": "elsewhere", "namespace": "other"}, "spec": {"containers": [{"name": "c", "image": "x"}]}})
        settings = Settings(policies=str(policies), kubeconfig=str(api.write_kubeconfig(tmp_path / "kubeconfig")), cluster="on", controllers="gates,reservations,requeue", gate_resync_s=0, reload_debounce_ms=50)
        with serve(create_app(settings)) as url:
            wait_for(lambda: httpx.get(url + "/readyz").status_code == 200)
            for pod in (rejected, elsewhere):
                answer = httpx.post(url + "/scheduler/filter", json={"Pod": pod, "NodeNames": ["b1"]}).json()
                assert answer["FailedAndUnresolvableNodes"] == {"b1": "opt-in/opted-in: rejected by opted-in"}
            generation = httpx.get(url + "/apis/v1/policies").json()["generation"]

            api.state.update("namespaces", "demo", merge={"metadata": {"labels": {"pool": "b"}}})
            wait_for(lambda: annotation(api, "rejected") == f"{generation}-ns1")
            assert 'kpe_requeued_pods_total{result="touched"} 1.0' in httpx.get(url + "/metrics").text
            assert "kpe.dev/requeue" not in (api.state.get_pod("other", "elsewhere")["metadata"].get("annotations") or {})
            answer = httpx.post(url + "/scheduler/filter", json={"Pod": rejected, "NodeNames": ["b1"]}).json()
            assert [n for n in answer["NodeNames"]] == ["b1"], "the changed namespace's pod is placed now"


RESERVED = """apiVersion: kpe.dev/v1alpha1
kind: Reservation
metadata: {name: gpu}
spec:
  slots: 1
  owners: {namespaces: [demo]}
  template:
    resources: {requests: {cpu: "1"}}
"""


def test_a_rejected_pod_is_forgotten_once_seen_bound_or_deleted_and_kept_while_pending() -> None:
    requeuer = Requeuer(rate=10)
    pods = [{"metadata": {"name": f"p{i}", "namespace": "demo", "uid": f"u{i}"}, "spec": {}} for i in range(3)]
    for pod in pods:
        requeuer.remember(pod, "g1", policies=frozenset({"pool"}))
    requeuer.pod_event("pod", "MODIFIED", {**pods[0], "spec": {"nodeName": "n1"}})
    requeuer.pod_event("pod", "DELETED", pods[1])
    requeuer.pod_event("pod", "MODIFIED", {**pods[2], "status": {"phase": "Pending"}})
    requeuer.pod_event("node", "MODIFIED", {"metadata": {"name": "n1", "uid": "u2"}, "spec": {"nodeName": "n1"}})
    assert list(requeuer.rejected) == ["u2"]


def test_a_placeholder_seen_bound_touches_the_pods_its_reservation_rejected_and_no_others(tmp_path: Path) -> None:
    """kube-scheduler retries a waiting owner as soon as it sees the slot's placeholder bound, maybe
    before kpe's cache has: kpe touches the owners its reservation rejected once its cache shows it."""
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "reserved.yaml").write_text(RESERVED)
    (policies / "pool.yaml").write_text(POLICY.format(pool="a").replace("filters:", "match: {namespaces: [other]}\n  filters:"))
    with FakeApiServer(bookmark_interval=0.2) as api:
        api.state.add_node({"metadata": {"name": "n1", "labels": {"pool": "b"}}})
        owner = pending(api, "owner")
        elsewhere = api.state.add_pod({"metadata": {"name": "elsewhere", "namespace": "other"}, "spec": {"containers": [{"name": "c", "image": "x"}]}})
        settings = Settings(policies=str(policies), kubeconfig=str(api.write_kubeconfig(tmp_path / "kubeconfig")), cluster="on", controllers="requeue", reload_debounce_ms=50)
        with serve(create_app(settings)) as url:
            wait_for(lambda: httpx.get(url + "/readyz").status_code == 200)
            answer = httpx.post(url + "/scheduler/filter", json={"Pod": owner, "NodeNames": ["n1"]}).json()
            assert answer["FailedAndUnresolvableNodes"] == {"n1": "reservation.gpu/reserved-slot: no free slot of reservation gpu on this node"}
            other = httpx.post(url + "/scheduler/filter", json={"Pod": elsewhere, "NodeNames": ["n1"]}).json()
            assert {**other["FailedNodes"], **other["FailedAndUnresolvableNodes"]} == {"n1": "pool/pool: not in pool a"}, other
            generation = httpx.get(url + "/apis/v1/policies").json()["generation"]

            api.state.add_pod({"metadata": {"name": "kpe-gpu-0", "namespace": "kpe-system", "labels": {"kpe.dev/reservation": "gpu", "kpe.dev/slot": "0"}},
                               "spec": {"containers": [{"name": "c", "image": "x"}]}})
            time.sleep(0.5)  # seen pending: no slot is free yet, nobody is touched
            assert annotation(api, "owner") is None
            api.state.bind("kpe-system", "kpe-gpu-0", "n1")
            wait_for(lambda: annotation(api, "owner") == f"{generation}-slot1")
            assert 'kpe_requeued_pods_total{result="touched"} 1.0' in httpx.get(url + "/metrics").text
            assert "kpe.dev/requeue" not in (api.state.get_pod("other", "elsewhere")["metadata"].get("annotations") or {})
            # By the time of the touch, kpe's filter sees the slot: the retry kube-scheduler makes finds it.
            assert httpx.post(url + "/scheduler/filter", json={"Pod": owner, "NodeNames": ["n1"]}).json()["NodeNames"] == ["n1"]
