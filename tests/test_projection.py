"""Cached pods cut to what is read (engine/cluster/projection.py, server/cluster/cache.py ``trim``): the
analysis finds what each expression reads of other pods (cases/projection.yaml), and
decisions over pods cut to a policy set's projection equal decisions over the pods as
the API server sent them: filter, score, preemption and admission, for every case of the
table, for the shipped policies, and for policies that read other pods in tricky ways,
through a random walk of cluster changes."""

from __future__ import annotations

import copy
import random
from pathlib import Path
from types import ModuleType
from typing import Any

import orjson
import pytest
import yaml

from engine.decisions.admission import GATES_ANNOTATION, admit
from engine.cel.library import Library
from engine.cel.parser.parser import parse
from engine.cel.ext.timestamps import Timestamp
from engine.decisions.filtering import filter_nodes
from engine.policy.loader import load, load_text
from engine.cluster.nodeinfo import is_active, node_info_map, pod_key
from engine.policy.model import PolicySet
from engine.decisions.preemption import preempt
from engine.cluster.projection import EMPTY, EVERYTHING, KPE_READS, Projection, from_paths
from engine.policy.reads import expression_reads, pod_projection, policy_reads, subject_reads
from engine.decisions.scoring import score_nodes
from server.cluster.trim import is_projected, trim
from tests.test_equivalence import cluster

ROOT = Path(__file__).resolve().parent.parent
CASES = yaml.safe_load((Path(__file__).parent / "cases" / "projection.yaml").read_text())
NOW = Timestamp(1_795_262_400, 0)  # 2026-11-21T12:00:00Z

Obj = dict[str, Any]


def case_policy(case: Obj) -> PolicySet:
    """The case's expression in a policy, where ``in`` says."""
    where = case.get("in", "filter")
    expression = case["expression"]
    spec: Obj = {"failurePolicy": "Ignore"}
    if "params" in case:
        spec["params"] = case["params"]
    if "variables" in case:
        spec["variables"] = case["variables"]
    if where == "filter":
        spec["filters"] = [{"name": "rule", "expression": expression, "message": "rejected"}]
    elif where == "message":
        spec["filters"] = [{"name": "rule", "expression": "nodeInfo.podCount % 2 == 0", "messageExpression": expression}]
    elif where == "score":
        spec["scores"] = [{"name": "rule", "expression": expression}]
    elif where == "admission":
        spec["admission"] = {"expression": expression}
    elif where == "victim":
        spec["preemption"] = {"victim": expression}
    elif where == "preemption-node":
        spec["preemption"] = {"node": expression}
    elif where == "match":
        spec["match"] = {"expression": expression}
        spec["filters"] = [{"name": "rule", "expression": "true"}]
    else:
        raise AssertionError(f"unknown place {where!r}")
    document = {"apiVersion": "kpe.dev/v1alpha1", "kind": "SchedulingPolicy", "metadata": {"name": "case"}, "spec": spec}
    return load_text(yaml.safe_dump(document), file="case.yaml")


# -- a varied cluster -------------------------------------------------------------------

TEAMS = ["vision", "search", "ads"]


