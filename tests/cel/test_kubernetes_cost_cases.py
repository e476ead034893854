"""The cases of Kubernetes' CEL cost tests (k8s.io/apiserver/pkg/cel/library/cost_test.go),
extracted by ``tests/data/kubernetes-cel/extract.py --costs``, run through kpe's static
estimate in Kubernetes' units (engine/cel/checker/kubecost.py). Every case whose estimate
is not Kubernetes' range is listed with its reason in kubernetes_cost_known_differences.yaml."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from engine.cel import default_library
from engine.cel.checker import kubecost
from engine.cel.parser.parser import parse

DATA = Path(__file__).resolve().parents[1] / "data" / "kubernetes-cel" / "cost.json"
KNOWN = yaml.safe_load((Path(__file__).parent / "kubernetes_cost_known_differences.yaml").read_text()) or {}
CASES = json.loads(DATA.read_text())["cases"]
# The sizes Kubernetes' cost test gives values the expression does not size itself
# (its testCostEstimator): strings and bytes of up to 12, anything else unknown.
TEST_SIZES = kubecost.Sizes(string=kubecost.Size(0, 12), list=kubecost.UNKNOWN, map=kubecost.UNKNOWN)


def kpe_estimate(expr: str) -> tuple[int, int]:
    cost = kubecost.estimate(parse(expr), {"authorizer": kubecost.DYN}, TEST_SIZES, namespaces=default_library().namespaces)
    return cost.lo, cost.hi


def _param(case: dict[str, object]) -> object:
    marks = [pytest.mark.xfail(strict=True, reason=KNOWN[case["id"]])] if case["id"] in KNOWN else []
    return pytest.param(case, id=str(case["id"]), marks=marks)


@pytest.mark.parametrize("case", [_param(c) for c in CASES])
def test_kpe_estimates_the_cost_kubernetes_own_test_expects(case: dict[str, object]) -> None:
    assert kpe_estimate(str(case["expr"])) == tuple(case["estimate"])  # type: ignore[arg-type]


def test_every_known_cost_difference_names_a_real_case_and_gives_its_reason() -> None:
    ids = {c["id"] for c in CASES}
    assert sorted(set(KNOWN) - ids) == []
    assert [k for k, reason in KNOWN.items() if not (isinstance(reason, str) and reason.strip())] == []


def test_the_cost_cases_of_every_library_kubernetes_tests_are_extracted() -> None:
    tests = {str(c["id"]).split("/")[0] for c in CASES}
    assert {"TestListsCost", "TestStringLibrary", "TestSetsCost", "TestCIDRCost", "TestQuantityCost", "TestTwoVariableComprehensionCost"} <= tests
