"""Generated request bodies against every verb over real HTTP: never a 5xx, never a dead worker."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from server.app import create_app
from server.settings import Settings

from .serving import serve

POLICIES = Path(__file__).parent / "cases" / "wire-policies.yaml"
VERBS = ["filter", "prioritize", "preempt", "bind", "admit"]

scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False), st.text(max_size=12))
json_values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)), max_leaves=20)
names = st.sampled_from(["node-1", "node-2", "", "x" * 300])
labels = st.dictionaries(st.sampled_from(["gpu", "team", "app", "topology.kubernetes.io/zone"]), st.one_of(st.text(max_size=5), st.integers(), st.none()), max_size=3)
meta = st.fixed_dictionaries({}, optional={"name": st.one_of(names, st.integers()), "labels": st.one_of(labels, json_values), "uid": st.text(max_size=5), "namespace": st.text(max_size=5)})
k8s_object = st.fixed_dictionaries({}, optional={"metadata": st.one_of(meta, json_values), "spec": json_values, "status": json_values})
body = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {},
        optional={
            "Pod": st.one_of(k8s_object, json_values),
            "pod": k8s_object,
            "Nodes": st.one_of(st.fixed_dictionaries({}, optional={"items": st.one_of(st.lists(k8s_object, max_size=3), json_values)}), json_values),
            "NodeNames": st.one_of(st.lists(names, max_size=3), json_values),
            "NodeNameToVictims": st.one_of(st.dictionaries(names, st.fixed_dictionaries({}, optional={"Pods": st.lists(k8s_object, max_size=2), "NumPDBViolations": json_values})), json_values),
            "NodeNameToMetaVictims": st.one_of(st.dictionaries(names, st.fixed_dictionaries({}, optional={"Pods": st.lists(st.fixed_dictionaries({}, optional={"UID": json_values}), max_size=2)})), json_values),
            "PodName": json_values,
            "PodNamespace": json_values,
            "PodUID": json_values,
            "Node": json_values,
        },
    ),
)


@pytest.fixture(scope="module")
def kpe() -> Iterator[str]:
    with serve(create_app(Settings(policies=str(POLICIES), cluster="off", bind=True))) as url:
        yield url


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(verb=st.sampled_from(VERBS), payload=body)
def test_generated_bodies_never_get_a_server_error(kpe: str, verb: str, payload: Any) -> None:
    response = httpx.post(f"{kpe}/scheduler/{verb}", content=json.dumps(payload))
    assert response.status_code < 500, response.text
    assert isinstance(response.json(), (dict, list))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(verb=st.sampled_from(VERBS), raw=st.binary(max_size=64))
def test_random_bytes_get_a_4xx_with_a_message(kpe: str, verb: str, raw: bytes) -> None:
    response = httpx.post(f"{kpe}/scheduler/{verb}", content=raw)
    assert response.status_code < 500
    if response.status_code >= 400:
        assert response.json()["Error"]


def test_the_worker_still_answers_after_the_fuzzing(kpe: str) -> None:
    assert httpx.get(kpe + "/healthz").text == "ok"


review_request = st.fixed_dictionaries(
    {"uid": st.just("f0e4c2b1")},
    optional={
        "kind": st.one_of(st.just({"group": "", "version": "v1", "kind": "Pod"}), json_values),
        "operation": st.one_of(st.sampled_from(["CREATE", "UPDATE"]), json_values),
        "namespace": json_values,
        "object": st.one_of(k8s_object, json_values),
    },
)
review = st.one_of(
    st.fixed_dictionaries({"apiVersion": st.just("admission.k8s.io/v1"), "kind": st.just("AdmissionReview"), "request": review_request}),
    st.fixed_dictionaries({"apiVersion": st.just("admission.k8s.io/v1"), "kind": st.just("AdmissionReview")}, optional={"request": json_values}),
    json_values,
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(payload=review)
def test_generated_admission_reviews_never_get_a_server_error(kpe: str, payload: Any) -> None:
    response = httpx.post(f"{kpe}/admission/pods", content=json.dumps(payload))
    assert response.status_code < 500, response.text
    answer = response.json()
    if response.status_code == 200:
        assert answer["kind"] == "AdmissionReview" and answer["response"]["uid"] == payload["request"]["uid"]
    else:
        assert "error" in answer


# A SchedulingPolicy or Reservation whose every part may be any JSON value, as the policy
# webhook may be sent one (the CRDs' schemas refuse most of these before the webhook is
# called, but kpe must not rely on it): refused or admitted, never a 5xx.
rule = st.fixed_dictionaries({}, optional={"name": st.one_of(names, json_values), "expression": st.one_of(st.sampled_from(["true", "node.metadata.name", "1 +", "pod.spec.x.y"]), json_values),
                                          "message": json_values, "messageExpression": json_values, "unresolvable": json_values})
policy_spec = st.fixed_dictionaries({}, optional={"mode": st.one_of(st.sampled_from(["Audit", "Enforce"]), json_values), "filters": st.one_of(st.lists(rule, max_size=2), json_values),
                                                  "scores": json_values, "admission": st.one_of(rule, json_values), "match": json_values, "params": json_values,
                                                  "variables": st.one_of(st.lists(rule, max_size=2), json_values), "slots": json_values, "template": json_values})
kpe_object = st.fixed_dictionaries(
    {"apiVersion": st.one_of(st.just("kpe.dev/v1alpha1"), json_values), "kind": st.sampled_from(["SchedulingPolicy", "Reservation"])},
    optional={"metadata": st.one_of(meta, json_values), "spec": st.one_of(policy_spec, json_values), "status": json_values},
)
policy_review = st.fixed_dictionaries({
    "apiVersion": st.just("admission.k8s.io/v1"), "kind": st.just("AdmissionReview"),
    "request": st.fixed_dictionaries(
        {"uid": st.just("u-1"), "kind": st.fixed_dictionaries({"group": st.just("kpe.dev"), "kind": st.sampled_from(["SchedulingPolicy", "Reservation"])})},
        optional={"operation": st.sampled_from(["CREATE", "UPDATE"]), "object": st.one_of(kpe_object, json_values), "oldObject": st.one_of(kpe_object, json_values)},
    ),
})


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(payload=st.one_of(policy_review, review))
def test_generated_policy_reviews_never_get_a_server_error(kpe: str, payload: Any) -> None:
    response = httpx.post(f"{kpe}/admission/policies", content=json.dumps(payload))
    assert response.status_code < 500, response.text
    answer = response.json()
    if response.status_code == 200:
        assert answer["kind"] == "AdmissionReview" and answer["response"]["uid"] == payload["request"]["uid"]
    else:
        assert "error" in answer


# -- wrong types where the engine reads ----------------------------------------------
# A well-formed pod, node and victim, with one value anywhere the engine or a policy
# reads replaced by any JSON value, sent to every route that takes it: never a 5xx,
# always a JSON body. Against the shipped policies too, which read containers,
# requests, limits and nodeInfo.

SHIPPED = Path(__file__).resolve().parent.parent / "policies"
Path_ = tuple[str | int, ...]


def base_pod() -> dict[str, Any]:
    container = {"name": "c", "image": "x", "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}}
    return {
        "metadata": {"name": "p", "namespace": "ml-train", "uid": "u-1", "labels": {"team": "ml", "app": "web"}, "annotations": {"a": "b"}},
        "spec": {"containers": [container], "initContainers": [dict(container, name="i")], "overhead": {"cpu": "100m"}, "priority": 0},
        "status": {"phase": "Running"},
    }


def base_node() -> dict[str, Any]:
    return {
        "metadata": {"name": "node-1", "labels": {"topology.kubernetes.io/zone": "zone-1", "gpu": "true", "pool": "ml"}},
        "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]},
        "status": {"allocatable": {"cpu": "8", "nvidia.com/gpu": "4"}, "capacity": {"cpu": "8", "nvidia.com/gpu": "4"}},
    }


POD_PATHS: list[Path_] = [
    ("metadata",), ("metadata", "labels"), ("metadata", "labels", "team"), ("metadata", "namespace"), ("metadata", "name"),
    ("metadata", "uid"), ("metadata", "annotations"), ("metadata", "annotations", "a"), ("spec",), ("spec", "containers"),
    ("spec", "containers", 0), ("spec", "containers", 0, "resources"), ("spec", "containers", 0, "resources", "requests"),
    ("spec", "containers", 0, "resources", "requests", "cpu"), ("spec", "containers", 0, "resources", "limits"),
    ("spec", "initContainers"), ("spec", "initContainers", 0, "resources", "requests"), ("spec", "overhead"), ("spec", "priority"),
    ("spec", "nodeName"), ("spec", "schedulingGates"), ("status",), ("status", "phase"),
]  # fmt: skip
NODE_PATHS: list[Path_] = [
    ("metadata", "labels"), ("metadata", "labels", "gpu"), ("metadata", "annotations"), ("spec",), ("spec", "taints"), ("spec", "taints", 0),
    ("status",), ("status", "allocatable"), ("status", "allocatable", "cpu"), ("status", "capacity"),
]  # fmt: skip


def put(obj: dict[str, Any], path: Path_, value: Any) -> dict[str, Any]:
    target: Any = obj
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return obj


def bodies(route: str, pod: dict[str, Any], node: dict[str, Any], victim: dict[str, Any]) -> Any:
    if route in ("filter", "prioritize", "explain"):
        return {"Pod": pod, "Nodes": {"items": [node]}}
    if route == "preempt":
        return {"Pod": pod, "NodeNameToVictims": {"node-1": {"Pods": [victim], "NumPDBViolations": 0}}}
    if route == "admit":
        return {"Pod": pod}
    request = {"uid": "r-1", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "operation": "CREATE", "namespace": "ml-train", "object": pod}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


ROUTES = {"filter": "/scheduler/filter", "prioritize": "/scheduler/prioritize", "preempt": "/scheduler/preempt", "admit": "/scheduler/admit",
          "explain": "/apis/v1/explain", "webhook": "/admission/pods"}  # fmt: skip


@pytest.fixture(scope="module")
def shipped() -> Iterator[str]:
    with serve(create_app(Settings(policies=str(SHIPPED), cluster="off"))) as url:
        yield url


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    route=st.sampled_from(sorted(ROUTES)),
    where=st.one_of(
        st.tuples(st.just("pod"), st.sampled_from(POD_PATHS)),
        st.tuples(st.just("node"), st.sampled_from(NODE_PATHS)),
        st.tuples(st.just("victim"), st.sampled_from(POD_PATHS)),
    ),
    value=json_values,
)
def test_a_wrong_type_anywhere_the_engine_reads_gets_a_json_answer_below_500_on_every_route(
    kpe: str, shipped: str, route: str, where: tuple[str, Path_], value: Any
) -> None:
    target, path = where
    pod, node, victim = base_pod(), base_node(), base_pod()
    put({"pod": pod, "node": node, "victim": victim}[target], path, value)
    for url in (kpe, shipped):
        response = httpx.post(url + ROUTES[route], content=json.dumps(bodies(route, pod, node, victim)))
        assert response.status_code < 500, response.text
        assert isinstance(response.json(), (dict, list)), response.text


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(field=st.sampled_from(["PodName", "PodNamespace", "PodUID", "Node"]), value=json_values)
def test_a_wrong_type_in_a_bind_request_gets_a_json_answer_below_500(kpe: str, field: str, value: Any) -> None:
    body = {"PodName": "p", "PodNamespace": "demo", "PodUID": "u-1", "Node": "node-1", field: value}
    response = httpx.post(kpe + "/scheduler/bind", content=json.dumps(body))
    assert response.status_code < 500, response.text
    assert isinstance(response.json()["Error"], str)
