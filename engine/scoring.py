"""The score decision: 0..10 per node (kube-scheduler's MaxExtenderPriority).

Each Enforce score rule of every matching policy gives a number, clamped to
0..100; the node's score is the weighted mean of those, divided by 10 and
rounded half up. An evaluation error counts 0 with failurePolicy Fail and
leaves the rule out of the mean with Ignore. Audit rules are evaluated and
explained but never counted. With no score rule, every node scores 0.
"""

from __future__ import annotations

import math
from itertools import compress
from operator import attrgetter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import cel
from .equivalence import EquivalenceCache, Offload, TrackedNodeInfo
from .evaluation import Outcome, PolicyScope, matching_scopes, request_inputs, run_rule
from .filtering import NO_NODE_INFO, RuleEvent
from .deadline import Deadline, Overdue
from .nodeinfo import NodesByName, node_name, node_names
from .policy import PolicySet, ScoreRule

_SCORE, _ERRORS, _ENCODED = attrgetter("score"), attrgetter("errors"), attrgetter("encoded")
MAX_EXTENDER_PRIORITY = 10
RULE_MAX = 100


@dataclass
class Contribution:
    policy: str
    rule: str
    weight: int
    value: float | None  # the clamped rule score; None when the rule was left out
    error: str | None = None
    audit: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"policy": self.policy, "rule": self.rule, "weight": self.weight, "score": self.value, "error": self.error, "audit": self.audit}


@dataclass
class NodeScore:
    node: str
    score: int
    contributions: list[Contribution] = field(default_factory=list)
    outcomes: list[Outcome] = field(default_factory=list)
    errors: tuple[RuleEvent, ...] = ()
    encoded: bytes = b""  # the node's entry of the answer, encoded once by score_nodes' ``encode``

    def to_dict(self) -> dict[str, Any]:
        return {"node": self.node, "score": self.score, "contributions": [c.to_dict() for c in self.contributions], "rules": [o.to_dict() for o in self.outcomes]}


@dataclass
class ScoreResult:
    generation: str
    _scores: dict[str, int] | None = field(default=None, repr=False)
    errors: list[RuleEvent] = field(default_factory=list)
    evaluations: int = 0
    rule_counts: list[tuple[str, str, int]] = field(default_factory=list)  # (policy, rule, evaluations)
    explanation: list[NodeScore] | None = None
    matched: list[str] = field(default_factory=list)
    memo_hits: int = 0  # nodes answered from the equivalence cache
    memo_misses: int = 0
    overdue: int = 0  # nodes scored 0 unevaluated: the request's deadline had passed
    encoded: list[bytes] | None = None  # with ``encode``: each node's encoded entry, in the nodes' order
    unknown: list[str] = field(default_factory=list)  # names of nodes given by name that are not known (left out)
    # Remembered results the scores come from, in the names' order: the dict is built only when
    # someone reads ``scores`` (the server answers from ``encoded`` and needs none).
    _pending: tuple[list[str], list[Any]] | None = field(default=None, repr=False)

    @property
    def scores(self) -> dict[str, int]:
        """Node name -> the node's score (0..10)."""
        if self._scores is None:
            pending, self._pending = self._pending, None
            self._scores = dict(zip(pending[0], map(_SCORE, pending[1]))) if pending is not None else {}
        return self._scores

    @scores.setter
    def scores(self, value: dict[str, int]) -> None:
        self._scores, self._pending = value, None


def to_rule_score(value: Any) -> float:
    """A rule's value as a 0..100 number; anything but int or double is an error."""
    t = type(value)
    if t is bool or not (t is int or t is float or isinstance(value, int)):
        raise cel.EvalError(f"score must give an int or double, got {cel.values.type_name(value)}")
    number = float(value)
    if math.isnan(number):
        raise cel.EvalError("score is NaN")
    return min(max(number, 0.0), float(RULE_MAX))


def combine(weighted: list[tuple[int, float]]) -> int:
    """Weighted mean of 0..100 rule scores, mapped to 0..10, rounded half up."""
    total = sum(w for w, _ in weighted)
    if total == 0:
        return 0
    mean = sum(w * v for w, v in weighted) / total
    return min(MAX_EXTENDER_PRIORITY, int(mean * MAX_EXTENDER_PRIORITY / RULE_MAX + 0.5))


