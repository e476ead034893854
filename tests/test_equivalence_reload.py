"""Classes are per policy: a reload that edits one policy leaves every other policy's classes
with their results, and the pods of another Deployment that differs in what one policy reads
share every other policy's classes. The answers are exactly those of a full evaluation."""

from __future__ import annotations

import copy
import random
from typing import Any

import pytest

from engine.equivalence.classes import EquivalenceCache
from engine.equivalence.filtering import filter_nodes
from engine.equivalence.scoring import score_nodes
from server.http.wire import host_priority
from engine.policy.loader import load_text
from engine.policy.model import PolicySet
from engine.cluster.nodeinfo import node_info_map
from tests.test_equivalence import EXTRA, MATCHES, CachedNodes, at, audits, cluster, events, policy_set, replicas, same_filter, with_windows

# Three small policies and no rule that reads now, so what a request evaluates is what the
# cache did not know: a-rack rejects rack r0 and errs on nodes without a rack, b-audit only
# reports, c-zone is the one the reloads edit.
SMALL = """
apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: a-rack}
spec:
  filters:
  - name: not-r0
    expression: "node.metadata.labels['rack'] != 'r0'"
    messageExpression: "'rack %s is full'.format([node.metadata.labels['rack']])"
  - name: not-small
    expression: "node.metadata.?labels[?'size'].orValue('') != 'small'"
    message: too small
---
apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: b-audit}
spec:
  mode: Audit
  filters:
  - name: even
    expression: "int(node.metadata.name.split('-')[1]) % 2 == 0"
    message: odd node
---
apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: c-zone}
spec:
  filters:
  - name: zone
    expression: "node.metadata.?labels[?'zone'].orValue('') != 'ZONE'"
    message: MESSAGE
"""


def small_set(zone: str = "z9", message: str = "zone closed", unresolvable: bool = False) -> PolicySet:
    text = SMALL.replace("ZONE", zone).replace("MESSAGE", message)
    if unresolvable:
        text += "    unresolvable: true\n"
    return load_text(text, file="small.yaml")


def small_nodes(count: int) -> list[dict[str, Any]]:
    rng = random.Random(3)
    nodes = []
    for i in range(count):
        labels = {"zone": f"z{i % 3}", "size": rng.choice(["small", "large", "large"])}
        if i % 7:
            labels["rack"] = f"r{rng.randrange(3)}"
        nodes.append({"metadata": {"name": f"node-{i}", "labels": labels}})
    return nodes


def evaluated(result: Any, policy: str) -> int:
    return sum(n for p, _, n in result.rule_counts if p == policy)


def pod() -> dict[str, Any]:
    return {"metadata": {"name": "web-1", "namespace": "shop", "labels": {"app": "web"}}, "spec": {"containers": [{"name": "c"}]}}


@pytest.mark.parametrize("by_name", [False, True], ids=["node-objects", "node-names"])
def test_after_a_reload_that_edits_one_policy_only_its_rules_are_evaluated_and_the_answer_is_a_full_evaluation_s(by_name: bool) -> None:
    nodes = small_nodes(40)
    cached = CachedNodes(nodes, [])
    memo = EquivalenceCache()

    def ask(policies: PolicySet) -> Any:
        given: Any = cached.by_name([n["metadata"]["name"] for n in nodes]) if by_name else cached.known([n["metadata"]["name"] for n in nodes])
        return filter_nodes(policies, pod(), given, node_info=cached.info, memo=memo)

    before = small_set()
    first = ask(before)
    assert first.memo_misses == 3 * 40 and evaluated(first, "a-rack") > 0  # each policy's result per node
    for edited in (small_set(zone="z1"), small_set(zone="z1", message="zone one is closed", unresolvable=True), small_set(zone="z2")):
        assert edited.generation != before.generation
        result = ask(edited)
        full = filter_nodes(edited, pod(), cached.known([n["metadata"]["name"] for n in nodes]), node_info=cached.info)
        assert (result.passed, result.failed, result.unresolvable) == (full.passed, full.failed, full.unresolvable)
        assert (events(result), audits(result), result.rejections) == (events(full), audits(full), full.rejections)
        assert result.memo_misses == 40, "a new class of c-zone only"
        # The policies the reload left alone decided every node as before: nothing of theirs ran.
        assert (evaluated(result, "a-rack"), evaluated(result, "b-audit")) == (0, 0)
        # c-zone's class is the pod's alone: it judged every node, also where a full evaluation
        # stops before it (another policy rejected the node first), since the class serves every
        # pod that agrees on what c-zone reads, whatever their other policies say; its rule reads
        # only the node's zone, so it ran once per zone (``ClassMemo.alike``).
        assert evaluated(result, "c-zone") == 3 and evaluated(full, "c-zone") > 3
        before = edited


