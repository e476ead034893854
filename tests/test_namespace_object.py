"""``namespaceObject``: the pod's Namespace in every kind of expression, null when kpe does not
know it; the equivalence cache tells pods of namespaces that differ in what a policy reads;
``kpe test`` cases, ``kpe explain`` and snapshots carry namespaces."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from engine.cluster.anonymise import Anonymiser
from engine.cluster.projection import namespace_view, namespaces_by_name
from engine.cluster.snapshot import Snapshot
from engine.decisions.admission import admit
from engine.decisions.filtering import filter_nodes
from engine.decisions.preemption import preempt
from engine.decisions.scoring import score_nodes
from engine.equivalence.classes import EquivalenceCache
from engine.equivalence import filtering as memo_filtering
from engine.policy.loader import load_text
from engine.reports.policytest import run_test_files

POLICY = """
apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: by-namespace}
spec:
  match:
    expression: "namespaceObject == null || namespaceObject.metadata.?labels[?'kpe'].orValue('on') != 'off'"
  variables:
  - name: tier
    expression: "namespaceObject == null ? 'unknown' : namespaceObject.metadata.?labels[?'tier'].orValue('none')"
  filters:
  - name: tier-pool
    expression: "node.metadata.labels['pool'] == variables.tier"
    messageExpression: "'node pool ' + node.metadata.labels['pool'] + ' is not for tier ' + variables.tier"
  scores:
  - name: gold
    expression: "namespaceObject != null && namespaceObject.metadata.?annotations[?'gold'].orValue('') == 'yes' && node.metadata.labels['pool'] == 'gold' ? 100 : 0"
  admission:
    expression: "namespaceObject != null"
    message: the namespace is not known yet
  preemption:
    victim: "victim.metadata.namespace != namespaceObject.metadata.name"
"""

NODES = [{"metadata": {"name": f"n-{pool}", "labels": {"pool": pool}}} for pool in ("gold", "silver", "unknown")]


def pod(namespace: str = "shop", name: str = "api-1") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace}, "spec": {"containers": [{"name": "c", "image": "x"}]}}


def namespace(name: str, *, labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "uid": "0f0e", "labels": labels or {}, "annotations": annotations or {}, "managedFields": [{"manager": "kubectl"}]}
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": meta, "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}


def test_a_namespace_is_kept_as_its_name_labels_annotations_and_phase() -> None:
    view = namespace_view(namespace("shop", labels={"tier": "gold"}, annotations={"a": "b"}))
    assert view == {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop", "labels": {"tier": "gold"}, "annotations": {"a": "b"}},
                    "status": {"phase": "Active"}}
    assert list(namespaces_by_name([namespace("a"), namespace("b")])) == ["a", "b"]


def test_every_kind_of_expression_reads_the_pods_namespace_object() -> None:
    policies = load_text(POLICY)
    known = namespaces_by_name([namespace("shop", labels={"tier": "gold"}, annotations={"gold": "yes"})])
    result = filter_nodes(policies, pod(), NODES, namespaces=known)
    assert result.passed == ["n-gold"]
    assert result.unresolvable == {"n-silver": "by-namespace/tier-pool: node pool silver is not for tier gold",
                             "n-unknown": "by-namespace/tier-pool: node pool unknown is not for tier gold"}
    assert score_nodes(policies, pod(), NODES, namespaces=known).scores == {"n-gold": 10, "n-silver": 0, "n-unknown": 0}
    assert admit(policies, pod(), namespaces=known).admitted
    victims = {"n-gold": [pod("shop", "same"), pod("other", "elsewhere")]}
    assert preempt(policies, pod(), victims, nodes={"n-gold": NODES[0]}, namespaces=known).rejected == {
        "n-gold": "by-namespace/preemption.victim: victim shop/same may not be preempted"
    }


def test_a_namespace_kpe_does_not_know_is_null() -> None:
    policies = load_text(POLICY)
    others = namespaces_by_name([namespace("other", labels={"tier": "gold"})])
    assert filter_nodes(policies, pod(), NODES, namespaces=others).passed == ["n-unknown"]
    assert filter_nodes(policies, pod(), NODES).passed == ["n-unknown"]
    decision = admit(policies, pod())
    assert not decision.admitted and [d.message for d in decision.pending] == ["by-namespace: the namespace is not known yet"]


def test_a_match_expression_reads_it_too() -> None:
    off = namespaces_by_name([namespace("shop", labels={"kpe": "off"})])
    assert filter_nodes(load_text(POLICY), pod(), NODES, namespaces=off).matched == []


def test_remembered_answers_follow_a_change_of_the_namespace_labels_a_policy_reads() -> None:
    policies = load_text(POLICY)
    memo = EquivalenceCache()
    gold = namespaces_by_name([namespace("shop", labels={"tier": "gold"})])
    silver = namespaces_by_name([namespace("shop", labels={"tier": "silver"})])
    off = namespaces_by_name([namespace("shop", labels={"tier": "silver", "kpe": "off"})])
    for i, (known, passed) in enumerate([(gold, ["n-gold"]), (silver, ["n-silver"]), (gold, ["n-gold"]), (None, ["n-unknown"]),
                                         (off, ["n-gold", "n-silver", "n-unknown"])]):
        result = memo_filtering.filter_nodes(policies, pod(name=f"api-{i}"), NODES, memo=memo, namespaces=known)
        assert result.passed == passed, (i, known)
    # Replicas of one namespace share their class: the third request was answered from memory.
    again = memo_filtering.filter_nodes(policies, pod(name="api-9"), NODES, memo=memo, namespaces=gold)
    assert again.passed == ["n-gold"] and again.memo_hits == 3


def test_a_namespace_change_that_no_policy_reads_keeps_the_class() -> None:
    policies = load_text(POLICY)
    memo = EquivalenceCache()
    first = namespaces_by_name([namespace("shop", labels={"tier": "gold"}, annotations={"note": "1"})])
    second = namespaces_by_name([namespace("shop", labels={"tier": "gold"}, annotations={"note": "2"})])
    memo_filtering.filter_nodes(policies, pod(), NODES, memo=memo, namespaces=first)
    assert memo_filtering.filter_nodes(policies, pod(name="api-2"), NODES, memo=memo, namespaces=second).memo_hits == 3


def test_policy_test_cases_give_namespaces_as_fixtures_or_inline(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text(POLICY)
    (tmp_path / "t.yaml").write_text("""
