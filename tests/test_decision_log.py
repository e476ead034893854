"""The decision log (/apis/v1/decisions) is bounded in bytes as well as entries: a
whole-node filter that names every node with its reason is cut to its first rejected
nodes (saying how many were left out), and the oldest decisions go first."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from server.app import create_app
from server.telemetry.decisionlog import DecisionLog
from server.settings import Settings

from .serving import serve

POLICY = """apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: only-ok-nodes}
spec:
  filters:
  - {name: ok, expression: "node.metadata.name.startsWith('ok')", message: "this node's name does not start with ok, so no pod goes there"}
"""
BUDGET = 64 * 1024  # an entry keeps at most BUDGET / 16 = 4 KiB


def request(pod: str, rejected: int) -> dict[str, Any]:
    nodes = [{"metadata": {"name": "ok-1"}}] + [{"metadata": {"name": f"node-{i:04d}"}} for i in range(rejected)]
    return {"Pod": {"metadata": {"name": pod, "namespace": "demo"}}, "Nodes": {"items": nodes}}


@pytest.fixture
def kpe(tmp_path: Path) -> Iterator[str]:
    (tmp_path / "policy.yaml").write_text(POLICY)
    app = create_app(Settings(policies=str(tmp_path), cluster="off", decision_log_bytes=BUDGET, max_body_bytes=10_000_000))
    with serve(app) as url:
        yield url


def decisions(url: str) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = httpx.get(url + "/apis/v1/decisions", params={"limit": 10_000}).json()["decisions"]
    return entries


def test_a_decision_over_its_share_keeps_its_first_failed_nodes_and_counts_the_rest(kpe: str) -> None:
    answer = httpx.post(kpe + "/scheduler/filter", json=request("big", 1000)).json()
    # The rule cannot read nodeInfo, so no eviction could help: the nodes are unresolvable.
    assert len(answer["FailedAndUnresolvableNodes"]) == 1000  # the answer is whole; only the log is cut
    [entry] = decisions(kpe)
    kept = entry["unresolvable"]
    assert 0 < len(kept) < 1000
    assert list(kept) == [f"node-{i:04d}" for i in range(len(kept))]  # the first ones, in order
    assert entry["leftOut"] == {"unresolvable": 1000 - len(kept)}
    assert entry["passed"] == 1 and entry["pod"] == "demo/big"
    assert len(orjson.dumps(entry)) <= BUDGET // 16


def test_the_oldest_decisions_go_first_when_the_bytes_run_out(kpe: str) -> None:
    for i in range(40):
        httpx.post(kpe + "/scheduler/filter", json=request(f"pod-{i}", 1000))
    entries = decisions(kpe)
    assert sum(len(orjson.dumps(e)) for e in entries) <= BUDGET
    assert len(entries) < 40  # fewer than the 1,000 entries --decision-log-size allows
    assert [e["pod"] for e in entries] == [f"demo/pod-{i}" for i in range(39, 39 - len(entries), -1)]  # the newest, newest first


def test_one_huge_decision_does_not_evict_the_small_ones(kpe: str) -> None:
    for i in range(5):
        httpx.post(kpe + "/scheduler/filter", json=request(f"small-{i}", 2))
    httpx.post(kpe + "/scheduler/filter", json=request("huge", 20_000))
    assert [e["pod"] for e in decisions(kpe)] == ["demo/huge"] + [f"demo/small-{i}" for i in range(4, -1, -1)]


def test_the_entry_count_still_bounds_the_log() -> None:
    log = DecisionLog(3, max_bytes=BUDGET)
    for i in range(5):
        log.record("filter", f"demo/p{i}", "g", failed={})
    assert [e["pod"] for e in log.recent()] == ["demo/p4", "demo/p3", "demo/p2"]
    assert log.bytes == sum(len(orjson.dumps(e)) for e in log.recent())


def test_the_byte_budget_is_the_memory_the_log_takes() -> None:
    import gc
    import tracemalloc

    budget = 1024 * 1024
    log = DecisionLog(100_000, max_bytes=budget)
    tracemalloc.start()
    try:
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        for i in range(3000):
            # What a filter records: each rejected node with its policy's reason.
            failed = {f"node-{i % 7}-{n:04d}": f"team-node-pools/dedicated-pool: node pool is dedicated to team t{n % 30}, not t{i % 30}" for n in range(40)}
            log.record("filter", f"team-{i % 30}/app-{i:05d}", "1fd46f8ad65f", passed=420 - 40, failed=failed)
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert log.bytes <= budget
    # Kept as Python dicts, the same entries took 2.3 times their JSON.
    assert grown <= 1.25 * budget, f"{grown:,} bytes for a budget of {budget:,}"
    assert log.recent(limit=1)[0]["pod"] == "team-29/app-02999" and log.recent(limit=1)[0]["seq"] == 3000