def vary(pod: Obj, rng: random.Random) -> Obj:
    """A realistic pod with some of the fields the policies read changed, removed or added."""
    meta, spec, status = pod["metadata"], pod["spec"], pod.setdefault("status", {})
    labels = meta.setdefault("labels", {})
    if rng.random() < 0.2:
        del meta["labels"]
    else:
        if rng.random() < 0.4:
            labels["team"] = rng.choice(TEAMS)
        if rng.random() < 0.2:
            labels["app"] = rng.choice(["web", "db"])
        if rng.random() < 0.1:
            labels["canary"] = "true"
        if rng.random() < 0.2:
            labels["kpe.dev/team"] = rng.choice(TEAMS)
        if rng.random() < 0.1:
            labels[meta["namespace"]] = "x"
        if rng.random() < 0.1:
            labels["tier"] = "critical"
    if rng.random() < 0.2:
        meta.pop("annotations", None)
    if rng.random() < 0.2:
        meta["namespace"] = rng.choice(["ml-train", "vision-prod", "kube-system"])
    if rng.random() < 0.2:
        spec["priority"] = rng.choice([0, 100, 1000, 2000])
    elif rng.random() < 0.2:
        spec.pop("priority", None)
    if rng.random() < 0.1:
        spec["hostNetwork"] = rng.random() < 0.5
    if rng.random() < 0.1:
        spec["priorityClassName"] = "high"
    if rng.random() < 0.2:
        spec["tolerations"] = [] if rng.random() < 0.5 else [{"key": "k", "operator": rng.choice(["Exists", "Equal"])}]
    if rng.random() < 0.15:
        container = spec["containers"][0]
        container["image"] = container["image"].rsplit(":", 1)[0] + ":1.0.0"
    if rng.random() < 0.2:
        gpus = str(rng.choice([1, 2]))
        for section in ("requests", "limits"):
            spec["containers"][0]["resources"].setdefault(section, {})["nvidia.com/gpu"] = gpus
    if rng.random() < 0.1:
        spec["initContainers"] = [{"name": "init", "image": "busybox", "resources": {"requests": {"cpu": rng.choice(["1", "3"])}}}]
    if rng.random() < 0.1:
        spec["overhead"] = {"cpu": "100m"}
    if rng.random() < 0.1:
        status["phase"] = rng.choice(["Succeeded", "Failed", "Pending"])
    if rng.random() < 0.1:
        status.pop("conditions", None)
    elif rng.random() < 0.2 and len(status.get("conditions") or []) > 2:
        status["conditions"][2]["status"] = "False"
    if rng.random() < 0.1:
        status["qosClass"] = "Guaranteed"
    if rng.random() < 0.05:
        meta["deletionTimestamp"] = "2026-11-21T11:00:00Z"
    return pod


def pending(pod: Obj, rng: random.Random) -> Obj:
    """Not bound yet; sometimes held at one of kpe's gates (then never projected)."""
    pod["spec"].pop("nodeName", None)
    pod["status"] = {"phase": "Pending"}
    if rng.random() < 0.5:
        gate = rng.choice(["kpe.dev/case", "kpe.dev/gpu-quota", "kpe.dev/zz-namespace-cpu"])
        pod["spec"]["schedulingGates"] = [{"name": gate}]
        pod["metadata"].setdefault("annotations", {})[GATES_ANNOTATION] = gate
    return pod


