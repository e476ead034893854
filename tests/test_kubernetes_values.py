"""Values and helpers that agree with Kubernetes' Go code (issue 27, points 4 and 5). Each test
cites the Go code it follows; the generated agreement data is tests/test_kubernetes_helpers.py."""

from __future__ import annotations

from typing import Any

import pytest

import engine.cel as cel
from engine.cluster import kubefilters
from engine.cluster.nodeinfo import node_info_map
from engine.errors import PolicyLoadError
from engine.policy.loader import load_text


def run(expr: str) -> Any:
    return cel.compile(expr, check=False).evaluate({})


def test_percent_e_prints_what_kubernetes_strings_extension_version_2_prints() -> None:
    # cel-go v0.22.0 ext/formatting.go Scientific: message.NewPrinter(en-US).Sprintf("%6e", x).
    assert run("'%e'.format([3.14])") == "3.140000\u202f×\u202f10⁰⁰"
    assert run("'%e'.format([-0.000123])") == "-1.230000\u202f×\u202f10⁻⁰⁴"
    # The precision is passed as a width: six decimals always, padded on the left.
    assert run("'%.20e'.format([3.14])") == "     3.140000\u202f×\u202f10⁰⁰"


def test_percent_f_groups_thousands_as_kubernetes_en_us_printer_does() -> None:
    assert run("'%f'.format([1234567.5])") == "1,234,567.500000"
    assert run("'%.2f'.format([-1234.005])") == "-1,234.01"
    assert run("'%.3f'.format([1.2345])") == "1.234"


def test_the_zero_timestamp_is_year_one_as_go_s_zero_time() -> None:
    assert run("optional.ofNonZeroValue(timestamp('0001-01-01T00:00:00Z')) == optional.none()")
    assert run("optional.ofNonZeroValue(timestamp(0)).hasValue()")


def test_a_timestamp_keeps_the_offset_it_was_written_with() -> None:
    # cel-go keeps Go's time.Time location: string() is Format(RFC3339Nano), getters read t.Hour().
    assert run("string(timestamp('2024-05-06T07:08:09.5+02:00'))") == "2024-05-06T07:08:09.5+02:00"
    assert run("string(timestamp('2024-05-06T07:08:09-05:30') + duration('1h'))") == "2024-05-06T08:08:09-05:30"
    assert run("string(timestamp('2024-05-06T07:08:09+00:00'))") == "2024-05-06T07:08:09Z"
    assert run("timestamp('2024-05-06T01:08:09+02:00').getHours()") == 1
    assert run("timestamp('2024-05-06T01:08:09+02:00').getHours('UTC')") == 23
    assert run("timestamp('2024-05-06T09:08:09+02:00') == timestamp('2024-05-06T07:08:09Z')")


def test_is_semver_of_a_list_names_only_the_argument_given() -> None:
    with pytest.raises(cel.CelError) as err:
        run("isSemver([1, 2, 3])")
    assert "isSemver(list)" in str(err.value) and "bool" not in str(err.value)


def test_as_approximate_float_is_infinite_past_the_double_range() -> None:
    # resource.Quantity.AsApproximateFloat64: big.Float.Float64() gives ±Inf.
    assert run("quantity('999999999999999999999e290').asApproximateFloat()") == float("inf")
    assert run("quantity('-999999999999999999999e290').asApproximateFloat()") == float("-inf")


def test_pod_requests_are_rounded_up_to_milli_units_as_the_api_server_stores_them() -> None:
    # pkg/apis/core/v1/defaults.go SetDefaults_ResourceList: val.RoundUp(-3) on requests, limits, overhead.
    assert run("kube.podRequests({'spec': {'containers': [{'resources': {'requests': {'cpu': '1n'}}}]}}, 'cpu') == quantity('1m')")
    assert run(
        "kube.podRequests({'spec': {'containers': [{'resources': {'limits': {'memory': '1.0001m'}}}],"
        " 'overhead': {'cpu': '1u'}}}) == {'memory': quantity('2m'), 'cpu': quantity('1m')}"
    )


