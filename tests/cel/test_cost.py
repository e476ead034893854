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
    assert estimate("node.metadata.labels['zone'] == pod.metadata.labels['zone']").cost == 9


def test_nested_comprehensions_multiply_by_the_sizes_they_iterate() -> None:
    est = estimate("params.xs.all(a, params.xs.all(b, a + b >= 0))")
    assert est.cost == 4_052_702
    assert est.reason == "nested all() over 900 x 900 items"


def test_a_single_loop_over_a_known_list_costs_its_length_times_its_body() -> None:
    est = estimate("params.xs.exists(x, x == 3)")
    assert est.cost == 900 * 3 + 2  # per item: the step, x, ==; the range: params, .xs
    assert est.reason == "exists() over 900 items"


def test_loops_over_labels_use_the_assumed_label_count() -> None:
    assert estimate("node.metadata.labels.all(k, k != '')").reason == f"all() over {shapes.LABELS_MAX} items"


def test_a_pods_containers_use_the_container_assumption_and_other_lists_the_default() -> None:
    assert estimate("pod.spec.containers.all(c, true)").reason == f"all() over {shapes.CONTAINERS_MAX} items"
    assert estimate("node.spec.taints.all(t, true)").reason == f"all() over {shapes.DEFAULT_LIST} items"


def test_admission_lists_are_as_large_as_kubernetes_cluster_limits() -> None:
    assert estimate("pods.exists(p, true)").reason == "exists() over 150,000 items"
    assert estimate("nodes.exists(n, true)").reason == "exists() over 5,000 items"


def test_find_all_costs_a_scan_and_each_possible_result_unless_it_has_a_limit() -> None:
    unbounded = estimate("pod.metadata.annotations['a'].findAll('[0-9]+')")
    assert unbounded.reason == "findAll() with up to 262,145 results"
    assert unbounded.cost > 2_000_000
    assert estimate("pod.metadata.annotations['a'].findAll('[0-9]+', 5)").cost < 100_000


def test_string_scans_cost_one_unit_per_ten_characters() -> None:
    # a 63-character label value and a 1-character argument: 7 units for the scan,
    # 1 for the call, 4 for node, .metadata, .labels and ['a']
    assert estimate("node.metadata.labels['a'].indexOf('x')").cost == 7 + 1 + 4


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
