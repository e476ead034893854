"""Node-name requests (nodeCacheCapable: true) before kpe's cache has synced, and from a
watch break until it has caught up again, get an Error that says so, and /readyz fails:
answered from an empty or stale cache they would be 200s with every node in FailedNodes
("not in kpe's node cache"), or passes on nodes whose change the cache missed, which
kube-scheduler takes as real verdicts. Against the fake API server."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from server.app import create_app
from server.verbs.answer import NOT_CONNECTED, NOT_SYNCED
from server.settings import Settings
from server.state import ServerState

from .fakeapi import FakeApiServer
from .serving import serve

POLICIES = Path(__file__).parent / "cases" / "wire-policies.yaml"
NODES = ["node-1", "node-2"]
POD = {"metadata": {"name": "p", "namespace": "demo", "labels": {"app": "web"}}}
FILTER = {"Pod": POD, "NodeNames": NODES}
PREEMPT = {"Pod": POD, "NodeNameToMetaVictims": {"node-1": {"Pods": [{"UID": "u-1"}], "NumPDBViolations": 0}}}


def wait_for(check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def node(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"gpu": "false"}}, "status": {"allocatable": {"cpu": "4", "pods": "110"}}}


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    with FakeApiServer(bookmark_interval=0.1) as server:
        for name in NODES:
            server.state.add_node(node(name))
        yield server


def app_on(api: FakeApiServer, tmp_path: Path, **settings: Any) -> Any:
    kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
    return create_app(Settings(policies=str(POLICIES), kubeconfig=kubeconfig, cluster="on", gate_resync_s=0, relist_backoff_max_s=0.2, **settings))


def state_of(app: Any) -> ServerState:
    state: ServerState = app.state.kpe
    return state


def answers_normally(url: str) -> None:
    answer = httpx.post(url + "/scheduler/filter", json=FILTER).json()
    assert answer["Error"] == "" and answer["NodeNames"] == NODES


def test_before_the_first_sync_node_name_verbs_answer_with_an_error_that_says_so(api: FakeApiServer, tmp_path: Path) -> None:
    api.state.fail_next(1_000_000, 503, method="GET", path="/api/v1/nodes")
    app = app_on(api, tmp_path)
    with serve(app) as url:
        cache = state_of(app).cache
        assert cache is not None
        wait_for(lambda: "503" in (cache.last_error or ""))
        assert httpx.get(url + "/readyz").status_code == 503
        expected = NOT_SYNCED + f" (last error: {cache.last_error})"
        assert expected.startswith(
            "kpe's node and pod cache has not synced with the API server yet; kpe cannot resolve node names "
            "or victims until it has (its /readyz says when) (last error: nodes: "
        )

        response = httpx.post(url + "/scheduler/filter", json=FILTER)
        assert response.status_code == 200  # kube-scheduler reads a filter's Error from a 200
        assert response.json() == {"Nodes": None, "NodeNames": [], "FailedNodes": {}, "FailedAndUnresolvableNodes": {}, "Error": expected}
        for verb, body in (("prioritize", FILTER), ("preempt", PREEMPT)):
            response = httpx.post(url + f"/scheduler/{verb}", json=body)
            assert (response.status_code, response.json()) == (503, {"Error": expected})
        # Whole-node requests do not need the cache's nodes.
        whole = httpx.post(url + "/scheduler/filter", json={"Pod": POD, "Nodes": {"items": [node("n9")]}}).json()
        assert whole["Error"] == "" and [n["metadata"]["name"] for n in whole["Nodes"]["items"]] == ["n9"]

        api.state.clear_faults()
        wait_for(lambda: httpx.get(url + "/readyz").status_code == 200)
        answers_normally(url)


def test_from_a_watch_break_until_the_cache_has_caught_up_node_name_verbs_answer_with_an_error_and_readyz_fails(api: FakeApiServer, tmp_path: Path) -> None:
    """The cut-off need not last --cache-stale-after-s: a node relabelled while the watch is
    down would be answered from the old labels the moment the break happened."""
    app = app_on(api, tmp_path)
    with serve(app) as url:
        wait_for(lambda: httpx.get(url + "/readyz").status_code == 200)
        answers_normally(url)

        api.state.fail_next(1_000_000, 503)
        api.state.drop_watches()
        wait_for(lambda: httpx.post(url + "/scheduler/filter", json=FILTER).json()["Error"] != "")
        error = httpx.post(url + "/scheduler/filter", json=FILTER).json()["Error"]
        assert re.fullmatch(
            re.escape(NOT_CONNECTED) + r" for \d+ s \((nodes|pods): its (watch|list) failed \(.*\)\) "
            r"\(last error: .*\); not answering node names from it until it has caught up \(its /readyz says when\)",
            error,
        ), error
        response = httpx.post(url + "/scheduler/prioritize", json=FILTER)
        assert response.status_code == 503 and response.json()["Error"].startswith(NOT_CONNECTED)
        ready = httpx.get(url + "/readyz")
        assert ready.status_code == 503 and ready.text.startswith("not ready: node and pod cache not connected to the API server for "), ready.text
        wait_for(lambda: "503" in httpx.get(url + "/readyz").text)  # the retries' answers show up as they come

        api.state.clear_faults()
        wait_for(lambda: httpx.post(url + "/scheduler/filter", json=FILTER).json()["Error"] == "")
        assert httpx.get(url + "/readyz").status_code == 200
        answers_normally(url)


def test_with_cache_stale_after_0_node_name_verbs_answer_from_a_cache_that_is_not_connected(api: FakeApiServer, tmp_path: Path) -> None:
    app = app_on(api, tmp_path, cache_stale_after_s=0)
    with serve(app) as url:
        wait_for(lambda: httpx.get(url + "/readyz").status_code == 200)
        cache = state_of(app).cache
        assert cache is not None
        api.state.fail_next(1_000_000, 503)
        api.state.drop_watches()
        wait_for(lambda: not cache.connected)
        answers_normally(url)
        assert httpx.get(url + "/readyz").status_code == 503  # readiness still tells the truth


def test_a_quiet_cluster_is_not_a_stale_cache_and_a_silent_resumed_watch_is_relisted(tmp_path: Path) -> None:
    """No event and no bookmark for longer than --cache-stale-after-s while the watches are
    open: the cache is current. A watch resumed after a break that then says nothing could be
    missing what changed meanwhile: the informer relists rather than wait for a bookmark."""
    with FakeApiServer(bookmark_interval=3600) as api:
        for name in NODES:
            api.state.add_node(node(name))
        app = app_on(api, tmp_path, cache_stale_after_s=0.3)
        with serve(app) as url:
            wait_for(lambda: httpx.get(url + "/readyz").status_code == 200)
            cache = state_of(app).cache
            assert cache is not None
            time.sleep(0.5)
            assert cache.lag_seconds("node") > 0.3 and cache.connected
            answers_normally(url)

            lists = len([r for r in api.state.requests_to("GET", "/api/v1/nodes") if "watch" not in r.query])
            api.state.drop_watches()
            wait_for(lambda: not cache.connected)
            wait_for(lambda: cache.connected and httpx.get(url + "/readyz").status_code == 200)
            relisted = [r for r in api.state.requests_to("GET", "/api/v1/nodes") if "watch" not in r.query and r.query.get("limit") != "1"]
            assert len(relisted) == lists + 1  # the probe's one-node lists aside
            metrics = state_of(app).metrics
            assert metrics.registry.get_sample_value("kpe_watch_restarts_total", {"kind": "node", "reason": "silent"}) == 1
            answers_normally(url)