def test_a_node_the_class_before_the_reload_did_not_know_or_that_changed_since_is_evaluated_whole() -> None:
    nodes = small_nodes(12)
    cached = CachedNodes(nodes, [])
    memo = EquivalenceCache()
    names = [n["metadata"]["name"] for n in nodes]
    filter_nodes(small_set(), pod(), cached.by_name(names[:6]), node_info=cached.info, memo=memo)
    changed = copy.deepcopy(cached.states["node-0"].node)
    changed["metadata"]["labels"]["rack"] = "r0"
    cached.put(changed, cached.states["node-0"].info)
    edited = small_set(zone="z1")
    result = filter_nodes(edited, pod(), cached.by_name(names), node_info=cached.info, memo=memo)
    full = filter_nodes(edited, pod(), cached.known(names), node_info=cached.info)
    assert (result.passed, result.failed, result.unresolvable) == (full.passed, full.failed, full.unresolvable)
    assert (events(result), audits(result)) == (events(full), audits(full))
    assert {**result.failed, **result.unresolvable}["node-0"] == "a-rack/not-r0: rack r0 is full"
    # Nodes 6 to 11 were never asked for: those 6 run b-audit's rule. node-0 changed, but not
    # in what b-audit reads of it (its name): its result stands (``ClassMemo.alike``).
    assert evaluated(result, "b-audit") == 6


# d-team reads the pod's team label: two Deployments of two teams are two classes that share
# a-rack and b-audit.
TEAM = """
---
apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: d-team}
spec:
  filters:
  - name: own-pool
    expression: "node.metadata.?labels[?'pool'].orValue(pod.metadata.labels.team) == pod.metadata.labels.team"
    message: another team's pool
---
apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: e-size}
spec:
  failurePolicy: Ignore
  scores:
  - name: large
    expression: "node.metadata.labels.size == 'large' ? 80 : 20"
  - name: rack
    weight: 2
    expression: "int(node.metadata.labels['rack'].substring(1)) * 30"
---
apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: f-team-score}
spec:
  scores:
  - name: own-pool
    expression: "node.metadata.?labels[?'pool'].orValue('') == pod.metadata.labels.team ? 100 : 0"
"""


def test_the_class_of_another_team_s_deployment_evaluates_only_the_policy_that_reads_the_team() -> None:
    nodes = small_nodes(30)
    for node in nodes[:10]:
        node["metadata"]["labels"]["pool"] = "search"
    cached = CachedNodes(nodes, [])
    names = [n["metadata"]["name"] for n in nodes]
    policies = load_text(SMALL.replace("ZONE", "z9").replace("MESSAGE", "closed") + TEAM, file="small.yaml")
    memo = EquivalenceCache()
    asked = []
    for team in ("search", "vision", "ads"):
        team_pod = pod()
        team_pod["metadata"]["labels"]["team"] = team
        result = filter_nodes(policies, team_pod, cached.by_name(names), node_info=cached.info, memo=memo)
        full = filter_nodes(policies, team_pod, cached.known(names), node_info=cached.info)
        assert (result.passed, result.failed, result.unresolvable) == (full.passed, full.failed, full.unresolvable)
        assert (events(result), audits(result), result.rejections) == (events(full), audits(full), full.rejections)
        assert result.memo_misses == (4 * 30 if team == "search" else 30), "the other teams' pods: a new class of d-team only"
        asked.append({p: evaluated(result, p) for p in ("a-rack", "b-audit", "c-zone", "d-team")})
    assert asked[0]["a-rack"] > 0 and asked[0]["b-audit"] == 30
    # The other teams' classes share every policy but d-team with the first: only d-team ran.
    assert [a["a-rack"] + a["b-audit"] + a["c-zone"] for a in asked[1:]] == [0, 0]
    assert [a["d-team"] for a in asked[1:]] == [asked[0]["d-team"]] * 2
    # So with scores: e-size's raw scores and its errors (nodes without a rack) are the first class's.
    scored = []
    for team in ("search", "vision", "ads"):
        team_pod = pod()
        team_pod["metadata"]["labels"]["team"] = team
        result = score_nodes(policies, team_pod, cached.by_name(names), node_info=cached.info, memo=memo, encode=host_priority)
        plain = score_nodes(policies, team_pod, cached.known(names), node_info=cached.info)
        assert result.scores == plain.scores and events(result) == events(plain) != []
        scored.append((evaluated(result, "e-size"), evaluated(result, "f-team-score")))
    # A class scores once per kind of node its rules read (``ClassMemo.alike``): e-size reads the
    # size and rack (a node without a rack errs, which is reported for that node, so it runs on
    # each such node); f-team-score reads the pool, and each team's pod is its own class there.
    labels = [n["metadata"]["labels"] for n in nodes]
    sizes = 2 * (len({(l["size"], l["rack"]) for l in labels if "rack" in l}) + sum(1 for l in labels if "rack" not in l))
    pools = len({l.get("pool") for l in labels})
    assert scored == [(sizes, pools), (0, pools), (0, pools)] and sizes < 60


