"""What every request handler reads: settings, the policy store, the cluster cache and client, metrics and the decision log."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from engine.equivalence import EquivalenceCache
from engine.nodeinfo import NodesByName
from engine.filtering import FilterResult
from engine.heldroom import keep_evictions_off, keep_off
from engine.policy import PolicySet
from engine.preemption import PreemptionResult

from .decisionlog import DecisionLog
from .lookahead import Lookahead
from .metrics import Metrics
from .policystore import PolicyStore
from .settings import Settings
from .worker import Worker

if TYPE_CHECKING:
    from .cache import ClusterCache
    from .certificate import ServingCertificate
    from .gates import GateController
    from .kube import KubeClient
    from .requeue import Requeuer
    from .reservations import ReservationController

log = logging.getLogger("kpe.decisions")


@dataclass
class ServerState:
    settings: Settings
    store: PolicyStore
    metrics: Metrics = field(default_factory=Metrics)
    decisions: DecisionLog = field(default_factory=lambda: DecisionLog(1000))
    client: KubeClient | None = None
    cache: ClusterCache | None = None
    gates: GateController | None = None
    elector: Any = None  # LeaderElector when the gate controller runs
    equivalence: EquivalenceCache = field(default_factory=EquivalenceCache)
    certificate: ServingCertificate | None = None  # with --tls-cert: reloaded when its files change
    surfaces_by_port: dict[int, frozenset[str]] = field(default_factory=dict)  # see server.listeners.SurfaceGuard
    worker: Worker = field(default_factory=Worker)  # runs the decisions off the event loop
    requeue: Requeuer | None = None  # with cluster access: pods to prompt kube-scheduler about after a reload
    reservations: ReservationController | None = None  # with the gate controller: placeholders of the reservations' free slots
    lookahead: Lookahead = field(init=False)  # the prioritize expected after the last filter (server.lookahead)

    def __post_init__(self) -> None:
        self.lookahead = Lookahead(count=self.metrics.count_ahead)

    def node_info(self) -> Mapping[str, Any] | None:
        return self.cache.node_info if self.cache is not None else None

    def keep_off_reserved(self, policy_set: PolicySet, pod: Mapping[str, Any], nodes: Sequence[Mapping[str, Any]] | NodesByName, result: FilterResult) -> FilterResult:
        """The filter's result with non-owners kept out of reserved room in transit
        (``engine.heldroom``). Runs where the filter does, in the worker that reads nodeInfo."""
        controller = self.reservations
        if controller is None or not controller.homes or not policy_set.reservations:
            return result
        names = {r.name for r in policy_set.reservations}
        if isinstance(nodes, NodesByName):
            # Only the passing nodes where a slot is at home are looked at: resolve just those.
            homes, states = controller.homes, nodes.states
            nodes = [states[name].node for name in result.passed if name in homes and name in states]
        return keep_off(result, pod, nodes, self.node_info(), controller.homes, reservations=names)

    def keep_evictions_off_reserved(
        self, policy_set: PolicySet, pod: Mapping[str, Any], nodes: Mapping[str, Mapping[str, Any]], result: PreemptionResult
    ) -> PreemptionResult:
        """The preempt verb's candidates without the nodes where the pod would fit only in
        reserved room in transit once the victims are gone (``engine.heldroom``)."""
        controller = self.reservations
        if controller is None or not controller.homes or not policy_set.reservations:
            return result
        return keep_evictions_off(result, policy_set, pod, nodes, self.node_info(), controller.homes)

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
        if hits:
            self.metrics.equivalence.labels(verb, "hit").inc(hits)
        if misses:
            self.metrics.equivalence.labels(verb, "miss").inc(misses)

    def record(self, verb: str, pod: Mapping[str, Any], generation: str, **details: Any) -> None:
        meta = pod.get("metadata") or {}
        name = f"{meta.get('namespace', 'default')}/{meta.get('name', '?')}"
        self.decisions.record(verb, name, generation, **details)
        level = logging.INFO if self.settings.log_decisions else logging.DEBUG
        if log.isEnabledFor(level):
            log.log(level, "%s %s", verb, name, extra={"verb": verb, "pod": name, "generation": generation, **details})
