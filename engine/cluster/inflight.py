"""Pods in flight: placed by kube-scheduler, perhaps, and not yet seen bound.

kube-scheduler decides one pod at a time, and once it has picked a node it "assumes" the
pod there in its own cache and goes on to the next pod while the binding is written.
kpe's cache learns of the placement only when the binding reaches the API server and
comes back on the watch, a few milliseconds to seconds later. A burst of pods is
filtered inside that window: a policy that counts pods on a node (``nodeInfo``) would
see none of the burst and pass the same node for all of them.

So a pod kpe's filter passed counts, for filters that read ``nodeInfo``, on every node
it passed (kube-scheduler picks one of them; kpe cannot know which) until kpe sees it
bound, finished or deleted, a later filter of the same pod replaces the answer (a new
attempt; with gang scheduling, another candidate placement), or ``ttl`` passes. A pod
that names a node in ``status.nominatedNodeName`` (preemption, and from 1.35 the
scheduler's placement before its binding cycle) counts on that node alone, for as long
as it names it, and only for pods of its priority or lower: kube-scheduler adds the
nominated pods of equal or higher priority to a node before its filters
(``addGENominatedPods``, pkg/scheduler/framework/runtime/framework.go), so a higher-priority
pod may take the room a lower one was nominated to. A nomination is written by the
scheduler, not guessed from kpe's answers, so it counts with ``ttl`` 0 too. A node
passes only if the filters pass on it both with and without the pods in flight there
(kube-scheduler runs its filters both ways too when it adds nominated pods): counting
them is conservative; it can reject a node the pod would have fit, and kube-scheduler
tries the pod again on the next cluster event, which the binding of the pod in flight is.
``docs/policy-format.md`` ("Pods in flight") explains the trade-off.

A pod of a pod group (``spec.schedulingGroup``, the Workload API, beta in 1.37 behind
GenericWorkload) is never recorded from a filter: kube-scheduler filters such a pod once per
candidate placement of its group, against that placement's nodes, with the group's earlier pods
placed only tentatively in its own books (``podGroupSchedulingPlacementAlgorithm``,
pkg/scheduler/schedule_one_podgroup.go), and keeps at most one placement. A filter call there is
no placement at all: counting each member on every node it passed would count the first member
on every node of the placement when the second is filtered, and a filter that allows one such
pod a node would reject the rest of the group everywhere, at every attempt. Such a pod counts
once kube-scheduler names its node (``status.nominatedNodeName``) or it is seen bound;
``docs/gangs.md`` says what else kpe cannot see of a group.

Written on the event loop (filter answers, watch events), read by the evaluation
worker: readers take copies made in C.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from engine.cluster.kubefilters import priority as pod_priority
from engine.cluster.nodeinfo import is_active, pod_key, pod_name, pod_requests
from engine.cel.ext import quantity as _q
from engine.cel.ext.quantity import Quantity

Obj = Mapping[str, Any]

# How long a pod kpe's filter passed counts on the nodes it passed without kpe seeing it
# bound: longer than kube-scheduler takes from its decision to the binding being written
# (milliseconds, or the seconds of a slow PreBind) and short enough that a pod whose attempt
# failed after kpe's answer (another extender, a Permit plugin) does not hold room for long.
DEFAULT_TTL_S = 30.0
# Pods in flight kept at most, the oldest forgotten first past it: in flight a pod lives
# milliseconds, so only a scheduler that keeps failing pods after kpe has passed them (another
# extender, a Permit plugin) comes near it. Each holds its pod and its set of nodes, and pods
# passed on the same nodes (most of a burst) share one set.
MAX_PODS = 10_000


# Pods named in a rejection that counted them, at most.
NAMED = 3


def _named(pods: Sequence[Obj], what: str) -> str:
    names = []
    for pod in pods[:NAMED]:
        names.append(pod_name(pod))
    more = f" and {len(pods) - NAMED} more" if len(pods) > NAMED else ""
    return f"{len(pods)} pod{'s' if len(pods) != 1 else ''} {what} ({', '.join(names)}{more})"


def nominated_to(pod: Obj) -> str:
    status = pod.get("status")
    node = status.get("nominatedNodeName") if isinstance(status, Mapping) else None
    return node if isinstance(node, str) else ""


def counted_note(pods: Sequence[Obj], node: str) -> str:
    """What a rejection counted on ``node`` besides its bound pods, for the reason's parenthesis:
    the pods nominated to it (kube-scheduler holds their room: a preemptor waiting for its
    victims, a pod about to be bound), named as such, and the pods kpe passed there and has not
    seen placed."""
    nominated = [p for p in pods if nominated_to(p) == node]
    passed = [p for p in pods if nominated_to(p) != node]
    parts = []
    if nominated:
        held = "it" if len(nominated) == 1 else "them"
        parts.append(f"{_named(nominated, 'nominated to this node')}, whose room kube-scheduler holds for {held}")
    if passed:
        parts.append(f"{_named(passed, 'in flight')} that kube-scheduler may have placed on this node and kpe has not yet seen bound")
    return "counting " + " and ".join(parts)


def in_pod_group(pod: Obj) -> bool:
    """Whether kube-scheduler schedules ``pod`` with its pod group (``spec.schedulingGroup``,
    1.36 on; the API server drops the field unless GenericWorkload is on)."""
    spec = pod.get("spec")
    group = spec.get("schedulingGroup") if isinstance(spec, Mapping) else None
    return isinstance(group, Mapping) and bool(group.get("podGroupName"))


class InFlight:
    """The pods in flight and the nodes each counts on (see the module docstring)."""

    def __init__(self, *, ttl: float = DEFAULT_TTL_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl = ttl
        self.clock = clock  # what "now" is for the time-to-count: tests hand in their own
        # pod key -> (pod, nodes it counts on, when it stops counting; None: while nominated,
        # the priority up to which it counts; None: for every pod)
        self._pods: dict[str, tuple[Obj, frozenset[str], float | None, int | None]] = {}
        self._last: frozenset[str] = frozenset()  # the last set of nodes, shared by the pods passed on the same ones

    def __len__(self) -> int:
        return len(self._pods)

    @property
    def enabled(self) -> bool:
        return self.ttl > 0

    # --- written on the event loop -------------------------------------------------------

    def passed(self, pod: Obj, nodes: Iterable[str]) -> None:
        """kpe's filter passed ``pod`` on ``nodes``: it counts there until it is seen placed
        (this answer replaces any earlier one for the pod). Not for a pod of a pod group,
        whose filters are per candidate placement (see the module docstring)."""
        if not self.enabled or in_pod_group(pod):
            return
        key = pod_key(pod)
        held = self._pods.get(key)
        if held is not None and held[2] is None:
            return  # nominated: it counts on its nominated node, whatever a filter said
        self._set(key, pod, frozenset(nodes), self.clock() + self.ttl, None)

    def seen(self, pod: Obj) -> None:
        """A watch event (or list) of ``pod``: bound, finished or deleted, it no longer is in
        flight; unbound and nominated, it counts on its nominated node alone (``ttl`` 0 too)."""
        key = pod_key(pod)
        spec, status = pod.get("spec"), pod.get("status")
        spec = spec if isinstance(spec, Mapping) else {}
        status = status if isinstance(status, Mapping) else {}
        if spec.get("nodeName") or not is_active(pod):
            self.forget(key)
            return
        nominated = status.get("nominatedNodeName")
        if isinstance(nominated, str) and nominated:
            self._set(key, pod, frozenset((nominated,)), None, pod_priority(pod))
            return
        held = self._pods.get(key)
        if held is not None and held[2] is None:
            self.forget(key)  # no longer nominated, still pending: it waits for its next filter

    def forget(self, key: str) -> None:
        self._pods.pop(key, None)

    def expire(self) -> None:
        """Forget the pods whose time to count has passed."""
        if not self._pods:
            return
        now = self.clock()
        for key in [k for k, (_, _, until, _) in self._pods.items() if until is not None and until <= now]:
            self.forget(key)

    def _set(self, key: str, pod: Obj, nodes: frozenset[str], until: float | None, up_to: int | None) -> None:
        self._pods.pop(key, None)  # moved to the end: the newest
        if not nodes:
            return
        if nodes == self._last:
            nodes = self._last
        self._last = nodes
        self._pods[key] = (pod, nodes, until, up_to)
        if len(self._pods) > MAX_PODS:
            del self._pods[next(iter(self._pods))]

    def frozen(self) -> InFlight:
        """A copy that the event loop does not change: what a decision reads while the loop goes on
        applying watch events (``server.verbs.inflight``)."""
        copy = InFlight(ttl=self.ttl, clock=self.clock)
        copy._pods = dict(self._pods)  # one C call: the event loop cannot change it halfway
        copy._last = self._last
        return copy

    # --- read by decisions ---------------------------------------------------------------

    def on(self, names: Iterable[str], *, besides: str = "", priority: int | None = None) -> dict[str, list[Obj]]:
        """The pods in flight on each of ``names`` that has any, for a pod of ``priority``:
        ``besides`` (its key) left out, and the nominated pods of lower priority (None: every pod)."""
        if not self._pods:
            return {}
        wanted = names if isinstance(names, (set, frozenset)) else set(names)
        found: dict[str, list[Obj]] = {}
        for key, (pod, nodes, _, up_to) in list(self._pods.items()):  # a copy made in C: the event loop may change it meanwhile
            if key == besides or (up_to is not None and priority is not None and up_to < priority):
                continue
            for name in nodes & wanted if len(nodes) <= len(wanted) else wanted & nodes:
                found.setdefault(name, []).append(pod)
        return found

    def held(self, *, besides: str = "", priority: int | None = None) -> list[tuple[Obj, frozenset[str]]]:
        """Every pod in flight with the nodes it counts on, for a pod of ``priority`` (as ``on``)."""
        return [(pod, nodes) for key, (pod, nodes, _, up_to) in list(self._pods.items())
                if key != besides and (up_to is None or priority is None or up_to >= priority)]


def with_pods(view: Mapping[str, Any] | None, pods: list[Obj], *, requests: dict[Any, dict[str, Quantity]] | None = None) -> dict[str, Any]:
    """A node's ``nodeInfo`` view with ``pods`` added (as ``NodeInfoAccumulator`` would count
    them). ``requests`` keeps the summed requests of each list of pods across the calls of one
    request: the same pods in flight count on hundreds of nodes."""
    view = view or {"pods": [], "podCount": 0, "requested": {}}
    key = tuple(map(id, pods))
    added = requests.get(key) if requests is not None else None
    if added is None:
        added = {}
        for pod in pods:
            for name, q in pod_requests(pod).items():
                added[name] = _q._add(added[name], q) if name in added else q
        if requests is not None:
            requests[key] = added
    requested: dict[str, Quantity] = {name: _q.parse_quantity(value) for name, value in (view.get("requested") or {}).items()}
    for name, q in added.items():
        requested[name] = _q._add(requested[name], q) if name in requested else q
    return {
        "pods": [*view.get("pods", ()), *pods],
        "podCount": int(view.get("podCount", 0)) + len(pods),
        "requested": {name: q.cel_string() for name, q in sorted(requested.items())},
    }
