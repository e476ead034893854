"""One equivalence class's remembered per-node results for one verb (``ClassMemo``), and
what a lookup in them gives (``Lookup``, ``Snapshot``): the machinery under the equivalence
cache (``engine.equivalence.classes``), kept apart from how classes are keyed, chosen and
forgotten.

A result is kept with the node and ``nodeInfo`` objects it was computed from, or per node
name, forgotten as the cluster cache's change log (``TrackedNodeInfo``) names the node; a
window of nodes is checked in C, and only the stale are computed.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import compress, repeat
from operator import and_, is_
from typing import Any

from engine.cluster.nodeinfo import NodesByName, NodeState, node_name, node_names


class TrackedNodeInfo(dict[str, Any]):
    """``nodeInfo`` per node name that also tells which nodes' entries were
    replaced since a version, so the equivalence cache need not compare every
    node's entry on every request. Whoever fills it calls ``replaced(name)``
    after replacing or removing an entry."""

    def __init__(self, *, history: int = 4096) -> None:
        super().__init__()
        self.version = 0
        self._log: deque[tuple[int, str, bool]] = deque(maxlen=history)

    def replaced(self, name: str, *, node: bool = True) -> None:
        """``name``'s entry was replaced or removed; ``node=False`` when its node object is the
        same as before (only its pods changed: the bind of a pod, what happens most)."""
        self.version += 1
        self._log.append((self.version, name, node))

    def changed_since(self, version: int, *, nodes_only: bool = False) -> set[str] | None:
        """Names whose entry changed after ``version`` (``nodes_only``: whose node object did);
        None when that is too long ago to tell."""
        if version == self.version:
            return set()
        if not self._log or self._log[0][0] > version + 1:
            return None
        names: set[str] = set()
        for v, name, node in reversed(self._log):  # newest first: stop at the first entry already seen
            if v <= version:
                break
            if node or not nodes_only:
                names.add(name)
        return names


@dataclass(slots=True)
class Snapshot:
    """The nodes of the class's last request and their results, position by
    position, plus whatever the verb derived from them (``derived``)."""

    names: list[str]
    nodes: Sequence[Any]
    infos: list[Any]
    results: list[Any]
    derived: Any = None
    info_version: int | None = None  # TrackedNodeInfo.version the infos were read at
    info_map: Any = None  # the TrackedNodeInfo they were read from
    positions: dict[str, int] | None = None  # name -> position, built when first needed
    states: Mapping[str, NodeState] | None = None  # the states by name (``lookup_names``)

    def position(self) -> dict[str, int]:
        if self.positions is None:
            self.positions = {name: i for i, name in enumerate(self.names)}
        return self.positions


@dataclass(slots=True)
class Lookup:
    names: list[str]
    infos: list[Any] | None
    results: list[Any]
    hits: int
    changed: list[int] | None  # positions whose result differs from ``previous``'s; None: no usable previous
    previous: Snapshot | None
    states: Mapping[str, NodeState] | None = None  # with ``lookup_names``: the states by name (``infos`` is then None)
    unknown: list[str] = field(default_factory=list)  # with ``lookup_names``: names left out, not known

    def node(self, i: int, nodes: Any) -> Any:
        """The node at position ``i`` now (``nodes`` when they were given)."""
        return self.states[self.names[i]].node if self.states is not None else nodes[i]

    def info(self, i: int) -> Any:
        """The nodeInfo at position ``i`` now."""
        if self.states is not None:
            return self.states[self.names[i]].info
        assert self.infos is not None
        return self.infos[i]


class Offload(Exception):
    """Evaluating the request could take longer than the caller allowed (``inline_s``), or how
    long is not known: raised before anything is computed or remembered, so the caller can run
    the request elsewhere (kpe's server answers cheap requests on its event loop and hands the
    rest to its worker thread). ``estimate`` is the seconds expected, None when not measured."""

    def __init__(self, misses: int, estimate: float | None) -> None:
        took = "an unmeasured time" if estimate is None else f"about {estimate * 1000:.2f} ms"
        super().__init__(f"{misses} nodes to evaluate, {took}")
        self.misses = misses
        self.estimate = estimate


# How much of the measured cost a new measurement leaves: a mean over the last few requests, so
# one measurement stretched by the machine (a preempted thread, the other thread's turn at the
# interpreter) does not send a cheap class off the event loop, while a slow policy's first
# measurement, hundreds of times the budget, keeps it off at once.
COST_KEPT = 0.75
# Kinds of node a class keeps results for (``ClassMemo.alike``): a cluster's node pools, zones
# and teams make tens; rules that read each node's name make one a node, as many as ``by_name``.
ALIKE_KEPT = 256


class ClassMemo:
    """Remembered per-node results of one pod class for one verb.

    The scheduler sends the same node list for pod after pod, so the last
    request's list is kept as a snapshot: comparing object identities position
    by position (in C, through ``map``) finds the few nodes that changed, and
    only those are looked up or computed again. A verb keeps what it derived
    from the results (its answer) in the snapshot and patches it at the changed
    positions, so an unchanged cluster costs no Python work per node.
    """

    __slots__ = ("node_of", "info_of", "result_of", "by_name", "synced", "snapshot", "bound", "eventful", "shared", "alike", "info_blind", "prepared", "asked", "cost", "per_request", "clock",
                 "pinned", "asked_at")

    def __init__(self, *, info_blind: bool = False, clock: Callable[[], float] = time.perf_counter) -> None:
        # Per node name: the node and nodeInfo objects a result was computed from, and the
        # result. Three dicts rather than one of tuples, so a whole window is checked in C.
        self.node_of: dict[str, Any] = {}
        self.info_of: dict[str, Any] = {}
        self.result_of: dict[str, Any] = {}
        # Per node name (``lookup_names``), forgotten as the change log names them; ``synced``:
        # the log's version they were last brought up to.
        self.by_name: dict[str, Any] = {}
        self.synced: int | None = None
        self.snapshot: Snapshot | None = None
        # (names, change log version, results by name, which are None) of the last ``pending``, for its lookup.
        self.prepared: tuple[list[str], int, list[Any], list[bool]] | None = None
        # The verb's rules bound to the class's first pod: every pod of the class
        # gives them the same values (rules that read now are bound per request).
        self.bound: Any = None
        # Whether any result computed for the class had errors or Audit rejections to replay:
        # until one has, the verbs skip looking for them.
        self.eventful = False
        self.shared: dict[Any, Any] = {}  # a verb's equal results, one object each (without events: by position, unresolvable, reason and rules left to run)
        self.pinned: Any = None  # the dra object of the class key (EquivalenceCache.table)
        # Results without events by what the class's rules read of a node (``node_key``), for rules
        # that read of a node only paths (``PolicyReads.node_paths``): true of every node alike,
        # whatever changes, so kept until there are too many kinds (``keep_alike``).
        self.alike: dict[Any, Any] = {}
        # No rule of the class reads nodeInfo: a node's result outlives changes of its pods, so
        # the bind of a pod (one node's nodeInfo replaced) costs the class no evaluation.
        self.info_blind = info_blind
        # Seconds to evaluate one node for this class, as measured (None until a node has been):
        # how many misses a caller's inline budget can take. Measured per class and verb, since
        # what a node costs depends on the rules that match and on the pod they are bound to.
        self.cost: float | None = None
        # Seconds of evaluation every request of the class costs whatever it remembers (the filter's
        # rules that read now, run per request): measured the same way, None for a class without any.
        self.per_request: float | None = None
        self.clock = clock
        # How many filters (requests, and the chunks of jobs filling ahead) the class answered:
        # the first is the one to fill it, the second says whether it is worth filling ahead
        # (engine.equivalence.warming); and the scheduler's request it last answered, by number.
        self.asked = 0
        self.asked_at: int | None = None

    def keep_alike(self, key: Any, result: Any) -> None:
        """Keep ``result`` for every node like this one (``alike``), forgetting them all past
        ``ALIKE_KEPT`` kinds (rules that read a node's name or hostname make a kind of each)."""
        if len(self.alike) >= ALIKE_KEPT:
            self.alike.clear()
        self.alike[key] = result

    def ask(self, at: int) -> tuple[int, int | None]:
        """Count one more filter answered from the class, the scheduler's request number ``at``:
        how many so far, and how many of the scheduler's requests came since the one before (None
        for its first)."""
        self.asked += 1
        since = at - self.asked_at if self.asked_at is not None else None
        self.asked_at = at
        return self.asked, since

    def afford(self, misses: int, inline_s: float | None) -> None:
        """Raise ``Offload`` when evaluating ``misses`` nodes, and what every request of the class
        costs, could take longer than ``inline_s`` (no limit when None). Only a request that
        evaluates nothing is affordable before the class has been measured."""
        if inline_s is None:
            return
        if misses and self.cost is None:
            raise Offload(misses, None)
        estimate = (self.per_request or 0.0) + misses * (self.cost or 0.0)
        if estimate > inline_s:
            raise Offload(misses, estimate)

    def pending(self, nodes: Sequence[Any] | NodesByName, node_info: Mapping[str, Any] | None, missing: Any, names: list[str] | None = None) -> int:
        """How many of ``nodes`` a lookup would compute now (at most: a name not known counts),
        computing nothing: for a request answered from several classes, whose evaluation is
        judged against the caller's budget as a whole before any class computes (``afford_all``)."""
        if isinstance(nodes, NodesByName):
            assert isinstance(node_info, TrackedNodeInfo)
            self.sync(node_info)
            results = list(map(self.by_name.get, nodes.names))
            # By identity: ``list.count(None)`` would call each result's dataclass ``__eq__`` (42 µs
            # a window of 420 against 11).
            absent = list(map(is_, results, repeat(None)))
            # Kept for the lookup that follows (``lookup_names``), while nothing changes meanwhile.
            self.prepared = (nodes.names, node_info.version, results, absent)
            return absent.count(True)
        names = names if names is not None else node_names(nodes)
        infos = _infos(node_info, names, missing)
        fresh = map(and_, map(is_, map(self.node_of.get, names), nodes), map(is_, map(self.info_of.get, names), infos))
        return list(fresh).count(False)

    def measured(self, seconds: float, evaluated: int) -> None:
        """``evaluated`` nodes took ``seconds``: an exponentially weighted mean per node, the
        first measurement taken as it is."""
        if evaluated <= 0:
            return
        self.cost = _kept(self.cost, seconds / evaluated)

    def measured_request(self, seconds: float) -> None:
        """A request's evaluation that no remembered result spares took ``seconds``."""
        self.per_request = _kept(self.per_request, seconds)

    def lookup(
        self,
        nodes: Sequence[Any],
        node_info: Mapping[str, Any] | None,
        missing: Any,
        compute: Callable[[Any, Any, str], Any],
        *,
        names: list[str] | None = None,
        inline_s: float | None = None,
    ) -> Lookup:
        """Each node's result, in order (``compute(node, info, name)`` for the ones not remembered).
        ``names``, when the caller has them (the request's node names), are the nodes' names in order.
        With ``inline_s``, nodes to compute that could take longer than that (``afford``) raise
        ``Offload`` first."""
        previous = self.snapshot
        if previous is not None and previous.states is not None:
            previous = None  # the last request was looked up by state: nothing to patch from
        changed: list[int] | None = None
        version = node_info.version if isinstance(node_info, TrackedNodeInfo) else None
        same: list[bool] | None = None
        moved: list[int] | None = []
        if previous is not None and len(previous.nodes) == len(nodes):
            # None: the caller passed the very list of last time (it resolved the same names again).
            same = None if nodes is previous.nodes else list(map(is_, nodes, previous.nodes))
            # Counted in C first: another window of the same length (kube-scheduler's next pod)
            # moves nearly every position, and listing them one by one would be wasted.
            if same is not None:
                moved = _falses(same) if same.count(False) * 8 <= len(nodes) else None
        # Patching the last list pays when few positions moved; another window goes to the
        # general path below, which works in C.
        if previous is not None and len(previous.nodes) == len(nodes) and moved is not None:
            names = previous.names
            if moved:
                names = names.copy()
                for i in moved:
                    names[i] = node_name(nodes[i])
            replaced = None
            if (
                isinstance(node_info, TrackedNodeInfo)
                and previous.info_map is node_info
                and previous.info_version is not None
                and all(names[i] == previous.names[i] for i in moved)
            ):
                replaced = node_info.changed_since(previous.info_version)
            if replaced is not None:
                # Only the replaced entries and the changed nodes need a look.
                assert node_info is not None
                names = previous.names  # the same names, position by position
                index = previous.position()
                changed = sorted(set(moved) | {index[name] for name in replaced if name in index})
                infos = previous.infos
                if changed:
                    infos = infos.copy()
                    for i in changed:
                        infos[i] = node_info.get(names[i], missing)
                positions = previous.positions
            else:
                infos = _infos(node_info, names, missing)
                identical = map(is_, infos, previous.infos)
                changed = _falses(list(identical if same is None else map(and_, same, identical)))
                positions = None
            self.afford(len(changed), inline_s)
            results = previous.results.copy()
            todo: Iterable[int] = changed
            hits = len(nodes) - len(changed)
        else:
            # Another list of names (kube-scheduler sends each pod a different window): compare
            # every node's objects with those its result came from, in C, and compute the stale.
            names = names if names is not None else node_names(nodes)
            infos = _infos(node_info, names, missing)
            results = list(map(self.result_of.get, names))
            fresh = map(and_, map(is_, map(self.node_of.get, names), nodes), map(is_, map(self.info_of.get, names), infos))
            todo = _falses(list(fresh))
            self.afford(len(todo), inline_s)
            hits = len(names) - len(todo)
            positions = None
        node_of, info_of, result_of = self.node_of, self.info_of, self.result_of
        computed = 0
        start = self.clock() if todo else 0.0
        try:
            for i in todo:
                name, node, info = names[i], nodes[i], infos[i]
                if node_of.get(name) is node and info_of.get(name) is info:
                    results[i] = result_of[name]
                    hits += 1
                else:
                    results[i] = result = compute(node, info, name)
                    node_of[name], info_of[name], result_of[name] = node, info, result
                    computed += 1
        finally:
            # Measured even when the deadline stops the loop: those nodes cost that much.
            if computed:
                self.measured(self.clock() - start, computed)
        self.snapshot = Snapshot(names, nodes, infos, results, info_version=version, info_map=node_info if version is not None else None, positions=positions)
        # Deleted nodes would otherwise stay for ever. The bound follows the cluster, not this
        # request: kube-scheduler sends a different window of ~40% of the nodes for each pod, and
        # a bound of twice the window made the class forget every node outside it.
        cluster = len(node_info) if node_info is not None else len(names)
        if len(result_of) > 2 * max(cluster, len(names)) + 64:
            keep = node_info if node_info is not None else dict.fromkeys(names)
            for name in [name for name in result_of if name not in keep]:
                del node_of[name], info_of[name], result_of[name]
        return Lookup(names, infos, results, hits, changed, previous)


    def sync(self, changes: TrackedNodeInfo) -> set[str] | None:
        """Forget the results by name of the nodes ``changes`` logged since the last sync (all of
        them when that is too long ago to tell); returns the names forgotten, None for all."""
        version = changes.version
        gone = changes.changed_since(self.synced, nodes_only=self.info_blind) if self.synced is not None else None
        if gone is None:
            self.by_name.clear()
        else:
            for name in gone:
                self.by_name.pop(name, None)
        # Read before the results: a change logged meanwhile is forgotten again next time.
        self.synced = version
        return gone

    def lookup_nodes(
        self,
        nodes: Sequence[Any] | NodesByName,
        node_info: Mapping[str, Any] | None,
        missing: Any,
        compute: Callable[[Any, Any, str], Any],
        *,
        names: list[str] | None = None,
        inline_s: float | None = None,
    ) -> Lookup:
        """``lookup_names`` for nodes given by name (with the TrackedNodeInfo that logs their
        changes), ``lookup`` for nodes given as objects."""
        if isinstance(nodes, NodesByName):
            assert isinstance(node_info, TrackedNodeInfo)
            return self.lookup_names(nodes.names, nodes.states, node_info, compute, inline_s=inline_s)
        return self.lookup(nodes, node_info, missing, compute, names=names, inline_s=inline_s)

    def lookup_names(
        self,
        names: list[str],
        states: Mapping[str, NodeState],
        changes: TrackedNodeInfo,
        compute: Callable[[Any, Any, str], Any],
        *,
        inline_s: float | None = None,
    ) -> Lookup:
        """``lookup`` for nodes given by name: ``states`` holds each known node's current
        ``NodeState``, and ``changes`` logs every name whose state was replaced (a
        TrackedNodeInfo whose entries are replaced whenever their node changes too). Results
        are remembered per name and forgotten when the log names them, so a window of names
        costs one lookup per name, in C, and the nodes are resolved only where a result is
        computed. Names ``states`` does not know are left out and listed in ``unknown``."""
        gone = self.sync(changes)
        by_name = self.by_name
        previous = self.snapshot
        prepared, self.prepared = self.prepared, None
        if prepared is not None and prepared[0] is names and prepared[1] == changes.version and not gone:
            results, absent = prepared[2], prepared[3]  # looked up by ``pending`` a moment ago, nothing changed since
        else:
            results = list(map(by_name.get, names))
            absent = list(map(is_, results, repeat(None)))
        todo = list(compress(range(len(results)), absent))
        self.afford(len(todo), inline_s)
        unknown: list[int] = []
        computed = 0
        start = self.clock() if todo else 0.0
        try:
            for i in todo:
                state = states.get(names[i])
                if state is None:
                    unknown.append(i)
                    continue
                # A state replaced while this is computed is logged, and forgotten at the next sync.
                results[i] = by_name[state.name] = compute(state.node, state.info, state.name)
                computed += 1
        finally:
            # Measured even when the deadline stops the loop: those nodes cost that much.
            if computed:
                self.measured(self.clock() - start, computed)
        hits = len(names) - len(todo)
        missing = [names[i] for i in unknown]
        if unknown:
            known = [True] * len(names)
            for i in unknown:
                known[i] = False
            names, results = list(compress(names, known)), list(compress(results, known))
        changed: list[int] | None = None
        if previous is not None and previous.states is not None and not gone and not todo and names == previous.names:
            changed = []  # the very same answer as last time (a small cluster sends every node, every time)
        self.snapshot = Snapshot(names, [], [], results, states=states)
        return Lookup(names, None, results, hits, changed, previous if changed is not None else None, states, missing)


def afford_all(tables: Sequence[ClassMemo], nodes: Sequence[Any] | NodesByName, node_info: Mapping[str, Any] | None, missing: Any,
               names: list[str] | None, inline_s: float | None) -> None:
    """``ClassMemo.afford`` for one request answered from several classes (a class per policy):
    raise ``Offload`` before any of them computes when, together, what they would compute (and
    what each costs every request) could take longer than ``inline_s``."""
    if inline_s is None:
        return
    misses = [table.pending(nodes, node_info, missing, names) for table in tables]
    total = sum(misses)
    if any(n and table.cost is None for n, table in zip(misses, tables)):
        raise Offload(total, None)
    estimate = sum((table.per_request or 0.0) + n * (table.cost or 0.0) for n, table in zip(misses, tables))
    if estimate > inline_s:
        raise Offload(total, estimate)


def _kept(old: float | None, new: float) -> float:
    return new if old is None else COST_KEPT * old + (1 - COST_KEPT) * new


def _infos(node_info: Mapping[str, Any] | None, names: list[str], missing: Any) -> list[Any]:
    """Each name's nodeInfo, looked up in C."""
    return list(map(node_info.get, names, repeat(missing))) if node_info is not None else [missing] * len(names)


def _falses(flags: list[bool]) -> list[int]:
    """Positions of the False entries, found by ``list.index`` (a scan in C)."""
    found: list[int] = []
    start = 0
    try:
        while True:
            start = flags.index(False, start)
            found.append(start)
            start += 1
    except ValueError:
        return found
