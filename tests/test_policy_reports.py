"""PolicyReports of Audit-mode policies: which pods and rules they name, with exact texts;
one report per namespace, capped, updated in place; and the writer's writes: none for an
unchanged report, a replace for a changed one, a delete when a namespace's findings go."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from engine.cel.ext.timestamps import Timestamp
from engine.policy.loader import load_text
from engine.reports.audit import Finding, audit_findings, audit_projection
from engine.reports.policyreport import AuditReports

from server.cluster.apierrors import ApiError
from server.cluster.policyreports import ReportWriter

POLICIES = """apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: gpu-only}
spec:
  mode: Audit
  match: {podSelector: {matchLabels: {team: ml}}}
  filters:
  - name: gpu-node
    expression: "node.metadata.?labels[?'gpu'].orValue('') == 'true'"
    message: node has no GPU
---
apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: quota}
spec:
  mode: Audit
  match: {podSelector: {matchLabels: {team: ml}}}
  admission:
    expression: "false"
    message: team ml is over its quota
---
apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: enforced}
spec:
  filters:
  - {name: never, expression: "false", message: enforced rules decide and are not reported}
"""
NOW = Timestamp(1_795_000_000, 0)


def node(name: str, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}, "status": {"allocatable": {"cpu": "4", "pods": "110"}}}


def pod(name: str, *, node: str = "", namespace: str = "ml", phase: str = "", team: str = "ml", deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": f"uid-{name}", "labels": {"team": team}}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-27T09:00:00Z"
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "x"}]}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": {"phase": phase or ("Running" if node else "Pending")}}


def findings(pods: list[dict[str, Any]], nodes: list[dict[str, Any]]) -> list[Finding]:
    return audit_findings(load_text(POLICIES), pods, nodes, now=NOW, cluster_pods=pods)


GPU, PLAIN = node("gpu-1", gpu="true"), node("plain-1")


def test_a_bound_pod_on_a_node_an_audit_filter_rejects_is_named_with_the_rule_and_its_message() -> None:
    assert findings([pod("on-plain", node="plain-1"), pod("on-gpu", node="gpu-1")], [GPU, PLAIN]) == [
        Finding("ml", "on-plain", "gpu-only", "gpu-node", "filter", "fail",
                "would have kept the pod off its node plain-1: gpu-only/gpu-node: node has no GPU", "uid-on-plain", "plain-1"),
    ]


def test_a_pending_pod_is_named_when_an_audit_filter_rejects_every_node_and_when_its_audit_gate_would_hold_it() -> None:
    assert findings([pod("waiting")], [PLAIN]) == [
        Finding("ml", "waiting", "gpu-only", "gpu-node", "filter", "fail",
                "would leave the pod pending: rejects all 1 node, plain-1 first: gpu-only/gpu-node: node has no GPU", "uid-waiting"),
        Finding("ml", "waiting", "quota", "admission", "admission", "fail",
                "would hold the pod at its gate kpe.dev/quota: quota: team ml is over its quota", "uid-waiting"),
    ]
    # A node the rule keeps: the pod could go there, so the filter has nothing to report.
    assert [f.rule for f in findings([pod("waiting")], [PLAIN, GPU])] == ["admission"]


@pytest.mark.parametrize(
    "subject",
    [pod("done", node="plain-1", phase="Succeeded"), pod("going", node="plain-1", deleting=True), pod("other", node="plain-1", team="web"),
     pod("system", node="plain-1", namespace="kube-system")],
    ids=["finished", "being deleted", "no audit policy matches", "excluded namespace"],
)
def test_pods_that_are_gone_or_no_audit_policy_matches_have_no_findings(subject: dict[str, Any]) -> None:
    assert findings([subject], [GPU, PLAIN]) == []


def test_a_namespace_s_report_lists_one_result_per_pod_policy_and_rule() -> None:
    found = findings([pod("on-plain", node="plain-1"), pod("waiting")], [PLAIN])
    reports = AuditReports().build(found, now_s=1_795_000_123.7)
    assert list(reports) == ["ml"]
    assert reports["ml"] == {
        "apiVersion": "wgpolicyk8s.io/v1alpha2",
        "kind": "PolicyReport",
        "metadata": {"name": "kpe-audit", "namespace": "ml", "labels": {"app.kubernetes.io/managed-by": "kpe"}},
        "summary": {"pass": 0, "fail": 3, "warn": 0, "error": 0, "skip": 0},
        "results": [
            {
                "source": "kpe", "policy": "gpu-only", "rule": "gpu-node", "category": "filter", "result": "fail", "scored": False,
                "message": "would have kept the pod off its node plain-1: gpu-only/gpu-node: node has no GPU",
                "properties": {"mode": "Audit", "node": "plain-1"},
                "resources": [{"apiVersion": "v1", "kind": "Pod", "namespace": "ml", "name": "on-plain", "uid": "uid-on-plain"}],
                "timestamp": {"seconds": 1_795_000_123, "nanos": 0},
            },
            {
                "source": "kpe", "policy": "gpu-only", "rule": "gpu-node", "category": "filter", "result": "fail", "scored": False,
                "message": "would leave the pod pending: rejects all 1 node, plain-1 first: gpu-only/gpu-node: node has no GPU",
                "properties": {"mode": "Audit"},
                "resources": [{"apiVersion": "v1", "kind": "Pod", "namespace": "ml", "name": "waiting", "uid": "uid-waiting"}],
                "timestamp": {"seconds": 1_795_000_123, "nanos": 0},
            },
            {
                "source": "kpe", "policy": "quota", "rule": "admission", "category": "admission", "result": "fail", "scored": False,
                "message": "would hold the pod at its gate kpe.dev/quota: quota: team ml is over its quota",
                "properties": {"mode": "Audit"},
                "resources": [{"apiVersion": "v1", "kind": "Pod", "namespace": "ml", "name": "waiting", "uid": "uid-waiting"}],
                "timestamp": {"seconds": 1_795_000_123, "nanos": 0},
            },
        ],
    }


def test_a_result_keeps_the_time_it_was_first_found_and_goes_with_its_pod() -> None:
    book = AuditReports()
    first = book.build(findings([pod("a", node="plain-1"), pod("b", node="plain-1")], [GPU, PLAIN]), now_s=100)
    later = book.build(findings([pod("a", node="plain-1"), pod("b", node="plain-1")], [GPU, PLAIN]), now_s=200)
    assert later == first, "nothing changed: the same report, so nothing is written"
    shrunk = book.build(findings([pod("b", node="plain-1")], [GPU, PLAIN]), now_s=300)
    assert [r["resources"][0]["name"] for r in shrunk["ml"]["results"]] == ["b"]
    assert shrunk["ml"]["results"][0]["timestamp"] == {"seconds": 100, "nanos": 0}
    assert book.build([], now_s=400) == {}, "no findings left: no report"


def test_a_report_over_its_cap_lists_the_first_results_and_its_summary_and_annotation_say_how_many_are_left_out() -> None:
    pods = [pod(f"p{i}", node="plain-1") for i in range(5)]
    report = AuditReports(max_results=2).build(findings(pods, [GPU, PLAIN]), now_s=0)["ml"]
    assert [r["resources"][0]["name"] for r in report["results"]] == ["p0", "p1"]
    assert report["summary"]["fail"] == 5
    assert report["metadata"]["annotations"] == {"kpe.dev/results-left-out": "3"}


# -- the writer ---------------------------------------------------------------------------


class Reports:
    """The PolicyReport calls of server.cluster.kube.KubeClient, over a dict."""

    def __init__(self, *, served: bool = True) -> None:
        self.served = served
        self.objects: dict[str, dict[str, Any]] = {}
        self.calls: list[str] = []
        self.version = 0

    def _stored(self, namespace: str, report: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        meta = {**report["metadata"], "resourceVersion": str(self.version), "uid": f"uid-{namespace}"}
        self.objects[namespace] = {**report, "metadata": meta}
        return self.objects[namespace]

    async def list(self, path: str, *, params: dict[str, Any] | None = None) -> dict[str, Any]:
        self.calls.append(f"LIST {params}")
        if not self.served:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        return {"items": list(self.objects.values()), "metadata": {}}

    async def create_policy_report(self, namespace: str, report: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(f"POST {namespace}")
        return self._stored(namespace, report)

    async def replace_policy_report(self, namespace: str, name: str, report: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(f"PUT {namespace}/{name} at {report['metadata']['resourceVersion']}")
        return self._stored(namespace, report)

    async def delete_policy_report(self, namespace: str, name: str, *, uid: str = "") -> dict[str, Any]:
        self.calls.append(f"DELETE {namespace}/{name} uid {uid}")
        del self.objects[namespace]
        return {}


def test_the_writer_creates_replaces_only_what_changed_and_deletes_a_namespace_s_report_when_its_findings_go() -> None:
    api = Reports()
    writer = ReportWriter(api)  # type: ignore[arg-type]
    book = AuditReports()
    two = findings([pod("a", node="plain-1"), pod("b", node="plain-1", namespace="web")], [PLAIN])

    async def scenario() -> None:
        assert await writer.write(book.build(two, now_s=0)) == 2
        assert await writer.write(book.build(two, now_s=10)) == 0
        assert await writer.write(book.build(two[:1] + findings([pod("c", node="plain-1")], [PLAIN]), now_s=20)) == 2

    asyncio.run(scenario())
    assert api.calls == [
        "LIST {'labelSelector': 'app.kubernetes.io/managed-by=kpe', 'limit': 500}",
        "POST ml",
        "POST web",
        "PUT ml/kpe-audit at 1",
        "DELETE web/kpe-audit uid uid-web",
    ]
    assert [r["resources"][0]["name"] for r in api.objects["ml"]["results"]] == ["a", "c"]


def test_without_the_policy_report_crd_nothing_is_written_and_the_next_pass_looks_again() -> None:
    api = Reports(served=False)
    writer = ReportWriter(api)  # type: ignore[arg-type]
    wanted = AuditReports().build(findings([pod("a", node="plain-1")], [PLAIN]), now_s=0)

    async def scenario() -> None:
        assert await writer.write(wanted) == 0
        api.served = True
        assert await writer.write(wanted) == 1

    asyncio.run(scenario())
    assert [c.split(" ")[0] for c in api.calls] == ["LIST", "LIST", "POST"]


# -- the leader's reporter ------------------------------------------------------------------


class Cache:
    """What the reporter reads of kpe's cluster cache; bound pods are cut as the cache cuts them."""

    def __init__(self, nodes: list[dict[str, Any]]) -> None:
        self.by_uid: dict[str, dict[str, Any]] = {}
        self._nodes = nodes
        self.node_info = None
        self.counts = None

    def put(self, pod: dict[str, Any]) -> None:
        self.by_uid[pod["metadata"]["uid"]] = pod

    def pods(self) -> list[dict[str, Any]]:
        return list(self.by_uid.values())

    def pod_by_uid(self, uid: str) -> dict[str, Any] | None:
        return self.by_uid.get(uid)

    def nodes(self) -> list[dict[str, Any]]:
        return self._nodes


