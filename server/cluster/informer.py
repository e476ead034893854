"""One list+watch loop of the cluster cache: lists a kind, watches from the list's
resourceVersion with bookmarks, and resumes or relists when the stream ends.

A dropped or timed-out watch resumes from the last version seen; a 410 Expired or
an ERROR event means the history needed is gone, so the informer relists and hands
the whole list to its sink, which applies the difference. Failures back off
exponentially with jitter; the sink keeps serving what it has meanwhile, and the
time since the informer last heard from the API server shows the outage. What the
events do to the cache is the sink's (``server.cluster.cache``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import random
import time
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Protocol

from server.cluster.kube import ApiError, Expired, KubeClient, WatchError

if TYPE_CHECKING:
    from server.telemetry.metrics import Metrics

log = logging.getLogger("kpe.cache")

Obj = dict[str, Any]

BACKOFF_INITIAL_S = 0.5
# A watch that ends this fast with nothing in it counts as a failure, so a
# server that accepts and immediately closes watches cannot make us spin.
MIN_HEALTHY_WATCH_S = 1.0
# kube's reflectors pick a random watch timeout in [5, 10) minutes so that
# many clients do not reconnect in lockstep.
WATCH_TIMEOUT_RANGE_S = (300, 600)


class Sink(Protocol):
    """What an informer feeds: the cache."""

    def enter(self, kind: str, obj: Obj) -> Obj:
        """What is kept of ``obj`` as it enters (called page by page while listing)."""

    def apply(self, informer: Informer, event: Obj) -> None:
        """One watch event."""

    def replace(self, informer: Informer, items: list[Obj], resource_version: str, *, refresh: bool) -> None:
        """A whole list; ``refresh``: replace every object, changed or not."""


class Informer:
    """One list+watch loop and what it knows about its stream."""

    def __init__(
        self, kind: str, path: str, *, client: KubeClient, sink: Sink, metrics: Metrics | None = None, page_size: int = 500, backoff_max: float = 30.0
    ) -> None:
        self.kind = kind
        self.path = path
        self._client = client
        self._sink = sink
        self._metrics = metrics
        self._page_size = page_size
        self.backoff_max = backoff_max
        self.resource_version = ""
        self.listed = False
        self.error: str | None = None
        self.last_word = time.monotonic()
        self.lists = 0
        # A relist asked for while the watch runs (a reload widened the projection), and
        # who waits for it: resolved once a list that started after they asked is applied.
        self.relist_wanted = asyncio.Event()
        self.waiters: list[asyncio.Future[None]] = []

    def heard(self, resource_version: str) -> None:
        """The API server said something (an event, a list, a watch opening)."""
        self.error = None
        if resource_version:
            self.resource_version = resource_version
        self.last_word = time.monotonic()
        if self._metrics is not None:
            self._metrics.heard(self.kind)

    def _error(self, exc: ApiError) -> None:
        self.error = f"{self.kind}s: {exc}"
        log.warning("%s watch restarting: %s", self.kind, exc, extra={"kind": self.kind, "status": exc.status, "resourceVersion": self.resource_version})

    async def run(self, stop: asyncio.Event) -> None:
        """List, then watch from the list's version, until ``stop``; relist when the history is
        gone or someone asks (``relist_wanted``), back off on failures."""
        inf, sink, metrics = self, self._sink, self._metrics
        failures = 0
        relist = True
        enter = functools.partial(sink.enter, inf.kind)
        while not stop.is_set():
            relist = relist or inf.relist_wanted.is_set()
            listing, seen = relist, 0
            wait_at_least = 0.0
            waiting: list[asyncio.Future[None]] = []
            try:
                if relist:
                    # Whoever asked for a relist before this one started is answered by it.
                    inf.relist_wanted.clear()
                    waiting, inf.waiters = inf.waiters, []
                    items, rv = await self._client.list_all(inf.path, page_size=self._page_size, transform=enter)
                    # A relist asked for by a wider projection replaces every pod, changed or not.
                    sink.replace(inf, items, rv, refresh=bool(waiting))
                    for waiter in waiting:
                        if not waiter.done():
                            waiter.set_result(None)
                    waiting = []
                    relist, listing = False, False
                # Only a watch that delivers resets the backoff: a list that succeeds
                # followed by a watch that fails at once must not become a tight loop.
                started = time.monotonic()
                timeout = random.randint(*WATCH_TIMEOUT_RANGE_S)
                opened = functools.partial(self.heard, "")

                async def consume(timeout: int = timeout, opened: Callable[[], None] = opened) -> None:
                    nonlocal seen, failures
                    async for event in self._client.watch(inf.path, resource_version=inf.resource_version, timeout_seconds=timeout, on_open=opened):
                        began = time.perf_counter()
                        sink.apply(inf, event)
                        if metrics is not None:
                            # The event loop's time taken from scheduler requests: measured, not guessed.
                            metrics.count_applied(inf.kind, time.perf_counter() - began)
                        seen += 1
                        failures = 0

                if await _unless(inf.relist_wanted, consume()):
                    relist = True
                    if metrics is not None:
                        metrics.watch_restarts.labels(inf.kind, "relist").inc()
                    continue
                reason = "closed"
                if not seen and time.monotonic() - started < MIN_HEALTHY_WATCH_S:
                    failures += 1
            except Expired as exc:
                # Relist at once after a healthy watch (as kube's reflector does); wait
                # if the list itself expired (a continue token outliving etcd's history)
                # or the watch expired before saying anything.
                relist, reason = True, "expired"
                failures += 1 if listing or not seen else 0
                self._error(exc)
            except WatchError as exc:
                relist, reason = True, "error-event"
                failures += 1
                self._error(exc)
            except ApiError as exc:
                reason = "dropped" if exc.status == 0 else "failed"
                failures += 1
                self._error(exc)
                wait_at_least = exc.retry_after or 0.0
            except Exception as exc:  # noqa: BLE001 - a bug in event handling must not stop the cache; relist to a known state
                log.exception("%s informer failed; relisting", inf.kind)
                relist, reason = True, "internal"
                failures += 1
                inf.error = f"{inf.kind}s: {type(exc).__name__}: {exc}"
            finally:
                if waiting:  # the list failed: its waiters wait for the next one
                    inf.waiters[:0] = waiting
                    inf.relist_wanted.set()
            if stop.is_set():
                return
            if metrics is not None:
                metrics.watch_restarts.labels(inf.kind, reason).inc()
            # The server's Retry-After, when it gave one, is a floor under the backoff.
            delay = max(backoff(failures, self.backoff_max), min(wait_at_least, self.backoff_max))
            if delay > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), delay)


def backoff(failures: int, maximum: float) -> float:
    """0 for the first retry after a healthy stream; then exponential, capped at ``maximum``,
    with jitter (half fixed, half random: replicas spread out yet every wait still grows)."""
    if failures <= 0:
        return 0.0
    ceiling = min(maximum, BACKOFF_INITIAL_S * 2.0 ** min(failures - 1, 30))
    return ceiling / 2 + random.uniform(0, ceiling / 2)


async def _unless(wanted: asyncio.Event, work: Coroutine[Any, Any, None]) -> bool:
    """Run ``work`` (a watch) to its end, its exceptions raised here: False; True, with
    ``work`` cancelled, if ``wanted`` is set first."""
    if wanted.is_set():
        work.close()
        return True
    task = asyncio.create_task(work)
    asked = asyncio.create_task(wanted.wait())
    try:
        await asyncio.wait([task, asked], return_when=asyncio.FIRST_COMPLETED)
    finally:
        asked.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    if task.cancelled():
        return True
    task.result()
    return False
