"""How scores combine across policies (docs/guides/scores.md): normalised per policy over
the request's nodes, then a weighted mean per node, stretched to 0..10. Decision tables in
cases/scores.yaml; properties below, with and without the equivalence cache."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
import yaml

from engine.cluster.nodeinfo import node_info_map
from engine.decisions.scoring import score_nodes
from engine.equivalence.classes import EquivalenceCache
from engine.equivalence.scoring import score_nodes as remembered_score_nodes
from engine.policy.loader import load_text

CASES: list[dict[str, Any]] = yaml.safe_load((Path(__file__).parent / "cases" / "scores.yaml").read_text())


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_scores_decision_table(case: dict[str, Any]) -> None:
    policies = load_text(case["policies"], file="case.yaml")
    nodes = case["nodes"]
    info = node_info_map(nodes, case.get("clusterPods", []))
    assert score_nodes(policies, case["pod"], nodes, node_info=info).scores == case["expect"]["score"]
    # The same with the equivalence cache, cold and then from memory.
    memo = EquivalenceCache()
    for _ in range(2):
        assert remembered_score_nodes(policies, case["pod"], nodes, node_info=info, memo=memo).scores == case["expect"]["score"]


def _policy(name: str, label: str, weight: int) -> str:
    return f"""apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {{name: {name}}}
spec:
  scores:
  - {{name: r, expression: "int(node.metadata.labels['{label}'])", weight: {weight}}}
"""


FLAT = """apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: zz-flat}
spec:
  scores:
  - {name: same-everywhere, expression: "37", weight: 50}
  - {name: also-same, expression: "node.metadata.name != '' ? 80 : 0", weight: 7}
"""


def _nodes(rng: random.Random, count: int) -> list[dict[str, Any]]:
    return [{"metadata": {"name": f"n{i}", "labels": {"a": str(rng.randint(0, 100)), "b": str(rng.randint(0, 100))}}} for i in range(count)]


POD = {"metadata": {"name": "p", "namespace": "default"}}


def test_a_policy_that_scores_every_node_alike_does_not_change_the_ranking_or_the_scores() -> None:
    rng = random.Random(28)
    for _ in range(40):
        nodes = _nodes(rng, rng.randint(2, 8))
        two = _policy("a", "a", rng.randint(1, 5)) + "---\n" + _policy("b", "b", rng.randint(1, 5))
        without = score_nodes(load_text(two), POD, nodes).scores
        with_flat = score_nodes(load_text(two + "---\n" + FLAT), POD, nodes).scores
        assert with_flat == without
        memo = EquivalenceCache()
        for _ in range(2):
            assert remembered_score_nodes(load_text(two + "---\n" + FLAT), POD, nodes, memo=memo).scores == without


def test_the_full_0_to_10_range_is_used_when_policies_disagree() -> None:
    rng = random.Random(10)
    spread = 0
    for _ in range(40):
        nodes = _nodes(rng, rng.randint(2, 8))
        policies = load_text(_policy("a", "a", rng.randint(1, 5)) + "---\n" + _policy("b", "b", rng.randint(1, 5)))
        scores = score_nodes(policies, POD, nodes).scores
        spread += len(set(scores.values())) > 1
        if len(set(scores.values())) > 1:
            assert min(scores.values()) == 0 and max(scores.values()) == 10, scores
    assert spread >= 35  # (all alike only when the policies cancel out exactly)


def test_the_scores_are_normalised_over_the_nodes_of_each_request_even_when_remembered() -> None:
    rng = random.Random(3)
    nodes = _nodes(rng, 12)
    policies = load_text(_policy("a", "a", 2) + "---\n" + _policy("b", "b", 1))
    memo = EquivalenceCache()
    for _ in range(30):
        window = rng.sample(nodes, rng.randint(2, 12))
        remembered = remembered_score_nodes(policies, POD, window, memo=memo)
        assert remembered.scores == score_nodes(policies, POD, window).scores
    assert remembered.memo_hits > 0
