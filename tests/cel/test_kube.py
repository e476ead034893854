"""kpe's kube.* helpers against the tables in tests/cases/kube-*.yaml, which encode
kube-scheduler's behaviour case by case (requests, taints and tolerations, node
selectors and affinity, free capacity); and how the helpers sit in the compiler
(computed once per request, cost, the fields they read)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from engine import cel
from engine.cel.checker import cost, shapes
from engine.cel.ext.kube import POD_REQUEST_READS, READS
from engine.cel.interpreter.program import hoisting_candidates
from engine.cel.ext.quantity import Quantity, parse_quantity
from engine.cluster.nodeinfo import node_info_map

CASES = Path(__file__).resolve().parent.parent / "cases"


def load(name: str) -> Any:
    return yaml.safe_load((CASES / name).read_text())


REQUESTS: list[dict[str, Any]] = load("kube-pod-requests.yaml")
TAINTS: dict[str, list[dict[str, Any]]] = load("kube-taints.yaml")
AFFINITY: list[dict[str, Any]] = load("kube-node-affinity.yaml")
FREE: list[dict[str, Any]] = load("kube-node-free.yaml")


def run(expression: str, **activation: Any) -> Any:
    return cel.compile(expression, variables=list(activation)).evaluate(activation)


def same_quantity(actual: Any, expected: Any) -> bool:
    return isinstance(actual, Quantity) and actual.compare(parse_quantity(str(expected))) == 0


def ids(cases: list[dict[str, Any]]) -> list[str]:
    return [c["name"] for c in cases]


# -- requests ------------------------------------------------------------------------------


@pytest.mark.parametrize("case", REQUESTS, ids=ids(REQUESTS))
def test_pod_requests(case: dict[str, Any]) -> None:
    pod = case["pod"]
    if "error" in case:
        for expression in ("kube.podRequests(pod)", "kube.podRequests(pod, 'cpu')"):
            with pytest.raises(cel.EvalError) as info:
                run(expression, pod=pod)
            assert case["error"] in info.value.message
        return
    expected = {name: str(q) for name, q in case["requests"].items()}
    got = run("kube.podRequests(pod)", pod=pod)
    assert sorted(got) == sorted(expected)
    for name, q in expected.items():
        assert same_quantity(got[name], q), (name, got[name], q)
        assert same_quantity(run("kube.podRequests(pod, name)", pod=pod, name=name), q)
    assert run("kube.podRequests(pod, 'example.com/not-requested')", pod=pod) == parse_quantity("0")


# -- taints and tolerations ----------------------------------------------------------------


@pytest.mark.parametrize("case", TAINTS["tolerations"], ids=ids(TAINTS["tolerations"]))
def test_toleration_tolerates_taint(case: dict[str, Any]) -> None:
    if "error" in case:
        with pytest.raises(cel.EvalError, match=case["error"]):
            run("kube.toleratesTaint(t, taint)", t=case["toleration"], taint=case["taint"])
        return
    assert run("kube.toleratesTaint(t, taint)", t=case["toleration"], taint=case["taint"]) is case["tolerates"]
    # The same toleration as the pod's only one.
    pod = {"spec": {"tolerations": [case["toleration"]]}}
    assert run("kube.podToleratesTaint(pod, taint)", pod=pod, taint=case["taint"]) is case["tolerates"]


@pytest.mark.parametrize("case", TAINTS["podTaint"], ids=ids(TAINTS["podTaint"]))
def test_pod_tolerates_taint(case: dict[str, Any]) -> None:
    assert run("kube.podToleratesTaint(pod, taint)", pod=case["pod"], taint=case["taint"]) is case["tolerates"]
    any_one = "pod.spec.?tolerations.orValue([]).exists(t, kube.toleratesTaint(t, taint))"
    assert run(any_one, pod=case["pod"], taint=case["taint"]) is case["tolerates"]


@pytest.mark.parametrize("case", TAINTS["podNode"], ids=ids(TAINTS["podNode"]))
def test_untolerated_taints(case: dict[str, Any]) -> None:
    pod, node = case["pod"], case["node"]
    if "error" in case:
        for fn in ("untoleratedTaints", "podToleratesNodeTaints"):
            with pytest.raises(cel.EvalError) as info:
                run(f"kube.{fn}(pod, node)", pod=pod, node=node)
            assert info.value.message == case["error"].replace("untoleratedTaints", fn)
        return
    got = run("kube.untoleratedTaints(pod, node)", pod=pod, node=node)
    assert [f"{t['key']}:{t['effect']}" for t in got] == case["untolerated"]
    assert run("kube.podToleratesNodeTaints(pod, node)", pod=pod, node=node) is (case["untolerated"] == [])
    # The taints given back are copies: the result is a new value, not part of the node.
    taints = node["spec"].get("taints") or []
    assert all(t == next(x for x in taints if x == t) and all(t is not x for x in taints) for t in got)


# -- node selectors and affinity -------------------------------------------------------------


def affinity_runs() -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    runs = []
    for case in AFFINITY:
        for i, each in enumerate(case.get("nodes") or [case]):
            name = case["name"] if "nodes" not in case else f"{case['name']} [{each['node']['metadata'].get('name', i)}]"
            runs.append((name, case, each))
    return runs


AFFINITY_RUNS = affinity_runs()


@pytest.mark.parametrize(("name", "case", "each"), AFFINITY_RUNS, ids=[r[0] for r in AFFINITY_RUNS])
def test_node_affinity(name: str, case: dict[str, Any], each: dict[str, Any]) -> None:
    node = each["node"]
    if "pod" in case:
        expression, activation = "kube.podNodeAffinityMatches(pod, node)", {"pod": case["pod"], "node": node}
    else:
        expression, activation = "kube.nodeSelectorMatches(selector, node)", {"selector": case["selector"], "node": node}
    if "error" in each:
        with pytest.raises(cel.EvalError) as info:
            run(expression, **activation)
        assert info.value.message == each["error"]
        return
    assert run(expression, **activation) is each["matches"]
    if "selector" in case:
        # The same selector as a pod's required node affinity.
        pod = {"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": case["selector"]}}}}
        assert run("kube.podNodeAffinityMatches(pod, node)", pod=pod, node=node) is each["matches"]


# -- free capacity ------------------------------------------------------------------------------


@pytest.mark.parametrize("case", FREE, ids=ids(FREE))
def test_node_free(case: dict[str, Any]) -> None:
    node = case["node"]
    info = case["nodeInfo"] if "nodeInfo" in case else node_info_map([node], case["pods"])[node["metadata"]["name"]]
    if "error" in case:
        with pytest.raises(cel.EvalError) as error:
            run("kube.nodeFree(node, nodeInfo, r)", node=node, nodeInfo=info, r=case["resource"])
        assert case["error"] in error.value.message
        return
    for resource, expected in case["free"].items():
        got = run("kube.nodeFree(node, nodeInfo, r)", node=node, nodeInfo=info, r=resource)
        assert same_quantity(got, expected), (resource, got, expected)


# -- in the compiler -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "expression",
    [
        "kube.podRequests('pod')",
        "kube.podRequests(pod, 1)",
        "kube.podRequests(pod, 'cpu', 'memory')",
        "kube.toleratesTaint(pod)",
        "kube.untoleratedTaints(pod, [])",
        "kube.nodeFree(pod, pod, 1)",
        "kube.podNodeAffinityMatches(1, pod)",
    ],
)
def test_wrong_argument_types_have_no_overload(expression: str) -> None:
    with pytest.raises(cel.NoSuchOverloadError, match="no such overload: kube[.]"):
        run(expression, pod={"spec": {}})


def test_pod_requests_are_computed_once_per_request() -> None:
    """kube is a namespace, not a variable: the pod's requests are hoisted out of the per-node part."""
    program = cel.compile("kube.nodeFree(node, nodeInfo, 'cpu').compareTo(kube.podRequests(pod, 'cpu')) >= 0", variables=["pod", "node", "nodeInfo"])
    assert program.free_variables == {"pod", "node", "nodeInfo"}
    hoisted = hoisting_candidates(program.root, frozenset({"pod"}), program.variables, namespaces=cel.default_library().namespaces)
    assert [type(h).__name__ for h in hoisted] == ["Call"] and hoisted[0].function == "podRequests"  # type: ignore[attr-defined]
    per_node = program.bind(pod={"spec": {"containers": [{"resources": {"requests": {"cpu": "1"}}}]}})
    assert per_node(node={"status": {"allocatable": {"cpu": "2"}}}, nodeInfo={"requested": {"cpu": "500m"}}) is True
    assert per_node(node={"status": {"allocatable": {"cpu": "2"}}}, nodeInfo={"requested": {"cpu": "1500m"}}) is False


