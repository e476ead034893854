"""The tests' clock: `now` is the fixed instant of the `clock` fixture (tests/conftest.py)
wherever the engine or the server would read the wall clock, so no test depends on
the hour it runs at."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from engine.cel.ext.timestamps import parse_timestamp
from engine.reports.explain import explain
from engine.decisions.filtering import filter_nodes
from engine.policy.loader import load_text
from server.app import create_app
from server.settings import Settings

from .conftest import DEFAULT_NOW, Clock
from .serving import serve

NIGHT_POLICY = """apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: night}
spec:
  filters:
  - name: sleeps-at-three
    expression: "now.getHours() != 3"
    message: no pods at 03:00
"""
POD = {"metadata": {"name": "web", "namespace": "apps", "uid": "uid-web"}, "spec": {"containers": [{"name": "c"}]}}
NODE = {"metadata": {"name": "node-a", "labels": {}}}


def test_the_default_now_is_the_fixed_clock_not_the_wall_clock(clock: Clock) -> None:
    policies = load_text(NIGHT_POLICY)
    assert clock.now == parse_timestamp(DEFAULT_NOW)
    assert filter_nodes(policies, POD, [NODE]).passed == ["node-a"]
    clock.now = parse_timestamp("2026-11-21T03:00:00Z")
    result = filter_nodes(policies, POD, [NODE])
    assert {**result.failed, **result.unresolvable} == {"node-a": "night/sleeps-at-three: no pods at 03:00"}
    assert "no pods at 03:00" in explain(policies, POD, [NODE]).render()


def test_the_server_reads_the_same_clock_over_http(clock: Clock, tmp_path: Path) -> None:
    (tmp_path / "night.yaml").write_text(NIGHT_POLICY)
    body: dict[str, Any] = {"Pod": POD, "Nodes": {"items": [NODE]}}
    with serve(create_app(Settings(policies=str(tmp_path / "night.yaml"), cluster="off"))) as url:
        clock.now = parse_timestamp("2026-11-21T03:00:00Z")
        answer = httpx.post(url + "/scheduler/filter", json=body).json()
        assert {**answer["FailedNodes"], **(answer.get("FailedAndUnresolvableNodes") or {})} == {"node-a": "night/sleeps-at-three: no pods at 03:00"}
        assert "no pods at 03:00" in httpx.post(url + "/apis/v1/explain", json=body).json()["text"]
        clock.now = parse_timestamp("2026-11-21T12:00:00Z")
        assert [n["metadata"]["name"] for n in httpx.post(url + "/scheduler/filter", json=body).json()["Nodes"]["items"]] == ["node-a"]
