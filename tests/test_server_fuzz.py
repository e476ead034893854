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
    with serve(create_app(Settings(policies=str(POLICIES), cluster="off"))) as url:
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
