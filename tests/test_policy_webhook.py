"""The validating webhook for SchedulingPolicy and Reservation writes: what kpe check refuses
is refused with kpe's coded message naming the field, the rest admitted; a bad review gets
a 4xx JSON error."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from server.app import create_app
from server.settings import Settings

from .serving import serve

SERVED = """apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: served}
spec:
  filters:
  - {name: any, expression: "true"}
"""


def policy(**spec: Any) -> dict[str, Any]:
    """A SchedulingPolicy as the API server hands it to a webhook: with what the server adds."""
    return {
        "apiVersion": "kpe.dev/v1alpha1",
        "kind": "SchedulingPolicy",
        "metadata": {
            "name": "gpu-only",
            "uid": "4b1b4d58-0ad4-4a8a-9b0a-3f0e2d0a1c11",
            "generation": 1,
            "creationTimestamp": "2026-11-27T09:00:00Z",
            "managedFields": [{"manager": "kubectl-client-side-apply", "operation": "Update", "apiVersion": "kpe.dev/v1alpha1"}],
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"},
        },
        "spec": spec or {"filters": [{"name": "gpu", "expression": "node.metadata.?labels[?'gpu'].orValue('') == 'true'"}]},
    }


def review(obj: Any, *, operation: str = "CREATE", old: Any = None, kind: str = "SchedulingPolicy", group: str = "kpe.dev") -> dict[str, Any]:
    request: dict[str, Any] = {
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
        "kind": {"group": group, "version": "v1alpha1", "kind": kind},
        "resource": {"group": group, "version": "v1alpha1", "resource": kind.lower() + "s"},
        "name": "gpu-only",
        "operation": operation,
        "userInfo": {"username": "alice"},
        "object": obj,
        "oldObject": old,
        "dryRun": False,
    }
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp: Path = tmp_path_factory.mktemp("policy-webhook")
    (tmp / "policies.yaml").write_text(SERVED)
    with serve(create_app(Settings(policies=str(tmp / "policies.yaml"), cluster="off", max_body_bytes=64 * 1024))) as address:
        yield address


def post(url: str, body: Any) -> httpx.Response:
    return httpx.post(url + "/admission/policies?timeout=10s", json=body)


def test_a_policy_kpe_check_accepts_is_admitted_whatever_metadata_the_api_server_added(url: str) -> None:
    answer = post(url, review(policy()))
    assert answer.status_code == 200
    assert answer.json() == {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {"uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "allowed": True}}


def test_a_policy_with_a_cel_type_error_is_refused_with_its_field_path_and_code(url: str) -> None:
    broken = policy(filters=[{"name": "gpu", "expression": "node.metadata.name + 1 == 2"}])
    response = post(url, review(broken)).json()["response"]
    message = (
        "spec.filters[0].expression: KPE302 found no matching overload for '_+_' applied to '(string, int)'; "
        "a string is not a number: convert it with int(), double() or quantity()"
    )
    assert response == {
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
        "allowed": False,
        "status": {
            "code": 422,
            "reason": "Invalid",
            "message": message,
            "details": {
                "group": "kpe.dev",
                "kind": "SchedulingPolicy",
                "name": "gpu-only",
                "causes": [{"reason": "FieldValueInvalid", "field": "spec.filters[0].expression", "message": message.split(": ", 1)[1]}],
            },
        },
    }


def test_every_schema_error_of_a_policy_is_named_one_a_line(url: str) -> None:
    broken = policy(mode="Audi", filters=[{"name": "gpu", "expresion": "true"}])
    status = post(url, review(broken)).json()["response"]["status"]
    assert status["message"].split("\n") == [
        "spec.filters[0]: KPE200 missing required field 'expression'",
        "spec.filters[0].expresion: KPE200 unknown field 'expresion'; allowed here: expression, message, messageExpression, name, unresolvable",
        "spec.mode: KPE200 must be one of Enforce, Audit, not 'Audi'",
    ]


def test_an_expression_over_the_served_cost_limit_is_refused_as_kpe_check_refuses_it(url: str) -> None:
    costly = "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10].all(a, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10].all(b, node.metadata.name.matches('^' + string(a * b) + '.*x.*y.*z$')))"
    status = post(url, review(policy(filters=[{"name": "slow", "expression": costly}]))).json()["response"]["status"]
    assert status["message"].startswith("spec.filters[0].expression: KPE306 ")


def test_a_broken_reservation_is_refused_too(url: str) -> None:
    reservation = {"apiVersion": "kpe.dev/v1alpha1", "kind": "Reservation", "metadata": {"name": "ml", "uid": "u"}, "spec": {"slots": -1}}
    status = post(url, review(reservation, kind="Reservation")).json()["response"]["status"]
    assert status["message"].split("\n") == [
        "spec: KPE200 missing required field 'template'",
        "spec.slots: KPE200 -1 is less than the minimum of 0",
    ]


def test_an_update_that_keeps_a_broken_spec_is_admitted_with_its_problems_as_warnings(url: str) -> None:
    broken = policy(filters=[{"name": "gpu", "expression": "node.metadata.name + 1 == 2"}])
    relabelled = copy.deepcopy(broken)
    relabelled["metadata"]["labels"] = {"team": "ml"}
    response = post(url, review(relabelled, operation="UPDATE", old=broken)).json()["response"]
    assert response["allowed"] is True
    assert response["warnings"] == [
        "SchedulingPolicy/gpu-only is admitted with its spec unchanged, which kpe refuses: spec.filters[0].expression: KPE302 found no matching "
        "overload for '_+_' applied to '(string, int)'; a string is not a number: convert it with int(), double() or quantity()"
    ]
    changed = copy.deepcopy(broken)
    changed["spec"]["filters"][0]["name"] = "gpu2"
    assert post(url, review(changed, operation="UPDATE", old=broken)).json()["response"]["allowed"] is False


@pytest.mark.parametrize(
    "request_of",
    [
        lambda: review(policy(filters=[{"name": "x", "expression": "1"}]), operation="DELETE"),
        lambda: review({"kind": "Pod"}, kind="Pod", group=""),
        lambda: review(policy(filters=[{"name": "x", "expression": "1"}]), group="example.com"),
    ],
    ids=["deletes", "pods", "another group's kind"],
)
def test_deletes_and_other_kinds_are_admitted_unchecked(url: str, request_of: Any) -> None:
    assert post(url, request_of()).json()["response"] == {"uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "allowed": True}


@pytest.mark.parametrize(
    ("body", "status", "error"),
    [
        (b"{oops", 400, "malformed JSON"),
        (b'{"kind": "Pod", "apiVersion": "v1"}', 400, "expected kind AdmissionReview, apiVersion admission.k8s.io/v1; got kind 'Pod', apiVersion 'v1'"),
        (b'{"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": {}}', 400, "AdmissionReview.request.uid is missing"),
        (b"[]", 400, "expected an AdmissionReview object"),
        (b'{"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": {"uid": "u", "operation": "CREATE", '
         b'"kind": {"group": "kpe.dev", "kind": "SchedulingPolicy"}, "object": "text"}}', 400,
         "AdmissionReview.request.object: expected the SchedulingPolicy object, got str"),
        (b'{"padding": "' + b"x" * 70_000 + b'"}', 413, "over the limit of 65536 bytes (--max-body-bytes)"),
    ],
    ids=["not JSON", "not a review", "no uid", "not an object", "object not a mapping", "too large"],
)
def test_a_review_kpe_cannot_read_gets_a_4xx_json_error(url: str, body: bytes, status: int, error: str) -> None:
    answer = httpx.post(url + "/admission/policies", content=body, headers={"content-type": "application/json"})
    assert answer.status_code == status and error in answer.json()["error"], answer.text


def test_policy_reviews_are_counted_by_result(url: str) -> None:
    post(url, review(policy(filters=[{"name": "x", "expression": "1"}])))
    text = httpx.get(url + "/metrics").text
    assert 'kpe_policy_reviews_total{result="refused"}' in text
    assert 'kpe_requests_total{code="200",verb="policy-admission"}' in text


def test_a_policy_whose_rule_fails_on_ordinary_pods_is_admitted_with_the_lint_as_a_warning(url: str) -> None:
    sloppy = policy(filters=[{"name": "web", "expression": "pod.metadata.labels.app == 'web'"}])
    answer = post(url, review(sloppy))
    assert answer.status_code == 200
    assert answer.json()["response"] == {
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
        "allowed": True,
        "warnings": [
            "spec.filters[0].expression: KPE600 pod.metadata.labels['app'] fails on a pod without the field 'labels' or the label 'app' "
            "(under failurePolicy Fail, the node is rejected); read it as pod.metadata.?labels[?'app'].orValue(''), or test "
            "has(pod.metadata.labels) && 'app' in pod.metadata.labels first"
        ],
    }


def test_an_object_too_slow_to_check_within_the_api_server_s_timeout_is_refused_with_how_to_split_it(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from engine.policy.compiler import CompileDeadline
    from server.admission import policies

    budgets: list[float] = []

    def passed_at_once(seconds: float) -> CompileDeadline:
        budgets.append(seconds)
        return CompileDeadline(at=0.0, budget=seconds, clock=lambda: 1.0)  # the clock is past it before the first expression

    monkeypatch.setattr(policies.CompileDeadline, "after", staticmethod(passed_at_once))
    answer = httpx.post(url + "/admission/policies?timeout=5s", json=review(policy()))
    assert budgets == [4.0], "80% of the API server's 5 s"
    assert answer.json()["response"]["status"]["message"] == (
        "spec: KPE309 checking this object's expressions takes longer than the policy webhook may wait (4 s of the API server's "
        "timeoutSeconds); split its rules into several policies (kpe check shows what a policy costs to load)"
    )
    assert answer.json()["response"]["allowed"] is False
