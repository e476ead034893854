"""Wrong types where the engine reads a pod or a node are a 400 naming the field, on
every route; an unexpected exception on any route is a JSON 500 and the connection
stays usable (it used to be a plain-text 500, then a closed connection)."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx
import pytest

from server.introspection import endpoints as introspection
from server.admission import webhook
from server.app import create_app
from server.settings import Settings

from .serving import serve

SHIPPED = Path(__file__).resolve().parent.parent / "policies"
N1 = {"items": [{"metadata": {"name": "n1"}}]}


@pytest.fixture(scope="module")
def kpe() -> Iterator[str]:
    with serve(create_app(Settings(policies=str(SHIPPED), cluster="off"))) as url:
        yield url


def review(pod: dict[str, Any]) -> dict[str, Any]:
    request = {"uid": "r-1", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "operation": "CREATE", "namespace": "demo", "object": pod}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


CASES = [
    ("/scheduler/filter", {"Pod": {"metadata": {"labels": 5}}, "Nodes": N1},
     {"Error": "invalid filter request: Pod.metadata.labels must be an object of strings, got int"}),
    ("/scheduler/filter", {"Pod": {"metadata": {"labels": {"team": 5}}}, "Nodes": N1},
     {"Error": "invalid filter request: Pod.metadata.labels.team must be a string, got int"}),
    ("/scheduler/prioritize", {"Pod": {"metadata": {"namespace": 5}}, "Nodes": N1},
     {"Error": "invalid prioritize request: Pod.metadata.namespace must be a string, got int"}),
    ("/scheduler/preempt", {"Pod": {"spec": []}, "NodeNameToVictims": {}},
     {"Error": "invalid preempt request: Pod.spec must be an object, got array"}),
    ("/scheduler/preempt", {"Pod": {}, "NodeNameToVictims": {"n1": {"Pods": [{"metadata": "v"}]}}},
     {"Error": "invalid preempt request: NodeNameToVictims[n1].Pods[0].metadata must be an object, got string"}),
    ("/scheduler/admit", {"Pod": {"spec": {"containers": [5]}}},
     {"Error": "invalid admit request: Pod.spec.containers[0] must be an object, got int"}),
    ("/scheduler/admit", {"Pod": {"spec": {"containers": [{"resources": {"requests": []}}]}}},
     {"Error": "invalid admit request: Pod.spec.containers[0].resources.requests must be an object of quantities, got array"}),
    ("/scheduler/filter", {"Pod": {"spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": {}}}}]}}, "Nodes": N1},
     {"Error": "invalid filter request: Pod.spec.containers[0].resources.limits['nvidia.com/gpu'] must be a quantity string, got object"}),
    ("/scheduler/filter", {"Pod": {}, "Nodes": {"items": [{"metadata": {"name": "n1", "labels": 5}}]}},
     {"Error": "invalid filter request: Nodes.items[0] (n1).metadata.labels must be an object of strings, got int"}),
    ("/scheduler/prioritize", {"Pod": {}, "Nodes": {"items": [{"metadata": {"name": "n1"}, "status": {"allocatable": {"nvidia.com/gpu": True}}}]}},
     {"Error": "invalid prioritize request: Nodes.items[0] (n1).status.allocatable['nvidia.com/gpu'] must be a quantity string, got bool"}),
    ("/scheduler/filter", {"Pod": {}, "Nodes": {"items": [{"metadata": {"name": "n1"}, "spec": {"taints": ["NoSchedule"]}}]}},
     {"Error": "invalid filter request: Nodes.items[0] (n1).spec.taints[0] must be an object, got string"}),
    ("/apis/v1/explain", {"Pod": {"metadata": {"labels": 5}}, "Nodes": N1},
     {"error": "invalid explain request: Pod.metadata.labels must be an object of strings, got int"}),
    ("/admission/pods", review({"metadata": {"labels": 5}}),
     {"error": "AdmissionReview.request.object.metadata.labels must be an object of strings, got int"}),
]  # fmt: skip


@pytest.mark.parametrize(("path", "body", "answer"), CASES, ids=[f"{p}:{json.dumps(b)[:60]}" for p, b, _ in CASES])
def test_a_wrong_type_is_a_400_that_names_the_field(kpe: str, path: str, body: Any, answer: dict[str, str]) -> None:
    response = httpx.post(kpe + path, json=body)
    assert (response.status_code, response.json()) == (400, answer)


def exchange(conn: http.client.HTTPConnection, method: str, path: str, body: bytes = b"") -> tuple[int, Any]:
    conn.request(method, path, body=body or None, headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    return response.status, json.loads(response.read())


def test_an_unexpected_exception_on_an_introspection_route_is_a_json_500_on_a_connection_that_stays_open(kpe: str, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("boom")

    monkeypatch.setattr(introspection, "explain", broken)
    address = urlparse(kpe)
    conn = http.client.HTTPConnection(address.hostname or "", address.port)
    status, answer = exchange(conn, "POST", "/apis/v1/explain", json.dumps({"Pod": {}, "Nodes": N1}).encode())
    assert (status, answer) == (500, {"error": "kpe internal error in /apis/v1/explain: RuntimeError: boom"})
    sock = conn.sock
    status, answer = exchange(conn, "GET", "/apis/v1/policies")
    assert status == 200 and answer["policies"]
    assert conn.sock is sock  # the same connection: kpe did not close it after the error
    conn.close()


def test_an_unexpected_exception_in_the_webhook_is_a_json_500(kpe: str, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: Any) -> Any:
        raise RuntimeError("boom")

    monkeypatch.setattr(webhook, "check_pod", broken)  # called on every pod the webhook reviews
    response = httpx.post(kpe + "/admission/pods", json=review({}))
    assert (response.status_code, response.json()) == (500, {"error": "kpe internal error in the admission webhook: RuntimeError: boom"})


def test_an_unexpected_exception_in_a_verb_is_a_json_500_with_the_request_id_on_a_connection_that_stays_open(kpe: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from server.verbs import handlers as extender

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("boom")

    monkeypatch.setattr(extender, "filter_nodes", broken)
    address = urlparse(kpe)
    conn = http.client.HTTPConnection(address.hostname or "", address.port)
    conn.request("POST", "/scheduler/filter", body=json.dumps({"Pod": {}, "Nodes": N1}).encode(), headers={"X-Request-Id": "trace-7"})
    response = conn.getresponse()
    assert (response.status, json.loads(response.read())) == (500, {"Error": "kpe internal error in filter: RuntimeError: boom"})
    assert response.getheader("x-request-id") == "trace-7" and response.getheader("content-type") == "application/json"
    sock = conn.sock
    status, answer = exchange(conn, "POST", "/scheduler/prioritize", json.dumps({"Pod": {}, "Nodes": N1}).encode())
    assert status == 200 and answer == [{"Host": "n1", "Score": 0}]
    assert conn.sock is sock
    conn.close()
