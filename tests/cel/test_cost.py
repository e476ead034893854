"""The static cost estimate (engine/cel/checker/cost.py): comprehensions multiply by what
they iterate, string functions cost by the strings they read, sizes come from the
documented assumptions, and the reason names what drives the cost."""

from __future__ import annotations

import pytest

from engine.cel.checker import cost, shapes
from engine.cel.parser.parser import parse

ROOTS = shapes.kubernetes_roots({"xs": list(range(900)), "zone": "eu-west-1a"})


def estimate(text: str) -> cost.Estimate:
    return cost.estimate(parse(text), ROOTS)[0]


def test_a_label_comparison_costs_a_handful_of_units() -> None:
    # 4 per side (node, .metadata, .labels, ['zone']); == on two strings of up to 63
    # characters: 0.1 per character of the shorter, rounded up (Kubernetes' units)
    assert estimate("node.metadata.labels['zone'] == pod.metadata.labels['zone']").cost == 4 + 4 + 7


def test_nested_comprehensions_multiply_by_the_sizes_they_iterate() -> None:
    est = estimate("params.xs.all(a, params.xs.all(b, a + b >= 0))")
    # inner: params.xs (2), the result (1), 900 x (loop condition 2, step 1, a + b >= 0: 4);
    # outer: params.xs, the result, 900 x (condition, step and the inner all())
    assert est.cost == 2 + 1 + 900 * (2 + 1 + (2 + 1 + 900 * (2 + 1 + 4))) == 5_675_403
    assert est.reason == "nested all() over 900 x 900 items"


def test_a_single_loop_over_a_known_list_costs_its_length_times_its_body() -> None:
    est = estimate("params.xs.exists(x, x == 3)")
    # the range (params, .xs: 2), the result (1); per item: cel-go's loop condition
    # @not_strictly_false(!__result__) (3), the step __result__ || ... (1), x == 3 (2)
    assert est.cost == 2 + 1 + 900 * (3 + 1 + 2)
    assert est.reason == "exists() over 900 items"


def test_loops_over_labels_use_the_assumed_label_count() -> None:
    assert estimate("node.metadata.labels.all(k, k != '')").reason == f"all() over {shapes.LABELS_MAX} items"


def test_a_pods_containers_use_the_container_assumption_and_other_lists_the_default() -> None:
    assert estimate("pod.spec.containers.all(c, true)").reason == f"all() over {shapes.CONTAINERS_MAX} items"
    assert estimate("node.spec.taints.all(t, true)").reason == f"all() over {shapes.DEFAULT_LIST} items"


def test_admission_lists_are_as_large_as_kubernetes_cluster_limits() -> None:
    assert estimate("pods.exists(p, true)").reason == "exists() over 150,000 items"
    assert estimate("nodes.exists(n, true)").reason == "exists() over 5,000 items"


def test_find_all_costs_its_scan_times_a_quarter_unit_per_pattern_character() -> None:
    # (262,144 + 1) characters x 0.1, times ceil(6 x 0.25); 4 for the annotation's path
    unbounded = estimate("pod.metadata.annotations['a'].findAll('[0-9]+')")
    assert unbounded.reason == "findAll() with up to 262,145 results"
    assert unbounded.cost == 26_215 * 2 + 4
    assert estimate("pod.metadata.annotations['a'].findAll('[0-9]+', 5)").cost == 26_215 * 2 + 4


def test_string_scans_cost_one_unit_per_ten_characters() -> None:
    # a 63-character label value: 7 units for the scan (Kubernetes charges no unit for
    # the call itself), 4 for node, .metadata, .labels and ['a']
    assert estimate("node.metadata.labels['a'].indexOf('x')").cost == 7 + 4


def test_concatenation_grows_the_string_size_it_passes_on() -> None:
    est = estimate("params.zone + params.zone")
    assert est.shape.chars == 20
    assert est.reason == "_+_ building a string of up to 20 characters"


def test_a_conditional_costs_its_condition_and_its_dearer_branch() -> None:
    cheap, dear = estimate("true"), estimate("params.xs.all(x, x > 0)")
    assert estimate("1 > 0 ? true : params.xs.all(x, x > 0)").cost == 1 + dear.cost + cheap.cost


@pytest.mark.parametrize(
    "text",
    [
        "pod.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms.exists(term, "
        "term.matchExpressions.all(e, e.operator == 'In' ? (e.key in node.metadata.labels && node.metadata.labels[e.key] in e.values) "
        ": e.operator == 'Exists' ? e.key in node.metadata.labels : true))",
        "node.spec.taints.all(t, t.effect != 'NoSchedule' || pod.spec.tolerations.exists(tol, tol.key == t.key && "
        "(tol.operator == 'Exists' || tol.value == t.value)))",
        "nodeInfo.pods.filter(p, p.metadata.namespace == pod.metadata.namespace).size() < 10",
    ],
)
def test_the_expressions_real_policies_write_stay_well_under_the_default_limit(text: str) -> None:
    assert estimate(text).cost < 1_000_000
