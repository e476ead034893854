"""Node and pod cache: list + watch from the API server, kept as raw dicts.

Two informers (nodes, pods in all namespaces) each list once, then watch from
the list's resourceVersion with bookmarks, so a quiet stream still moves the
version forward. A dropped or timed-out watch resumes from the last version
seen; a 410 Expired or any ERROR event means the history we need is gone, so
the informer relists and applies the difference (so ``nodeInfo`` stays
incremental and subscribers see one change). Failures back off exponentially
with jitter; meanwhile the cache keeps serving what it has, and the growing
``lag_seconds`` shows the outage.

``nodeInfo`` (engine.nodeinfo) is maintained per node as pods are bound,
finish or are deleted; the view dict is cached per node and rebuilt only when
that node's pods change, because filter requests read it for every node.

Every object is trimmed as it enters (``trim``, page by page while listing, so
a first list never holds the untrimmed cluster): ``metadata.managedFields`` is
dropped, as kube-scheduler drops it, and every string value is interned, so
the label values, namespaces, node and image names, timestamps and the like
that thousands of pods repeat are one object each.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import random
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from engine.admission import held_by_kpe
from engine.equivalence import TrackedNodeInfo
from engine.nodeinfo import NodeInfoAccumulator, is_active, pod_key

from .kube import ApiError, Expired, KubeClient, WatchError

if TYPE_CHECKING:
    from .metrics import Metrics

log = logging.getLogger("kpe.cache")

Obj = dict[str, Any]
OnEvent = Callable[[str, str, Obj], None]
"""``on_event(kind, type, object)``: kind "node" or "pod", type ADDED, MODIFIED or DELETED."""

BACKOFF_INITIAL_S = 0.5
# A watch that ends this fast with nothing in it counts as a failure, so a
# server that accepts and immediately closes watches cannot make us spin.
MIN_HEALTHY_WATCH_S = 1.0
# kube's reflectors pick a random watch timeout in [5, 10) minutes so that
# many clients do not reconnect in lockstep.
WATCH_TIMEOUT_RANGE_S = (300, 600)


class _Informer:
    """What one list+watch loop knows about its stream."""

    def __init__(self, kind: str, path: str) -> None:
        self.kind = kind
        self.path = path
        self.resource_version = ""
        self.listed = False
        self.error: str | None = None
        self.last_word = time.monotonic()
        self.lists = 0


class ClusterCache:
    def __init__(
        self,
        client: KubeClient,
        *,
        on_event: OnEvent | None = None,
        backoff_max: float = 30.0,
        metrics: Metrics | None = None,
        page_size: int = 500,
    ) -> None:
        self._client = client
        self._on_event = on_event
        self.backoff_max = backoff_max
        self._metrics = metrics
        self._page_size = page_size
        self._nodes: dict[str, Obj] = {}
        self._pods: dict[str, Obj] = {}
        self._acc: dict[str, NodeInfoAccumulator] = {}
        self._placed: dict[str, str] = {}  # pod key -> the node whose accumulator holds it
        # nodeInfo per known node, rebuilt for the nodes in _stale when read: a burst
        # of pod events costs one rebuild per node, and readers get a plain dict.
        self._views = TrackedNodeInfo()
        self.node_version = 0  # moves on every node added, changed or deleted
        self._resolved: dict[str, tuple[list[str], int, list[Obj], list[str]]] = {}
        self._stale: set[str] = set()
        self._informers = {"node": _Informer("node", "/api/v1/nodes"), "pod": _Informer("pod", "/api/v1/pods")}
        self._subscribers: list[asyncio.Event] = []
        self.synced = asyncio.Event()
        # Keys of the unbound pods that hold one of kpe's gates, kept as events arrive, so the
        # gate controller costs nothing while no pod waits at a gate (it would scan every pod).
        self.gated: set[str] = set()

    # --- reading -------------------------------------------------------------

    def node(self, name: str) -> Obj | None:
        return self._nodes.get(name)

    def resolve(self, names: list[str], *, key: str = "") -> tuple[list[Obj], list[str]]:
        """The cached nodes for ``names`` (in order) and the names the cache does not know.

        The scheduler sends the same names pod after pod: when they equal the last
        list resolved under ``key`` and no node changed since, the same node list
        comes back (the same object, which lets the equivalence cache skip its
        per-node comparison too). Callers must not change it."""
        last = self._resolved.get(key)
        if last is not None and last[1] == self.node_version and last[0] == names:
            return last[2], list(last[3])
        found = list(map(self._nodes.get, names))
        if None not in found:
            nodes, missing = cast(list[Obj], found), []
        else:
            nodes, missing = [n for n in found if n is not None], [name for name, n in zip(names, found) if n is None]
        if key:
            self._resolved[key] = (names, self.node_version, nodes, missing)
        return nodes, list(missing)

    def nodes(self) -> list[Obj]:
        return list(self._nodes.values())

    def pods(self) -> list[Obj]:
        return list(self._pods.values())

    def pod_by_uid(self, uid: str) -> Obj | None:
        return self._pods.get(uid)

    def pods_on(self, node_name: str) -> list[Obj]:
        """The active (not Succeeded or Failed) pods bound to the node: those counted in its nodeInfo."""
        acc = self._acc.get(node_name)
        return [cast(Obj, pod) for pod in acc.pods.values()] if acc is not None else []

    @property
    def last_error(self) -> str | None:
        """Why the informers are failing now (None once each has recovered)."""
        errors = [inf.error for inf in self._informers.values() if inf.error]
        return "; ".join(errors) if errors else None

    def resource_version(self, kind: str) -> str:
        return self._informers[kind].resource_version

    def lag_seconds(self, kind: str) -> float:
        """Seconds since the API server last said anything about ``kind`` (list, accepted watch, event or bookmark)."""
        return time.monotonic() - self._informers[kind].last_word

    def stale_seconds(self) -> float:
        """How long the cache has been cut off: the longest time since an informer that is
        failing now last heard from the API server (0 while every informer is healthy).
        Not ``lag_seconds``: a healthy watch on a quiet cluster can go minutes without an
        event, and the watch cache sends bookmarks only when its resourceVersion moves."""
        now = time.monotonic()
        return max((now - inf.last_word for inf in self._informers.values() if inf.error), default=0.0)

    def subscribe(self) -> asyncio.Event:
        """An event set on every change to the cache; the subscriber clears it."""
        event = asyncio.Event()
        self._subscribers.append(event)
        return event

    def unsubscribe(self, event: asyncio.Event) -> None:
        with contextlib.suppress(ValueError):
            self._subscribers.remove(event)

    @property
    def node_info(self) -> TrackedNodeInfo:
        """``nodeInfo`` of every known node. Read-only for callers; a view object is
        replaced, never changed, when its node's pods change, and the map logs
        which were replaced (the equivalence cache relies on both)."""
        if self._stale:
            # Read in the evaluation worker while the event loop applies watch events: take
            # the names as they are now (one C call); a name added meanwhile waits for the next read.
            stale = set(self._stale)
            self._stale.difference_update(stale)
            for name in stale:
                if name in self._nodes:
                    acc = self._acc.get(name)
                    self._views[name] = acc.view() if acc is not None else {"pods": [], "podCount": 0, "requested": {}}
                    self._views.replaced(name)
                elif self._views.pop(name, None) is not None:
                    self._views.replaced(name)  # the node was deleted
        return self._views

    # --- running -------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Run both informers until ``stop`` is set (or this task is cancelled)."""
        loops = [asyncio.create_task(self._informer_loop(inf, stop), name=f"informer-{kind}") for kind, inf in self._informers.items()]
        stopped = asyncio.create_task(stop.wait())
        try:
            await asyncio.wait([*loops, stopped], return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (*loops, stopped):
                task.cancel()
            await asyncio.gather(*loops, stopped, return_exceptions=True)

    async def _informer_loop(self, inf: _Informer, stop: asyncio.Event) -> None:
        failures = 0
        relist = True
        while not stop.is_set():
            listing, seen = relist, 0
            wait_at_least = 0.0
            try:
                if relist:
                    items, rv = await self._client.list_all(inf.path, page_size=self._page_size, transform=trim)
                    self._replace(inf, items, rv)
                    relist, listing = False, False
                # Only a watch that delivers resets the backoff: a list that succeeds
                # followed by a watch that fails at once must not become a tight loop.
                started = time.monotonic()
                timeout = random.randint(*WATCH_TIMEOUT_RANGE_S)
                opened = functools.partial(self._heard, inf, "")
                async for event in self._client.watch(inf.path, resource_version=inf.resource_version, timeout_seconds=timeout, on_open=opened):
                    self._apply(inf, event)
                    seen += 1
                    failures = 0
                reason = "closed"
                if not seen and time.monotonic() - started < MIN_HEALTHY_WATCH_S:
                    failures += 1
            except Expired as exc:
                # Relist at once after a healthy watch (as kube's reflector does); wait
                # if the list itself expired (a continue token outliving etcd's history)
                # or the watch expired before saying anything.
                relist, reason = True, "expired"
                failures += 1 if listing or not seen else 0
                self._error(inf, exc)
            except WatchError as exc:
                relist, reason = True, "error-event"
                failures += 1
                self._error(inf, exc)
            except ApiError as exc:
                reason = "dropped" if exc.status == 0 else "failed"
                failures += 1
                self._error(inf, exc)
                wait_at_least = exc.retry_after or 0.0
            except Exception as exc:  # noqa: BLE001 - a bug in event handling must not stop the cache; relist to a known state
                log.exception("%s informer failed; relisting", inf.kind)
                relist, reason = True, "internal"
                failures += 1
                inf.error = f"{inf.kind}s: {type(exc).__name__}: {exc}"
            if stop.is_set():
                return
            if self._metrics is not None:
                self._metrics.watch_restarts.labels(inf.kind, reason).inc()
            # The server's Retry-After, when it gave one, is a floor under the backoff.
            delay = max(self._backoff(failures), min(wait_at_least, self.backoff_max))
            if delay > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), delay)

    def _backoff(self, failures: int) -> float:
        """0 for the first retry after a healthy stream; then exponential, capped, with jitter
        (half fixed, half random: replicas spread out yet every wait still grows)."""
        if failures <= 0:
            return 0.0
        ceiling = min(self.backoff_max, BACKOFF_INITIAL_S * 2.0 ** min(failures - 1, 30))
        return ceiling / 2 + random.uniform(0, ceiling / 2)

    def _error(self, inf: _Informer, exc: ApiError) -> None:
        inf.error = f"{inf.kind}s: {exc}"
        log.warning("%s watch restarting: %s", inf.kind, exc, extra={"kind": inf.kind, "status": exc.status, "resourceVersion": inf.resource_version})

    def _heard(self, inf: _Informer, resource_version: str) -> None:
        inf.error = None
        if resource_version:
            inf.resource_version = resource_version
        inf.last_word = time.monotonic()
        if self._metrics is not None:
            self._metrics.cache_lag.labels(inf.kind).set(0)

    # --- applying ------------------------------------------------------------

    def _apply(self, inf: _Informer, event: Obj) -> None:
        kind = event.get("type")
        obj = event.get("object")
        if not isinstance(obj, dict):
            return
        trim(obj)
        rv = str((obj.get("metadata") or {}).get("resourceVersion") or "")
        if kind in ("ADDED", "MODIFIED"):
            self._upsert(inf.kind, obj, str(kind))
        elif kind == "DELETED":
            self._delete(inf.kind, obj)
        # BOOKMARK (and anything unknown) only moves the resourceVersion.
        self._heard(inf, rv)
        if kind != "BOOKMARK":
            self._changed(inf.kind)

    def _replace(self, inf: _Informer, items: list[Obj], rv: str) -> None:
        """A relist: apply only the differences, so views and subscribers see real changes."""
        store = self._nodes if inf.kind == "node" else self._pods
        fresh = {self._key(inf.kind, obj): obj for obj in items}
        for key in [k for k in store if k not in fresh]:
            self._delete(inf.kind, store[key])
        for key, obj in fresh.items():
            old = store.get(key)
            if old is None or _rv(old) != _rv(obj) or not _rv(obj):
                self._upsert(inf.kind, obj, "MODIFIED" if old is not None else "ADDED")
        inf.listed = True
        inf.lists += 1
        self._heard(inf, rv)
        self._changed(inf.kind)
        if all(i.listed for i in self._informers.values()):
            self.synced.set()

    @staticmethod
    def _key(kind: str, obj: Obj) -> str:
        return str((obj.get("metadata") or {}).get("name") or "") if kind == "node" else pod_key(obj)

    def _upsert(self, kind: str, obj: Obj, event_type: str) -> None:
        key = self._key(kind, obj)
        if kind == "node":
            if key not in self._nodes:
                self._stale.add(key)
            self._nodes[key] = obj
            self.node_version += 1
        else:
            self._pods[key] = obj
            self._place(key, obj)
            if not (obj.get("spec") or {}).get("nodeName") and held_by_kpe(obj):
                self.gated.add(key)
            else:
                self.gated.discard(key)
        self._notify_callback(kind, event_type, obj)

    def _delete(self, kind: str, obj: Obj) -> None:
        key = self._key(kind, obj)
        if kind == "node":
            gone = self._nodes.pop(key, None)
            self.node_version += 1
            self._stale.add(key)  # its view goes at the next read of node_info, in the thread that reads it
        else:
            gone = self._pods.pop(key, None)
            self._place(key, None)
            self.gated.discard(key)
        if gone is not None:
            self._notify_callback(kind, "DELETED", obj)

    def _place(self, key: str, pod: Obj | None) -> None:
        """Move the pod's contribution to the node it now counts on (none when it
        is pending, finished or deleted); invalidate the views that changed."""
        target = ""
        if pod is not None and is_active(pod):
            target = str((pod.get("spec") or {}).get("nodeName") or "")
        old = self._placed.get(key, "")
        if old and old != target:
            acc = self._acc[old]
            acc.remove(key)
            if not acc.pods:
                del self._acc[old]
            self._stale.add(old)
        if target and pod is not None:
            self._acc.setdefault(target, NodeInfoAccumulator()).add(key, pod)
            self._placed[key] = target
            self._stale.add(target)
        else:
            self._placed.pop(key, None)

    def _notify_callback(self, kind: str, event_type: str, obj: Obj) -> None:
        if self._on_event is None:
            return
        try:
            self._on_event(kind, event_type, obj)
        except Exception:  # noqa: BLE001 - a subscriber's bug must not corrupt the cache
            log.exception("on_event callback failed for %s %s", kind, event_type)

    def _changed(self, kind: str) -> None:
        if self._metrics is not None:
            self._metrics.cache_objects.labels(kind).set(len(self._nodes if kind == "node" else self._pods))
        for event in self._subscribers:
            event.set()


