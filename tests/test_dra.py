"""Dynamic Resource Allocation: what kpe keeps of the resource.k8s.io/v1 objects, what
``dra`` holds, and what kube.podDevices, kube.nodeDevices and kube.nodeFreeDevices count,
with Kubernetes' own objects (tests/data/dra/) as fixtures; and the server's watch of them
where the API server does not serve resource.k8s.io/v1."""

from __future__ import annotations

import asyncio
import copy
import logging
from pathlib import Path
from typing import Any

import pytest
import yaml

from engine import cel
from engine.cel.ext.kube import node_devices, node_free_devices, pod_devices
from engine.cluster.devices import EMPTY_DRA, dra_of, view
from engine.cluster.nodeinfo import node_info_map
from engine.policy.loader import load
from engine.reports.diagnosis.diagnose import diagnose
from engine.reports.diagnosis.view import render_text
from server.cluster.devices import Devices, reads_dra
from server.cluster.kube import ApiError

DATA = Path(__file__).parent / "data" / "dra"
ROOT = Path(__file__).resolve().parent.parent
NODE = "scheduler-perf-dra-0"
DRIVER = "test-driver.cdi.k8s.io"


def fixture(name: str) -> dict[str, Any]:
    found: dict[str, Any] = yaml.safe_load((DATA / name).read_text())
    return found


def slice_() -> dict[str, Any]:
    return fixture("resourceslice-basic-devices.yaml")


def claim_template(name: str = "resourceclaimtemplate-for-two-devices.yaml", namespace: str = "ml") -> dict[str, Any]:
    template = fixture(name)
    template["metadata"]["namespace"] = namespace
    return template


def pod(name: str = "p0", namespace: str = "ml", node: str = "", claim_status: str = "") -> dict[str, Any]:
    found = fixture("pod-with-claim-template.yaml")
    found["metadata"] = {"name": name, "namespace": namespace}
    if node:
        found["spec"]["nodeName"] = node
    if claim_status:
        found["status"] = {"resourceClaimStatuses": [{"name": "resource", "resourceClaimName": claim_status}]}
    return found


def allocated_claim(name: str, devices: list[str], namespace: str = "ml", pool: str = "resourceslice-0") -> dict[str, Any]:
    claim = fixture("resourceclaim.yaml")
    claim["metadata"] = {"name": name, "namespace": namespace}
    claim["spec"]["devices"]["requests"][0]["exactly"]["count"] = len(devices)
    claim["status"] = {"allocation": {"devices": {"results": [
        {"request": "req-0", "driver": DRIVER, "pool": pool, "device": d} for d in devices]}}}
    return claim


def node(allocatable: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": NODE}, "status": {"allocatable": allocatable or {"cpu": "4"}}}


# -- what the cache keeps -------------------------------------------------------------------


def test_a_resource_slice_is_kept_with_only_what_counting_its_devices_needs() -> None:
    kept = view("resourceslices", slice_())
    assert set(kept) == {"metadata", "spec"} and kept["metadata"] == {"name": "resourceslice-0"}
    assert {k: v for k, v in kept["spec"].items() if k != "devices"} == {
        "driver": DRIVER, "nodeName": NODE, "pool": {"name": "resourceslice-0", "generation": 1}}
    device = kept["spec"]["devices"][0]
    assert sorted(device) == ["attributes", "capacity", "name"]
    assert device["attributes"]["model"] == {"string": "B60"} and device["capacity"]["memory"] == {"value": "24480Mi"}


def test_a_claim_is_kept_with_its_requests_and_its_allocation_results_only() -> None:
    claim = allocated_claim("c0", ["basic-device-0"])
    claim["metadata"].update({"uid": "u", "managedFields": [{"manager": "kube-scheduler"}], "finalizers": ["resource.kubernetes.io/delete-protection"]})
    claim["status"]["reservedFor"] = [{"resource": "pods", "name": "p0", "uid": "u0"}]
    claim["status"]["allocation"]["nodeSelector"] = {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [NODE]}]}]}
    assert view("resourceclaims", claim) == {
        "metadata": {"name": "c0", "namespace": "ml"},
        "spec": {"devices": {"requests": [{"name": "req-0", "exactly": {"deviceClassName": "test-class", "count": 1}}]}},
        "status": {"allocation": {"devices": {"results": [{"request": "req-0", "driver": DRIVER, "pool": "resourceslice-0", "device": "basic-device-0"}]}}},
    }


