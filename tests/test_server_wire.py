"""Every whole-node capture from a real kube-scheduler, replayed against kpe over real
HTTP, answered in the shape the scheduler accepted and with the policies' decisions."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from server.app import create_app
from server.settings import Settings

from .serving import serve

WIRE = Path(__file__).resolve().parent / "data" / "fixtures" / "kube-scheduler-wire"
POLICIES = Path(__file__).parent / "cases" / "wire-policies.yaml"
CAPTURES = sorted(WIRE.glob("*.json"))
WHOLE_NODE = [p for p in CAPTURES if "-18081-" in p.name]


def capture(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


@pytest.fixture(scope="module")
def kpe() -> Iterator[str]:
    app = create_app(Settings(policies=str(POLICIES), cluster="off", max_body_bytes=2_000_000, bind=True))
    with serve(app) as url:
        yield url


def expected_filter(pod: dict[str, Any], node: dict[str, Any]) -> tuple[str, str]:
    """An independent reading of wire-policies.yaml for one pod and node."""
    labels = pod["metadata"].get("labels", {})
    if labels.get("app") == "web" and node["metadata"]["labels"].get("gpu") == "true":
        return "unresolvable", "web-off-gpu/no-gpu: web pods never run on GPU nodes"
    if labels.get("team") == "c" and node["metadata"]["name"] == "node-3":
        # The rule cannot read nodeInfo, so no eviction could help: unresolvable, though not declared so.
        return "unresolvable", "team-c-placement/not-node-3: team c stays off node-3"
    return "pass", ""


def expected_scores(nodes: list[dict[str, Any]]) -> dict[str, int]:
    """prefer-zone-1's two rules (weight 1 each, clamped to 0..100) averaged per node, then
    spread over the request's nodes to 0..10 (docs/guides/scores.md); all alike: 0."""
    raw = {}
    for node in nodes:
        zone = 100 if node["metadata"]["labels"].get("topology.kubernetes.io/zone") == "zone-1" else 0
        number = min(100, int(node["metadata"]["name"][5:]) * 30)
        raw[node["metadata"]["name"]] = (zone + number) / 2
    low, high = min(raw.values()), max(raw.values())
    return {name: 0 if high == low else int((value - low) / (high - low) * 10 + 0.5) for name, value in raw.items()}


@pytest.mark.skipif(not CAPTURES, reason=f"wire captures not found at {WIRE}")
@pytest.mark.parametrize("path", WHOLE_NODE, ids=[p.name for p in WHOLE_NODE])
def test_captured_scheduler_request_gets_an_answer_the_scheduler_accepts(kpe: str, path: Path) -> None:
    data = capture(path)
    request, known_good = data["request"], data["response"]
    response = httpx.post(kpe + data["path"], content=json.dumps(request), headers={"Content-Type": "application/json"})
    assert response.status_code == 200, response.text
    assert response.headers["x-kpe-policy-generation"]
    answer = response.json()
    verb = data["path"].rsplit("/", 1)[1]
    if verb == "filter":
        assert set(known_good) <= set(answer)  # every field the accepted answer had, same names
        pod, nodes = request["Pod"], request["Nodes"]["items"]
        verdicts = {n["metadata"]["name"]: expected_filter(pod, n) for n in nodes}
        assert [n["metadata"]["name"] for n in answer["Nodes"]["items"]] == [n for n, (v, _) in verdicts.items() if v == "pass"]
        assert answer["Nodes"]["items"] == [n for n in nodes if verdicts[n["metadata"]["name"]][0] == "pass"]
        assert answer["FailedNodes"] == {n: r for n, (v, r) in verdicts.items() if v == "fail"}
        assert answer["FailedAndUnresolvableNodes"] == {n: r for n, (v, r) in verdicts.items() if v == "unresolvable"}
        assert answer["NodeNames"] is None and answer["Error"] == ""
    elif verb == "prioritize":
        assert [set(entry) for entry in answer] == [{"Host", "Score"}] * len(known_good)
        scores = expected_scores(request["Nodes"]["items"])
        assert answer == [{"Host": n["metadata"]["name"], "Score": scores[n["metadata"]["name"]]} for n in request["Nodes"]["items"]]
    else:
        victims = request["NodeNameToVictims"]
        assert set(answer) == {"NodeNameToMetaVictims"}
        expected = {
            node: [p["metadata"]["uid"] for p in entry["Pods"]]
            for node, entry in victims.items()
            if entry["Pods"] and len(entry["Pods"]) <= 3 and all(p["metadata"]["name"] != "batch-1" for p in entry["Pods"])
        }
        got = {node: [p["UID"] for p in entry["Pods"]] for node, entry in answer["NodeNameToMetaVictims"].items()}
        assert got == expected
        for node, entry in answer["NodeNameToMetaVictims"].items():
            assert entry["NumPDBViolations"] == victims[node]["NumPDBViolations"]


def test_keys_are_accepted_in_any_case_and_answered_in_pascal_case(kpe: str) -> None:
    request = capture(WHOLE_NODE[0])["request"]
    lowered = {"pod": request["Pod"], "NODES": request["Nodes"], "nodenames": None}
    answer = httpx.post(kpe + "/scheduler/filter", json=lowered).json()
    assert set(answer) == {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}
    answered = len(answer["Nodes"]["items"]) + len(answer["FailedNodes"]) + len(answer["FailedAndUnresolvableNodes"])
    assert answered == len(request["Nodes"]["items"])


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        (b"{not json", 400, "malformed JSON"),
        (b"", 400, "request body is empty"),
        (b"[]", 400, "filter request body must be a JSON object, not an array"),
        (b'{"Nodes": {"items": []}}', 400, "Pod is missing"),
        (b'{"Pod": {}, "Nodes": {"items": [{"metadata": {}}]}}', 400, "Nodes.items[0] must be a node object with metadata.name"),
        (b'{"Pod": {}, "NodeNames": "node-1"}', 400, "NodeNames must be an array of strings"),
        (b'{"Pod": {}}', 400, "neither Nodes nor NodeNames"),
    ],
)
def test_malformed_requests_get_a_4xx_that_says_what_is_wrong(kpe: str, body: bytes, status: int, message: str) -> None:
    response = httpx.post(kpe + "/scheduler/filter", content=body)
    assert response.status_code == status
    assert message in response.json()["Error"]