def _rv(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def trim(obj: Obj) -> Obj:
    """What the cache keeps of a node or pod, in place: without ``metadata.managedFields``
    (the API server's field ownership bookkeeping, for server-side apply: nothing in kpe
    reads it, and kube-scheduler drops it from its own cache), with every string value
    interned, so equal values across objects are one object. Values stay equal, so no
    policy can tell. Returns ``obj``."""
    if type(obj) is not dict:
        return obj  # not an object: left for the caller to judge
    meta = obj.get("metadata")
    if type(meta) is dict:
        meta.pop("managedFields", None)
    # Pods and nodes are schema-validated by the API server and nest a few dozen levels at
    # most; an object deeper than the interpreter's stack is only left partly interned.
    with contextlib.suppress(RecursionError):
        _intern_strings(obj)
    return obj


_intern = sys.intern


def _intern_strings(value: Any) -> None:
    """Intern the string values (not keys: orjson already shares the short ones) under ``value``.
    Interned strings are freed like any other once the cache lets go of them."""
    if type(value) is dict:
        for key, item in value.items():
            kind = type(item)
            if kind is str:
                value[key] = _intern(item)
            elif kind is dict or kind is list:
                _intern_strings(item)
    else:
        for index, item in enumerate(value):
            kind = type(item)
            if kind is str:
                value[index] = _intern(item)
            elif kind is dict or kind is list:
                _intern_strings(item)