@pytest.mark.parametrize("by_name", [False, True], ids=["node-objects", "node-names"])
def test_through_reloads_of_every_kind_and_changes_of_the_cluster_remembered_answers_equal_full_evaluation(by_name: bool) -> None:
    rng = random.Random(11)
    nodes = with_windows(cluster.nodes(80), rng)
    pods = cluster.pods_on(nodes)
    cached = CachedNodes(nodes, pods)
    names = [n["metadata"]["name"] for n in nodes]
    # Edits a GitOps change makes: a rule's test, its message, Audit to Enforce, a rule added.
    variants = [
        EXTRA,
        EXTRA.replace("!= 'r0'", "!= 'r2'"),
        EXTRA.replace("rack r0 is full", "rack r0 is closed"),
        EXTRA.replace("mode: Audit\n", "mode: Enforce\n", 1),
        EXTRA.replace("  - name: late\n", "  - name: not-r3\n    expression: \"node.metadata.?labels[?'rack'].orValue('') != 'r3'\"\n    message: r3\n  - name: late\n", 1),
    ]
    sets = [policy_set(v + MATCHES) for v in variants]
    memo = EquivalenceCache(classes=64)
    templates = [cluster.scheduling_pod(gpus=1), cluster.scheduling_pod(gpus=4)]
    templates[1]["metadata"]["labels"]["team"] = "search"
    streams = [replicas(t) for t in templates]
    policies, hour = sets[0], 1.0
    kept_through_reloads = 0
    for step in range(120):
        change = rng.choice(["reload", "reload", "node", "node-info", "clock", "none"])
        reloaded = False
        if change == "reload":
            reloaded = policies is not (policies := rng.choice(sets))
        elif change == "node":
            state = cached.states[rng.choice(names)]
            node = copy.deepcopy(state.node)
            node["metadata"]["labels"]["rack"] = f"r{rng.randrange(4)}"
            cached.put(node, state.info)
        elif change == "node-info":
            state = cached.states[rng.choice(names)]
            pods = pods + [{"metadata": {"name": f"bound-{step}", "uid": f"bound-{step}"}, "spec": {"nodeName": state.name, "containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": "2"}}}]}}]
            cached.put(state.node, node_info_map([state.node], pods)[state.name])
        elif change == "clock":
            hour = rng.choice([1.0, 5.5, 8.0, 13.0, 23.0])
        pod_ = next(rng.choice(streams))
        if by_name:
            full = filter_nodes(policies, pod_, cached.known(names), node_info=cached.info, now=at(hour))
            result = filter_nodes(policies, pod_, cached.by_name(names), node_info=cached.info, now=at(hour), memo=memo)
            assert (result.passed, result.failed, result.unresolvable) == (full.passed, full.failed, full.unresolvable)
            assert (events(result), audits(result), result.rejections) == (events(full), audits(full), full.rejections)
        else:
            result = same_filter(policies, pod_, cached.known(names), cached.info, at(hour), memo)
        kept_through_reloads += reloaded and result.memo_hits > 0
        given: Any = cached.by_name(names) if by_name else cached.known(names)
        scored = score_nodes(policies, pod_, given, node_info=cached.info, now=at(hour), memo=memo, encode=host_priority)
        plain = score_nodes(policies, pod_, cached.known(names), node_info=cached.info, now=at(hour))
        assert scored.scores == plain.scores and events(scored) == events(plain)
    assert kept_through_reloads > 5, "the first request after a reload found the classes of the policies it left alone"
