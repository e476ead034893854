"""Bounded work per request, over real HTTP: bodies that would explode in memory are refused
before parsing, a slow policy cannot hold a request past its deadline, and other requests
keep being answered while one is evaluated."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import orjson

from server.app import create_app
from server.settings import Settings

from .serving import serve

BENCH = Path(__file__).resolve().parents[1] / "bench" / "data"
POLICY = """apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {{name: slow}}
spec:
  failurePolicy: {failure}
  params: {{xs: {xs}}}
  filters:
  - {{name: busy, expression: "params.xs.all(x, params.xs.all(y, x + y >= size(node.metadata.name) - 100))", message: never}}
"""
FAST = """apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: fast}
spec:
  filters:
  - {name: any, expression: "true"}
"""


def whole_node_request(n: int) -> dict[str, Any]:
    node, pod = json.loads((BENCH / "node.json").read_text()), json.loads((BENCH / "pod.json").read_text())
    return {"Pod": pod, "Nodes": {"items": [dict(node, metadata=dict(node["metadata"], name=f"n{i}")) for i in range(n)]}}


def test_a_large_body_of_tiny_values_is_refused_before_parsing_and_a_real_one_of_the_same_size_is_not(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text(FAST)
    with serve(create_app(Settings(policies=str(tmp_path / "p.yaml"), cluster="off"))) as url:
        real = orjson.dumps(whole_node_request(400))
        tiny = b'{"Pod":{},"Nodes":{"items":[' + b"{}," * (len(real) // 3) + b"{}]}}"
        assert abs(len(tiny) - len(real)) < len(real) // 10
        accepted = httpx.post(url + "/scheduler/filter", content=real, headers={"Content-Type": "application/json"}, timeout=30)
        assert accepted.status_code == 200 and len(accepted.json()["Nodes"]["items"]) == 400
        refused = httpx.post(url + "/scheduler/filter", content=tiny, headers={"Content-Type": "application/json"}, timeout=30)
        assert refused.status_code == 413
        message = refused.json()["Error"]
        assert message.startswith(f"request body of {len(tiny):,} bytes holds ")
        assert message.endswith("kpe parses at most 20 times): no kube-scheduler or API server request is shaped like that")


def slow_app(tmp_path: Path, *, failure: str, deadline: float) -> Any:
    (tmp_path / "slow.yaml").write_text(POLICY.format(failure=failure, xs=list(range(250))))
    return create_app(Settings(policies=str(tmp_path / "slow.yaml"), cluster="off", request_deadline_s=deadline))


def request(nodes: int) -> dict[str, Any]:
    return {"Pod": {"metadata": {"name": "p", "namespace": "d"}}, "Nodes": {"items": [{"metadata": {"name": f"n{i}"}} for i in range(nodes)]}}


def test_past_the_deadline_the_nodes_left_are_rejected_under_failure_policy_fail(tmp_path: Path) -> None:
    with serve(slow_app(tmp_path, failure="Fail", deadline=0.2)) as url:
        answer = httpx.post(url + "/scheduler/filter", json=request(400), timeout=60).json()
        overdue = {n: r for n, r in answer["FailedNodes"].items() if "(deadline)" in r}
        assert overdue, "400 nodes of a slow policy cannot all be evaluated in 0.2 s"
        assert set(overdue.values()) == {"slow/(deadline): kpe's deadline of 0.2 s for this request passed before this node was evaluated (--request-deadline-s)"}
        assert len(answer["Nodes"]["items"]) + len(answer["FailedNodes"]) == 400
        metrics = httpx.get(url + "/metrics").text
        assert f'kpe_deadline_overdue_nodes_total{{verb="filter"}} {float(len(overdue))}' in metrics


def test_past_the_deadline_the_nodes_left_pass_under_failure_policy_ignore(tmp_path: Path) -> None:
    with serve(slow_app(tmp_path, failure="Ignore", deadline=0.2)) as url:
        answer = httpx.post(url + "/scheduler/filter", json=request(400), timeout=60).json()
        assert len(answer["Nodes"]["items"]) == 400 and answer["FailedNodes"] == {}


def test_health_is_answered_while_a_slow_request_is_being_evaluated(tmp_path: Path) -> None:
    with serve(slow_app(tmp_path, failure="Fail", deadline=3.0)) as url:
        done: list[float] = []

        def slow() -> None:
            httpx.post(url + "/scheduler/filter", json=request(2000), timeout=60)
            done.append(time.monotonic())

        worker = threading.Thread(target=slow)
        worker.start()
        answered: list[float] = []
        while worker.is_alive():
            if httpx.get(url + "/healthz", timeout=60).text == "ok":
                answered.append(time.monotonic())
            time.sleep(0.05)
        worker.join()
        # Not a timing threshold: only the order. On the event loop, the slow request would
        # have answered first and every health check after it.
        assert done and sum(t < done[0] for t in answered) >= 3
