"""``kpe explain pod`` shows what kpe's preempt verb really kept out of the pod's preemption
and by which policy's rule: through a running kpe from its decision log, from the cluster
from the PreemptionVetoed Event kpe posted on the pod; the same lines either way."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from engine.reports.diagnosis.diagnose import preemption_vetoes
from engine.reports.diagnosis.view import headline, preemption_lines, render_markdown
from server.app import create_app
from server.settings import Settings

from .livecluster import POLICIES, Live, live_cluster
from .serving import serve

VETOES = [
    "preemption: kpe kept node cpu-1 out: gpus/gpu-node: node has no GPUs",
    "preemption: kpe kept node gpu-2 out: gpus/preemption.victim: victim ml/critical may not be preempted",
]


@pytest.fixture
def live(tmp_path: Path) -> Iterator[Live]:
    with live_cluster(tmp_path) as found:
        yield found


@pytest.fixture
def kpe_url(live: Live) -> Iterator[str]:
    app = create_app(Settings(policies=str(POLICIES), kubeconfig=live.kubeconfig, cluster="on", gate_resync_s=0, controllers="requeue"))
    with serve(app) as url:
        deadline = time.monotonic() + 10
        while httpx.get(url + "/readyz").status_code != 200:
            assert time.monotonic() < deadline, "kpe did not sync"
            time.sleep(0.05)
        yield url


def preempt_train(live: Live, url: str) -> None:
    """kube-scheduler's preempt call for ml/train: ml/big's eviction proposed on cpu-1 (no GPUs
    whatever is evicted) and ml/critical's on gpu-2 (a victim the gpus policy spares)."""
    get = live.api.state.get_pod
    victims = {"cpu-1": [get("ml", "big")], "gpu-2": [get("ml", "critical")]}
    request = {"Pod": get("ml", "train"), "NodeNameToVictims": {n: {"Pods": ps, "NumPDBViolations": 0} for n, ps in victims.items()}}
    answer = httpx.post(url + "/scheduler/preempt", json=request)
    assert answer.json() == {"NodeNameToMetaVictims": {}}


def text(live: Live, *argv: str) -> str:
    code, out = live.kpe("explain", "pod", "ml/train", *argv)
    assert code == 0, out
    return out


def test_through_a_running_kpe_the_nodes_its_preempt_verb_kept_out_are_named_with_the_rule(live: Live, kpe_url: str) -> None:
    assert not any(line.startswith("preemption:") for line in text(live, "--server", kpe_url).splitlines())  # no preempt call yet
    preempt_train(live, kpe_url)
    out = text(live, "--server", kpe_url)
    assert [line for line in out.splitlines() if line.startswith("preemption:")] == VETOES
    data = json.loads(text(live, "--server", kpe_url, "--output", "json"))
    assert data["preemption"]["vetoed"] == {
        "cpu-1": "gpus/gpu-node: node has no GPUs",
        "gpu-2": "gpus/preemption.victim: victim ml/critical may not be preempted",
    }
    assert data["preemption"]["source"].startswith("kpe's decision log, preempt at ")


def test_from_the_cluster_the_same_vetoes_are_read_from_the_event_kpe_posted_on_the_pod(live: Live, kpe_url: str) -> None:
    preempt_train(live, kpe_url)
    deadline = time.monotonic() + 10
    while not [e for e in live.api.state.events if e["reason"] == "PreemptionVetoed"]:
        assert time.monotonic() < deadline, "no PreemptionVetoed event"
        time.sleep(0.05)
    out = text(live, "--kubeconfig", live.kubeconfig, "--policies", str(POLICIES))
    assert [line for line in out.splitlines() if line.startswith("preemption:")] == VETOES
    markdown = text(live, "--kubeconfig", live.kubeconfig, "--policies", str(POLICIES), "--output", "markdown")
    assert f"- {VETOES[0]}" in markdown.splitlines()


def test_many_vetoed_nodes_are_named_first_few_then_counted_and_unchecked_ones_said_so() -> None:
    rejected = {f"n{i}": "still rejected with the victims evicted: accel-only/accelerated: node is not accelerated" for i in range(1, 9)}
    rejected["n9"] = "no victims: preemption would not free anything on this node"  # no rule's veto
    unchecked = {"ghost": "accel-only: kpe does not know node ghost, so its filters cannot be checked after the evictions (failurePolicy Ignore keeps the node)"}
    part = preemption_vetoes(rejected, unchecked=unchecked, source="test")
    assert preemption_lines(part) == [
        *(f"preemption: kpe kept node n{i} out: accel-only/accelerated: node is not accelerated" for i in range(1, 6)),
        "preemption: kpe kept 3 more nodes out",
        "preemption: kpe kept node ghost in unchecked: accel-only: kpe does not know node ghost, so its filters cannot be checked "
        "after the evictions (failurePolicy Ignore keeps the node)",
    ]
    data: dict[str, Any] = {"pod": "demo/urgent", "generation": "g", "nodes": [], "preemption": part}
    assert headline(data)[-2] == "preemption: kpe kept node ghost in unchecked: " + unchecked["ghost"]
    assert "- preemption: kpe kept 3 more nodes out" in render_markdown(data).splitlines()
    assert preemption_lines(None) == [] and preemption_lines(preemption_vetoes({}, source="test")) == []
