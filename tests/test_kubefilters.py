"""kube-scheduler's own filters and its preemption dry run, as kpe checks them for
`kpe explain pod` and `kpe diff` (engine/cluster/kubefilters.py), against the table in
tests/cases/kube-filters.yaml."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from engine.cluster import kubefilters
from engine.cluster.nodeinfo import node_info_map, pod_name

TABLE: dict[str, list[dict[str, Any]]] = yaml.safe_load((Path(__file__).parent / "cases" / "kube-filters.yaml").read_text())


def ids(cases: list[dict[str, Any]]) -> list[str]:
    return [c["name"] for c in cases]


@pytest.mark.parametrize("case", TABLE["filters"], ids=ids(TABLE["filters"]))
def test_kube_scheduler_s_filters_say_what_the_table_says(case: dict[str, Any]) -> None:
    info = node_info_map([case["node"]], case["pods"])
    verdict = kubefilters.check(case["pod"], case["node"], info[case["node"]["metadata"]["name"]])
    assert verdict.reasons == case["reasons"]
    assert verdict.unresolvable is case["unresolvable"]
    assert verdict.passed is (not case["reasons"])


@pytest.mark.parametrize("case", TABLE["victims"], ids=ids(TABLE["victims"]))
def test_the_preemption_dry_run_picks_the_victims_the_table_says(case: dict[str, Any]) -> None:
    info = node_info_map([case["node"]], case["pods"])
    victims, why = kubefilters.dry_run_victims(case["pod"], case["node"], info[case["node"]["metadata"]["name"]])
    assert [pod_name(v) for v in victims] == case["victims"]
    if case["victims"]:
        assert why == ""
    else:
        assert case["why"] in why


def test_without_node_info_the_resource_fit_is_not_judged() -> None:
    pod = {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "64"}}}]}}
    node = {"metadata": {"name": "n1"}, "status": {"allocatable": {"cpu": "1"}}}
    assert kubefilters.check(pod, node, None).passed


def test_a_malformed_object_is_reported_as_what_kpe_cannot_tell() -> None:
    pod = {"spec": {"tolerations": "all", "containers": [{"name": "c"}]}}
    node = {"metadata": {"name": "n1"}, "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]}}
    verdict = kubefilters.check(pod, node, {})
    assert len(verdict.reasons) == 1 and verdict.reasons[0].startswith("kpe cannot tell: ")
    assert "must be a list" in verdict.reasons[0]
