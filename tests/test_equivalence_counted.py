"""Filter rules that read ``counts`` remembered per node with the counts they read
(``engine.equivalence.counted``): reused while those counts stay, evaluated again when one
moves, and every answer exactly a full evaluation's as pods bind, nodes change and the
counts' variables are of the node or of the pod alone."""

from __future__ import annotations

import copy
import random
from typing import Any, cast

from engine.cel.types.counts import Counts
from engine.cluster.counts import CountIndex
from engine.cluster.nodeinfo import node_info_map
from engine.decisions.filtering import FilterResult, filter_nodes as plain_filter
from engine.equivalence.classes import EquivalenceCache
from engine.equivalence.filtering import filter_nodes
from engine.equivalence.reads import PolicyReads
from engine.policy.loader import load, load_text
from engine.policy.model import PolicySet
from tests.test_equivalence import ROOT, CachedNodes, audits, events

ZONES = ["a", "b", "c"]

# A node-scoped count (a variable that reads node), a count of the whole cluster read straight
# by the rule, the same count read through a variable that reads no node (the compiler inlines
# it into the rule all the same), and an Audit cap whose message formats the count.
CAPS = """
apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: rack-cap}
spec:
  match: {podSelector: {matchExpressions: [{key: app, operator: Exists}]}}
  variables:
  - name: onRack
    expression: "counts.inDomain(node, 'rack', {'app': pod.metadata.labels.app})"
  filters:
  - name: rack-has-room
    expression: "node.metadata.?labels[?'rack'].hasValue() && variables.onRack < 2"
    messageExpression: "'rack runs %d pods of %s'.format([variables.onRack, pod.metadata.labels.app])"
---
apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: app-cluster-cap}
spec:
  match: {podSelector: {matchExpressions: [{key: app, operator: Exists}]}}
  filters:
  - name: few-in-cluster
    expression: "counts.cluster({'app': pod.metadata.labels.app}) < 9 || node.metadata.labels['rack'] == 'r0'"
---
apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: team-cap-by-variable}
spec:
  match: {podSelector: {matchExpressions: [{key: team, operator: Exists}]}}
  variables:
  - name: teamPods
    expression: "counts.cluster({'team': pod.metadata.labels.team})"
  filters:
  - name: team-under-cap
    expression: "variables.teamPods < 7 || node.metadata.labels['rack'] == 'r1'"
---
apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: zone-watch}
spec:
  mode: Audit
  match: {podSelector: {matchExpressions: [{key: app, operator: Exists}]}}
  filters:
  - name: zone-quiet
    expression: "counts.inDomain(node, 'topology.kubernetes.io/zone', {'app': pod.metadata.labels.app}) < 2"
    messageExpression: "'zone runs %d'.format([counts.inDomain(node, 'topology.kubernetes.io/zone', {'app': pod.metadata.labels.app})])"
"""


def caps() -> PolicySet:
    return load_text(CAPS, file="caps.yaml")


def node(i: int) -> dict[str, Any]:
    return {
        "metadata": {"name": f"n{i:02d}", "labels": {"rack": f"r{i % 4}", "topology.kubernetes.io/zone": ZONES[i % 3]}},
        "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}},
    }


def pod(app: str, team: str, uid: str) -> dict[str, Any]:
    return {
        "metadata": {"name": uid, "namespace": "default", "uid": uid, "labels": {"app": app, "team": team}},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "100m"}}}]},
    }


def evaluations(result: FilterResult, policy: str) -> int:
    return sum(n for p, _, n in result.rule_counts if p == policy)


