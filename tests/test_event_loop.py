"""The event loop stays free while policies are slow: a filter or prioritize that needs
evaluating runs on the worker thread unless its equivalence class is measured cheap enough to
fit the inline budget, so probes, metrics and the admission webhook keep answering whatever
the policies cost."""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

import engine.equivalence.filtering as memo_filtering
import engine.equivalence.scoring as memo_scoring
from engine.decisions.scoring import score_node
from server.app import create_app
from server.settings import Settings

from .fakeapi import FakeApiServer
from .serving import serve

CAPTURE = Path(__file__).resolve().parent / "data" / "fixtures" / "kube-apiserver-wire" / "mutating-admission-review-pod-create.json"
NODES = [f"node-{i}" for i in range(32)]
APPS = [f"app-{i}" for i in range(6)]
# What one node's evaluation takes, for every node of every class, filter and score alike.
SLOW_S = 0.2
POLICIES = """apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: slow}
spec:
  failurePolicy: Ignore
  # Each rule reads the node's name, so every node is a kind of its own and evaluated
  # (a class judges each kind of node once: engine.equivalence.memo.ClassMemo.alike).
  filters:
  - {name: by-app, expression: "pod.metadata.labels['app'] != '' && node.metadata.name != ''", message: no app}
  scores:
  - {name: flat, expression: "node.metadata.name != '' ? 50 : 0"}
---
apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: gated}
spec:
  admission: {gate: example.com/gated, expression: "true"}
"""
# The poller runs in its own process, as the kubelet and the API server do: in the test's
# process it would take turns at the interpreter with the server it measures. One
# thread an endpoint, so a slow answer of one does not thin out the calls of the others.
POLLER = """
import http.client, json, sys, threading, time
port, seconds, review = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3].encode()
calls = {"healthz": ("GET", "/healthz", None), "metrics": ("GET", "/metrics", None), "webhook": ("POST", "/admission/pods?timeout=10s", review)}
took = {name: [] for name in calls}
end = time.monotonic() + seconds

def poll(name):
    method, path, body = calls[name]
    while time.monotonic() < end:
        start = time.perf_counter()
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        connection.request(method, path, body=body, headers={"Content-Type": "application/json"})
        answer = connection.getresponse()
        answer.read()
        connection.close()
        assert answer.status == 200, (path, answer.status)
        took[name].append(time.perf_counter() - start)
        time.sleep(0.02)

threads = [threading.Thread(target=poll, args=(name,)) for name in calls]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(json.dumps(took))
"""
DURATION_S = 8.0
IDLE_S = 3.0
SLO_S = 0.1  # the bound on a probe's or webhook call's p99 while filters run


def go_json(value: Any) -> bytes:
    """JSON as kube-scheduler writes it (compact, keys in struct order): the prioritize that
    follows a filter is then expected, and kpe works its answer out ahead on the event loop."""
    return json.dumps(value, separators=(",", ":")).encode()


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[math.ceil(0.99 * len(ordered)) - 1]


@dataclass
class Run:
    """What a few seconds of scheduling with a slow policy did."""

    sent: list[int]  # the number of nodes of each filter
    threads: list[str]  # the thread each node evaluation ran on
    took: dict[str, list[float]]  # seconds each call of the poller took, by endpoint
    idle: dict[str, list[float]]  # the same before any filter was sent

    def bound(self, endpoint: str) -> float:
        """The issue's 100 ms on top of the p99 the machine gave the same call with nothing
        evaluated: what a decision may add, whatever else the machine is running meanwhile."""
        return SLO_S + p99(self.idle[endpoint])

    def summary(self) -> str:
        off = [name for name in self.threads if not name.startswith("kpe-evaluation")]
        return (
            f"{len(self.sent)} filters of {min(self.sent, default=0)} to {max(self.sent, default=0)} nodes; "
            f"{len(off)} of {len(self.threads)} node evaluations off the worker thread ({sorted(set(off))}); "
            + "; ".join(
                f"/{name} p99 {p99(t) * 1000:.0f} ms (idle {p99(self.idle[name]) * 1000:.0f} ms), max {max(t) * 1000:.0f} ms over {len(t)} calls"
                for name, t in self.took.items()
            )
        )