apiVersion: kpe.dev/v1alpha1
kind: PolicyTest
metadata: {name: ns}
spec:
  policies: [p.yaml]
  fixtures:
    nodes:
      n-gold: {metadata: {labels: {pool: gold}}}
      n-unknown: {metadata: {labels: {pool: unknown}}}
    namespaces:
      shop: {metadata: {labels: {tier: gold}}}
  cases:
  - name: the fixture is the pod's namespace
    pod: {metadata: {name: a, namespace: shop}}
    expect: {filter: {pass: [n-gold]}}
  - name: inline, and none
    pod: {metadata: {name: a, namespace: shop}}
    namespaces: []
    expect: {filter: {pass: [n-unknown]}}
  - name: a typo
    pod: {metadata: {name: a, namespace: shop}}
    namespaces: [shpo]
    expect: {filter: {pass: [n-gold]}}
""")
    results = run_test_files([tmp_path / "t.yaml"])
    assert [r.passed for r in results] == [True, True, False]
    assert results[2].error is not None
    assert results[2].error.endswith("error[KPE500] ns: spec.cases[2].namespaces[0]: case 'a typo': unknown namespace fixture 'shpo' (known: shop)")


def test_a_snapshot_keeps_namespaces_as_the_cache_does_and_anonymises_their_names() -> None:
    snapshot = Snapshot.from_dict({"apiVersion": "kpe.dev/v1alpha1", "kind": "ClusterSnapshot", "nodes": [], "pods": [],
                                   "namespaces": [namespace("shop", annotations={"secret": "s", "kpe.dev/allow-gpu-nodes": "true"})]})
    assert snapshot.namespaces == [namespace_view(namespace("shop", annotations={"secret": "s", "kpe.dev/allow-gpu-nodes": "true"}))]
    assert json.loads(json.dumps(snapshot.to_dict()))["namespaces"] == snapshot.namespaces
    older = Snapshot.from_dict({"apiVersion": "kpe.dev/v1alpha1", "kind": "ClusterSnapshot", "nodes": [], "pods": []})
    assert older.namespaces == []
    anonymiser = Anonymiser(b"0123456789abcdef")
    hidden = anonymiser.namespace(snapshot.namespaces[0])
    assert hidden["metadata"]["name"] == anonymiser.pod(pod())["metadata"]["namespace"] != "shop"
    assert hidden["metadata"]["annotations"] == {"kpe.dev/allow-gpu-nodes": "true"}