def test_a_variable_named_kube_is_still_a_variable() -> None:
    program = cel.compile("kube.podRequests", variables=["kube"])
    assert program.free_variables == {"kube"}
    assert program.evaluate({"kube": {"podRequests": 3}}) == 3


def test_static_cost_counts_what_the_helpers_visit() -> None:
    roots = shapes.kubernetes_roots()
    estimates = {
        e: cost.estimate(cel.compile(e, variables=list(roots)).root, roots)[0]
        for e in (
            "kube.podRequests(pod)",
            "kube.podToleratesNodeTaints(pod, node)",
            "kube.podNodeAffinityMatches(pod, node)",
            "pods.map(p, kube.podRequests(p, 'x').asInteger()).sum()",
        )
    }
    assert estimates["kube.podRequests(pod)"].cost == 2 * shapes.CONTAINERS_MAX + 2
    assert estimates["kube.podToleratesNodeTaints(pod, node)"].cost == shapes.DEFAULT_LIST**2 + 3
    assert "64 tolerations x 64 taints" in estimates["kube.podToleratesNodeTaints(pod, node)"].reason
    assert estimates["kube.podNodeAffinityMatches(pod, node)"].cost > shapes.DEFAULT_LIST**2
    over_pods = estimates["pods.map(p, kube.podRequests(p, 'x').asInteger()).sum()"]
    assert over_pods.cost > shapes.CLUSTER_PODS_MAX * 2 * shapes.CONTAINERS_MAX
    assert over_pods.reason == "map() over 150,000 items, each with kube.podRequests() over up to 64 containers"
    # The result of kube.podRequests(pod) is a map of at most DEFAULT_LIST resources.
    assert cost.estimate(cel.compile("kube.podRequests(pod).all(k, k != '')", variables=["pod"]).root, roots)[0].cost < 400