def varied_cluster(rng: random.Random, nodes: list[Obj], per_node: int = 4) -> list[Obj]:
    pods = [vary(p, rng) for p in cluster.realistic_pods(nodes, per_node, seed=rng.randrange(1000))]
    for pod in rng.sample(pods, len(pods) // 8):
        pending(pod, rng)
    return pods


def cached(pods: list[Obj], projection: Projection) -> list[Obj]:
    """The pods as kpe's cache keeps them: decoded as from the wire, trimmed and projected."""
    return [trim(orjson.loads(orjson.dumps(p)), projection) for p in pods]


def subjects(rng: random.Random) -> list[Obj]:
    """Pods to decide: a GPU training pod, a team's pod, a pod of a namespace with a quota."""
    gpu = cluster.scheduling_pod(gpus=rng.choice([1, 2, 4]))
    plain = cluster.scheduling_pod(gpus=0)
    plain["metadata"]["labels"] = {"team": rng.choice(TEAMS), "app": "web", "app.kubernetes.io/name": "checkout"}
    plain["metadata"]["namespace"] = rng.choice(["vision-prod", "search-prod", "default"])
    for c in plain["spec"]["containers"]:
        c["resources"] = {"requests": {"cpu": "1", "memory": "1Gi"}}
    plain["spec"]["priority"] = rng.choice([0, 1000, 5000])
    return [gpu, plain]


# -- decisions ---------------------------------------------------------------------------

def _events(events: list[Any]) -> list[tuple[str, str, str, str]]:
    return sorted((e.policy, e.rule, e.node, e.message) for e in events)


def decisions(policy_set: PolicySet, pod: Obj, nodes: list[Obj], pods: list[Obj], victims: dict[str, list[str]]) -> Any:
    """Everything the engine decides for ``pod`` over this cluster, as comparable data.
    ``victims``: per node, the UIDs kube-scheduler proposes (taken from ``pods``, as the
    preempt verb takes them from the cache)."""
    info = node_info_map(nodes, pods)
    filtered = filter_nodes(policy_set, pod, nodes, node_info=info, now=NOW)
    scored = score_nodes(policy_set, pod, nodes, node_info=info, now=NOW)
    by_uid = {p["metadata"]["uid"]: p for p in pods}
    candidates = {name: [by_uid[u] for u in uids] for name, uids in victims.items()}
    preempted = preempt(policy_set, pod, candidates, nodes={n["metadata"]["name"]: n for n in nodes}, node_info=info, now=NOW)
    admitted = admit(policy_set, pod, nodes=nodes, pods=pods, now=NOW)
    return {
        "filter": (filtered.passed, filtered.failed, filtered.unresolvable, _events(filtered.errors), _events(filtered.audit_rejections)),
        "score": (scored.scores, _events(scored.errors)),
        "preempt": ({n: [pod_key(v) for v in vs] for n, vs in preempted.candidates.items()}, preempted.rejected,
                    _events(preempted.errors), _events(preempted.audit_rejections)),
        "admission": [{k: v for k, v in d.to_dict().items() if k != "elapsedMicroseconds"} for d in admitted.decisions],
        # What the server reads of nodeInfo besides the rules (the node introspection endpoint).
        "nodeInfo": {name: (i["podCount"], i["requested"], sorted(pod_key(p) for p in i["pods"])) for name, i in info.items()},
    }


def proposed_victims(rng: random.Random, nodes: list[Obj], pods: list[Obj]) -> dict[str, list[str]]:
    on: dict[str, list[str]] = {}
    for p in pods:
        node = p["spec"].get("nodeName")
        if node and is_active(p):
            on.setdefault(node, []).append(p["metadata"]["uid"])
    names = [n["metadata"]["name"] for n in nodes]
    return {name: rng.sample(on.get(name, []), min(len(on.get(name, [])), rng.randrange(3))) for name in rng.sample(names, 6)}


def assert_same_decisions(policy_set: PolicySet, rng: random.Random, nodes: list[Obj], pods: list[Obj]) -> None:
    lean = cached(pods, policy_set.pod_projection)
    full = cached(pods, EVERYTHING)
    assert [pod_key(p) for p in lean] == [pod_key(p) for p in full]
    victims = proposed_victims(rng, nodes, pods)
    for pod in subjects(rng):
        assert decisions(policy_set, pod, nodes, lean, victims) == decisions(policy_set, pod, nodes, full, victims)


# -- the table -----------------------------------------------------------------------------

@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_the_analysis_finds_what_an_expression_reads_of_cached_pods(case: Obj) -> None:
    assert policy_reads(case_policy(case)).render() == sorted(case["reads"])


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_decisions_over_pods_cut_to_a_case_s_projection_equal_decisions_over_whole_pods(case: Obj) -> None:
    policy_set = case_policy(case)
    rng = random.Random(case["name"])
    nodes = cluster.nodes(12)
    for _ in range(3):
        assert_same_decisions(policy_set, rng, nodes, varied_cluster(rng, nodes))


# -- shipped and tricky policies --------------------------------------------------------------

TRICKY = """
apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: zz-neighbours}
spec:
  failurePolicy: Ignore
  params:
    appLabel: app.kubernetes.io/name
    limit: 3
    oldImages: [registry.example.com/ads/catalog:1.1.0, registry.example.com/ads/inventory:1.4.2, registry.example.com/ml-training/auth:1.1.2]
  variables:
  - name: sameApp
    expression: "nodeInfo.pods.filter(p, p.metadata.?labels[?params.appLabel] == pod.metadata.?labels[?params.appLabel])"
  - name: images
    expression: "nodeInfo.pods.map(p, p.spec.containers.map(c, c.image)).filter(l, l.size() > 0)"
  filters:
  - name: spread
    expression: "variables.sameApp.size() < params.limit"
    messageExpression: >-
      '%d replicas of %s already: %s'.format([variables.sameApp.size(),
        pod.metadata.?labels[?params.appLabel].orValue('?'), variables.sameApp.map(p, p.metadata.name).join(',')])
  - name: no-host-network-neighbours
    expression: "!nodeInfo.pods.exists(p, has(p.spec.hostNetwork) && p.spec.hostNetwork)"
  - name: ready-neighbours
    expression: "nodeInfo.pods.all(p, !has(p.status.conditions) || p.status.conditions.exists(c, c.type == 'Ready' && c.status == 'True'))"
  - name: tolerations-by-index
    expression: "nodeInfo.pods.all(p, p.spec.?tolerations.orValue([]).size() == 0 || p.spec.tolerations[0].operator == 'Exists')"
  scores:
  - name: fewer-old-images
    expression: "100 - variables.images.filter(l, l.exists(i, i in params.oldImages)).size() * 10"
  - name: priority-sum
    expression: "nodeInfo.pods.map(p, p.spec.?priority.orValue(0)).sum() % 100"
  - name: labels-count
    expression: "nodeInfo.pods.map(p, size(p.metadata.?labels.orValue({}))).sum() % 100"
  - name: dynamic-key
    expression: "nodeInfo.pods.filter(p, p.metadata.?labels[?p.metadata.namespace].hasValue()).size() * 10"
  - name: optional-chains
    expression: >-
      nodeInfo.pods.filter(p, p.metadata.?labels.optMap(l, l.?team.orValue('')).orValue('') == pod.metadata.?labels[?'team'].orValue('-')
        && p.spec.?priorityClassName.hasValue()).size() * 20
---
apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: zz-namespace-cpu}
spec:
  failurePolicy: Fail
  params: {cpus: 40.0}
  admission:
    expression: >-
      admitted.filter(p, p.metadata.namespace == pod.metadata.namespace)
        .map(p, p.spec.containers.map(c, quantity(c.resources.?requests[?'cpu'].orValue('0')).asApproximateFloat()).sum())
        .sum() < params.cpus
      && pods.filter(p, p.status.?phase.orValue('') == 'Pending').size() < 30
      && !pods.exists(p, p.metadata.?labels[?'canary'].orValue('') == 'true' && p.metadata.namespace == pod.metadata.namespace)
    messageExpression: "'namespace %s is over its cpus'.format([pod.metadata.namespace])"
---
apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: zz-victims}
spec:
  failurePolicy: Fail
  filters:
  - name: few-vision
    expression: "nodeInfo.pods.filter(p, p.metadata.?labels[?'team'].orValue('') == 'vision').size() < 3"
  preemption:
    victim: >-
      victim.metadata.?ownerReferences.orValue([]).exists(o, o.kind == 'ReplicaSet')
      && string(victim.spec.?priority.orValue(0)) != '2000'
      && !(victim.metadata.namespace in ['kube-system'])
    node: "victims.all(v, v.status.?qosClass.orValue('') != 'Guaranteed') && victims.map(v, v.metadata.name).join(',').size() < 500"
"""


def shipped_and_tricky() -> PolicySet:
    shipped = load([ROOT / "policies"])
    added = load_text(TRICKY, file="tricky.yaml")
    policies = shipped.policies + added.policies
    return PolicySet(policies, shipped.generation + added.generation, pod_projection=pod_projection(policies))


def test_the_shipped_policies_keep_a_small_part_of_each_cached_pod() -> None:
    shipped = load([ROOT / "policies"])
    assert not shipped.pod_projection.whole
    pod = cluster.realistic_pod(3, "cpu-us-east-1a-00001")
    kept = trim(orjson.loads(orjson.dumps(pod)), shipped.pod_projection)
    assert set(kept["metadata"]["labels"]) < set(pod["metadata"]["labels"])
    # startTime: the preemption dry run's order; the conditions' types and reasons and the containers'
    # statuses (their names; allocatedResources, resources.requests): what an in-place resize holds
    assert kept["status"]["phase"] == "Running" and kept["status"]["startTime"] == pod["status"]["startTime"]
    assert set(kept["status"]) == {"phase", "startTime", "conditions", "containerStatuses"}
    assert all(set(c) <= {"type", "reason"} for c in kept["status"]["conditions"])
    assert set(kept["spec"]["containers"][0]) == {"name", "resources"}
    assert len(orjson.dumps(kept)) < len(orjson.dumps(pod)) / 6


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_decisions_over_projected_pods_equal_decisions_over_whole_pods_through_a_random_walk(seed: int) -> None:
    rng = random.Random(seed)
    policy_set = shipped_and_tricky()
    assert not policy_set.pod_projection.whole, "the walk must cut pods, or it tests nothing"
    nodes = cluster.nodes(16)
    pods = varied_cluster(rng, nodes, per_node=3)
    made = 0
    for step in range(40):
        change = rng.choice(["add", "add", "remove", "modify", "bind", "gate", "node"])
        if change == "add":
            made += 1
            fresh = vary(cluster.realistic_pod(10_000 + seed * 1000 + made, rng.choice(nodes)["metadata"]["name"], seed=seed), rng)
            pods.append(pending(fresh, rng) if rng.random() < 0.3 else fresh)
        elif change == "remove" and pods:
            pods.pop(rng.randrange(len(pods)))
        elif change == "modify" and pods:
            i = rng.randrange(len(pods))
            pods[i] = vary(copy.deepcopy(pods[i]), rng)
        elif change == "bind":
            waiting = [i for i, p in enumerate(pods) if not p["spec"].get("nodeName")]
            if waiting:
                i = rng.choice(waiting)
                bound = copy.deepcopy(pods[i])
                bound["spec"].pop("schedulingGates", None)
                bound["spec"]["nodeName"] = rng.choice(nodes)["metadata"]["name"]
                bound["status"] = {"phase": "Running", "qosClass": "Burstable"}
                pods[i] = bound
        elif change == "gate" and pods:
            i = rng.randrange(len(pods))
            if not pods[i]["spec"].get("nodeName"):
                pods[i] = pending(copy.deepcopy(pods[i]), rng)
        elif change == "node":
            i = rng.randrange(len(nodes))
            node = copy.deepcopy(nodes[i])
            node["metadata"]["labels"]["kpe.dev/maintenance"] = rng.choice(["", "true"])
            nodes = nodes[:i] + [node] + nodes[i + 1 :]
        assert_same_decisions(policy_set, rng, nodes, pods)


def test_pending_and_gated_pods_stay_whole_and_bound_ones_are_cut() -> None:
    projection = load([ROOT / "policies"]).pod_projection
    rng = random.Random(4)
    bound = cluster.realistic_pod(1, "cpu-us-east-1a-00001")
    waiting = pending(cluster.realistic_pod(2, "cpu-us-east-1a-00001"), random.Random(0))
    gated_and_bound = cluster.realistic_pod(3, "cpu-us-east-1a-00001")
    gated_and_bound["spec"]["schedulingGates"] = [{"name": "someone/else"}]
    assert is_projected(bound) and not is_projected(waiting) and not is_projected(gated_and_bound)
    for pod in (waiting, gated_and_bound):
        sent = orjson.loads(orjson.dumps(pod))
        del sent["metadata"]["managedFields"]
        assert trim(orjson.loads(orjson.dumps(pod)), projection) == sent
    assert trim(orjson.loads(orjson.dumps(bound)), projection) != bound
    assert trim(vary(bound, rng), EVERYTHING) is bound


# -- the projection itself -----------------------------------------------------------------

def test_a_projection_keeps_the_types_and_lengths_along_what_it_keeps() -> None:
    projection = from_paths(["metadata.name", ("spec", "containers", "resources", "requests")])
    pod = {"metadata": {"name": "a", "labels": {"x": "y"}}, "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}, "limits": {}}}, "odd"]},
           "status": {"phase": "Running"}}
    assert projection.apply(pod) == {"metadata": {"name": "a"}, "spec": {"containers": [{"resources": {"requests": {"cpu": "1"}}}, "odd"]}}
    assert projection.apply("not a pod") == "not a pod"
    assert EMPTY.apply({"a": [1, {"b": 2}]}) == {}
    assert from_paths([("a",)]).apply({"a": [{"b": 1}], "c": 2}) == {"a": [{"b": 1}]}


def test_union_and_covers_tell_whether_a_reload_must_relist() -> None:
    labels = from_paths(["metadata.labels"])
    team = from_paths([("metadata", "labels", "team")])
    phase = from_paths(["status.phase"])
    assert labels.covers(team) and not team.covers(labels)
    assert not team.covers(phase) and team.union(phase).covers(phase) and team.union(phase).covers(team)
    assert EVERYTHING.covers(labels) and not labels.covers(EVERYTHING) and labels.covers(EMPTY)
    assert KPE_READS.union(team) == team.union(KPE_READS)
    assert EVERYTHING.union(team) is EVERYTHING and team.union(EMPTY) is team


def test_a_library_function_that_declares_what_it_reads_keeps_only_that() -> None:
    module = ModuleType("podlib")
    module.FUNCTIONS = {"podCpu": lambda pod: 0, "podName": lambda pod: ""}  # type: ignore[attr-defined]
    module.READS = {"podCpu": ((("spec", "containers", "resources", "requests", "cpu"), "spec.overhead"),)}  # type: ignore[attr-defined]
    library = Library([module])
    declared = expression_reads(parse("nodeInfo.pods.map(p, podCpu(p)).sum() < 4"), library)
    assert declared.render() == ["spec.containers.resources.requests.cpu", "spec.overhead"]
    undeclared = expression_reads(parse("nodeInfo.pods.exists(p, podName(p) == 'a')"), library)
    assert undeclared.render() == ["*"], "a function without a READS entry reads its argument whole"
    listed = expression_reads(parse("podCpu(nodeInfo.pods) < 4"), library)
    assert listed.render() == ["*"], "declared reads are of one pod, not of a list of them"


def test_what_a_policy_reads_of_the_pod_it_decides_is_apart_from_what_it_reads_of_other_pods() -> None:
    policy_set = load_text("""apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: cap}
spec:
  mode: Audit
  filters:
  - name: cap
    expression: >-
      nodeInfo.pods.filter(p, p.metadata.?labels[?'app'].orValue('') == pod.metadata.labels['app']).size() < 2
      && pod.spec.?priorityClassName.orValue('') != 'batch'
    messageExpression: "'too many of ' + pod.metadata.name"
""")
    # What the reports need of a bound pod to judge it again: the decided pod's reads only.
    assert subject_reads(policy_set).render() == ["metadata.labels.app", "metadata.name", "spec.priorityClassName"]
    # What the cache keeps of every bound pod for the other pods' decisions: nodeInfo's pods' reads only.
    assert policy_reads(policy_set).render() == ["metadata.labels.app"]
