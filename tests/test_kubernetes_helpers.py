"""kpe's Kubernetes helpers against Kubernetes' own Go functions, on the seeded pods and nodes
tests/data/kubernetes-helpers/gen generates (its output, cases.json, is committed; README there).

Per helper, every case must agree unless known-differences.yaml lists it with its reason. Print
the counts with ``python -m pytest -q -s tests/test_kubernetes_helpers.py -k counts``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from engine.cel.ext import kuberesources, kubescheduling
from engine.cel.ext.quantity import parse_quantity
from engine.cluster import kubefilters
from engine.cluster.nodeinfo import node_info_map
from engine.policy.selectors import parse_selector

DATA = Path(__file__).parent / "data" / "kubernetes-helpers"
CASES: dict[str, Any] = json.loads((DATA / "cases.json").read_text()) if (DATA / "cases.json").exists() else {}
KNOWN: dict[str, dict[str, str]] = yaml.safe_load((DATA / "known-differences.yaml").read_text()) or {}


def _requests(case: dict[str, Any]) -> bool:
    kpe = {k: q for k, q in kuberesources.pod_requests(case["pod"]).items() if q.sign()}
    go = {k: parse_quantity(v) for k, v in case["requests"].items() if parse_quantity(v).sign()}
    return kpe == go


def _requested(case: dict[str, Any]) -> bool:
    node = case["node"]
    info = node_info_map([node], case["pods"] or [])[node["metadata"]["name"]]
    kpe = {k: kuberesources.scheduler_units(k, parse_quantity(v)) for k, v in info["requested"].items()}
    return {k: v for k, v in kpe.items() if v} == {k: v for k, v in case["requested"].items() if v}


def _fits(case: dict[str, Any]) -> bool:
    node = case["node"]
    info = node_info_map([node], case["pods"] or [])[node["metadata"]["name"]]
    reasons, _ = kubefilters.insufficient(case["pod"], node, info)
    return sorted(reasons) == (case["fits"] or [])


def _affinity(case: dict[str, Any]) -> bool:
    return kubescheduling.pod_node_affinity_matches(case["pod"], case["node"], "test") == case["affinity"]


def _taints(case: dict[str, Any]) -> bool:
    untolerated = kubescheduling.untolerated_taints(case["pod"], case["node"], "test")
    return (untolerated[0].get("key") if untolerated else None) == case["untolerated"]


def _selector(case: dict[str, Any]) -> bool:
    _, problems = parse_selector(case["selector"])
    return (not problems) == case["valid"]


HELPERS: dict[str, tuple[str, Callable[[dict[str, Any]], bool]]] = {
    "kube.podRequests (PodRequests)": ("podRequests", _requests),
    "nodeInfo.requested (NodeInfo.Requested)": ("nodes", _requested),
    "NodeResourcesFit (noderesources.Fits)": ("nodes", _fits),
    "kube.podNodeAffinityMatches (GetRequiredNodeAffinity.Match)": ("nodes", _affinity),
    "kube.untoleratedTaints (FindMatchingUntoleratedTaint)": ("nodes", _taints),
    "podSelector (ValidateLabelSelector)": ("labelSelectors", _selector),
}


def _disagreements(helper: str) -> tuple[int, list[int]]:
    section, check = HELPERS[helper]
    cases = CASES.get(section) or []
    return len(cases), [i for i, case in enumerate(cases) if not check(case)]


pytestmark = pytest.mark.skipif(not CASES, reason="tests/data/kubernetes-helpers/cases.json not generated")


@pytest.mark.parametrize("helper", list(HELPERS))
def test_kpe_s_helper_agrees_with_kubernetes_go_code_on_every_generated_case(helper: str) -> None:
    _, wrong = _disagreements(helper)
    known = {int(k) for k in (KNOWN.get(helper) or {})}
    assert sorted(set(wrong) - known) == [], f"{helper}: cases that disagree with Kubernetes"
    assert sorted(known - set(wrong)) == [], f"{helper}: known-differences.yaml lists cases that agree now"


def test_known_differences_each_have_a_reason() -> None:
    assert set(KNOWN) <= set(HELPERS)
    assert all(isinstance(r, str) and r.strip() for entries in KNOWN.values() for r in (entries or {}).values())


def test_print_agreement_counts_per_helper() -> None:
    print(f"\nagreement with Kubernetes {CASES.get('kubernetes')} (seed {CASES.get('seed')}):")
    for helper in HELPERS:
        total, wrong = _disagreements(helper)
        print(f"  {helper}: {total - len(wrong)}/{total} agree")
