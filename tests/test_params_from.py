"""Parameters from a ConfigMap (``spec.paramsFrom``, engine/policy/params.py): the data over the
declared ``params``, each value parsed as YAML and of its default's type; a missing or
malformed ConfigMap under Deny and UseDefaults; the generation follows the values; ``kpe test``
cases supply ConfigMaps."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from engine.decisions.admission import admit
from engine.decisions.filtering import filter_nodes
from engine.policy.loader import load_text
from engine.reports.policytest import run_test_files

REF = ("kpe-system", "team-caps")

POLICY = """
apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: team-cap}
spec:
  paramsFrom:
    configMap: {namespace: kpe-system, name: team-caps}
    parameterNotFoundAction: %s
  params:
    defaultCap: 1
    caps: {}
    pools: []
  variables:
  - name: cap
    expression: "params.caps[?pod.metadata.namespace].orValue(params.defaultCap)"
  admission:
    gate: kpe.dev/team-cap
    expression: "admitted.filter(p, p.metadata.namespace == pod.metadata.namespace).size() < variables.cap"
    message: the team is at its cap
  filters:
  - name: pool
    expression: "params.pools.size() == 0 || params.pools.exists(p, p == node.metadata.labels[?'pool'].orValue(''))"
"""


def policy(action: str = "Deny", data: dict[str, str] | None = None, *, found: bool = True) -> Any:
    cluster = {REF: data if data is not None else {}} if found else {}
    return load_text(POLICY % action, cluster_params=cluster).policies[0]


def pod(name: str, namespace: str = "shop") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace}, "spec": {"containers": [{"name": "c", "image": "x"}]}}


def test_each_value_is_parsed_as_yaml_over_the_declared_defaults() -> None:
    p = policy(data={"caps": "{shop: 3, ml: 10}", "pools": "[a, b]", "note": "free text"})
    assert p.params == {"defaultCap": 1, "caps": {"shop": 3, "ml": 10}, "pools": ["a", "b"], "note": "free text"}
    assert p.params_error == "" and p.params_from == REF


@pytest.mark.parametrize(
    ("data", "found", "problem"),
    [
        (None, False, "params: ConfigMap kpe-system/team-caps not found"),
        ({"defaultCap": "three"}, True, "params: ConfigMap kpe-system/team-caps: key 'defaultCap' is a string, but params.defaultCap is declared an int"),
        ({"caps": "[shop]"}, True, "params: ConfigMap kpe-system/team-caps: key 'caps' is a list, but params.caps is declared a map"),
        ({"caps": "{shop: [3"}, True, "params: ConfigMap kpe-system/team-caps: key 'caps' is not YAML (while parsing a flow sequence)"),
        ({"pools": "[1, 2]"}, True, "params: ConfigMap kpe-system/team-caps: its values do not compile: "
                                    "found no matching overload for '_==_' applied to '(int, string)'"),
    ],
    ids=["missing", "another-type", "a-list-for-a-map", "not-yaml", "does-not-compile"],
)
def test_a_missing_or_malformed_config_map_denies_every_read_of_params(data: dict[str, str] | None, found: bool, problem: str) -> None:
    denied = load_text(POLICY % "Deny", cluster_params={REF: data} if found else {})
    p = denied.policies[0]
    assert (p.params_error, p.params_problem) == (problem, problem)
    assert p.params == {"defaultCap": 1, "caps": {}, "pools": []}
    decision = admit(denied, pod("a"))
    assert [d.message for d in decision.decisions] == [f"team-cap: evaluation error: {problem}"] and not decision.admitted
    result = filter_nodes(denied, pod("a"), [{"metadata": {"name": "n1"}}])
    assert result.unresolvable == {"n1": f"team-cap/pool: evaluation error: {problem}"}
    # UseDefaults: the declared params, no error (the problem is kept for people).
    lenient = load_text(POLICY % "UseDefaults", cluster_params={REF: data} if found else {})
    assert lenient.policies[0].params_error == "" and lenient.policies[0].params_problem == problem
    assert admit(lenient, pod("a")).admitted


def test_the_generation_follows_the_values_and_without_a_cluster_policies_use_their_defaults() -> None:
    def generation(cluster: Any) -> str:
        return str(load_text(POLICY % "Deny", cluster_params=cluster).generation)

    three, four = generation({REF: {"defaultCap": "3"}}), generation({REF: {"defaultCap": "4"}})
    assert len({three, four, generation({}), generation(None)}) == 4
    assert three == generation({REF: {"defaultCap": "3"}})
    defaults = load_text(POLICY % "Deny").policies[0]
    assert defaults.params_error == "" and defaults.params == {"defaultCap": 1, "caps": {}, "pools": []}


def test_the_cap_read_from_the_config_map_decides_admission() -> None:
    policy_set = load_text(POLICY % "Deny", cluster_params={REF: {"caps": "{shop: 2}"}})
    admitted = [pod("a"), pod("b")]
    assert admit(policy_set, pod("c"), pods=admitted[:1]).admitted
    assert not admit(policy_set, pod("c"), pods=admitted).admitted


def test_policy_test_cases_supply_config_maps(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text(POLICY % "Deny")
    (tmp_path / "t.yaml").write_text("""