def test_a_device_class_is_kept_with_its_selectors_and_extended_resource_name() -> None:
    assert view("deviceclasses", fixture("deviceclass-extended-resource.yaml")) == {
        "metadata": {"name": "test-class-0"},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}], "extendedResourceName": "example.com/gpu-0"},
    }


# -- dra ----------------------------------------------------------------------------------


def test_dra_counts_a_node_s_devices_of_each_class_and_those_allocated() -> None:
    dra = dra_of({"resourceslices": [slice_()], "deviceclasses": [fixture("deviceclass.yaml"), fixture("deviceclass-extended-resource.yaml")],
                  "resourceclaims": [allocated_claim("c0", ["basic-device-1", "basic-device-3"])],
                  "resourceclaimtemplates": [claim_template(), claim_template("resourceclaimtemplate-first-available.yaml", "other")]})
    assert dra == {
        "classes": {"test-class": {}, "test-class-0": {"extendedResourceName": "example.com/gpu-0"}},
        "nodes": {NODE: {"test-class": {"total": 4, "allocated": 2}, "test-class-0": {"total": 4, "allocated": 2}}},
        "claims": {"ml/c0": {"requests": {"req-0": {"test-class": 2}}, "allocated": {"test-class": 2}}},
        "templates": {"ml/test-claim-template": {"requests": {"req-0": {"test-class": 2}}},
                      "other/test-claim-template": {"requests": {"req-0": {"no-devices-class": 1, "test-class": 1}}}},
    }


@pytest.mark.parametrize(("expression", "selected"), [
    ('device.attributes["test-driver.cdi.k8s.io"].model == "B60"', 4),  # an attribute without a domain is the driver's
    ('device.attributes["resource.kubernetes.io"].pciRoot == "pci0000:01"', 2),
    ('device.attributes["test-driver.cdi.k8s.io"].driverVersion.isGreaterThan(semver("1.2.0"))', 4),
    ('device.capacity["test-driver.cdi.k8s.io"].memory.compareTo(quantity("24Gi")) < 0', 4),
    ('device.capacity["test-driver.cdi.k8s.io"].memory.compareTo(quantity("24Gi")) > 0', 0),
    ('device.attributes["test-driver.cdi.k8s.io"].sriov && device.driver == "other.example.com"', 0),
    ('device.attributes["test-driver.cdi.k8s.io"].nosuch == "x"', 0),  # an error selects nothing, as in the scheduler
    ('device.driver ==', 0),  # does not compile: nothing
])
def test_a_class_selects_devices_by_their_attributes_and_capacity_as_kubernetes_cel_sees_them(expression: str, selected: int) -> None:
    cls = {"metadata": {"name": "c"}, "spec": {"selectors": [{"cel": {"expression": expression}}]}}
    dra = dra_of({"resourceslices": [slice_()], "deviceclasses": [cls]})
    assert dra["nodes"].get(NODE, {}).get("c", {"total": 0})["total"] == selected


def test_only_the_newest_generation_of_a_pool_counts() -> None:
    old = slice_()
    new = copy.deepcopy(old)
    new["metadata"]["name"] = "resourceslice-0-b"
    new["spec"]["pool"]["generation"] = 2
    new["spec"]["devices"] = new["spec"]["devices"][:1]
    dra = dra_of({"resourceslices": [old, new], "deviceclasses": [fixture("deviceclass.yaml")]})
    assert dra["nodes"][NODE]["test-class"] == {"total": 1, "allocated": 0}


def test_devices_of_a_slice_for_many_nodes_count_for_none() -> None:
    shared = slice_()
    del shared["spec"]["nodeName"]
    shared["spec"]["allNodes"] = True
    assert dra_of({"resourceslices": [shared], "deviceclasses": [fixture("deviceclass.yaml")]})["nodes"] == {}


# -- the helpers ------------------------------------------------------------------------------


def cluster(*claims: dict[str, Any]) -> dict[str, Any]:
    return dra_of({"resourceslices": [slice_()], "deviceclasses": [fixture("deviceclass.yaml"), fixture("deviceclass-extended-resource.yaml")],
                   "resourceclaims": list(claims), "resourceclaimtemplates": [claim_template()]})