def cut(whole: dict[str, Any], node: str) -> dict[str, Any]:
    """A bound pod as kpe's cache keeps it: no labels, nothing a policy does not read of other pods."""
    return {"metadata": {k: whole["metadata"][k] for k in ("name", "namespace", "uid")}, "spec": {"nodeName": node}, "status": {"phase": "Running"}}


def reporter(cache: Cache, api: Reports, *, clock: Any = lambda: 1_000.0) -> Any:
    from types import SimpleNamespace

    from server.reports.controller import AuditReporter
    from server.telemetry.metrics import Metrics

    store = SimpleNamespace(current=load_text(POLICIES))
    state = SimpleNamespace(client=api, cache=cache, store=store, metrics=Metrics(), namespaces=lambda: None, dra=lambda: None)
    made = AuditReporter(state, interval_s=1, clock=clock)  # type: ignore[arg-type]
    return made


def kept_by_the_cache(whole: dict[str, Any], *, reports: bool) -> dict[str, Any]:
    """A bound pod as kpe's cache keeps it: what the set reads of other pods, and with
    --policy-reports what the Audit policies read of the pod they judge."""
    policy_set = load_text(POLICIES)
    projection = policy_set.pod_projection.union(audit_projection(policy_set)) if reports else policy_set.pod_projection
    kept: dict[str, Any] = projection.apply(whole)
    return kept


