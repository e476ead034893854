"""Policies as Kubernetes objects (engine/policy/objects.py): an object as the API server returns
it compiles as the same file does, its errors name it with the field path, and the loader's
refusals across policies (KPE404: a shared scheduling gate) hold for files and objects alike."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
import yaml

from engine.errors import PolicyLoadError
from engine.policy.loader import load_text
from engine.policy.objects import ObjectKey, convert, load_objects

from server.cli.main import main

POLICY = """apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata:
  name: pool
spec:
  filters:
  - name: pool
    expression: "node.metadata.?labels[?'pool'].orValue('') == 'a'"
"""


def served(text: str, *, generation: int = 3, **extra: Any) -> dict[str, Any]:
    """``text`` as the API server returns the object made from it: its fields, and its own."""
    obj: dict[str, Any] = yaml.safe_load(text)
    obj["metadata"] |= {"uid": "7d1c", "resourceVersion": "4711", "generation": generation, "creationTimestamp": "2026-11-27T08:00:00Z",
                        "labels": {"kustomize.toolkit.fluxcd.io/name": "policies"},
                        "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"},
                        "managedFields": [{"manager": "kubectl", "operation": "Update"}]}
    obj["status"] = {"observedGeneration": 2}
    obj.update(extra)
    return obj


def test_an_object_keeps_its_name_and_spec_and_leaves_out_what_the_api_server_and_tools_add() -> None:
    converted = convert(served(POLICY))
    assert converted.key == ObjectKey("SchedulingPolicy", "pool") and converted.key.file == "schedulingpolicy/pool"
    assert (converted.generation, converted.uid) == (3, "7d1c")
    assert converted.data == {"apiVersion": "kpe.dev/v1alpha1", "kind": "SchedulingPolicy", "metadata": {"name": "pool"}, "spec": yaml.safe_load(POLICY)["spec"]}


def test_the_objects_of_a_file_serve_the_set_the_file_serves() -> None:
    from_cluster = load_objects([convert(served(POLICY))])
    from_file = load_text(POLICY)
    assert from_cluster.generation == from_file.generation
    assert from_cluster.files == ("schedulingpolicy/pool",) and from_cluster.policies[0].file == "schedulingpolicy/pool"


def test_an_invalid_object_s_errors_name_it_with_the_field_path_and_no_line() -> None:
    bad = served(POLICY.replace("node.metadata", "nodee.metadata"))
    broken = served(POLICY.replace("pool\nspec", "broken\nspec").replace("filters:", "filterz:"))
    with pytest.raises(PolicyLoadError) as raised:
        load_objects([convert(bad), convert(broken)])
    assert raised.value.render() == (
        "schedulingpolicy/broken: error[KPE200] broken: spec: needs at least one of: filters, scores, admission, preemption\n"
        "schedulingpolicy/broken: error[KPE200] broken: spec.filterz: unknown field 'filterz'; allowed here: admission, failurePolicy, "
        "filters, match, mode, params, paramsFrom, preemption, scores, variables\n"
        "schedulingpolicy/pool: error[KPE301] pool: spec.filters[0].expression: undeclared reference to 'nodee'; did you mean 'node'? "
        "(this expression can read: node, nodeInfo, pod, namespaceObject, params, now, dra, counts, variables)\n"
        "    nodee.metadata.?labels[?'pool'].orValue('') == 'a'\n"
        "    ^"
    )


def test_a_reservation_object_compiles_as_its_owners_policy() -> None:
    reservation = {"apiVersion": "kpe.dev/v1alpha1", "kind": "Reservation", "metadata": {"name": "gpus", "generation": 1},
                   "spec": {"slots": 2, "template": {"resources": {"requests": {"cpu": "2 cores"}}}}}
    with pytest.raises(PolicyLoadError) as raised:
        load_objects([convert(reservation)])
    (error,) = raised.value.errors
    assert error.render().splitlines()[0].startswith("reservation/gpus: error[KPE403] gpus: spec.template.resources.requests.cpu: ")
    reservation["spec"]["template"]["resources"]["requests"]["cpu"] = "2"
    assert [p.name for p in load_objects([convert(reservation)]).policies] == ["reservation.gpus"]


def test_an_empty_cluster_is_refused_unless_asked_for() -> None:
    with pytest.raises(PolicyLoadError) as raised:
        load_objects([])
    assert raised.value.render() == (
        "cluster: error[KPE402] no SchedulingPolicy or Reservation in the cluster: with an empty set every node passes every pod; "
        "create one, or pass --allow-empty-policies (KPE_ALLOW_EMPTY_POLICIES=true for kpe serve) if an empty set is what you want"
    )
    assert len(load_objects([], allow_empty=True)) == 0


GATES = """apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: first}
spec:
  admission: {gate: example.com/quota, expression: "true"}
---
apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: second}
spec:
  admission:
    gate: example.com/quota
    expression: "true"
---
apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: third}
spec:
  admission: {expression: "true"}
---
apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: fourth}
spec:
  admission: {gate: kpe.dev/third, expression: "true"}
"""


def test_two_policies_may_not_share_a_scheduling_gate(tmp_path: Path) -> None:
    (tmp_path / "gates.yaml").write_text(GATES)
    out = io.StringIO()
    assert main(["check", str(tmp_path / "gates.yaml")], out=out) == 1
    # The default gate (kpe.dev/<name>) counts too: the clash is then at spec.admission.
    assert out.getvalue().replace(str(tmp_path) + "/", "") == (
        "gates.yaml:12:11: error[KPE404] second: spec.admission.gate: scheduling gate 'example.com/quota' is also the gate of policy "
        "'first' (gates.yaml:5:21); each policy needs a gate of its own\n"
        "gates.yaml:25:21: error[KPE404] fourth: spec.admission.gate: scheduling gate 'kpe.dev/third' is also the gate of policy "
        "'third' (gates.yaml:19:14); each policy needs a gate of its own\n"
        "\n2 errors found.\n"
    )


def test_which_of_two_clashing_objects_is_refused_does_not_depend_on_the_listing_order() -> None:
    first, second = (convert(served(doc)) for doc in GATES.split("---\n")[:2])
    for listed in ([first, second], [second, first]):
        with pytest.raises(PolicyLoadError) as raised:
            load_objects(listed)
        assert [(e.location.file, e.path) for e in raised.value.errors] == [("schedulingpolicy/second", "spec.admission.gate")]
