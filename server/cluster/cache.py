"""Node and pod cache: list + watch from the API server, kept as raw dicts.

Two informers (nodes, pods in all namespaces; ``server.cluster.informer``) each
list once, then watch from the list's resourceVersion. A relist is applied as
the difference from what is cached (so ``nodeInfo`` stays incremental and
subscribers see one change). The cache is ``connected`` while every informer is:
its watch open and caught up (see ``server.cluster.informer``). From any break
until then, ``disconnection`` says since when and why, and node names are not
answered from it (``server.verbs.answer.cache_unusable``, ``/readyz``); what it
holds stays for the controllers and introspection, and ``lag_seconds`` shows
how long the API server has said nothing.

``nodeInfo`` (engine.cluster.nodeinfo) is maintained per node as pods are bound,
finish or are deleted; the view dict is cached per node and rebuilt only when
that node's pods change, because filter requests read it for every node.

Every object is trimmed as it enters (``server.cluster.trim``: page by page while listing,
so a first list never holds the untrimmed cluster); bound, ungated pods are also
projected to what the served policy set and kpe read of them. ``server.cluster.trim`` says
what reads cached pods, and what it reads of them. So a bound pod's update whose projection
is the one cached (most of a kubelet's status updates) changes nothing anyone reads: it is
not applied, and its node keeps its view and the answers remembered from it.

A reload whose set reads a field the cache dropped must not serve before the
pods have it: the cache registers a swap guard with the policy store, which
widens what it keeps (the union of both sets'), relists pods (interrupting the
watch) replacing every one, changed or not, and only then lets the swap
happen; the old set serves meanwhile, through failed lists and their backoff.
A set that reads less needs nothing: the cache cuts pods entering it to the
new set's projection ``narrow_after_s`` after the swap (a request that took
the old set just before still finds its fields); the pods already cached keep
what they have.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, cast

from engine.decisions.admission import held_by_kpe
from engine.equivalence.memo import TrackedNodeInfo
from engine.equivalence.warming import Exemplars
from engine.cel.types.counts import Counts
from engine.cluster.counts import CountIndex, CountSpecs
from engine.cluster.inflight import InFlight
from engine.cluster.nodeinfo import NodeInfoAccumulator, NodeState, is_active, pod_key
from engine.cluster.projection import EVERYTHING, Projection

from server.cluster.informer import CATCH_UP_S, Informer, Reachability
from server.cluster.kube import KubeClient
from server.cluster.namespaces import PATH as NAMESPACES_PATH
from server.cluster.namespaces import Namespaces, reads_namespace
from server.cluster.configmaps import ConfigMaps
from server.cluster.devices import Devices, reads_dra
from server.cluster.trim import is_projected as is_projected  # also read through here by server.introspection.endpoints
from server.cluster.trim import trim

if TYPE_CHECKING:
    from engine.policy.model import PolicySet

    from server.telemetry.metrics import Metrics
    from server.reload.store import PolicyStore

log = logging.getLogger("kpe.cache")

Obj = dict[str, Any]
OnEvent = Callable[[str, str, Obj], None]
"""``on_event(kind, type, object)``: kind "node" or "pod", type ADDED, MODIFIED or DELETED."""

# After a reload that reads fewer pod fields, pods entering the cache are cut to the new
# set's projection only this long after the swap: a request that took the old set just
# before the swap still finds every field that set reads (requests end in seconds).
NARROW_AFTER_S = 60.0


class ClusterCache:
    def __init__(
        self,
        client: KubeClient,
        *,
        on_event: OnEvent | None = None,
        backoff_max: float = 30.0,
        metrics: Metrics | None = None,
        page_size: int = 500,
        policies: PolicyStore | None = None,
        projection: Projection | None = None,
        also_keep: Callable[[PolicySet], Projection] | None = None,
        narrow_after_s: float = NARROW_AFTER_S,
        catch_up_s: float = CATCH_UP_S,
        in_flight: InFlight | None = None,
    ) -> None:
        self._client = client
        self._on_event = on_event
        self._metrics = metrics
        self._nodes: dict[str, Obj] = {}
        self._pods: dict[str, Obj] = {}
        self._acc: dict[str, NodeInfoAccumulator] = {}
        self._placed: dict[str, str] = {}  # pod key -> the node whose accumulator holds it
        # Pods kube-scheduler may have placed and the watch has not shown bound (engine.cluster.inflight):
        # filter answers add them, pod events here take them out.
        self.in_flight = in_flight if in_flight is not None else InFlight()
        # nodeInfo per known node, rebuilt for the nodes in _stale when read: a burst
        # of pod events costs one rebuild per node, and readers get a plain dict.
        self._views = TrackedNodeInfo()
        # Each node with its view, as one object replaced along with the view (on any change to
        # the node or its pods): what node names resolve to (``states``).
        self._states: dict[str, NodeState] = {}
        # Each known node's name to itself: the cache's own string for a name a request sends.
        self._names: dict[str, str] = {}
        self.node_version = 0  # moves on every node added, changed or deleted
        self._resolved: dict[str, tuple[list[str], int, list[Obj], list[str]]] = {}
        self._stale: set[str] = set()
        self._reachability = Reachability(client, "/api/v1/nodes")
        self._informers = {
            kind: Informer(kind, path, client=client, sink=self, metrics=metrics, page_size=page_size, backoff_max=backoff_max,
                           catch_up_s=catch_up_s, reachability=self._reachability)
            for kind, path in (("node", "/api/v1/nodes"), ("pod", "/api/v1/pods"))
        }
        # Namespaces, watched once a served set reads namespaceObject (server.cluster.namespaces).
        self.namespaces = Namespaces(lambda sink: Informer("namespace", NAMESPACES_PATH, client=client, sink=sink, metrics=metrics, page_size=page_size,
                                                           backoff_max=backoff_max, catch_up_s=catch_up_s, reachability=self._reachability))
        # paramsFrom's ConfigMaps (server.cluster.configmaps), the policy store's params source.
        self.configmaps = ConfigMaps(lambda path, sink: Informer("configmap", path, client=client, sink=sink, metrics=metrics, page_size=page_size,
                                                                 backoff_max=backoff_max, catch_up_s=catch_up_s, reachability=self._reachability))
        # Dynamic Resource Allocation objects, watched once a served set reads dra (server.cluster.devices).
        self.devices = Devices(client, lambda kind, path, sink: Informer(kind, path, client=client, sink=sink, metrics=metrics, page_size=page_size,
                                                                         backoff_max=backoff_max, catch_up_s=catch_up_s, reachability=self._reachability))
        if policies is not None:
            policies.params = self.configmaps
        self._stop: asyncio.Event | None = None
        self._subscribers: list[asyncio.Event] = []
        self.synced = asyncio.Event()
        # Keys of the unbound pods that hold one of kpe's gates, kept as events arrive, so the
        # gate controller costs nothing while no pod waits at a gate (it would scan every pod).
        self.gated: set[str] = set()
        # What is kept of bound pods (see the module docstring): the served policy set's
        # projection, or everything without a policy store.
        self._store = policies
        # More of a bound pod than the set reads of other pods, for a reader of kpe's own:
        # the Audit policies' reads of the pod they judge, with --policy-reports.
        self._also_keep = also_keep
        if projection is None:
            projection = self.wanted(policies.current) if policies is not None and policies.ready else EVERYTHING
        self._projection = projection
        # Pods counted across nodes for the served set's ``counts`` (engine.cluster.counts), kept
        # with nodeInfo; a reload that counts by other labels recounts (``_recount``).
        self.count_index = CountIndex(policies.current.counts if policies is not None and policies.ready else CountSpecs())
        self.narrow_after_s = narrow_after_s
        # The newest pods of the workloads that created pods last, whole, from the first list (set by
        # the composition root with --warm-classes; server.verbs.warming takes them once synced).
        self.exemplars: Exemplars | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    # --- reading -------------------------------------------------------------

    def node(self, name: str) -> Obj | None:
        return self._nodes.get(name)

    def own_names(self, names: list[str]) -> list[str]:
        """The cache's own string for each name it knows, the name as given for the others.
        A filter's names outlive its request (nodes in flight, remembered answers) and are
        looked up in dicts keyed by the cache's strings, which a string of the same object
        finds without comparing characters. Not ``sys.intern``: with every cached string
        interned and pods coming and going, the interpreter's table of them is large and
        full of freed slots; interning a window of 420 names measured 335 µs in a serving
        kpe against 137 µs from this table (timed in process over 400 filters of
        ``bench/replay_bench.py``'s heterogeneous shape)."""
        return list(map(self._names.get, names, names))

    def nodes_named(self, names: list[str]) -> list[Obj | None]:
        """The cached node of each name (None where unknown), looked up in C."""
        return list(map(self._nodes.get, names))

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

    @property
    def states(self) -> Mapping[str, NodeState]:
        """Every known node's current ``NodeState``, by name (read-only for callers)."""
        self.node_info  # brings the states of changed nodes up to date
        return self._states

    def nodes(self) -> list[Obj]:
        return list(self._nodes.values())

    @property
    def projection(self) -> Projection:
        """What the cache keeps of a bound pod entering it now."""
        return self._projection

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

    @property
    def connected(self) -> bool:
        """Whether every informer's watch is open and caught up: what the cache holds is current."""
        return all(inf.connected for inf in self._watching())

    def _watching(self) -> list[Informer]:
        # Not paramsFrom's ConfigMaps: one policy naming a namespace kpe may not read would make
        # every replica unready and every node-name request an error. Such a policy acts on its
        # parameterNotFoundAction, and /readyz says why (``ConfigMaps.problems``).
        return [*self._informers.values(), *((self.namespaces.informer,) if self.namespaces.started else ()), *self.devices.watching]

    def disconnection(self) -> tuple[float, str] | None:
        """None while the cache is connected; else for how many seconds it has not been, and why."""
        lost = [inf for inf in self._watching() if not inf.connected]
        if not lost:
            return None
        now = time.monotonic()
        return max(now - inf.since for inf in lost), "; ".join(f"{inf.kind}s: {inf.why}" for inf in lost)

    def subscribe(self) -> asyncio.Event:
        """An event set on every change to the cache; the subscriber clears it."""
        event = asyncio.Event()
        self._subscribers.append(event)
        return event

    def unsubscribe(self, event: asyncio.Event) -> None:
        with contextlib.suppress(ValueError):
            self._subscribers.remove(event)

    @property
    def counts(self) -> Counts:
        """``counts`` as the cache keeps it (read-only for callers)."""
        return Counts(self.count_index)

    def recount(self, specs: CountSpecs) -> None:
        """Count by ``specs`` as well from now on (on the event loop: the index is rebuilt from
        the cached nodes and pods, swapped whole)."""
        wanted = self.count_index.specs.union(specs)
        if wanted != self.count_index.specs:
            self.count_index = CountIndex.build(wanted, self._nodes.values(), self._pods.values())

    @property
    def node_info(self) -> TrackedNodeInfo:
        """``nodeInfo`` of every known node. Read-only for callers; a view object is
        replaced, never changed, when its node or the node's pods change (with the node's
        ``NodeState``), and the map logs which were replaced (the equivalence cache relies
        on both)."""
        if self._stale:
            # Read in the evaluation worker while the event loop applies watch events: take
            # the names as they are now (one C call); a name added meanwhile waits for the next read.
            stale = set(self._stale)
            self._stale.difference_update(stale)
            for name in stale:
                node = self._nodes.get(name)
                old = self._states.pop(name, None)
                if node is not None:
                    acc = self._acc.get(name)
                    view = acc.view() if acc is not None else {"pods": [], "podCount": 0, "requested": {}}
                    self._views[name] = view
                    self._states[name] = NodeState(name, node, view)
                    self._views.replaced(name, node=old is None or old.node is not node)
                elif self._views.pop(name, None) is not None:
                    self._views.replaced(name)  # the node was deleted
        return self._views

    # --- running -------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Run both informers until ``stop`` is set (or this task is cancelled)."""
        self._loop = asyncio.get_running_loop()
        self._stop = stop
        store = self._store
        if store is not None:
            store.add_swap_guard(self._before_swap)
            if store.ready:  # a set swapped in before the guard was there: nothing is cached yet
                self._projection = self._projection.union(self.wanted(store.current))
                self.recount(store.current.counts)
                if reads_namespace(store.current):
                    self.namespaces.start(stop)
                if reads_dra(store.current):
                    self.devices.start(stop)
        loops = [asyncio.create_task(inf.run(stop), name=f"informer-{kind}") for kind, inf in self._informers.items()]
        loops.append(asyncio.create_task(self._reachability.run(stop), name="api-server-probe"))
        # Ends once the ConfigMaps are listed: not one of the loops whose end ends the cache.
        params = asyncio.create_task(self.configmaps.serve(store, stop), name="policy-params") if store is not None else None
        stopped = asyncio.create_task(stop.wait())
        try:
            await asyncio.wait([*loops, stopped], return_when=asyncio.FIRST_COMPLETED)
        finally:
            if params is not None:
                loops.append(params)
            for task in (*loops, stopped):
                task.cancel()
            await asyncio.gather(*loops, stopped, return_exceptions=True)
            await self.namespaces.stop()
            await self.devices.stop()
            await self.configmaps.close()
            if store is not None:
                store.remove_swap_guard(self._before_swap)
            for inf in self._informers.values():
                for waiter in inf.waiters:
                    waiter.cancel()  # a reload waiting for a relist: the cache is gone, it waits no more
                inf.waiters = []
            self._loop = None

    # --- what is kept of pods ------------------------------------------------

    async def widen(self, wanted: Projection) -> None:
        """Keep at least ``wanted`` of bound pods from now on, and return once every pod has
        been listed again and replaced (the cached ones miss fields ``wanted`` keeps); at once
        when the cache keeps all of it already. Needs ``run`` to be running."""
        if self._projection.covers(wanted):
            return
        self._projection = self._projection.union(wanted)
        inf = self._informers["pod"]
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        inf.waiters.append(waiter)
        inf.relist_wanted.set()
        await waiter

    def narrow(self, projection: Projection) -> None:
        """Keep only ``projection`` of the bound pods entering from now on; the cached ones
        keep what they have (more than it, which no decision can tell)."""
        self._projection = projection

    def wanted(self, policy_set: PolicySet) -> Projection:
        """What to keep of bound pods under ``policy_set``."""
        if self._also_keep is None:
            return policy_set.pod_projection
        return policy_set.pod_projection.union(self._also_keep(policy_set))

    def _before_swap(self, candidate: PolicySet) -> None:
        """The policy store's swap guard, called in its reload thread before ``candidate``
        serves. A set that reads pod fields the cache drops waits here (the old set serving
        meanwhile) until the pods are listed again with them; a set that reads fewer has the
        cache keep fewer, ``narrow_after_s`` after the swap."""
        loop = self._loop
        wanted = self.wanted(candidate)
        if loop is not None and not loop.is_closed() and self._stop is not None and not self.namespaces.started and reads_namespace(candidate):
            self.namespaces.start_before_swap(loop, self._stop)
        if loop is not None and not loop.is_closed() and self._stop is not None and not self.devices.started and reads_dra(candidate):
            self.devices.start_before_swap(loop, self._stop)
        if loop is None or loop.is_closed():
            self._projection = self._projection.union(wanted)  # not running: nothing is waiting to be listed
            self.recount(candidate.counts)
            return
        if self.count_index.specs.union(candidate.counts) != self.count_index.specs:
            self._recount_before(loop, candidate.counts)
        if not self._projection.covers(wanted):
            try:
                on_loop = asyncio.get_running_loop() is loop
            except RuntimeError:
                on_loop = False
            if on_loop:
                # A synchronous reload on the event loop itself (kpe reloads in a thread): it
                # cannot wait for the list it needs, so decisions may miss the new fields until then.
                log.warning("policy reload on the event loop: pods are relisted without holding the new set back")
                loop.create_task(self.widen(wanted))
                return
            started = time.monotonic()
            log.info("the new policy set reads pod fields the cache dropped: relisting pods before it serves",
                     extra={"generation": candidate.generation})
            try:
                asyncio.run_coroutine_threadsafe(self.widen(wanted), loop).result()
            except (concurrent.futures.CancelledError, RuntimeError):
                return  # the cache stopped
            log.info("pods relisted for the new policy set", extra={"generation": candidate.generation, "seconds": round(time.monotonic() - started, 3)})
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(self._narrow_later, candidate)

    def _recount_before(self, loop: asyncio.AbstractEventLoop, specs: CountSpecs) -> None:
        """Recount on the event loop, which writes the index, before the set that reads it serves."""
        try:
            on_loop = asyncio.get_running_loop() is loop
        except RuntimeError:
            on_loop = False
        if on_loop:
            self.recount(specs)
            return

        async def recount() -> None:
            self.recount(specs)

        with contextlib.suppress(RuntimeError, concurrent.futures.CancelledError):  # the cache stopped
            asyncio.run_coroutine_threadsafe(recount(), loop).result()

    def _narrow_later(self, candidate: PolicySet) -> None:
        assert self._loop is not None
        self._loop.call_later(self.narrow_after_s, self._narrow_if_serving, candidate)

    def _narrow_if_serving(self, candidate: PolicySet) -> None:
        store = self._store
        if store is None or not store.ready or store.current is not candidate:
            return
        wanted = self.wanted(candidate)
        if self._projection.covers(wanted):
            self.narrow(wanted)

    def enter(self, kind: str, obj: Obj) -> Obj:
        """What the cache keeps of an object as it enters: trimmed, and a bound pod projected. Until
        the first sync, each pod is offered whole to ``exemplars`` first."""
        if kind == "node":
            return trim(obj)
        if self.exemplars is not None and not self.synced.is_set():
            self.exemplars.offer(obj)
        return trim(obj, self._projection)

    # --- applying ------------------------------------------------------------

    def apply(self, inf: Informer, event: Obj) -> None:
        kind = event.get("type")
        obj = event.get("object")
        if not isinstance(obj, dict):
            return
        rv = _rv(obj)  # before it enters: a bound pod's projection keeps no resourceVersion
        obj = self.enter(inf.kind, obj)
        if kind == "MODIFIED" and inf.kind == "pod" and (old := self._pods.get(pod_key(obj))) is not None and _same(old, obj):
            # A bound pod whose projection did not change (a kubelet's status updates: conditions,
            # container states, IPs) changed nothing kpe reads: its node keeps its view and the
            # answers worked out for it. Applied, each such event made the node's view anew.
            inf.heard(rv)
            return
        if kind in ("ADDED", "MODIFIED"):
            self._upsert(inf.kind, obj, str(kind))
        elif kind == "DELETED":
            self._delete(inf.kind, obj)
        # BOOKMARK (and anything unknown) only moves the resourceVersion.
        inf.heard(rv)
        if kind != "BOOKMARK":
            self._changed(inf.kind)

    def replace(self, inf: Informer, items: list[Obj], rv: str, *, refresh: bool = False) -> None:
        """A relist: apply only the differences, so views and subscribers see real changes
        (every object with ``refresh``: the cached ones were cut narrower than these)."""
        store = self._nodes if inf.kind == "node" else self._pods
        fresh = {self._key(inf.kind, obj): obj for obj in items}
        for key in [k for k in store if k not in fresh]:
            self._delete(inf.kind, store[key])
        for key, obj in fresh.items():
            old = store.get(key)
            if refresh or old is None or not _same(old, obj):
                self._upsert(inf.kind, obj, "MODIFIED" if old is not None else "ADDED")
        inf.listed = True
        inf.lists += 1
        inf.heard(rv)
        self._changed(inf.kind)
        if all(i.listed for i in self._informers.values()):
            self.synced.set()

    @staticmethod
    def _key(kind: str, obj: Obj) -> str:
        return str((obj.get("metadata") or {}).get("name") or "") if kind == "node" else pod_key(obj)

    def _upsert(self, kind: str, obj: Obj, event_type: str) -> None:
        key = self._key(kind, obj)
        if kind == "node":
            self._stale.add(key)  # its NodeState holds the node: a new one at the next read
            self._nodes[key] = obj
            self._names.setdefault(key, key)
            self.node_version += 1
            self.count_index.set_node(key, obj)
        else:
            self._pods[key] = obj
            self._place(key, obj)
            self.in_flight.seen(obj)
            if not (obj.get("spec") or {}).get("nodeName") and held_by_kpe(obj):
                self.gated.add(key)
            else:
                self.gated.discard(key)
        self._notify_callback(kind, event_type, obj)

    def _delete(self, kind: str, obj: Obj) -> None:
        key = self._key(kind, obj)
        if kind == "node":
            gone = self._nodes.pop(key, None)
            self._names.pop(key, None)
            self.node_version += 1
            self.count_index.set_node(key, None)
            self._stale.add(key)  # its view goes at the next read of node_info, in the thread that reads it
        else:
            gone = self._pods.pop(key, None)
            self._place(key, None)
            self.in_flight.forget(key)
            self.gated.discard(key)
        if gone is not None:
            self._notify_callback(kind, "DELETED", obj)

    def _place(self, key: str, pod: Obj | None) -> None:
        """Move the pod's contribution to the node it now counts on (none when it
        is pending, finished or deleted); invalidate the views that changed."""
        self.count_index.set_pod(key, pod)
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


def _same(old: Obj, new: Obj) -> bool:
    """Whether a relisted or watched object is the one cached: the same resourceVersion, or for a bound pod
    (whose projection keeps none: a string of its own for each of 20,000 pods and a metadata
    table past its next size, 140 bytes a pod) the same projection. Its equal parts are one
    object each (``server.cluster.trim``), so comparing them is mostly comparing references."""
    version = _rv(new)
    return version == _rv(old) if version else old == new


