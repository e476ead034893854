"""The leader's PolicyReports of Audit-mode policies (``--policy-reports``): a background scan.

Each pass evaluates the set's Audit policies over every pod kpe's cache holds, bound or
pending, whatever kpe saw of it before (``engine.reports.audit``: a bound pod on its node, a
pending one on every node and at its gate), builds one report per namespace
(``engine.reports.policyreport``) and has the cluster hold exactly those
(``server.cluster.policyreports``). Passes follow the cache and reloads, at most one every
``--policy-report-interval-s``: a burst of pods is one pass and at most one write per
namespace whose findings changed, never a write per pod.

kpe's cache keeps a bound pod cut to what the policies read of *other* pods; with
``--policy-reports`` it keeps, besides, what the Audit policies read of the pod they judge
(``engine.reports.audit.audit_projection``), so a pod created bound, bound by another
scheduler or bound before this replica started is judged as it would have been pending.
Nothing is kept in memory that a restart or a new leader would lack: a new leader's first
pass, once its cache has synced, computes every finding before it writes, and the writer
replaces only the reports that differ from what it finds in the cluster, so a restart or a
leader change drops no result it would add back.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from engine.decisions.evaluation import current_time
from engine.reports.audit import FindingsMemo, audit_findings, audit_only
from engine.reports.policyreport import AuditReports

from server.cluster.leader import run_passes
from server.cluster.policyreports import ReportWriter
from server.http.worker import Worker
from server.state import ServerState

log = logging.getLogger("kpe.reports")
RESYNC_S = 60.0  # a pass at least this often: rules that read `now` or counts change without an event


class AuditReporter:
    """Writes the PolicyReports while this replica leads."""

    def __init__(self, state: ServerState, *, interval_s: float, clock: Callable[[], float] = time.time) -> None:
        self.state = state
        self.interval = interval_s
        self.clock = clock
        self.reports = AuditReports()
        self.memo = FindingsMemo(max_age_s=RESYNC_S)  # bound pods' findings, while nothing they read changed
        self.worker = Worker(name="kpe-reports")  # passes off the decisions' thread
        assert state.client is not None
        self.writer = ReportWriter(state.client, count=lambda action: state.metrics.policy_report_writes.labels(action).inc())

    async def reconcile(self) -> None:
        cache = self.state.cache
        assert cache is not None
        policy_set = self.state.store.current
        if audit_only(policy_set) is None:
            self.memo.keep_only(set())
            findings = []
        else:
            pods, nodes = cache.pods(), cache.nodes()
            info, counts, namespaces, dra = cache.node_info, cache.counts, self.state.namespaces(), self.state.dra()
            findings = await self.worker.run(
                lambda: audit_findings(policy_set, pods, nodes, node_info=info, counts=counts, namespaces=namespaces, dra=dra, now=current_time(),
                                       cluster_pods=pods, memo=self.memo)
            )
        held, fresh = await self.writer.held()
        if held is not None and fresh:
            self.reports.recall(held.values())  # the same findings as the last leader's: the same reports, no write
        wanted = self.reports.build(findings, now_s=self.clock())
        writes = await self.writer.write(wanted)
        if writes:
            log.info("policy reports written", extra={"writes": writes, "namespaces": len(wanted), "findings": len(findings), "generation": policy_set.generation})

    def follow(self) -> None:
        """Not leading: the next leader writes; this replica reads the cluster again if it leads later."""
        self.memo.keep_only(set())
        self.writer.forget()

    async def run(self, stop: asyncio.Event, leading: asyncio.Event) -> None:
        cache = self.state.cache
        assert cache is not None
        try:
            await run_passes(
                stop, leading, synced=cache.synced, changed=cache.subscribe(), reloaded=self.state.store.subscribe(),
                reconcile=self.reconcile, follow=self.follow, name="policy reports", wait_s=RESYNC_S, settle_s=self.interval,
            )
        finally:
            self.worker.close()
