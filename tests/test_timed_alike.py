"""Rules that read ``now`` or ``counts`` run on every request; within one request, nodes alike in
what those rules read of a node (a cap per zone reads the node's zone) share one run. Every
answer stays exactly a full evaluation's: counts moving between requests, nodes relabelled,
errors and Audit rejections (which name their node) reported for each node."""

from __future__ import annotations

import copy
import random
from typing import Any

from engine.cel.types.counts import Counts
from engine.cluster.counts import CountIndex
from engine.decisions.filtering import filter_nodes as plain_filter
from engine.equivalence.classes import EquivalenceCache
from engine.equivalence.filtering import filter_nodes
from engine.equivalence.reads import PolicyReads
from engine.policy.loader import load_text
from tests.test_equivalence import CachedNodes, at, audits, events

ZONE = "topology.kubernetes.io/zone"

POLICIES = """
apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: zone-cap}
spec:
  params: {most: 3, zoneKey: topology.kubernetes.io/zone}
  variables:
  - name: inZone
    expression: "counts.inDomain(node, 'topology.kubernetes.io/zone', {'app': pod.metadata.labels.app})"
  filters:
  - name: room
    expression: "node.metadata.?labels[?params.zoneKey].hasValue() && variables.inZone < params.most"
    messageExpression: "'zone %s runs %d of %s'.format([node.metadata.?labels[?params.zoneKey].orValue('none'), variables.inZone, pod.metadata.labels.app])"
---
apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: windows}
spec:
  filters:
  - name: no-window
    # An annotation that is no timestamp is an evaluation error, reported for its node.
    expression: "!has(node.metadata.annotations) || !('w' in node.metadata.annotations) || now < timestamp(node.metadata.annotations.w)"
---
apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: audit-late}
spec:
  failurePolicy: Ignore
  mode: Audit
  filters:
  - name: early
    expression: "now < timestamp('2026-11-21T06:00:00Z') || node.metadata.labels['kind'] != 'late'"
    messageExpression: "'node %s is late'.format([node.metadata.name])"
"""


def node(i: int, rng: random.Random) -> dict[str, Any]:
    labels = {"kubernetes.io/hostname": f"n{i}", "kind": rng.choice(["early", "late"])}
    if i % 9:
        labels[ZONE] = f"zone-{i % 4}"
    annotations = {"w": rng.choice(["2026-11-21T03:00:00Z", "2026-11-21T09:00:00Z", "soon"])} if i % 5 == 0 else {}
    return {"metadata": {"name": f"n{i}", "labels": labels, "annotations": annotations}, "status": {"allocatable": {"cpu": "8", "pods": "110"}}}


def pending(app: str) -> dict[str, Any]:
    return {"metadata": {"name": f"{app}-new", "namespace": "shop", "uid": f"{app}-new", "labels": {"app": app}},
            "spec": {"containers": [{"name": "c"}]}}


def test_the_rules_run_per_request_read_of_a_node_only_its_paths() -> None:
    reads = {p.name: PolicyReads(p) for p in load_text(POLICIES, file="alike.yaml").policies}
    assert reads["zone-cap"].node_paths("timed") == (("metadata", "labels", ZONE),)
    assert reads["windows"].node_paths("timed") == (("metadata", "annotations"), ("metadata", "annotations", "w"))
    assert reads["audit-late"].node_paths("timed") == (("metadata", "labels", "kind"), ("metadata", "name"))


WHOLE = """
apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: mixed}
spec:
  variables:
  - {name: pool, expression: "node.metadata.?labels[?'pool'].orValue('')"}
  - {name: free, expression: "kube.nodeFree(node, nodeInfo, 'cpu')"}
  filters:
  - {name: pool, expression: "variables.pool != 'gpu'", messageExpression: "'pool ' + variables.pool + ' of ' + node.metadata.name"}
  scores:
  - {name: roomy, expression: "variables.free.isGreaterThan(quantity('1')) ? 100 : 0"}
"""


def test_a_class_shares_results_by_what_its_rules_read_and_not_where_one_reads_the_node_whole_or_its_pods() -> None:
    reads = PolicyReads(load_text(WHOLE, file="mixed.yaml").policies[0])
    # The filter reads the pool label (through a variable) and, in its message, the name: each node a kind.
    assert reads.node_paths("filter") == (("metadata", "labels", "pool"), ("metadata", "name"))
    # The score reads nodeInfo and passes the node whole: never shared.
    assert reads.node_paths("score") is None


def test_nodes_alike_share_a_run_of_the_rules_that_read_counts_and_every_answer_is_a_full_evaluation_s() -> None:
    rng = random.Random(11)
    policies = load_text(POLICIES, file="alike.yaml")
    cluster = [node(i, rng) for i in range(60)]
    names = [n["metadata"]["name"] for n in cluster]
    bound: list[dict[str, Any]] = []
    cached = CachedNodes(cluster, bound, history=16)
    index = CountIndex.build(policies.counts, cluster, bound)
    memo = EquivalenceCache()
    zone_cap_runs: list[int] = []
    reported = {"errors": 0, "audit": 0}
    for step in range(120):
        app = rng.choice(["web", "api"])
        change = rng.choice(["bind", "bind", "relabel", "none"])
        if change == "bind":
            name = rng.choice(names)
            placed = {**pending(app), "metadata": {**pending(app)["metadata"], "name": f"{app}-{step}", "uid": f"uid-{step}"}}
            cached.bind(placed, name, bound, index)
        elif change == "relabel":
            state = cached.states[rng.choice(names)]
            moved = copy.deepcopy(state.node)
            moved["metadata"]["labels"][ZONE] = rng.choice(["zone-0", "zone-1", "zone-7"])
            moved["metadata"]["labels"]["kind"] = rng.choice(["early", "late"])
            cached.put(moved, state.info)
            index.set_node(moved["metadata"]["name"], moved)
        now = at(rng.choice([1.0, 5.0, 7.0, 10.0]))
        counts = Counts(index)
        window = names[step % 5:]
        pod = pending(app)
        full = plain_filter(policies, pod, cached.known(window), node_info=cached.info, counts=counts, now=now)
        result = filter_nodes(policies, pod, cached.by_name(window), node_info=cached.info, memo=memo, counts=counts, now=now)
        assert (result.passed, result.failed, result.unresolvable) == (full.passed, full.failed, full.unresolvable), step
        assert (events(result), audits(result), result.rejections) == (events(full), audits(full), full.rejections), step
        zones = {cached.states[n].node["metadata"]["labels"].get(ZONE) for n in window}
        runs = dict(((p, r), n) for p, r, n in result.rule_counts)[("zone-cap", "room")]
        assert runs <= len(zones), (step, runs, zones)
        zone_cap_runs.append(runs)
        reported["errors"] += len(full.errors)
        reported["audit"] += len(full.audit_rejections)
    assert sum(zone_cap_runs) < 120 * 8, "a run per zone, not per node"
    assert reported["errors"] > 100 and reported["audit"] > 100, reported  # each named its node, shared runs or not