def test_a_pod_asks_for_its_template_s_devices_until_its_claim_is_made_then_for_the_claim_s() -> None:
    dra = cluster(allocated_claim("p0-resource-x7k2q", ["basic-device-0", "basic-device-1", "basic-device-2"]))
    assert pod_devices(pod(), dra, "test-class") == 2
    assert pod_devices(pod(claim_status="p0-resource-x7k2q"), dra, "test-class") == 3  # allocated: what it got
    assert pod_devices(pod(claim_status="not-seen-yet"), dra, "test-class") == 2  # the template's, until kpe sees the claim
    assert pod_devices(pod(), dra, "test-class-0") == 0
    assert pod_devices(pod(namespace="elsewhere"), dra, "test-class") == 0  # a template kpe has not seen
    assert pod_devices(fixture("pod-with-extended-resource.yaml"), dra, "test-class-0") == 0  # kube.podRequests' part


def test_first_available_counts_the_most_one_subrequest_of_the_class_asks() -> None:
    dra = dra_of({"resourceclaimtemplates": [claim_template("resourceclaimtemplate-first-available.yaml")]})
    assert (pod_devices(pod(), dra, "test-class"), pod_devices(pod(), dra, "no-devices-class")) == (1, 1)


def test_a_node_s_free_devices_leave_out_the_allocated_and_the_pending_claims_of_its_pods() -> None:
    dra = cluster(allocated_claim("c0", ["basic-device-0"]))
    assert node_devices(node(), dra, "test-class") == {"total": 4, "allocated": 1}
    assert node_free_devices(node(), {"pods": []}, dra, "test-class") == 3
    in_flight, binding = pod("p1"), pod("p2", node=NODE)  # a pod kpe passed; a bound pod whose allocation kpe has not seen
    assert node_free_devices(node(), {"pods": [in_flight, binding]}, dra, "test-class") == -1
    allocated = pod("p3", node=NODE, claim_status="c0")  # counted where its devices are, once
    assert node_free_devices(node(), {"pods": [allocated]}, dra, "test-class") == 3