def test_rules_that_read_counts_are_reused_while_their_counts_stay_and_every_answer_is_a_full_evaluation_s() -> None:
    rng = random.Random(11)
    policies = caps()
    cluster = [node(i) for i in range(24)]
    names = [n["metadata"]["name"] for n in cluster]
    bound: list[dict[str, Any]] = []
    cached = CachedNodes(cluster, bound, history=64)
    index = CountIndex.build(policies.counts, cluster, bound)
    memo = EquivalenceCache()
    evaluated = {"rack-cap": 0, "app-cluster-cap": 0, "team-cap-by-variable": 0, "zone-watch": 0}
    asked = 0
    verdicts: set[tuple[str, bool]] = set()
    for step in range(240):
        change = rng.choice(["bind", "bind", "node", "none"])
        if change == "bind":
            placed = pod(rng.choice(["web", "api", "db"]), rng.choice(["t1", "t2"]), f"bound-{step}")
            name = rng.choice(names)
            placed["spec"]["nodeName"] = name
            placed["status"] = {"phase": "Running"}
            bound.append(placed)
            state = cached.states[name]
            cached.put(cast(dict[str, Any], state.node), node_info_map([state.node], bound)[name])
            index.set_pod(f"default/{placed['metadata']['name']}", placed)
        elif change == "node":
            # Its rack changes: its counts move from one rack to another (the index is told, as the cache tells it).
            state = cached.states[rng.choice(names)]
            changed = cast(dict[str, Any], copy.deepcopy(state.node))
            changed["metadata"]["labels"]["rack"] = f"r{rng.randrange(4)}"
            cached.put(changed, cast(dict[str, Any], state.info))
            index.set_node(changed["metadata"]["name"], changed)
        asking = pod(rng.choice(["web", "api", "db"]), rng.choice(["t1", "t2"]), f"pending-{step}")
        counts = Counts(index)
        window = names[step % 5:] if step % 2 else names
        full = plain_filter(policies, asking, cached.known(window), node_info=cached.info, counts=counts)
        result = filter_nodes(policies, asking, cached.by_name(window), node_info=cached.info, memo=memo, counts=counts)
        assert (result.passed, result.failed, result.unresolvable) == (full.passed, full.failed, full.unresolvable), step
        assert (events(result), audits(result), result.rejections) == (events(full), audits(full), full.rejections), step
        for policy in evaluated:
            evaluated[policy] += evaluations(result, policy)
        asked += len(window)
        verdicts.update((n, n in full.passed) for n in ("n00", "n01", "n02", "n03"))
    assert len(verdicts) == 8, "every node was both passed and rejected at some point: the caps were reached and freed"
    assert all(n < asked / 2 for n in evaluated.values()), (evaluated, asked)  # binds every other request: a third of each window is evaluated again


def test_a_rule_is_remembered_with_its_counts_when_it_reads_counts_and_not_the_clock() -> None:
    policies = {p.name: p for p in caps().policies}
    counted = {name: PolicyReads(p).counted(p.filters[0].expression, p.filters[0].message_expression) for name, p in policies.items()}
    assert counted == {"rack-cap": True, "app-cluster-cap": True, "team-cap-by-variable": True, "zone-watch": True}
    shipped = {p.name: p for p in load([ROOT / "policies"]).policies}
    drain = shipped["maintenance-drain"]
    assert not PolicyReads(drain).counted(drain.filters[0].expression, drain.filters[0].message_expression), "it reads now"
    cap = shipped["app-zone-cap"]
    assert PolicyReads(cap).counted(cap.filters[0].expression, cap.filters[0].message_expression)


def test_a_count_rule_that_failed_to_evaluate_is_evaluated_and_reported_on_every_request() -> None:
    text = CAPS.split("---")[0].replace("variables.onRack < 2", "variables.onRack < 2 && node.metadata.labels['missing'] == 'x'")
    policies = load_text(text, file="caps.yaml")
    cluster = [node(i) for i in range(6)]
    names = [n["metadata"]["name"] for n in cluster]
    cached = CachedNodes(cluster, [])
    index = CountIndex.build(policies.counts, cluster, [])
    memo = EquivalenceCache()
    for step in range(3):
        result = filter_nodes(policies, pod("web", "t1", f"p{step}"), cached.by_name(names), node_info=cached.info, memo=memo, counts=Counts(index))
        assert len(result.errors) == len(names), step
        assert evaluations(result, "rack-cap") == len(names), step
