"""Writes the Audit findings' PolicyReports (wgpolicyk8s.io/v1alpha2) to the cluster.

The reports themselves are the engine's (``engine.reports.policyreport``); this module
makes the cluster hold exactly them, with as few writes as that takes: a report that says
what the cluster's copy says is not written, one that changed is replaced (PUT with the
copy's resourceVersion), one whose namespace has no findings left is deleted. kpe's own
reports are found by their label (``app.kubernetes.io/managed-by: kpe``) and name
(``kpe-audit``), listed once when a replica starts leading and after any failed write, so
reports another engine (Kyverno) writes are never touched.

Without the PolicyReport CRD the API answers 404: kpe says so once in its log and tries
again at the next pass, so installing the CRD later needs no restart.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from engine.reports.policyreport import MANAGED_BY, REPORT_NAME, same_report

from server.cluster.kube import POLICY_REPORTS, ApiError, KubeClient

log = logging.getLogger("kpe.reports")
Obj = dict[str, Any]
SELECTOR = ",".join(f"{k}={v}" for k, v in MANAGED_BY.items())
PAGE = 500


class ReportWriter:
    """The leader's writer of kpe's PolicyReports; ``count(action)`` is told of every write
    (``created``, ``updated``, ``deleted``, ``failed``)."""

    def __init__(self, client: KubeClient, *, count: Callable[[str], None] | None = None) -> None:
        self.client = client
        self.count = count or (lambda action: None)
        self._written: dict[str, Obj] | None = None  # namespace -> kpe's report as the cluster holds it
        self._missing_crd_logged = False

    def forget(self) -> None:
        """What the cluster holds is read again before the next write (a new leader's first
        pass, or after a write failed: another writer, or a report deleted by hand)."""
        self._written = None

    async def _read(self) -> dict[str, Obj]:
        found: dict[str, Obj] = {}
        params: dict[str, Any] = {"labelSelector": SELECTOR, "limit": PAGE}
        while True:
            page = await self.client.list(f"{POLICY_REPORTS}/policyreports", params=params)
            for item in page.get("items") or []:
                meta = item.get("metadata") or {}
                if meta.get("name") == REPORT_NAME and meta.get("namespace"):
                    found[str(meta["namespace"])] = item
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return found
            params = {"labelSelector": SELECTOR, "limit": PAGE, "continue": token}

    async def held(self) -> tuple[Mapping[str, Obj] | None, bool]:
        """kpe's reports as the cluster holds them (None without the PolicyReport CRD), and
        whether they were read just now (a new leader's first pass, or after a failed write)."""
        if self._written is not None:
            return self._written, False
        try:
            self._written = await self._read()
        except ApiError as exc:
            if exc.status == 404:
                if not self._missing_crd_logged:
                    log.warning("no PolicyReports written: the API does not serve %s/policyreports (install the PolicyReport CRD)", POLICY_REPORTS)
                    self._missing_crd_logged = True
                return None, False
            raise
        self._missing_crd_logged = False
        return self._written, True

    async def write(self, wanted: Mapping[str, Obj]) -> int:
        """Make the cluster hold ``wanted`` (namespace -> report) and no other report of kpe's;
        returns how many writes it took."""
        await self.held()
        written = self._written
        if written is None:
            return 0
        writes = 0
        try:
            for namespace, report in wanted.items():
                current = written.get(namespace)
                if current is not None and same_report(current, report):
                    continue
                writes += 1
                if current is None:
                    written[namespace] = await self.client.create_policy_report(namespace, report)
                    self.count("created")
                else:
                    meta = {**report["metadata"], "resourceVersion": (current.get("metadata") or {}).get("resourceVersion", "")}
                    written[namespace] = await self.client.replace_policy_report(namespace, REPORT_NAME, {**report, "metadata": meta})
                    self.count("updated")
            for namespace in sorted(set(written) - set(wanted)):
                writes += 1
                uid = str((written[namespace].get("metadata") or {}).get("uid") or "")
                try:
                    await self.client.delete_policy_report(namespace, REPORT_NAME, uid=uid)
                except ApiError as exc:
                    if exc.status != 404:
                        raise
                del written[namespace]
                self.count("deleted")
        except ApiError:
            self.count("failed")
            self.forget()
            raise
        return writes