def slow_kpe(tmp_path: Path) -> Iterator[str]:
    (tmp_path / "slow.yaml").write_text(POLICIES)
    with FakeApiServer(bookmark_interval=1.0) as api:
        for name in NODES:
            api.state.add_node({"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}})
        # A short deadline: each request evaluates a few nodes and leaves the rest overdue (not
        # remembered), so misses keep coming for classes already measured, not only new ones.
        settings = Settings(policies=str(tmp_path / "slow.yaml"), kubeconfig=api.write_kubeconfig(tmp_path / "kubeconfig"), cluster="on", request_deadline_s=0.5)
        with serve(create_app(settings)) as url:
            deadline = time.monotonic() + 10
            while httpx.get(url + "/readyz").status_code != 200:
                assert time.monotonic() < deadline, "kpe did not sync"
                time.sleep(0.05)
            yield url


def slow_and_recorded(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every node evaluation of the filter and score layers made SLOW_S slower, and the name of
    the thread each ran on. A sleep, not CEL that computes that long: a CPU-bound evaluation
    on the worker thread would hold the interpreter, and on a shared 2-core machine how soon
    the event loop then gets it back is the machine's noise, not whether kpe put a decision on
    the loop (tests/test_request_limits.py keeps health answered beside CPU-bound CEL)."""
    threads: list[str] = []

    def slowed(real: Callable[..., Any]) -> Callable[..., Any]:
        def evaluate(*args: Any, **kwargs: Any) -> Any:
            threads.append(threading.current_thread().name)
            time.sleep(SLOW_S)
            return real(*args, **kwargs)

        return evaluate

    monkeypatch.setattr(memo_filtering, "_remember", slowed(memo_filtering._remember))
    monkeypatch.setattr(memo_scoring, "score_node", slowed(score_node))
    return threads


def schedule(url: str, seed: int, stop: threading.Event, sent: list[int], failures: list[str]) -> None:
    """kube-scheduler's calls for pod after pod, each of 1 to 32 nodes, until ``stop``."""
    rng = random.Random(seed)
    with httpx.Client(base_url=url, timeout=30) as client:
        while not stop.is_set():
            names = rng.sample(NODES, rng.randint(1, 32))
            pod = {"metadata": {"name": f"p-{seed}-{len(sent)}", "namespace": "d", "labels": {"app": rng.choice(APPS)}}, "spec": {"containers": [{"name": "c"}]}}
            answer = client.post("/scheduler/filter", content=go_json({"Pod": pod, "Nodes": None, "NodeNames": names}))
            if answer.status_code != 200 or answer.json().get("Error"):
                failures.append(answer.text)
                return
            sent.append(len(names))
            passed = answer.json()["NodeNames"]
            if len(passed) >= 2:
                scored = client.post("/scheduler/prioritize", content=go_json({"Pod": pod, "Nodes": None, "NodeNames": passed}))
                if scored.status_code != 200:
                    failures.append(scored.text)
                    return


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """A poller in another process calls /healthz, /metrics and the webhook for IDLE_S, then
    again for DURATION_S while two threads send filters and prioritizes."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        threads = slow_and_recorded(monkeypatch)
        kpe = slow_kpe(tmp_path_factory.mktemp("slow"))
        url = next(kpe)
        try:
            stop, sent, failures = threading.Event(), list[int](), list[str]()
            review = json.dumps(json.loads(CAPTURE.read_text())["request"])
            poll = [sys.executable, "-c", POLLER, url.rpartition(":")[2]]
            idle = subprocess.run([*poll, str(IDLE_S), review], stdout=subprocess.PIPE, text=True, check=True, timeout=IDLE_S + 60).stdout
            poller = subprocess.Popen([*poll, str(DURATION_S), review], stdout=subprocess.PIPE, text=True)
            schedulers = [threading.Thread(target=schedule, args=(url, seed, stop, sent, failures)) for seed in (1, 2)]
            for thread in schedulers:
                thread.start()
            try:
                out, _ = poller.communicate(timeout=DURATION_S + 60)
            finally:
                stop.set()
                for thread in schedulers:
                    thread.join(timeout=60)
            assert poller.returncode == 0 and not failures, failures[:1]
            return Run(sent, threads, json.loads(out), json.loads(idle))
        finally:
            next(kpe, None)


def test_with_a_slow_policy_on_1_to_32_nodes_every_node_is_evaluated_on_the_worker_thread(run: Run) -> None:
    assert all(name.startswith("kpe-evaluation") for name in run.threads), run.summary()
    assert len(run.sent) >= 10 and len(run.threads) >= 10, f"the slow policy was evaluated all along: {run.summary()}"
    assert min(run.sent) <= 8 and max(run.sent) >= 24, run.summary()


@pytest.mark.parametrize("endpoint", ["healthz", "metrics"])
def test_while_a_slow_policy_is_evaluated_probes_and_metrics_answer_within_100_ms_at_the_99th_percentile(run: Run, endpoint: str) -> None:
    """Where each node is evaluated is asserted by thread (above); this test measures time
    because what the issue asks for is a latency: the kubelet's probe times out after 2 s
    (deploy/deployment.yaml) and restarts kpe. The poller is another process, as the kubelet
    is. 100 ms is the issue's number, allowed on top of the p99 the machine gives the same call
    with no filter running (2 to 60 ms on a 2-core test machine with other work on it), so the
    noise of a shared machine does not fail it; a decision on the event loop adds seconds."""
    took = run.took[endpoint]
    assert len(took) >= 20 and p99(took) <= run.bound(endpoint), run.summary()


def test_while_a_slow_policy_is_evaluated_the_admission_webhook_answers_within_100_ms_at_the_99th_percentile(run: Run) -> None:
    """Measured for the reason the probe is: the API server gives the webhook 5 s
    (deploy/webhook.yaml), then admits the pod without its gates (failurePolicy Ignore)."""
    took = run.took["webhook"]
    assert len(took) >= 20 and p99(took) <= run.bound("webhook"), run.summary()