def test_an_extended_resource_request_counts_against_the_class_that_backs_it_where_the_node_lacks_it() -> None:
    dra = cluster()
    extended = fixture("pod-with-extended-resource.yaml")  # example.com/gpu-0: 1, backed by test-class-0 (KEP-5004)
    assert node_free_devices(node(), {"pods": [extended]}, dra, "test-class-0") == 3
    # A node with the resource in its allocatable serves it by its device plugin (NodeResourcesFit).
    assert node_free_devices(node({"example.com/gpu-0": "2"}), {"pods": [extended]}, dra, "test-class-0") == 4
    # Once kpe sees the claim the scheduler made for it allocated, the allocation counts instead.
    claim = allocated_claim("test-dra-0-extended-resources-abcde", ["basic-device-0"], namespace="default")
    claim["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = "test-class-0"
    dra = cluster(claim)
    extended["status"] = {"extendedResourceClaimStatus": {"resourceClaimName": "test-dra-0-extended-resources-abcde",
                                                          "requestMappings": [{"containerName": "pause", "resourceName": "example.com/gpu-0", "requestName": "container-0-request-0"}]}}
    assert node_free_devices(node(), {"pods": [extended]}, dra, "test-class-0") == 3


def test_the_helpers_answer_in_cel() -> None:
    dra = cluster()
    program = cel.compile("kube.nodeDevices(node, dra, 'test-class').total - kube.nodeFreeDevices(node, nodeInfo, dra, 'test-class') "
                          "+ kube.podDevices(pod, dra, 'test-class')", variables=["node", "nodeInfo", "dra", "pod"])
    assert program.evaluate({"node": node(), "nodeInfo": {"pods": [pod("p1")]}, "dra": dra, "pod": pod()}) == 4
    # Arguments of other types are no such overload at run time (their typed check at load time: tests/cases/typed_check.yaml).
    with pytest.raises(cel.EvalError, match="kube.nodeDevices"):
        cel.compile("kube.nodeDevices(node, dra, 1)", variables=["node", "dra"]).evaluate({"node": node(), "dra": dra})
    assert cel.compile("kube.podDevices(pod, dra, 'c')", variables=["pod", "dra"]).evaluate({"pod": pod(), "dra": EMPTY_DRA}) == 0


# -- kpe explain pod ---------------------------------------------------------------------------


def test_kpe_explain_pod_shows_the_devices_the_pod_asks_for_and_each_node_s_free_devices() -> None:
    policies = load([ROOT / "policies" / "gpu-placement.yaml"])
    the_node = {**node(), "metadata": {"name": NODE}}
    dra = cluster(allocated_claim("c0", ["basic-device-0"]))
    subject = pod()
    diagnosis = diagnose(policies, subject, [the_node], cluster_pods=[pod("p2", node=NODE)], dra=dra)
    assert diagnosis.devices == {"pod": {"test-class": {"claims": 2, "extendedResource": 0}},
                                 "nodes": {NODE: {"test-class": {"total": 4, "allocated": 1, "free": 1}}}}
    text = render_text(diagnosis.to_dict())
    assert "devices: the pod asks for 2 of DeviceClass test-class (2 through its claims)\n" \
           f"  {NODE}: 1 of 4 test-class free (1 allocated to claims)" in text
    assert diagnose(policies, subject, [the_node], dra=EMPTY_DRA).devices is None


# -- the server's watch -------------------------------------------------------------------------


class _Informer:
    def __init__(self, kind: str) -> None:
        self.kind, self.listed, self.lists, self.heard_versions = kind, False, 0, []

    def heard(self, rv: str) -> None:
        self.heard_versions.append(rv)


class _Client:
    def __init__(self, status: int) -> None:
        self.status = status

    async def list(self, path: str, *, params: dict[str, Any] | None = None) -> dict[str, Any]:
        raise ApiError(self.status, "NotFound" if self.status == 404 else "Forbidden", f"{path} is not here")


@pytest.mark.parametrize(("status", "said"), [
    (404, "the API server does not serve resource.k8s.io/v1 (Kubernetes before 1.34, or DRA disabled)"),
    (403, "kpe may not list resource.k8s.io/v1 deviceclasses (RBAC: deploy/rbac.yaml)"),
])
def test_an_api_server_without_resource_k8s_io_v1_is_logged_once_and_dra_stays_empty(status: int, said: str, caplog: pytest.LogCaptureFixture) -> None:
    devices = Devices(_Client(status), lambda kind, path, sink: _Informer(kind))  # type: ignore[arg-type,return-value]

    async def run() -> None:
        devices.start(asyncio.Event())
        await asyncio.wait_for(devices.ready.wait(), 5)
        assert devices.task is not None
        await devices.task

    with caplog.at_level(logging.WARNING, logger="kpe.cache"):
        asyncio.run(run())
    assert [r.getMessage() for r in caplog.records] == [f"a served policy reads dra, but {said}: kube.podDevices and kube.nodeDevices see no devices"]
    assert devices.view() is EMPTY_DRA and devices.watching == [] and devices.served is False


def test_the_shipped_gpu_policies_read_dra_and_others_do_not() -> None:
    assert reads_dra(load([ROOT / "policies" / "gpu-placement.yaml"]))
    assert reads_dra(load([ROOT / "policies" / "gpu-quota.yaml"]))
    assert not reads_dra(load([ROOT / "policies" / "zone-affinity.yaml"]))


def test_node_info_of_bound_pods_keeps_what_the_free_devices_read_of_them() -> None:
    # The pods a policy reads through kube.nodeFreeDevices keep their claims in kpe's cache.
    projection = load([ROOT / "policies" / "gpu-placement.yaml"]).pod_projection
    bound = pod("p2", node=NODE, claim_status="c0")
    kept = projection.apply(bound)
    assert kept["spec"]["resourceClaims"] == bound["spec"]["resourceClaims"]
    assert kept["status"]["resourceClaimStatuses"] == bound["status"]["resourceClaimStatuses"]
    assert node_info_map([node()], [kept])[NODE]["podCount"] == 1


def test_dra_kept_event_by_event_is_the_one_built_from_every_object_and_snapshots_never_change() -> None:
    from engine.cluster.devices import DeviceIndex, key

    classes = [view("deviceclasses", fixture("deviceclass.yaml")), view("deviceclasses", fixture("deviceclass-extended-resource.yaml"))]
    first = view("resourceslices", slice_())
    newer = copy.deepcopy(first)
    newer["metadata"]["name"] = "resourceslice-0-gen2"
    newer["spec"]["pool"]["generation"] = 2
    newer["spec"]["devices"] = newer["spec"]["devices"][1:3]
    other = copy.deepcopy(first)
    other["metadata"]["name"] = "resourceslice-1"
    other["spec"].update({"nodeName": "scheduler-perf-dra-1", "pool": {"name": "resourceslice-1", "generation": 1}})
    c0 = view("resourceclaims", allocated_claim("c0", ["basic-device-1"]))
    c1 = view("resourceclaims", allocated_claim("c1", ["basic-device-2"]))
    c1_again = view("resourceclaims", allocated_claim("c1", ["basic-device-2", "basic-device-0"]))
    shared = view("resourceclaims", allocated_claim("c2", ["basic-device-1"]))  # a device two claims hold (shared)
    class_with_model = {"metadata": {"name": "test-class"}, "spec": {"selectors": [{"cel": {"expression": 'device.attributes["test-driver.cdi.k8s.io"].model == "B60"'}}]}}
    events: list[tuple[str, str, Any]] = [
        ("resourceslices", "resourceslice-0", first), ("resourceclaims", "ml/c0", c0), ("resourceclaims", "ml/c1", c1),
        ("resourceslices", "resourceslice-1", other), ("resourceclaims", "ml/c2", shared), ("resourceclaims", "ml/c1", c1_again),
        ("resourceslices", "resourceslice-0-gen2", newer), ("resourceclaims", "ml/c0", None), ("deviceclasses", "test-class", class_with_model),
        ("resourceslices", "resourceslice-0-gen2", None), ("resourceclaims", "ml/c2", None), ("resourceslices", "resourceslice-1", None),
    ]
    index = DeviceIndex()
    index.set_classes(classes)
    state: dict[str, dict[str, Any]] = {"resourceslices": {}, "resourceclaims": {}, "deviceclasses": {key("deviceclasses", c): c for c in classes}}
    for kind, name, obj in events:
        before = index.snapshot()
        frozen = copy.deepcopy(before)
        index.set(kind, name, obj)
        if obj is None:
            state[kind].pop(name)
        else:
            state[kind][name] = obj
        assert before == frozen, f"a snapshot handed out changed with {kind} {name}"
        assert index.snapshot() == DeviceIndex.build(state["resourceslices"].values(), state["resourceclaims"].values(), [],
                                                     state["deviceclasses"].values()), f"after {kind} {name}"
    assert index.snapshot()["nodes"] == {NODE: {"test-class": {"total": 4, "allocated": 2}, "test-class-0": {"total": 4, "allocated": 2}}}


def test_the_equivalence_cache_remembers_a_dra_rule_until_the_dra_objects_change(tmp_path: Path) -> None:
    from engine.equivalence.classes import EquivalenceCache
    from engine.equivalence.filtering import filter_nodes as remembered

    shipped = (ROOT / "policies" / "gpu-placement.yaml").read_text()
    (tmp_path / "gpu-placement.yaml").write_text(shipped.replace("gpuDeviceClass: gpu.nvidia.com", "gpuDeviceClass: test-class"))
    policies = load([tmp_path / "gpu-placement.yaml"])
    nodes = [node(), {"metadata": {"name": "cpu-0"}, "status": {"allocatable": {"cpu": "4"}}}]
    info = node_info_map(nodes, [])
    memo = EquivalenceCache()
    dra = cluster()
    first = remembered(policies, pod(), nodes, node_info=info, memo=memo, dra=dra)
    assert (first.passed, first.memo_misses, first.unresolvable) == ([NODE], 2, {"cpu-0": "gpu-placement/gpu-node: node has no GPUs"})
    again = remembered(policies, pod("p1"), nodes, node_info=info, memo=memo, dra=dra)  # another replica, the same dra
    assert (again.passed, again.memo_misses) == ([NODE], 0)
    taken = cluster(allocated_claim("c0", ["basic-device-0", "basic-device-1", "basic-device-2"]))  # a claim allocated: a new dra
    after = remembered(policies, pod("p2"), nodes, node_info=info, memo=memo, dra=taken)
    assert after.memo_misses == 2 and after.failed == {NODE: "gpu-placement/enough-free-gpus: node has 1 of 4 GPUs free, pod needs 2"}


def test_a_match_that_reads_dra_is_remembered_while_the_dra_objects_are_the_same_and_follows_them_when_they_change(tmp_path: Path) -> None:
    from engine.equivalence.classes import EquivalenceCache
    from engine.equivalence.filtering import filter_nodes as remembered

    shipped = (ROOT / "policies" / "gpu-placement.yaml").read_text()
    (tmp_path / "gpu-placement.yaml").write_text(shipped.replace("gpuDeviceClass: gpu.nvidia.com", "gpuDeviceClass: test-class"))
    policies = load([tmp_path / "gpu-placement.yaml"])
    policy = policies.policies[0]
    memo = EquivalenceCache()
    calls: list[str] = []

    def evaluate(outcome: str) -> Any:
        calls.append(outcome)
        return outcome

    dra, other = cluster(), cluster()
    assert memo.match(policy, pod("p0"), lambda: evaluate("first"), {"dra": dra}) == "first"
    assert memo.match(policy, pod("p1"), lambda: evaluate("again"), {"dra": dra}) == "first"  # a replica, the same dra: remembered
    assert memo.match(policy, pod("p2"), lambda: evaluate("changed"), {"dra": other}) == "changed"  # a DRA object changed
    assert calls == ["first", "changed"]

    # Through the filter: the pod's claim template comes into view, and the GPU policy then applies to it.
    nodes = [node(), {"metadata": {"name": "cpu-0"}, "status": {"allocatable": {"cpu": "4"}}}]
    info = node_info_map(nodes, [])
    memo = EquivalenceCache()
    unseen = dra_of({"resourceslices": [slice_()], "deviceclasses": [fixture("deviceclass.yaml")]})  # no template yet: no GPUs asked
    before = remembered(policies, pod("p3"), nodes, node_info=info, memo=memo, dra=unseen)
    assert sorted(before.passed) == ["cpu-0", NODE]
    after = remembered(policies, pod("p4"), nodes, node_info=info, memo=memo, dra=cluster())
    assert (after.passed, after.unresolvable) == ([NODE], {"cpu-0": "gpu-placement/gpu-node: node has no GPUs"})


def test_the_server_keeps_dra_from_lists_and_watch_events_and_hands_out_one_object_until_a_change() -> None:
    devices = Devices(_Client(404), lambda kind, path, sink: _Informer(kind))  # type: ignore[arg-type,return-value]
    devices.served = True
    informers: dict[str, Any] = devices.informers
    claim = allocated_claim("c0", ["basic-device-0"])
    claim["metadata"]["managedFields"] = [{"manager": "kube-scheduler"}]
    listed = {"deviceclasses": [fixture("deviceclass.yaml")], "resourceslices": [slice_()], "resourceclaims": [claim],
              "resourceclaimtemplates": [claim_template()]}
    for kind in ("deviceclasses", "resourceslices", "resourceclaims"):
        devices.replace(informers[kind], [devices.enter(kind, o) for o in listed[kind]], "10", refresh=False)
        assert devices.view() is EMPTY_DRA  # not every kind listed yet
    devices.replace(informers["resourceclaimtemplates"], [devices.enter("resourceclaimtemplates", o) for o in listed["resourceclaimtemplates"]], "10", refresh=False)
    first = devices.view()
    assert devices.ready.is_set() and first is devices.view()
    assert first["nodes"] == {NODE: {"test-class": {"total": 4, "allocated": 1}}}
    assert "managedFields" not in devices.objects["resourceclaims"]["ml/c0"]["metadata"]
    more = allocated_claim("c1", ["basic-device-3"])
    more["metadata"]["resourceVersion"] = "11"
    devices.apply(informers["resourceclaims"], {"type": "ADDED", "object": more})
    second = devices.view()
    assert second is not first and second["nodes"][NODE]["test-class"] == {"total": 4, "allocated": 2}
    assert first["nodes"][NODE]["test-class"] == {"total": 4, "allocated": 1}  # what a running evaluation holds stays
    devices.apply(informers["resourceslices"], {"type": "DELETED", "object": slice_()})
    assert devices.view()["nodes"] == {} and informers["resourceslices"].heard_versions[-1] == ""