def test_a_pod_created_bound_is_judged_from_what_the_cache_keeps_of_it() -> None:
    cache, api = Cache([PLAIN]), Reports()
    audit = reporter(cache, api)
    whole = pod("fast", node="plain-1")  # bound by another scheduler or a person: kpe never saw it pending
    assert not kept_by_the_cache(whole, reports=False)["metadata"].get("labels"), "what the set reads of other pods lacks what matching reads"
    cache.put(kept_by_the_cache(whole, reports=True))
    asyncio.run(audit.reconcile())
    audit.worker.close()
    [result] = api.objects["ml"]["results"]
    assert result["message"] == "would have kept the pod off its node plain-1: gpu-only/gpu-node: node has no GPU"
    assert result["resources"] == [{"apiVersion": "v1", "kind": "Pod", "namespace": "ml", "name": "fast", "uid": "uid-fast"}]


def test_a_new_leader_s_first_pass_finds_the_same_results_and_writes_nothing() -> None:
    cache, api = Cache([PLAIN]), Reports()
    for name in ("a", "b"):
        cache.put(kept_by_the_cache(pod(name, node="plain-1"), reports=True))
    cache.put(pod("waiting"))  # pending: its audit gate would hold it
    first = reporter(cache, api)
    asyncio.run(first.reconcile())
    first.worker.close()
    before = [dict(r) for r in api.objects["ml"]["results"]]
    # A restart, or the Lease moving: a reporter that has seen nothing, a minute later.
    second = reporter(cache, api, clock=lambda: 1_060.0)
    calls = len(api.calls)
    asyncio.run(second.reconcile())
    second.worker.close()
    assert [c.split(" ")[0] for c in api.calls[calls:]] == ["LIST"], "read, found the same, written nothing"
    assert api.objects["ml"]["results"] == before and len(before) == 4
    assert {r["timestamp"]["seconds"] for r in before} == {1_000}


