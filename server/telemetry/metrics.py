"""Prometheus metrics (prometheus_client: the exposition format and histogram
maths are not something to hand-roll). One registry per app, so several apps
in one process (tests, replicas in a benchmark) do not share counters."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from engine.decisions.filtering import RuleEvent

# A filter answered from the equivalence cache takes a fraction of a millisecond and a class's
# first requests tens of milliseconds: the buckets are fine below 10 ms, so that a p99 read from
# them (histogram_quantile, bench/scheduler_bench.py --reload-round) tells the two apart.
LATENCY_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.00075, 0.001, 0.0015, 0.002, 0.003, 0.005, 0.0075,
    0.01, 0.015, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
)


class Metrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry(auto_describe=True)
        # The process's CPU seconds and resident memory (process_*, from /proc): kube-scheduler waits for kpe
        # on every pod, so CPU kpe waits for shows as scheduling latency, and these size its requests.
        ProcessCollector(registry=r)
        self.requests = Counter("kpe_requests_total", "Requests per verb and HTTP status", ["verb", "code"], registry=r)
        self.latency = Histogram("kpe_request_duration_seconds", "Time to answer, per verb", ["verb"], buckets=LATENCY_BUCKETS, registry=r)
        self.nodes_per_request = Histogram(
            "kpe_request_nodes", "Nodes per filter/prioritize request", ["verb"], buckets=(1, 10, 100, 500, 1000, 2000, 5000, 10000), registry=r
        )
        self.evaluations = Counter("kpe_rule_evaluations_total", "Rule evaluations per policy and rule", ["policy", "rule", "kind"], registry=r)
        self._evaluation_children: dict[tuple[str, str, str], Any] = {}
        self._answered: dict[tuple[str, int], tuple[Any, Any]] = {}
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        self.offloaded = Counter(
            "kpe_worker_requests_total",
            "Filter and prioritize requests evaluated on the worker thread (more nodes to evaluate than the event loop takes, or the worker busy)",
            ["verb"], registry=r,
        )
        self.errors = Counter("kpe_rule_errors_total", "Rule evaluation errors per policy and rule", ["policy", "rule", "kind"], registry=r)
        self.audit = Counter(
            "kpe_audit_would_reject_total", "Audit-mode rules that would have rejected a node, gate or victim", ["policy", "rule", "kind"], registry=r
        )
        self.equivalence = Counter(
            "kpe_equivalence_cache_nodes_total", "Each policy's results per node answered from the equivalence cache (hit) or evaluated (miss), per verb", ["verb", "result"], registry=r
        )
        self.warmed = Counter(
            "kpe_equivalence_warmed_nodes_total",
            "Nodes evaluated ahead of the scheduler for an equivalence class (after its second filter, for the classes seen last after a reload, "
            "and at start-up for the pods waiting and the workloads that placed pods last)",
            registry=r,
        )
        self.rejections = Counter("kpe_node_rejections_total", "Nodes rejected per policy and rule", ["policy", "rule"], registry=r)
        self.preemption_rejections = Counter(
            "kpe_preemption_rejections_total", "Preemption candidate nodes dropped per policy and rule", ["policy", "rule"], registry=r
        )
        self.reloads = Counter("kpe_policy_reloads_total", "Policy reloads by result (success, failure, unchanged)", ["result"], registry=r)
        self.generation = Gauge("kpe_policy_generation_info", "The serving policy generation (value 1)", ["generation"], registry=r)
        self.policies = Gauge("kpe_policies", "Policies in the serving set", registry=r)
        self.load_errors = Gauge("kpe_policy_load_errors", "Errors in the last policy load (0 when it was clean)", registry=r)
        self.fallback = Gauge(
            "kpe_policy_fallback",
            "1 while kpe serves a fallback set because the cluster's policies were refused at its start (the last good set kept, "
            "or the objects that compile); 0 once it serves the cluster's set",
            registry=r,
        )
        self.cache_objects = Gauge("kpe_cache_objects", "Objects in kpe's cache", ["kind"], registry=r)
        self.watch_events = Counter("kpe_cache_events_total", "Watch events applied to kpe's cache, per kind", ["kind"], registry=r)
        self.watch_seconds = Counter(
            "kpe_cache_event_seconds_total", "Time spent applying watch events to kpe's cache (on the event loop that answers the scheduler), per kind", ["kind"], registry=r
        )
        self.watch_restarts = Counter("kpe_watch_restarts_total", "Watch restarts by kind and reason", ["kind", "reason"], registry=r)
        self.cache_lag = Gauge("kpe_cache_lag_seconds", "Seconds since the last word (event or bookmark) from the API server", ["kind"], registry=r)
        self.unknown_nodes = Counter("kpe_unknown_nodes_total", "Node names the cache did not know", ["verb"], registry=r)
        self.unknown_victims = Counter("kpe_unknown_victims_total", "Victim UIDs the pod cache did not know", registry=r)
        self.kube_api_requests = Counter(
            "kpe_kube_api_requests_total",
            "Requests kpe made to the Kubernetes API server, by method (WATCH for watches) and code: the HTTP status, "
            "or Unreachable, Timeout, ConnectionLost when no whole answer came",
            ["method", "code"], registry=r,
        )
        self.admission_reviews = Counter(
            "kpe_admission_reviews_total", "AdmissionReviews by result (gated, allowed, skipped, invalid, failed)", ["result"], registry=r
        )
        self.policy_reviews = Counter(
            "kpe_policy_reviews_total", "AdmissionReviews of SchedulingPolicy and Reservation writes by result (allowed, refused, skipped, invalid)", ["result"], registry=r
        )
        self.policy_report_writes = Counter(
            "kpe_policy_report_writes_total", "PolicyReport writes of the leader's reporter (created, updated, deleted, failed)", ["action"], registry=r
        )
        self.gates_added = Counter("kpe_gates_added_total", "Scheduling gates added at pod creation, per policy", ["policy"], registry=r)
        self.gate_wait = Histogram(
            "kpe_gate_wait_seconds", "Time from pod creation to kpe lifting a gate, per policy", ["policy"],
            buckets=(0.1, 0.5, 1, 2, 5, 10, 30, 60, 300, 900, 3600, 14400, 86400), registry=r,
        )
        self.gated_pods = Gauge("kpe_gated_pods", "Pods kpe is holding at a gate, per policy", ["policy"], registry=r)
        # Reservations (server.reservations.controller), set and counted by the leader's reservation controller.
        self.reservation_slots = Gauge(
            "kpe_reservation_slots", "Slots of each reservation by state (free, pending, used, consumed, missing)", ["reservation", "state"], registry=r
        )
        self.reservation_placeholders = Counter(
            "kpe_reservation_placeholders_total", "Placeholder pods kpe created or deleted", ["reservation", "action"], registry=r
        )
        self.reservation_claims = Counter("kpe_reservation_claims_total", "Owners that took a reserved slot", ["reservation"], registry=r)
        self.admission_evaluations = Counter(
            "kpe_admission_evaluations_total", "Gate re-evaluations by the controller, per policy and result", ["policy", "result"], registry=r
        )
        self.leader = Gauge("kpe_gate_controller_leader", "1 while this replica holds the gate controller Lease", registry=r)
        self.overdue = Counter(
            "kpe_deadline_overdue_nodes_total", "Nodes answered unevaluated because the request's deadline passed, per verb", ["verb"], registry=r
        )
        self.requeued = Counter(
            "kpe_requeued_pods_total", "Pending pods touched after a reload, a namespace change or a reservation's slot coming back so kube-scheduler retries them, by result", ["result"], registry=r
        )
        self.binds = Counter("kpe_binds_total", "Bindings created, by result", ["result"], registry=r)
        self.ahead = Counter(
            "kpe_prioritize_ahead_total",
            "Prioritize requests expected after a filter, by outcome: answered (from the answer worked out ahead), "
            "rescored (scored when asked: the cache or the policies changed meanwhile, or nothing was worked out), unasked (no such prioritize came)",
            ["outcome"], registry=r,
        )
        self.ahead_seconds = Counter(
            "kpe_prioritize_ahead_seconds_total", "Time spent working out prioritize answers ahead (on the event loop, after a filter's answer is written)", registry=r
        )
        self._generation_label = ""
        self._reloads_seen: dict[str, int] = {}

    def count_ahead(self, outcome: str) -> None:
        self._child(self.ahead, outcome).inc()

    def count_equivalence(self, verb: str, hits: int, misses: int) -> None:
        """Node results of a request answered from the equivalence cache (``hits``) and computed (``misses``)."""
        if hits:
            self._child(self.equivalence, verb, "hit").inc(hits)
        if misses:
            self._child(self.equivalence, verb, "miss").inc(misses)

    def answered(self, verb: str, status: int, seconds: float) -> None:
        """One verb request answered: counted per status, its time in the latency histogram.
        The children are kept: ``labels()`` per request was a measurable part of a cache hit."""
        children = self._answered.get((verb, status))
        if children is None:
            children = self._answered[(verb, status)] = (self.requests.labels(verb, str(status)), self.latency.labels(verb))
        children[0].inc()
        children[1].observe(seconds)

    def set_generation(self, generation: str, policies: int) -> None:
        if generation != self._generation_label:
            if self._generation_label:
                self.generation.remove(self._generation_label)
            self.generation.labels(generation).set(1)
            self._generation_label = generation
        self.policies.set(policies)

    def count_rules(self, kind: str, evaluations: Iterable[tuple[str, str, int]], errors: Iterable[RuleEvent], audit: Iterable[RuleEvent]) -> None:
        children = self._evaluation_children
        for policy, rule, n in evaluations:
            if n:
                # labels() validates and looks up its arguments on every call; each request
                # counts every rule of every matching policy, so the children are kept.
                child = children.get((policy, rule, kind))
                if child is None:
                    child = children[(policy, rule, kind)] = self.evaluations.labels(policy, rule, kind)
                child.inc(n)
        # Errors replayed from the equivalence cache come by the hundred on some requests: one
        # update per rule, through kept children.
        for counter, events in ((self.errors, errors), (self.audit, audit)):
            per_rule: dict[tuple[str, str], int] = {}
            for e in events:
                key = (e.policy, e.rule)
                per_rule[key] = per_rule.get(key, 0) + 1
            for (policy, rule), n in per_rule.items():
                self._child(counter, policy, rule, kind).inc(n)

    def count_applied(self, kind: str, seconds: float) -> None:
        child = self._child(self.watch_events, kind)
        child.inc()
        self._child(self.watch_seconds, kind).inc(seconds)

    def heard(self, kind: str) -> None:
        """The cache heard from the API server about ``kind`` just now (every watch event)."""
        self._child(self.cache_lag, kind).set(0)

    def observe_nodes(self, verb: str, nodes: int) -> None:
        self._child(self.nodes_per_request, verb).observe(nodes)

    def _child(self, metric: Any, *labels: str) -> Any:
        """``metric.labels(*labels)``, kept: labels() validates and looks up its arguments on every call."""
        key = (id(metric), labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def count_reloads(self, totals: dict[str, int]) -> None:
        """Bring the reload counter up to the store's totals (the store counts in its worker thread)."""
        for result, total in totals.items():
            seen = self._reloads_seen.get(result, 0)
            if total > seen:
                self.reloads.labels(result).inc(total - seen)
            self._reloads_seen[result] = total
            if not seen and not total:
                self.reloads.labels(result)  # shown as 0 from the start, so rate() has a baseline

    def count_rejections(self, per_rule: dict[str, int], *, preemption: bool = False) -> None:
        """Count rejected nodes (or dropped preemption candidates) per ``policy/rule``, one metric update per rule."""
        counter = self.preemption_rejections if preemption else self.rejections
        for label, n in per_rule.items():
            policy, _, rule = label.partition("/")
            self._child(counter, policy, rule).inc(n)

    def render(self) -> bytes:
        return bytes(generate_latest(self.registry))

    def per_policy(self) -> dict[str, dict[str, int]]:
        """Since kpe started, per policy: nodes its rules rejected, rule errors, and what its
        Audit rules would have rejected (the web view's policies page)."""
        out: dict[str, dict[str, int]] = {}
        for key, counter in (("nodesRejected", self.rejections), ("errors", self.errors), ("auditWouldReject", self.audit)):
            for metric in counter.collect():
                for sample in metric.samples:
                    if sample.name.endswith("_total"):
                        entry = out.setdefault(sample.labels["policy"], {"nodesRejected": 0, "errors": 0, "auditWouldReject": 0})
                        entry[key] += int(sample.value)
        return out