def test_oversized_bodies_are_refused_before_they_are_read(kpe: str) -> None:
    response = httpx.post(kpe + "/scheduler/filter", content=b" " * 2_000_001)
    assert response.status_code == 413
    assert "over the limit of 2000000 bytes" in response.json()["Error"]


def test_node_names_without_cluster_access_get_a_clear_error(kpe: str) -> None:
    request = capture(WIRE / "0001-18082-filter.json")["request"]
    answer = httpx.post(kpe + "/scheduler/filter", json=request).json()
    assert answer["NodeNames"] == [] and "no cluster access" in answer["Error"]
    assert httpx.post(kpe + "/scheduler/bind", json=capture(WIRE / "0002-18082-bind.json")["request"]).json()["Error"].startswith("kpe has no cluster access")


def test_decisions_and_policies_are_introspectable(kpe: str) -> None:
    request = capture(WIRE / "0017-18081-filter.json")["request"]
    httpx.post(kpe + "/scheduler/filter", json=request)
    recent = httpx.get(kpe + "/apis/v1/decisions", params={"verb": "filter", "pod": "demo/batch-4"}).json()["decisions"]
    assert recent and recent[0]["unresolvable"] == {"node-3": "team-c-placement/not-node-3: team c stays off node-3"}
    policies = httpx.get(kpe + "/apis/v1/policies").json()
    assert [p["name"] for p in policies["policies"]] == ["prefer-zone-1", "protect-batch-1", "team-c-placement", "web-off-gpu"]
    assert policies["lastLoad"]["ok"] is True
    routes = {r["path"] for r in httpx.get(kpe + "/apis/v1/__services__").json()["routes"]}
    assert {"/scheduler/filter", "/scheduler/prioritize", "/scheduler/preempt", "/scheduler/bind", "/scheduler/admit", "/metrics"} <= routes


def test_metrics_count_requests_rules_and_generation(kpe: str) -> None:
    httpx.post(kpe + "/scheduler/filter", json=capture(WIRE / "0003-18081-filter.json")["request"])
    text = httpx.get(kpe + "/metrics").text
    assert 'kpe_requests_total{code="200",verb="filter"}' in text
    assert 'kpe_rule_evaluations_total{kind="filter",policy="web-off-gpu",rule="no-gpu"}' in text
    assert "kpe_policy_generation_info{generation=" in text
    assert "kpe_request_duration_seconds_bucket" in text


def test_metrics_report_the_cpu_seconds_and_resident_memory_of_kpes_process(kpe: str) -> None:
    # What sizes kpe's CPU request (docs/operations.md, CPU; the dashboard's CPU panels).
    families = {f.name: f for f in text_string_to_metric_families(httpx.get(kpe + "/metrics").text)}
    assert families["process_cpu_seconds"].type == "counter"
    assert families["process_cpu_seconds"].samples[0].value > 0
    assert families["process_resident_memory_bytes"].samples[0].value > 10 * 2**20


def test_explain_endpoint_returns_the_table_for_a_pod(kpe: str) -> None:
    request = capture(WIRE / "0003-18081-filter.json")["request"]
    report = httpx.post(kpe + "/apis/v1/explain", json=request).json()
    verdicts = {n["node"]: n["verdict"] for n in report["nodes"]}
    assert verdicts == {"node-1": "pass", "node-2": "pass", "node-3": "unresolvable"}
    assert "web-off-gpu/no-gpu" in report["text"]


def test_without_cluster_access_explain_and_filter_agree_on_rules_that_read_node_info() -> None:
    request = json.loads((Path(__file__).resolve().parent.parent / "docs" / "examples" / "filter-request.json").read_text())
    with serve(create_app(Settings(policies=str(Path(__file__).resolve().parent.parent / "policies"), cluster="off"))) as url:  # the shipped policies
        answer = httpx.post(url + "/scheduler/filter", json=request).json()
        report = httpx.post(url + "/apis/v1/explain", json=request).json()
    explained = {n["node"]: n["reason"] for n in report["nodes"] if n["verdict"] != "pass"}
    assert explained == {**answer["FailedNodes"], **answer["FailedAndUnresolvableNodes"]}
    assert any("no value for variable 'nodeInfo'" in reason for reason in explained.values())


def test_the_bind_verb_when_off_says_how_to_turn_it_on() -> None:
    binding = {"PodName": "web-1", "PodNamespace": "demo", "PodUID": "0b7e4c9a", "Node": "node-1"}
    with serve(create_app(Settings(policies=str(POLICIES), cluster="off"))) as url:
        response = httpx.post(url + "/scheduler/bind", json=binding)
        elsewhere = httpx.post(url + "/scheduler/unbind", json=binding)
    assert response.status_code == 404
    assert response.json() == {"Error": "kpe's bind verb is off: start kpe with --bind (KPE_BIND=true) to serve it"}
    assert (elsewhere.status_code, elsewhere.json()) == (404, {"Error": "POST /scheduler/unbind: Not Found"})