def test_run_time_budget_is_charged_per_container() -> None:
    pod = {"spec": {"containers": [{"name": str(i)} for i in range(40)]}}
    assert run("kube.podRequests(pod) == {}", pod=pod) is True
    # 32 up front (pod, the call, the map {}), then one per container
    program = cel.compile("kube.podRequests(pod) == {}", variables=["pod"], cost_limit=32 + 39)
    with pytest.raises(cel.CostLimitError):
        program.evaluate({"pod": pod})
    taints = cel.compile("kube.podToleratesNodeTaints(pod, node)", variables=["pod", "node"], cost_limit=30)
    many = {"spec": {"tolerations": [{"key": str(i)} for i in range(6)]}}
    node = {"spec": {"taints": [{"key": str(i), "effect": "NoSchedule"} for i in range(6)]}}
    with pytest.raises(cel.CostLimitError):
        taints.evaluate({"pod": many, "node": node})


# -- what the helpers read ------------------------------------------------------------------------


def _keep(value: Any, paths: list[tuple[str, ...]]) -> Any:
    """``value`` with only ``paths`` (lists transparent), as kpe's cache keeps a projected pod."""
    if isinstance(value, list):
        return [_keep(v, paths) for v in value]
    if not isinstance(value, dict) or any(not p for p in paths):
        return value
    out = {}
    for key, item in value.items():
        below = [p[1:] for p in paths if p[0] == key]
        if below:
            out[key] = _keep(item, below)
    return out