def test_a_bound_pod_s_findings_are_remembered_while_its_node_and_node_info_are_the_same_and_not_for_long_when_rules_read_now() -> None:
    from engine.reports.audit import FindingsMemo

    clock = [0.0]
    memo = FindingsMemo(max_age_s=60, clock=lambda: clock[0])
    policies, bound = load_text(POLICIES), [pod("a", node="plain-1")]
    info: dict[str, Any] = {"plain-1": {"pods": [], "podCount": 0, "requested": {}}}

    def again() -> list[Finding]:
        return audit_findings(policies, bound, [PLAIN], node_info=info, now=NOW, memo=memo)

    first = again()
    assert [f.pod for f in first] == ["a"] and memo.hits == 0
    assert again() == first and memo.hits == 1
    info["plain-1"] = {"pods": [], "podCount": 0, "requested": {}}  # kpe's cache replaces a node's view when its pods change
    again()
    assert memo.hits == 1
    clock[0] = 61
    again()
    assert memo.hits == 2, "no rule reads now: as true a minute later as when worked out"
    # A rule that reads now: never older than max_age_s.
    policies = load_text(POLICIES.replace("== 'true'\"", "== 'true' || now < timestamp('2000-01-01T00:00:00Z')\""))
    again()
    assert memo.hits == 2, "another set: evaluated again"
    clock[0] = 122
    again()
    assert memo.hits == 2, "too old: evaluated again (the rule reads now)"
    again()
    assert memo.hits == 3
    bound.clear()
    assert again() == [] and memo.get("uid-a", ()) is None, "a pod gone is forgotten"


def test_reports_are_off_unless_the_deployment_turns_them_on_and_need_cluster_access() -> None:
    from server.settings import Settings

    assert Settings().policy_reports is False
    assert "--policy-reports writes to the cluster: it needs --cluster on or auto" in Settings(policies="p", policy_reports=True, cluster="off").validate()
    assert Settings(policies="p", policy_report_interval_s=0).validate() == ["--policy-report-interval-s must be positive"]
