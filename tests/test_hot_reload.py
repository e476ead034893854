"""Hot reload as Kubernetes does it: a ConfigMap mount whose ``..data`` symlink is swapped."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from server.app import create_app
from server.reload.store import PolicyStore
from server.settings import Settings

from .serving import serve

POLICY = """apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {{name: label-gate}}
spec:
  filters:
  - {{name: label, expression: "node.metadata.labels[?'pool'].orValue('') == '{pool}'", message: "not in pool {pool}"}}
"""
BROKEN = POLICY.format(pool="c").replace("orValue('')", "orValue(''")
REQUEST = {"Pod": {"metadata": {"name": "p", "namespace": "demo"}}, "Nodes": {"items": [{"metadata": {"name": "a", "labels": {"pool": "a"}}}, {"metadata": {"name": "b", "labels": {"pool": "b"}}}]}}


def publish(mount: Path, version: int, text: str) -> None:
    """What the kubelet does: write a timestamped dir, then atomically repoint ..data."""
    stamp = mount / f"..2026_11_21_00_00_0{version}"
    stamp.mkdir()
    (stamp / "policy.yaml").write_text(text)
    tmp = mount / "..data_tmp"
    os.symlink(stamp.name, tmp)
    os.replace(tmp, mount / "..data")
    link = mount / "policy.yaml"
    if not link.is_symlink():
        os.symlink("..data/policy.yaml", link)


def wait_for(check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_configmap_symlink_swap_reloads_and_a_broken_change_keeps_the_last_good_set(tmp_path: Path) -> None:
    publish(tmp_path, 1, POLICY.format(pool="a"))
    app = create_app(Settings(policies=str(tmp_path), cluster="off", reload_debounce_ms=50))
    with serve(app) as url:
        first = httpx.post(url + "/scheduler/filter", json=REQUEST)
        assert [n["metadata"]["name"] for n in first.json()["Nodes"]["items"]] == ["a"]
        gen1 = first.headers["x-kpe-policy-generation"]

        publish(tmp_path, 2, POLICY.format(pool="b"))
        wait_for(lambda: httpx.get(url + "/apis/v1/policies").json()["generation"] != gen1)
        second = httpx.post(url + "/scheduler/filter", json=REQUEST)
        assert [n["metadata"]["name"] for n in second.json()["Nodes"]["items"]] == ["b"]
        gen2 = second.headers["x-kpe-policy-generation"]

        publish(tmp_path, 3, BROKEN)
        wait_for(lambda: httpx.get(url + "/apis/v1/policies").json()["lastLoad"]["ok"] is False)
        state = httpx.get(url + "/apis/v1/policies").json()
        assert state["generation"] == gen2
        [error] = state["lastLoad"]["errors"]
        assert (error["code"], error["policy"], error["path"], error["line"]) == ("KPE300", "label-gate", "spec.filters[0].expression", 6)
        assert error["file"].endswith("policy.yaml")
        third = httpx.post(url + "/scheduler/filter", json=REQUEST)
        assert third.headers["x-kpe-policy-generation"] == gen2
        metrics = httpx.get(url + "/metrics").text
        assert "kpe_policy_load_errors 1.0" in metrics
        assert f'kpe_policy_generation_info{{generation="{gen2}"}} 1.0' in metrics
        reloads = httpx.get(url + "/apis/v1/policies").json()["reloads"]
        assert reloads["success"] >= 1 and reloads["failure"] >= 1
        for result in ("success", "failure"):
            assert f'kpe_policy_reloads_total{{result="{result}"}} {float(reloads[result])}' in metrics


def test_a_swap_replaces_the_reference_and_leaves_the_old_set_untouched(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(POLICY.format(pool="a"))
    store = PolicyStore(str(path))
    old = store.load_initial()
    in_flight = store.current
    path.write_text(POLICY.format(pool="b"))
    outcome = store.reload()
    assert outcome.ok and store.current is not old
    assert in_flight is old and in_flight.policies[0].filters[0].message == "not in pool a"
    assert store.current.policies[0].filters[0].message == "not in pool b"
    path.write_text(POLICY.format(pool="b"))
    assert store.reload().ok and store.reloads["unchanged"] == 1


SECOND = """---
apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: second}
spec:
  filters:
  - {name: any, expression: "true"}
"""


def test_an_in_place_edit_is_loaded_only_once_the_file_holds_still(tmp_path: Path) -> None:
    """The writer is cut short after the first of two policies (still a valid file) and
    finishes while kpe waits for the file to hold still: the half-written set never serves."""
    path = tmp_path / "policies.yaml"
    path.write_text(POLICY.format(pool="a"))
    truncated, complete = POLICY.format(pool="b"), POLICY.format(pool="b") + SECOND

    def sleep(seconds: float) -> None:
        # kpe's stability check waits here: the writer gets to finish now, not before.
        if path.read_text() == truncated:
            path.write_text(complete)
        time.sleep(seconds)

    store = PolicyStore(str(path), stable_interval_s=0.02, sleep=sleep)
    app = create_app(Settings(policies=str(path), cluster="off", reload_debounce_ms=50), store=store)
    with serve(app) as url:
        path.write_text(truncated)
        wait_for(lambda: [p["name"] for p in httpx.get(url + "/apis/v1/policies").json()["policies"]] == ["label-gate", "second"])
        answer = httpx.post(url + "/scheduler/filter", json=REQUEST).json()
        assert [n["metadata"]["name"] for n in answer["Nodes"]["items"]] == ["b"]
        # One swap, straight to the complete file: the truncated one was never served.
        assert httpx.get(url + "/apis/v1/policies").json()["reloads"]["success"] == 1


def test_a_file_that_never_holds_still_is_loaded_as_it_is_after_the_last_check(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(POLICY.format(pool="a"))
    looks: list[float] = []

    def sleep(seconds: float) -> None:
        looks.append(seconds)
        with path.open("a") as f:
            f.write("# still writing\n")

    store = PolicyStore(str(path), stable_interval_s=0.5, stable_checks=3, sleep=sleep)
    store.load_initial()
    path.write_text(POLICY.format(pool="b"))
    assert store.reload().ok
    assert looks == [0.5, 0.5, 0.5]
    assert store.current.policies[0].filters[0].message == "not in pool b"