apiVersion: kpe.dev/v1alpha1
kind: PolicyTest
metadata: {name: caps}
spec:
  policies: [p.yaml]
  fixtures:
    configMaps:
      team-caps: {metadata: {namespace: kpe-system}, data: {caps: "{shop: 2}"}}
  cases:
  - name: the fixture's cap
    pod: {metadata: {name: c, namespace: shop}}
    clusterPods: [{metadata: {name: a, namespace: shop}}]
    expect: {admission: {admitted: true}}
  - name: at the fixture's cap
    pod: {metadata: {name: c, namespace: shop}}
    clusterPods: [{metadata: {name: a, namespace: shop}}, {metadata: {name: b, namespace: shop}}]
    expect: {admission: {admitted: false}}
  - name: no ConfigMap in the cluster
    pod: {metadata: {name: c, namespace: shop}}
    configMaps: []
    expect:
      admission:
        pending: [kpe.dev/team-cap]
        messages: {kpe.dev/team-cap: "team-cap: evaluation error: params: ConfigMap kpe-system/team-caps not found"}
  - name: an unknown ConfigMap fixture
    pod: {metadata: {name: c, namespace: shop}}
    configMaps: [team-cpas]
    expect: {admission: {admitted: true}}
""")
    results = run_test_files([tmp_path / "t.yaml"])
    assert [r.passed for r in results] == [True, True, True, False], [r.render() for r in results]
    assert results[3].error is not None
    assert results[3].error.endswith("error[KPE500] caps: spec.cases[3].configMaps[0]: case 'an unknown ConfigMap fixture': "
                                     "unknown configMap fixture 'team-cpas' (known: team-caps)")


def test_kpe_serve_without_a_cluster_finds_no_config_map_and_says_so(tmp_path: Path) -> None:
    import httpx

    from server.app import create_app
    from server.settings import Settings
    from tests.serving import serve

    (tmp_path / "p.yaml").write_text(POLICY % "Deny")
    app = create_app(Settings(policies=str(tmp_path), cluster="off"))
    with serve(app) as url:
        [entry] = httpx.get(url + "/apis/v1/policies").json()["policies"]
        assert entry["paramsFrom"] == {"configMap": "kpe-system/team-caps", "problem": "params: ConfigMap kpe-system/team-caps not found"}
        answer = httpx.post(url + "/scheduler/filter", json={"Pod": pod("a"), "Nodes": {"items": [{"metadata": {"name": "n1"}}]}}).json()
        assert answer["FailedAndUnresolvableNodes"] == {"n1": "team-cap/pool: evaluation error: params: ConfigMap kpe-system/team-caps not found"}
