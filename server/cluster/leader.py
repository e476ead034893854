"""Leader election through a coordination.k8s.io/v1 Lease, as client-go's leaderelection does.

One replica holds the Lease and renews it every ``retry`` seconds; another
takes it over only when ``renewTime + leaseDurationSeconds`` has passed.
Writes carry the Lease's resourceVersion, so two candidates racing for it get
one success and one 409. A leader that cannot renew within the lease
duration steps down before anyone else can take over.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid
from datetime import datetime, timezone
from collections.abc import Awaitable, Callable
from typing import Any

from server.cluster.kube import ApiError, KubeClient

log = logging.getLogger("kpe.leader")


def micro_time(at: float | None = None) -> str:
    """Kubernetes MicroTime: RFC 3339 with microseconds."""
    moment = datetime.fromtimestamp(time.time() if at is None else at, tz=timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_micro_time(text: str | None) -> float:
    if not text:
        return 0.0
    for fmt in ("%Y-%m-%dT%H:%M:%S.%fZ", "%Y-%m-%dT%H:%M:%SZ"):
        try:
            return datetime.strptime(text, fmt).replace(tzinfo=timezone.utc).timestamp()
        except ValueError:
            continue
    return 0.0


def default_identity() -> str:
    return f"{socket.gethostname()}_{os.getpid()}_{uuid.uuid4().hex[:6]}"


class LeaderElector:
    def __init__(self, client: KubeClient, *, namespace: str, name: str, identity: str, lease_duration_s: float) -> None:
        self.client = client
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.duration = lease_duration_s
        self.retry = max(0.05, lease_duration_s / 3)
        self.leading = asyncio.Event()
        self.transitions = 0
        self._last_renew = 0.0

    @property
    def is_leader(self) -> bool:
        return self.leading.is_set()

    def _spec(self, lease: dict[str, Any] | None, *, acquire: bool) -> dict[str, Any]:
        now = micro_time()
        old = (lease or {}).get("spec") or {}
        spec = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, int(round(self.duration))),
            "acquireTime": now if acquire else old.get("acquireTime", now),
            "renewTime": now,
            "leaseTransitions": int(old.get("leaseTransitions", 0)) + (1 if acquire and lease is not None else 0),
        }
        return spec

    async def try_acquire_or_renew(self) -> bool:
        """One round: True when this replica holds the lease afterwards."""
        try:
            lease = await self.client.get_lease(self.namespace, self.name)
        except ApiError as exc:
            if exc.status != 404:
                raise
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": self._spec(None, acquire=True),
            }
            try:
                await self.client.create_lease(self.namespace, body)
            except ApiError as create_error:
                if create_error.status == 409:
                    return False  # another replica created it first
                raise
            return True
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        expires = parse_micro_time(spec.get("renewTime")) + float(spec.get("leaseDurationSeconds") or self.duration)
        if holder and holder != self.identity and time.time() < expires:
            return False
        lease = {**lease, "spec": self._spec(lease, acquire=holder != self.identity)}
        try:
            await self.client.replace_lease(self.namespace, self.name, lease)
        except ApiError as exc:
            if exc.status == 409:
                return False
            raise
        if holder != self.identity:
            self.transitions = int(lease["spec"]["leaseTransitions"])
        return True

    async def run(self, stop: asyncio.Event) -> None:
        """Campaign and renew until ``stop``; ``leading`` is set only while the lease is held."""
        while not stop.is_set():
            try:
                held = await self.try_acquire_or_renew()
                if held:
                    self._last_renew = time.time()
            except Exception as exc:  # noqa: BLE001 - the campaign must outlive any failure: a replica that stops renewing stops leading
                if isinstance(exc, ApiError):
                    log.warning("lease %s/%s: %s", self.namespace, self.name, exc)
                else:
                    log.exception("lease %s/%s: renewal failed", self.namespace, self.name)
                # The API server is unreachable: keep leading only while the last
                # renewal is recent enough that nobody else can have taken over.
                held = self.is_leader and time.time() - self._last_renew < self.duration * 2 / 3
            if held:
                if not self.is_leader:
                    log.info("became leader", extra={"lease": f"{self.namespace}/{self.name}", "identity": self.identity})
                self.leading.set()
            elif self.is_leader:
                log.warning("lost leadership", extra={"lease": f"{self.namespace}/{self.name}", "identity": self.identity})
                self.leading.clear()
            try:
                await asyncio.wait_for(stop.wait(), timeout=self.retry)
            except asyncio.TimeoutError:
                pass
        await self.release()

    async def release(self) -> None:
        """Give the lease up on a clean stop, so another replica need not wait for it to expire."""
        if not self.is_leader:
            return
        self.leading.clear()
        try:
            lease = await self.client.get_lease(self.namespace, self.name)
            if (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                lease["spec"]["holderIdentity"] = ""
                lease["spec"]["renewTime"] = micro_time(0)
                await self.client.replace_lease(self.namespace, self.name, lease)
        except ApiError as exc:
            log.warning("could not release lease: %s", exc)


async def first(*events: asyncio.Event, timeout: float) -> None:
    """Wait until any of ``events`` is set, or ``timeout`` seconds."""
    waiters = [asyncio.create_task(e.wait()) for e in events]
    try:
        await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waiters:
            w.cancel()


async def run_passes(
    stop: asyncio.Event,
    leading: asyncio.Event,
    *,
    synced: asyncio.Event | None,
    changed: asyncio.Event,
    reloaded: asyncio.Event,
    reconcile: Callable[[], Awaitable[object]],
    follow: Callable[[], None],
    name: str,
    wait_s: float,
    settle_s: float,
) -> None:
    """A leader's controller loop: a ``reconcile`` pass whenever the cache or the policy set
    ``changed``/``reloaded`` (or every ``wait_s``), then ``settle_s`` for a burst of changes
    to settle; ``follow()`` whenever this replica does not lead, and no pass before the cache
    has ``synced`` (None: a controller that reads no cache). The gate and reservation
    controllers, the PolicyReports, the policies' status and the last good set run on it."""
    while not stop.is_set():
        if not leading.is_set():
            follow()
            await first(stop, leading, timeout=1.0)
            continue
        if synced is not None and not synced.is_set():
            await first(stop, synced, timeout=1.0)
            continue
        # Cleared before the pass, not after: a change that arrives while the pass
        # awaits the API (a pod created during a burst) must cause another pass.
        changed.clear()
        reloaded.clear()
        try:
            await reconcile()
        except Exception:  # noqa: BLE001 - one bad pass must not end the controller
            log.exception("%s pass failed", name)
        await first(stop, changed, reloaded, timeout=wait_s)
        if not stop.is_set():
            await asyncio.sleep(settle_s)
