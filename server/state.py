"""What every request handler reads: settings, the policy store, the cluster cache and client, metrics and the decision log."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from engine.cluster.nodeinfo import NodesByName, pod_name
from engine.equivalence.classes import EquivalenceCache
from engine.equivalence.warming import Warming
from engine.reservations.heldroom import Home
from engine.reservations.slots import Plan

from server.http.worker import Worker
from server.reload.store import PolicyStore
from server.settings import Settings
from server.telemetry.decisionlog import DecisionLog
from server.telemetry.metrics import Metrics
from server.verbs.lookahead import Lookahead
from server.verbs.vetoes import VetoEvents

if TYPE_CHECKING:
    from server.cluster.cache import ClusterCache
    from server.cluster.kube import KubeClient
    from server.cluster.lastgood import LastGoodKeeper
    from server.cluster.policyobjects import PolicyObjects
    from server.http.certificate import ServingCertificate
    from server.verbs.wholenodes import WholeNodes


# What one surface reads of another's controller, as the surfaces see it: the controllers
# are made by the composition root (server.app) and handed in here, so no surface imports
# another to reach them.


class Requeue(Protocol):
    """The pods to prompt kube-scheduler about after a reload or a reservation's slot coming
    back (``server.admission.requeue``), as the filter verb tells them, with the policies that rejected them."""

    def remember(self, pod: Mapping[str, Any], generation: str, *, policies: frozenset[str] = frozenset()) -> None: ...

    def forget(self, pod: Mapping[str, Any]) -> None: ...


class HeldPod(Protocol):
    """A pod kpe holds at its gates, as /apis/v1/gated shows it."""

    @property
    def namespace(self) -> str: ...

    @property
    def name(self) -> str: ...

    @property
    def gates(self) -> Mapping[str, str]: ...

    @property
    def since(self) -> float: ...


class Gates(Protocol):
    """The gate controller (``server.admission.gates``), as introspection reads it."""

    @property
    def held(self) -> Mapping[str, HeldPod]: ...


class Slots(Protocol):
    """The reservation controller (``server.reservations.controller``), as the verbs and
    introspection read it: where slots are at home, and the slots as last seen."""

    @property
    def homes(self) -> Mapping[str, list[Home]]: ...

    def latest(self) -> Plan | None: ...

    def status(self) -> dict[str, Any]:
        """Every reservation and slot, as ``/apis/v1/reservations`` shows them."""
        ...


log = logging.getLogger("kpe.decisions")


@dataclass
class ServerState:
    settings: Settings
    store: PolicyStore
    metrics: Metrics = field(default_factory=Metrics)
    decisions: DecisionLog = field(default_factory=lambda: DecisionLog(1000))
    client: KubeClient | None = None
    cache: ClusterCache | None = None
    gates: Gates | None = None
    elector: Any = None  # LeaderElector when the gate controller runs
    policy_objects: PolicyObjects | None = None  # --policy-source cluster: the objects the policies come from
    last_good: LastGoodKeeper | None = None  # --policy-source cluster with --controllers status: the leader keeps the set served
    equivalence: EquivalenceCache = field(default_factory=EquivalenceCache)
    warming: Warming | None = None  # with cluster access and --warm-classes: classes filled ahead of the scheduler (server.verbs.warming)
    in_flight_counting: tuple[Any, Any] | None = None  # (policy set, what counting pods in flight takes under it): server.verbs.inflight
    certificate: ServingCertificate | None = None  # with --tls-cert: reloaded when its files change
    surfaces_by_port: dict[int, frozenset[str]] = field(default_factory=dict)  # see server.http.listeners.SurfaceGuard
    worker: Worker = field(default_factory=Worker)  # runs the decisions off the event loop
    # The webhook's admission decisions, on a thread of their own: the API server gives the webhook
    # 5 s, and behind a slow filter on the decisions' thread it would wait up to the request deadline.
    # Admission reads the pod and node lists it is handed, never the equivalence cache or nodeInfo.
    admission_worker: Worker = field(default_factory=lambda: Worker(name="kpe-admission"))
    requeue: Requeue | None = None  # with cluster access: pods to prompt kube-scheduler about after a reload
    reservations: Slots | None = None  # with the gate controller: placeholders of the reservations' free slots
    lookahead: Lookahead = field(init=False)  # the prioritize expected after the last filter (server.verbs.lookahead)
    whole_nodes: WholeNodes | None = None  # without cluster access: the nodes filter and prioritize were sent, for preempt
    vetoes: VetoEvents = field(default_factory=VetoEvents)  # the Events telling pods kpe kept nodes out of their preemption

    def __post_init__(self) -> None:
        self.lookahead = Lookahead(count=self.metrics.count_ahead)

    def node_info(self) -> Mapping[str, Any] | None:
        return self.cache.node_info if self.cache is not None else None

    def counts(self) -> Any:
        """``counts`` from the cache (None without one: every call is then an evaluation error)."""
        return self.cache.counts if self.cache is not None else None
    def dra(self) -> Mapping[str, Any] | None:
        """The cluster's DRA objects (``dra``; engine.cluster.devices), None without a cache."""
        return self.cache.devices.view() if self.cache is not None else None

    def namespaces(self) -> Mapping[str, Any] | None:
        """The cluster's namespaces by name (``namespaceObject``), None until watched and listed."""
        return self.cache.namespaces.view() if self.cache is not None else None

    def resolve_nodes(self, names: list[str], verb: str) -> tuple[list[dict[str, Any]], dict[str, str]]:
        """Nodes for the names the scheduler sent; unknown names fail with a reason that says so."""
        assert self.cache is not None
        nodes, missing = self.cache.resolve(names, key=verb)
        return nodes, self.unknown_nodes(missing, verb)

    def nodes_by_name(self, names: list[str]) -> NodesByName:
        """The names the scheduler sent, with the cache's current NodeState of every node."""
        assert self.cache is not None
        return NodesByName(names, self.cache.states)

    def unknown_nodes(self, missing: list[str], verb: str) -> dict[str, str]:
        """Why each of the ``missing`` names fails: kpe does not know the node (counted in metrics)."""
        unknown = {name: f"kpe: node {name} is not in kpe's node cache (deleted, or not seen yet)" for name in missing}
        if unknown:
            self.metrics.unknown_nodes.labels(verb).inc(len(unknown))
        return unknown

    def count_overdue(self, verb: str, nodes: int) -> None:
        if nodes:
            self.metrics.overdue.labels(verb).inc(nodes)

    def count_equivalence(self, verb: str, hits: int, misses: int) -> None:
        self.metrics.count_equivalence(verb, hits, misses)

    def record(self, verb: str, pod: Mapping[str, Any], generation: str, **details: Any) -> None:
        name = pod_name(pod)
        self.decisions.record(verb, name, generation, **details)
        level = logging.INFO if self.settings.log_decisions else logging.DEBUG
        if log.isEnabledFor(level):
            log.log(level, "%s %s", verb, name, extra={"verb": verb, "pod": name, "generation": generation, **details})
