"""The mutating admission webhook over real HTTPS with a generated CA, fed the
AdmissionReview a real kube-apiserver sent (fixtures/kube-apiserver-wire)."""

from __future__ import annotations

import base64
import copy
import json
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trustme

from server.app import create_app
from server.cli.serve import uvicorn_options
from server.settings import Settings

from .serving import serve

CAPTURE = Path(__file__).resolve().parent / "data" / "fixtures" / "kube-apiserver-wire" / "mutating-admission-review-pod-create.json"
POLICIES = """apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: ml-quota}
spec:
  match: {podSelector: {matchLabels: {team: ml}}}
  admission:
    gate: example.com/ml-quota
    expression: "pods.size() < 100"
---
apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: trial}
spec:
  mode: Audit
  admission: {expression: "false"}
---
apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: everyone}
spec:
  admission: {expression: "true"}
"""


@pytest.fixture(scope="module")
def webhook(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, ssl.SSLContext]]:
    tmp = tmp_path_factory.mktemp("webhook")
    (tmp / "policies.yaml").write_text(POLICIES)
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert.private_key_pem.write_to_path(str(tmp / "tls.key"))
    cert.cert_chain_pems[0].write_to_path(str(tmp / "tls.crt"))
    ca.cert_pem.write_to_path(str(tmp / "ca.crt"))
    settings = Settings(policies=str(tmp / "policies.yaml"), cluster="off", controllers="gates", tls_cert=str(tmp / "tls.crt"), tls_key=str(tmp / "tls.key"))
    options = {k: v for k, v in uvicorn_options(settings).items() if k.startswith("ssl")}
    with serve(create_app(settings), **options) as url:
        yield url, ssl.create_default_context(cafile=str(tmp / "ca.crt"))


def captured_review() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(CAPTURE.read_text())
    return data


def post(webhook: tuple[str, ssl.SSLContext], review: Any) -> httpx.Response:
    url, context = webhook
    return httpx.post(url + "/admission/pods?timeout=10s", json=review, verify=context)


def patch_of(answer: dict[str, Any]) -> list[dict[str, Any]]:
    response = answer["response"]
    assert response["patchType"] == "JSONPatch"
    patch: list[dict[str, Any]] = json.loads(base64.b64decode(response["patch"]))
    return patch


def test_pod_create_gets_one_gate_per_matching_enforce_policy(webhook: tuple[str, ssl.SSLContext]) -> None:
    review = captured_review()["request"]
    answer = post(webhook, review).json()
    accepted_shape = captured_review()["response"]
    assert set(answer) == set(accepted_shape) and answer["apiVersion"] == "admission.k8s.io/v1"
    assert answer["response"]["uid"] == review["request"]["uid"] and answer["response"]["allowed"] is True
    assert patch_of(answer) == [
        {"op": "add", "path": "/spec/schedulingGates", "value": [{"name": "kpe.dev/everyone"}, {"name": "example.com/ml-quota"}]},
        # The captured pod has annotations: the gates kpe added are recorded in one more.
        {"op": "add", "path": "/metadata/annotations/kpe.dev~1gates", "value": "kpe.dev/everyone,example.com/ml-quota"},
    ]


def test_gates_are_appended_to_gates_the_pod_already_has_and_never_repeated(webhook: tuple[str, ssl.SSLContext]) -> None:
    review = captured_review()["request"]
    review["request"]["object"]["spec"]["schedulingGates"] = [{"name": "other.io/hold"}, {"name": "kpe.dev/everyone"}]
    del review["request"]["object"]["metadata"]["annotations"]
    assert patch_of(post(webhook, review).json()) == [
        {"op": "add", "path": "/spec/schedulingGates/-", "value": {"name": "example.com/ml-quota"}},
        {"op": "add", "path": "/metadata/annotations", "value": {"kpe.dev/gates": "example.com/ml-quota"}},
    ]
    review["request"]["object"]["spec"]["schedulingGates"].append({"name": "example.com/ml-quota"})
    assert "patch" not in post(webhook, review).json()["response"]


@pytest.mark.parametrize(
    "change",
    [
        lambda r: r["request"].__setitem__("operation", "UPDATE"),
        lambda r: r["request"]["object"]["spec"].__setitem__("nodeName", "node-1"),
        lambda r: r["request"]["kind"].__setitem__("kind", "Deployment"),
    ],
    ids=["updates", "pods with a node", "other kinds"],
)
def test_updates_bound_pods_and_other_kinds_pass_untouched(webhook: tuple[str, ssl.SSLContext], change: Any) -> None:
    review = copy.deepcopy(captured_review()["request"])
    change(review)
    response = post(webhook, review).json()["response"]
    assert response == {"uid": review["request"]["uid"], "allowed": True}


def test_a_review_kpe_cannot_decode_gets_a_clear_error(webhook: tuple[str, ssl.SSLContext]) -> None:
    url, context = webhook
    bad = httpx.post(url + "/admission/pods", content=b"{oops", verify=context)
    assert bad.status_code == 400 and "malformed JSON" in bad.json()["error"]
    wrong = post(webhook, {"kind": "Pod", "apiVersion": "v1"})
    assert wrong.status_code == 400 and "expected kind AdmissionReview" in wrong.json()["error"]
    no_uid = post(webhook, {"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": {}})
    assert no_uid.status_code == 400 and "request.uid is missing" in no_uid.json()["error"]


