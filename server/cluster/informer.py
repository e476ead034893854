"""One list+watch loop of the cluster cache, and whether what it holds is current.

An informer lists a kind, then watches from the list's resourceVersion with bookmarks. A
watch the API server ends as asked (its timeoutSeconds) resumes from the last version seen,
and the informer stays ``connected``. Anything else breaks the connection: a watch dropped,
refused or timed out, a server ending it early (a restarting API server ends its watches
cleanly too), a 410 Expired, an ERROR event. From the break until the informer has caught
up, it is not connected, and the cache does not answer node names from what it holds
(``server.verbs.answer.cache_unusable``; ``/readyz`` says so too). It catches up with a list,
or by resuming from its resourceVersion and hearing from the resumed watch (an event, or a
bookmark: what keeps a quiet watch provably alive) within ``catch_up_s``; a resumed watch that
says nothing that long is relisted. A 410 Expired or an ERROR event means the history needed
is gone: the informer relists and hands the whole list to its sink, which applies the
difference.

Failures back off exponentially with jitter, capped at ``backoff_max``. A list that succeeds,
an event or bookmark, or a watch that stays open resets the backoff, so outages do not add up
into the cap. While an informer backs off because the API server did not answer (refused,
unreachable, 5xx, 401/403), ``Reachability`` asks the server for one node every second and
wakes it as soon as the server answers: recovery follows the API server, not the backoff. A
server that lists but fails every watch at once (flapping) wakes nobody early, and its backoff
keeps growing. What the events do to the cache is the sink's (``server.cluster.cache``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
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
# A watch that ends or breaks this fast with nothing in it counts as a failure, so a
# server that accepts and immediately closes watches cannot make us spin.
MIN_HEALTHY_WATCH_S = 1.0
# kube's reflectors pick a random watch timeout in [5, 10) minutes so that
# many clients do not reconnect in lockstep.
WATCH_TIMEOUT_RANGE_S = (300, 600)
# A watch the server ends cleanly this close to the timeoutSeconds asked for ended as asked.
TIMEOUT_MARGIN_S = 2.0
# How long a watch resumed after a break may stay silent before the informer relists instead:
# the API server sends the events missed first, but a quiet kind has none, and bookmarks come
# only about once a minute.
CATCH_UP_S = 3.0
# How often the API server is asked whether it answers again, while an informer waits to retry.
PROBE_INTERVAL_S = 1.0


class Sink(Protocol):
    """What an informer feeds: the cache."""

    def enter(self, kind: str, obj: Obj) -> Obj:
        """What is kept of ``obj`` as it enters (called page by page while listing)."""

    def apply(self, informer: Informer, event: Obj) -> None:
        """One watch event."""

    def replace(self, informer: Informer, items: list[Obj], resource_version: str, *, refresh: bool) -> None:
        """A whole list; ``refresh``: replace every object, changed or not."""


class Reachability:
    """While any informer waits to retry after the API server did not answer, asks the
    server for one item of ``path`` every ``interval`` (a request it serves cheaply, and one
    kpe's RBAC must allow), and wakes the waiting informers when it answers."""

    def __init__(self, client: KubeClient, path: str = "/api/v1/nodes", *, interval: float = PROBE_INTERVAL_S) -> None:
        self._client = client
        self._path = path
        self.interval = interval
        self._waiting = 0
        self._wanted = asyncio.Event()
        self._answered = asyncio.Event()
        self.probes = 0

    async def wait(self, stop: asyncio.Event, timeout: float) -> None:
        """Until ``timeout`` has passed, ``stop`` is set or the API server has answered a probe."""
        self._waiting += 1
        self._wanted.set()
        try:
            await first(stop, self._answered, timeout=timeout)
        finally:
            self._waiting -= 1

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await first(stop, self._wanted)
            self._wanted.clear()
            while self._waiting and not stop.is_set():
                await first(stop, timeout=self.interval)
                if stop.is_set() or not self._waiting:
                    break
                self.probes += 1
                try:
                    await self._client.list(self._path, params={"limit": 1})
                except Exception:  # noqa: BLE001 - no answer yet; a probe must never end the cache
                    continue
                answered, self._answered = self._answered, asyncio.Event()
                answered.set()


class Informer:
    """One list+watch loop and what it knows about its stream."""

    def __init__(
        self, kind: str, path: str, *, client: KubeClient, sink: Sink, metrics: Metrics | None = None, page_size: int = 500,
        backoff_max: float = 30.0, catch_up_s: float = CATCH_UP_S, reachability: Reachability | None = None,
    ) -> None:
        self.kind = kind
        self.path = path
        self._client = client
        self._sink = sink
        self._metrics = metrics
        self._page_size = page_size
        self.backoff_max = backoff_max
        self.catch_up_s = catch_up_s
        self._reachability = reachability
        self.resource_version = ""
        self.listed = False
        self.error: str | None = None
        self.last_word = time.monotonic()
        self.lists = 0
        # Whether what the cache holds of this kind is current: since when it is (or is not), and why not.
        self.connected = False
        self.since = time.monotonic()
        self.why = "not listed yet"
        self._was_connected = False
        self._catch_up: asyncio.TimerHandle | None = None
        self._silent = False  # the watch resumed after a break said nothing within catch_up_s
        # A relist asked for while the watch runs (a reload widened the projection, a resumed
        # watch stayed silent), and who waits for it: resolved once a list that started after
        # they asked is applied.
        self.relist_wanted = asyncio.Event()
        self.waiters: list[asyncio.Future[None]] = []
        # Told of each failed list or watch (what ``error`` says): a sink that must tell "cannot
        # be read" from "not there" (the ConfigMaps of paramsFrom) listens here.
        self.on_failure: Callable[[str], None] = lambda why: None

    def heard(self, resource_version: str) -> None:
        """The API server said something about this kind (a list, an event or a bookmark):
        what the cache holds is current from here on."""
        self.error = None
        if resource_version:
            self.resource_version = resource_version
        self.last_word = time.monotonic()
        if self._metrics is not None:
            self._metrics.heard(self.kind)
        if not self.connected:
            self._connected()

    def opened(self) -> None:
        """The API server accepted a watch. One resumed after a break has caught up only
        once it says something: relisted if it does not within ``catch_up_s``."""
        self.error = None
        self.last_word = time.monotonic()
        if self._metrics is not None:
            self._metrics.heard(self.kind)
        if not self.connected and self._catch_up is None:
            self._catch_up = asyncio.get_running_loop().call_later(self.catch_up_s, self._overdue)

    def broke(self, why: str) -> None:
        """The watch broke: what the cache holds may miss changes from now on."""
        self._stop_catch_up()
        self.why = why
        if self.connected:
            self.connected, self.since = False, time.monotonic()
            log.warning("%s cache no longer current (%s): node-name requests get an error until it has caught up", self.kind, why,
                        extra={"kind": self.kind, "resourceVersion": self.resource_version})

    def _connected(self) -> None:
        self._stop_catch_up()
        now = time.monotonic()
        if self._was_connected:
            log.info("%s cache current again after %.1f s", self.kind, now - self.since,
                     extra={"kind": self.kind, "seconds": round(now - self.since, 3), "resourceVersion": self.resource_version})
        self._was_connected = True
        self.connected, self.since, self.why = True, now, ""

    def _overdue(self) -> None:
        self._catch_up = None
        if not self.connected:
            self._silent = True
            self.relist_wanted.set()

    def _stop_catch_up(self) -> None:
        if self._catch_up is not None:
            self._catch_up.cancel()
            self._catch_up = None

    def _error(self, exc: ApiError) -> None:
        self.error = f"{self.kind}s: {exc}"
        self.on_failure(self.error)
        log.warning("%s watch restarting: %s", self.kind, exc, extra={"kind": self.kind, "status": exc.status, "resourceVersion": self.resource_version})

    async def run(self, stop: asyncio.Event) -> None:
        """List, then watch from the list's version, until ``stop``; relist when the history is
        gone or someone asks (``relist_wanted``), back off on failures."""
        try:
            await self._run(stop)
        finally:
            self._stop_catch_up()

    async def _run(self, stop: asyncio.Event) -> None:
        inf, sink, metrics = self, self._sink, self._metrics
        failures = 0  # attempts in a row that failed
        flapping = 0  # lists in a row whose watch then failed at once: reset only by a watch that works
        relist = True
        enter = functools.partial(sink.enter, inf.kind)
        while not stop.is_set():
            relist = relist or inf.relist_wanted.is_set()
            listing, listed, seen = relist, False, 0
            opened_at = 0.0
            wait_at_least = 0.0
            wake = False  # whether the server's answering a probe may cut the wait short
            failed = True
            waiting: list[asyncio.Future[None]] = []

            def opened() -> None:
                nonlocal opened_at
                opened_at = time.monotonic()
                inf.opened()

            try:
                if relist:
                    # Whoever asked for a relist before this one started is answered by it.
                    inf.relist_wanted.clear()
                    inf._silent = False
                    waiting, inf.waiters = inf.waiters, []
                    items, rv = await self._client.list_all(inf.path, page_size=self._page_size, transform=enter)
                    # A relist asked for by a wider projection replaces every pod, changed or not.
                    sink.replace(inf, items, rv, refresh=bool(waiting))
                    for waiter in waiting:
                        if not waiter.done():
                            waiter.set_result(None)
                    waiting = []
                    relist, listing, listed = False, False, True
                    failures = 0
                timeout = random.randint(*WATCH_TIMEOUT_RANGE_S)
                started = time.monotonic()

                async def consume(timeout: int = timeout) -> None:
                    nonlocal seen
                    async for event in self._client.watch(inf.path, resource_version=inf.resource_version, timeout_seconds=timeout, on_open=opened):
                        began = time.perf_counter()
                        sink.apply(inf, event)
                        if metrics is not None:
                            # The event loop's time taken from scheduler requests: measured, not guessed.
                            metrics.count_applied(inf.kind, time.perf_counter() - began)
                        seen += 1

                if await _unless(inf.relist_wanted, consume()):
                    relist = True
                    reason, failed = ("silent" if inf._silent else "relist"), False
                elif time.monotonic() - started >= timeout - TIMEOUT_MARGIN_S:
                    reason, failed = "closed", False
                else:
                    reason = "ended-early"
                    inf.broke("the API server ended its watch early")
            except Expired as exc:
                # Relist at once after a watch resumed from a version the server no longer has,
                # as kube's reflector does: the server answered. A list that expired (a continue
                # token outliving etcd's history), or a watch that expired at once from the
                # version its list gave, waits.
                relist, reason = True, "expired"
                inf.broke("its history expired (410): relisting")
                failed = listing or listed
                self._error(exc)
            except WatchError as exc:
                relist, reason = True, "error-event"
                inf.broke(f"an error event ({exc.status} {exc.reason}): relisting")
                self._error(exc)
            except ApiError as exc:
                reason = "dropped" if exc.status == 0 else "failed"
                inf.broke(f"its {'list' if listing else 'watch'} failed ({f'{exc.status} {exc.reason}' if exc.status else exc.reason})")
                self._error(exc)
                wait_at_least = exc.retry_after or 0.0
                wake = exc.retry_after is None and (exc.status == 0 or exc.status in (401, 403) or exc.status >= 500)
            except Exception as exc:  # noqa: BLE001 - a bug in event handling must not stop the cache; relist to a known state
                log.exception("%s informer failed; relisting", inf.kind)
                relist, reason = True, "internal"
                inf.broke("internal error: relisting")
                inf.error = f"{inf.kind}s: {type(exc).__name__}: {exc}"
            finally:
                if waiting:  # the list failed: its waiters wait for the next one
                    inf.waiters[:0] = waiting
                    inf.relist_wanted.set()
            if stop.is_set():
                return
            if metrics is not None:
                metrics.watch_restarts.labels(inf.kind, reason).inc()
            if seen or (opened_at and time.monotonic() - opened_at >= MIN_HEALTHY_WATCH_S):
                # The watch worked before it ended: the first retry goes at once.
                failures = flapping = 0
            elif failed:
                failures += 1
                if listed:
                    flapping += 1
            else:  # a resumed watch whose history is gone: the server answered, so relist now
                failures = 0
            # The server's Retry-After, when it gave one, is a floor under the backoff.
            delay = max(backoff(failures + flapping, self.backoff_max), min(wait_at_least, self.backoff_max))
            if delay <= 0:
                continue
            if wake and not flapping and self._reachability is not None:
                await self._reachability.wait(stop, delay)
            else:
                await first(stop, timeout=delay)


def backoff(failures: int, maximum: float) -> float:
    """0 for the first retry after a healthy stream; then exponential, capped at ``maximum``,
    with jitter (half fixed, half random: replicas spread out yet every wait still grows)."""
    if failures <= 0:
        return 0.0
    ceiling = min(maximum, BACKOFF_INITIAL_S * 2.0 ** min(failures - 1, 30))
    return ceiling / 2 + random.uniform(0, ceiling / 2)


async def first(*events: asyncio.Event, timeout: float | None = None) -> None:
    """Until any of ``events`` is set, or ``timeout`` seconds have passed."""
    if not events:
        await asyncio.sleep(timeout or 0)
        return
    waiters = [asyncio.create_task(e.wait()) for e in events]
    try:
        await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()


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


def start_and_wait(loop: asyncio.AbstractEventLoop, start: Callable[[], None], ready: asyncio.Event) -> None:
    """Call ``start`` on ``loop`` and return once ``ready`` is set: how a reload (in its own thread)
    holds back a set until a watch the set needs has listed. On the loop itself it cannot wait,
    and only starts."""
    async def started() -> None:
        start()
        await ready.wait()

    try:
        on_loop = asyncio.get_running_loop() is loop
    except RuntimeError:
        on_loop = False
    if on_loop:
        loop.create_task(started())
        return
    with contextlib.suppress(concurrent.futures.CancelledError, RuntimeError):
        asyncio.run_coroutine_threadsafe(started(), loop).result()


async def cancelled(task: asyncio.Task[Any] | None) -> None:
    """Cancel a watch's task (if started) and wait until it has stopped."""
    if task is not None:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