def score_nodes(
    policy_set: PolicySet,
    pod: Mapping[str, Any],
    nodes: Sequence[Mapping[str, Any]] | NodesByName,
    *,
    node_info: Mapping[str, Any] | None = None,
    now: Any = None,
    explain: bool = False,
    memo: EquivalenceCache | None = None,
    deadline: Deadline | None = None,
    names: list[str] | None = None,
    max_misses: int | None = None,
    encode: Callable[[str, int], bytes] | None = None,
) -> ScoreResult:
    """Score ``nodes`` for ``pod``. With ``memo`` (and no score rule reading ``now``),
    a node's score is reused for pods of the same equivalence class while the node
    and its ``nodeInfo`` are the same objects (see ``engine.equivalence``). With
    ``max_misses``, a request that would evaluate more nodes than that raises
    ``Offload`` before evaluating any. With ``encode`` (and the cache), each node's
    ``encode(name, score)`` is kept with its score and ``encoded`` lists them in
    order: an answer assembled without per-node work on a hit. ``nodes`` given by
    name: as for ``filter_nodes`` (unknown names are left out and listed in ``unknown``)."""
    result = ScoreResult(generation=policy_set.generation, explanation=[] if explain else None)
    scopes = matching_scopes(policy_set, pod, request_inputs(pod, now), memo=memo.match if memo is not None else None)
    result.matched = [s.policy.name for s in scopes]
    rules = [(scope, rule) for scope in scopes for rule in scope.policy.scores]
    counts = [0] * len(rules)
    table = None
    if memo is not None and not explain and not any(memo.reads(scope.policy).timed(rule.expression) for scope, rule in rules):
        table = memo.table(generation=policy_set.generation, verb="score", scopes=scopes, pod=pod)
    if isinstance(nodes, NodesByName) and (table is None or not isinstance(node_info, TrackedNodeInfo)):
        nodes, result.unknown = nodes.resolve()
    if max_misses is not None and table is None and rules and len(nodes) > max_misses:
        raise Offload(len(nodes))
    plan: list[Planned] | None = None  # bound to the pod when a node is not remembered

    def scored(node: Any, info: Any, name: str) -> NodeScore:
        nonlocal plan
        if deadline is not None:
            deadline.check()  # raises Overdue: nothing past the deadline is remembered
        if plan is None:
            # With the cache, the rules bound to the class's first pod serve the whole class.
            if table is not None and table.bound is not None:
                plan = table.bound
            else:
                plan = [(scope, rule, *scope.caller(rule.expression)) for scope, rule in rules]
                if table is not None:
                    table.bound = plan
        outcome = _score_node(plan, counts, node, info, name, explain=explain)
        if table is not None:
            if encode is not None:
                outcome.encoded = encode(name, outcome.score)
            else:
                table.unencoded = True
            if outcome.errors:
                table.eventful = True
        return outcome

    if table is not None:
        try:
            found = table.lookup_nodes(nodes, node_info, NO_NODE_INFO, scored, names=names, max_misses=max_misses)
            result.unknown = found.unknown
        except Overdue:
            # Past the deadline a rule counts as failed to evaluate: 0, or left out of the mean.
            result.scores = dict.fromkeys(nodes.names if isinstance(nodes, NodesByName) else node_names(nodes), 0)
            result.overdue = len(result.scores)
            result.rule_counts = [(scope.policy.name, rule.name, n) for (scope, rule), n in zip(rules, counts)]
            return result
        result.memo_hits, result.memo_misses = found.hits, len(found.names) - found.hits
        previous = found.previous
        if found.changed == [] and previous is not None and previous.derived is not None:
            eventful = previous.derived  # nothing changed: the same answer
        else:
            eventful = list(compress(range(len(found.results)), map(_ERRORS, found.results))) if table.eventful else []
        assert table.snapshot is not None
        table.snapshot.derived = eventful
        # Another window of names comes with nearly every pod: the scores by name are built
        # only if asked for (in C then: zip, map), the answer is joined from the entries.
        result._pending = (found.names, found.results)
        if encode is not None:
            # Not when some result was remembered without its entry (a caller without ``encode``).
            result.encoded = None if table.unencoded else list(map(_ENCODED, found.results))
        for i in eventful:
            result.errors += found.results[i].errors
    else:
        assert not isinstance(nodes, NodesByName)
        for node in nodes:
            name = node_name(node)
            try:
                outcome = scored(node, node_info.get(name, NO_NODE_INFO) if node_info is not None else NO_NODE_INFO, name)
            except Overdue:
                result.scores[name] = 0
                result.overdue += 1
                continue
            result.scores[name] = outcome.score
            result.errors += outcome.errors
            if result.explanation is not None:
                result.explanation.append(outcome)
    result.rule_counts = [(scope.policy.name, rule.name, n) for (scope, rule), n in zip(rules, counts)]
    result.evaluations = sum(counts)
    return result


Planned = tuple[PolicyScope, ScoreRule, int, Any, BaseException | None]


def _score_node(plan: list[Planned], counts: list[int], node: Any, info: Any, name: str, *, explain: bool) -> NodeScore:
    cache: dict[str, Any] = {}
    weighted: list[tuple[int, float]] = []
    errors: list[RuleEvent] = []
    contributions: list[Contribution] = []
    outcomes: list[Outcome] = []
    for i, (scope, rule, arity, fn, bind_error) in enumerate(plan):
        counts[i] += 1
        error: str | None = None
        raw: Any = None
        if explain:
            outcome = run_rule(scope, rule.expression, {"node": node, "nodeInfo": info}, cache, rule=rule.name, kind="score", timed=True)
            outcomes.append(outcome)
            raw, error = outcome.value, outcome.error
        else:
            try:
                if bind_error is not None:
                    raise bind_error
                if arity == 1:
                    raw = fn(node)
                elif arity == 2:
                    raw = fn(node, info)
                elif arity == 0:
                    raw = fn()
                else:
                    raw = scope.evaluate(rule.expression, {"node": node, "nodeInfo": info}, cache)
            except cel.EvalError as exc:
                error = exc.message
        value: float | None = None
        if error is None:
            try:
                value = to_rule_score(raw)
            except cel.EvalError as exc:
                error = exc.message
        if error is not None:
            errors.append(RuleEvent(scope.policy.name, rule.name, name, error))
            value = 0.0 if scope.policy.fail_closed else None
        audit = not scope.policy.enforce
        if value is not None and not audit:
            weighted.append((rule.weight, value))
        if explain:
            contributions.append(Contribution(scope.policy.name, rule.name, rule.weight, value, error, audit))
            outcomes[-1].effect = "audit: not counted" if audit else ("left out (error, failurePolicy Ignore)" if value is None else f"scored {value:g} x{rule.weight}")
    return NodeScore(name, combine(weighted), contributions, outcomes, tuple(errors))