def test_webhook_metrics_count_reviews_and_gates(webhook: tuple[str, ssl.SSLContext]) -> None:
    post(webhook, captured_review()["request"])
    url, context = webhook
    text = httpx.get(url + "/metrics", verify=context).text
    assert 'kpe_admission_reviews_total{result="gated"}' in text
    assert 'kpe_gates_added_total{policy="ml-quota"}' in text
    assert 'kpe_audit_would_reject_total{kind="admission",policy="trial",rule="admission"}' in text
    assert 'kpe_requests_total{code="200",verb="admission"}' in text and 'kpe_request_duration_seconds_count{verb="admission"}' in text


# -- routing pods to kpe's own scheduler (--scheduler-name) -------------------------------------

ROUTING_POLICIES = """apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: ml-nodes}
spec:
  match: {podSelector: {matchLabels: {team: ml}}}
  filters:
  - name: ml-pool
    expression: "node.metadata.?labels[?'pool'].orValue('') == 'ml'"
---
apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: everyone}
spec:
  admission: {expression: "true"}
"""
ROUTE = {"op": "add", "path": "/spec/schedulerName", "value": "kpe-scheduler"}


@pytest.fixture(scope="module")
def routing_webhook(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, ssl.SSLContext]]:
    tmp = tmp_path_factory.mktemp("routing-webhook")
    (tmp / "policies.yaml").write_text(ROUTING_POLICIES)
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert.private_key_pem.write_to_path(str(tmp / "tls.key"))
    cert.cert_chain_pems[0].write_to_path(str(tmp / "tls.crt"))
    ca.cert_pem.write_to_path(str(tmp / "ca.crt"))
    settings = Settings(
        policies=str(tmp / "policies.yaml"), cluster="off", controllers="gates", tls_cert=str(tmp / "tls.crt"), tls_key=str(tmp / "tls.key"),
        scheduler_name="kpe-scheduler",
    )  # fmt: skip
    assert settings.validate() == []
    options = {k: v for k, v in uvicorn_options(settings).items() if k.startswith("ssl")}
    with serve(create_app(settings), **options) as url:
        yield url, ssl.create_default_context(cafile=str(tmp / "ca.crt"))


def test_a_pod_a_scheduling_policy_matches_is_routed_to_kpe_s_own_scheduler(routing_webhook: tuple[str, ssl.SSLContext]) -> None:
    review = captured_review()["request"]
    # The API server fills in the default scheduler before it calls the webhook.
    assert review["request"]["object"]["spec"]["schedulerName"] == "default-scheduler"
    assert patch_of(post(routing_webhook, review).json()) == [
        {"op": "add", "path": "/spec/schedulingGates", "value": [{"name": "kpe.dev/everyone"}]},
        {"op": "add", "path": "/metadata/annotations/kpe.dev~1gates", "value": "kpe.dev/everyone"},
        ROUTE,
    ]
    url, context = routing_webhook
    pod = review["request"]["object"]["metadata"]
    [decision] = httpx.get(url + "/apis/v1/decisions", params={"verb": "webhook", "pod": f"gated/{pod['name']}", "limit": "1"}, verify=context).json()["decisions"]
    assert decision["scheduler"] == "kpe-scheduler" and decision["routedBy"] == ["ml-nodes"]


@pytest.mark.parametrize(
    ("scheduler", "routed"),
    [(None, True), ("", True), ("default-scheduler", True), ("volcano", False), ("kpe-scheduler", False)],
    ids=["no name", "empty", "the default", "another scheduler", "already kpe's"],
)
def test_only_a_pod_that_left_the_choice_to_the_cluster_is_routed(routing_webhook: tuple[str, ssl.SSLContext], scheduler: str | None, routed: bool) -> None:
    review = captured_review()["request"]
    spec = review["request"]["object"]["spec"]
    spec["schedulingGates"] = [{"name": "kpe.dev/everyone"}]  # so that routing is the only change left
    spec.pop("schedulerName")
    if scheduler is not None:
        spec["schedulerName"] = scheduler
    response = post(routing_webhook, review).json()["response"]
    assert (patch_of({"response": response}) if "patch" in response else []) == ([ROUTE] if routed else [])


def test_a_pod_only_admission_policies_match_keeps_the_default_scheduler(routing_webhook: tuple[str, ssl.SSLContext]) -> None:
    review = captured_review()["request"]
    review["request"]["object"]["metadata"]["labels"] = {"team": "web"}
    patch = patch_of(post(routing_webhook, review).json())
    assert patch and ROUTE not in patch, "its gate applies whichever scheduler places it"


def test_without_the_setting_no_pod_is_routed(webhook: tuple[str, ssl.SSLContext]) -> None:
    assert not any(op["path"] == "/spec/schedulerName" for op in patch_of(post(webhook, captured_review()["request"]).json()))


@pytest.mark.parametrize("name", ["default-scheduler", "Kpe-Scheduler", "kpe_scheduler", "-kpe", "kpe..scheduler"])
def test_the_scheduler_name_must_be_one_of_kpe_s_own_that_a_pod_can_name(name: str) -> None:
    problems = Settings(policies="policies", scheduler_name=name).validate()
    assert any(p.startswith("--scheduler-name must be a lowercase DNS subdomain") for p in problems), problems
    assert Settings(policies="policies", scheduler_name="gpu.kpe-scheduler").validate() == []
