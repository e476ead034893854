"""The leader's PolicyReports of Audit-mode policies (``--policy-reports``).

Each pass evaluates the set's Audit policies over the pods kpe knows whole
(``engine.reports.audit``: a bound pod on its node, a pending one on every node and at its
gate), builds one report per namespace (``engine.reports.policyreport``) and has the
cluster hold exactly those (``server.cluster.policyreports``). Passes follow the cache and
reloads, at most one every ``--policy-report-interval-s``: a burst of pods is one pass and
at most one write per namespace whose findings changed, never a write per pod.

kpe's cache keeps a bound pod cut to what the policies read of *other* pods, not the pod
whole that a policy's rules read of the pod they decide. So the reporter keeps the pods it
must judge whole, as it first met them: every pending pod of a pass, and every pod the
filter verb rejected a node for under an Audit rule (``note``: the pod as kube-scheduler
sent it, so a pod bound before any pass still has its finding). A kept pod is judged with
its current node and phase and dropped when the cache no longer has it or it finished; at
most ``MAX_KEPT`` are kept, oldest going first. A pod kube-scheduler asked another replica
about, and that was bound before the leader's next pass, is not reported.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

from engine.cluster.nodeinfo import is_active
from engine.decisions.evaluation import current_time
from engine.reports.audit import FindingsMemo, audit_findings, audit_only
from engine.reports.policyreport import AuditReports

from server.cluster.leader import run_passes
from server.cluster.policyreports import ReportWriter
from server.http.worker import Worker
from server.state import ServerState

log = logging.getLogger("kpe.reports")
MAX_KEPT = 10_000  # whole pods kept for judging once bound: about 10 KB each
RESYNC_S = 60.0  # a pass at least this often: rules that read `now` or counts change without an event


class AuditReporter:
    """Writes the PolicyReports while this replica leads; ``note`` is the filter verb's."""

    def __init__(self, state: ServerState, *, interval_s: float, clock: Callable[[], float] = time.time, max_kept: int = MAX_KEPT) -> None:
        self.state = state
        self.interval = interval_s
        self.clock = clock
        self.max_kept = max_kept
        self.kept: OrderedDict[str, Mapping[str, Any]] = OrderedDict()  # uid -> the pod whole
        self.reports = AuditReports()
        self.memo = FindingsMemo(max_age_s=RESYNC_S)  # bound pods' findings, while nothing they read changed
        self.worker = Worker(name="kpe-reports")  # passes off the decisions' thread
        assert state.client is not None
        self.writer = ReportWriter(state.client, count=lambda action: state.metrics.policy_report_writes.labels(action).inc())
        self.leading = False

    def note(self, pod: Mapping[str, Any]) -> None:
        """Keep a pod an Audit rule rejected a node for, whole, until it is gone."""
        uid = (pod.get("metadata") or {}).get("uid")
        if self.leading and isinstance(uid, str) and uid:
            self._keep(uid, pod)

    def _keep(self, uid: str, pod: Mapping[str, Any]) -> None:
        self.kept[uid] = pod
        self.kept.move_to_end(uid)
        while len(self.kept) > self.max_kept:
            self.kept.popitem(last=False)

    def subjects(self) -> list[Mapping[str, Any]]:
        """The pods to judge: pending ones as the cache has them (whole), kept ones whole
        with the node and phase the cache has now; kept ones that are gone are dropped."""
        cache = self.state.cache
        assert cache is not None
        for pod in cache.pods():
            meta = pod.get("metadata") or {}
            if not (pod.get("spec") or {}).get("nodeName") and isinstance(meta.get("uid"), str):
                self._keep(meta["uid"], pod)
        out: list[Mapping[str, Any]] = []
        for uid, whole in list(self.kept.items()):
            now = cache.pod_by_uid(uid)
            if now is None or not is_active(now) or (now.get("metadata") or {}).get("deletionTimestamp"):
                del self.kept[uid]
                continue
            node = (now.get("spec") or {}).get("nodeName")
            out.append({**whole, "spec": {**(whole.get("spec") or {}), "nodeName": node}, "status": now.get("status") or whole.get("status") or {}} if node else whole)
        return out

    async def reconcile(self) -> None:
        cache = self.state.cache
        assert cache is not None
        policy_set = self.state.store.current
        if audit_only(policy_set) is None:
            self.kept.clear()
            self.memo.keep_only(set())
            findings = []
        else:
            pods, nodes = self.subjects(), cache.nodes()
            info, counts, namespaces, dra, everyone = cache.node_info, cache.counts, self.state.namespaces(), self.state.dra(), cache.pods()
            findings = await self.worker.run(
                lambda: audit_findings(policy_set, pods, nodes, node_info=info, counts=counts, namespaces=namespaces, dra=dra, now=current_time(),
                                       cluster_pods=everyone, memo=self.memo)
            )
        wanted = self.reports.build(findings, now_s=self.clock())
        writes = await self.writer.write(wanted)
        if writes:
            log.info("policy reports written", extra={"writes": writes, "namespaces": len(wanted), "findings": len(findings), "generation": policy_set.generation})

    def follow(self) -> None:
        """Not leading: the next leader writes; this replica reads the cluster again if it leads later."""
        self.leading = False
        self.kept.clear()
        self.memo.keep_only(set())
        self.writer.forget()

    async def run(self, stop: asyncio.Event, leading: asyncio.Event) -> None:
        cache = self.state.cache
        assert cache is not None

        async def reconcile() -> None:
            self.leading = True
            await self.reconcile()

        try:
            await run_passes(
                stop, leading, synced=cache.synced, changed=cache.subscribe(), reloaded=self.state.store.subscribe(),
                reconcile=reconcile, follow=self.follow, name="policy reports", wait_s=RESYNC_S, settle_s=self.interval,
            )
        finally:
            self.worker.close()