def _projected(value: Any, declared: Any) -> Any:
    return _keep(value, [tuple(p.split(".")) if isinstance(p, str) else tuple(p) for p in declared])


def read_runs() -> list[tuple[str, str, list[Any]]]:
    """(id, function, arguments) of every table case that does not fail."""
    runs: list[tuple[str, str, list[Any]]] = []
    for case in REQUESTS:
        if "error" not in case:
            runs.append((case["name"], "kube.podRequests", [case["pod"]]))
    for case in TAINTS["tolerations"]:
        if "error" not in case:
            runs.append((case["name"], "kube.toleratesTaint", [case["toleration"], case["taint"]]))
            runs.append((case["name"], "kube.podToleratesTaint", [{"spec": {"tolerations": [case["toleration"]]}}, case["taint"]]))
    for case in TAINTS["podNode"]:
        if "error" not in case:
            runs.append((case["name"], "kube.untoleratedTaints", [case["pod"], case["node"]]))
            runs.append((case["name"], "kube.podToleratesNodeTaints", [case["pod"], case["node"]]))
    for name, case, each in AFFINITY_RUNS:
        if "error" not in each:
            if "pod" in case:
                runs.append((name, "kube.podNodeAffinityMatches", [case["pod"], each["node"]]))
            else:
                runs.append((name, "kube.nodeSelectorMatches", [case["selector"], each["node"]]))
    for case in FREE:
        if "nodeInfo" in case and "error" not in case:
            for resource in case["free"]:
                runs.append((case["name"], "kube.nodeFree", [case["node"], case["nodeInfo"], resource]))
    return runs


READ_RUNS = read_runs()


@pytest.mark.parametrize(("name", "function", "args"), READ_RUNS, ids=[f"{r[1]}: {r[0]}" for r in READ_RUNS])
def test_declared_reads_are_all_a_helper_reads(name: str, function: str, args: list[Any]) -> None:
    """Each argument cut to the fields READS declares gives the same answer (kpe's cache
    keeps only those of the pods bound to nodes)."""
    impl = cel.default_library().functions[function]
    declared = READS[function]
    cut = [_projected(a, declared[i]) if i < len(declared) and declared[i] is not None else a for i, a in enumerate(args)]
    assert impl(*cut) == impl(*args)


def test_every_helper_declares_its_reads() -> None:
    helpers = {name for name in cel.default_library().functions if name.startswith("kube.")}
    assert set(READS) == helpers


def test_kpe_cache_keeps_what_node_info_requested_reads() -> None:
    """nodeInfo.requested is summed (engine.cluster.nodeinfo.pod_requests) over the pods kpe's cache
    keeps; the cache's own projection of them (engine.cluster.projection.KPE_READS) must keep every
    field the effective requests are computed from: sidecars' restartPolicy, limits (the
    API's defaulting), pod-level resources, overhead."""
    projection = pytest.importorskip("engine.cluster.projection")
    kpe_reads, from_paths = getattr(projection, "KPE_READS", None), getattr(projection, "from_paths", None)
    if kpe_reads is None or from_paths is None:
        pytest.skip("engine.cluster.projection has no KPE_READS")
    assert kpe_reads.covers(from_paths(POD_REQUEST_READS))


def test_a_variable_without_a_value_says_so() -> None:
    """Without kpe's cache there is no nodeInfo: the error names the variable, as any other read of it does."""
    program = cel.compile("kube.nodeFree(node, nodeInfo, 'cpu')", variables=["node", "nodeInfo"])
    with pytest.raises(cel.EvalError, match="no value for variable 'nodeInfo'"):
        program.evaluate({"node": {"status": {"allocatable": {"cpu": "1"}}}})
    with pytest.raises(cel.EvalError, match="no value for variable 'pod'"):
        cel.compile("kube.podRequests(pod, 'cpu')", variables=["pod"]).evaluate({})