def test_a_null_quantity_is_zero() -> None:
    # Quantity.UnmarshalJSON("null") leaves the zero Quantity.
    assert run("kube.podRequests({'spec': {'containers': [{'resources': {'requests': {'cpu': null}}}]}}) == {'cpu': quantity('0')}")


GI = 1024**3


def _pod(name: str, memory: str, node: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"requests": {"memory": memory}}}]}
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": name, "namespace": "ns", "uid": name}, "spec": spec, "status": {"phase": "Running"}}


def test_node_free_counts_each_pod_s_request_in_whole_bytes_as_the_scheduler_does() -> None:
    # framework.Resource.Add: r.Memory += rQuant.Value() (rounded up), per pod, in NodeInfo.update.
    node = {"metadata": {"name": "n1"}, "status": {"allocatable": {"memory": "1Gi", "pods": "110"}}}
    info = node_info_map([node], [_pod("p", "0.3Gi", "n1")])["n1"]
    assert info["requested"]["memory"] == "322122548"
    free = cel.compile("kube.nodeFree(node, nodeInfo, 'memory')", variables=["node", "nodeInfo"], check=False)
    assert free.evaluate({"node": node, "nodeInfo": info}).as_int64() == GI - 322122548 == 751619276
    # A 0.7Gi pod (751619276.8 bytes, 751619277 to the scheduler) does not fit.
    assert kubefilters.check(_pod("q", "0.7Gi"), node, info).reasons == ["Insufficient memory"]


def test_a_node_without_allocatable_pods_has_room_for_none() -> None:
    # fitsRequest: len(pods)+1 > AllowedPodNumber, which is 0 without status.allocatable.pods.
    node = {"metadata": {"name": "n1"}, "status": {"allocatable": {"cpu": "4", "memory": "1Gi"}}}
    assert kubefilters.check(_pod("q", "1"), node, {"pods": [], "podCount": 0, "requested": {}}).reasons == ["Too many pods"]


def test_nodes_outside_the_matchfields_names_get_the_scheduler_s_prefilter_text() -> None:
    # schedule_one.go: "node(s) didn't satisfy plugin(s) [NodeAffinity]" for nodes PreFilter dropped.
    def pod(*terms: list[str]) -> dict[str, Any]:
        return {"spec": {"containers": [{"name": "c"}], "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": t}]} for t in terms]}}}}}

    n1 = {"metadata": {"name": "n1"}, "status": {"allocatable": {"pods": "110"}}}
    assert kubefilters.placement(pod(["n2"]), n1).reasons == ["node(s) didn't satisfy plugin(s) [NodeAffinity]"]
    assert kubefilters.placement(pod(["n1"], ["n2"]), n1).reasons == []
    both = {"spec": {"containers": [{"name": "c"}], "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]},
                                               {"key": "metadata.name", "operator": "In", "values": ["n2"]}]}]}}}}}
    assert kubefilters.placement(both, n1).reasons == ["pod affinity terms conflict"]


POLICY = """\
apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: sel}
spec:
  match:
    podSelector:
      matchLabels: {"team name": a}
      matchExpressions:
      - {key: tier, operator: In, values: ["not valid!"]}
  filters:
  - {name: f, expression: "true"}
"""


def test_a_pod_selector_kubernetes_rejects_is_refused_at_load_with_its_place() -> None:
    # metav1validation.ValidateLabelSelector: label keys and values must be valid labels.
    with pytest.raises(PolicyLoadError) as err:
        load_text(POLICY, file="p.yaml")
    errors = [e.render() for e in err.value.errors]
    assert any("p.yaml:7:" in e and "matchLabels" in e and '"team name"' in e for e in errors), errors
    assert any("p.yaml:9:" in e and "matchExpressions[0].values[0]" in e and '"not valid!"' in e for e in errors), errors
