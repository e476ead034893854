"""The score decision: 0..10 per node (kube-scheduler's MaxExtenderPriority).

Each Enforce score rule of every matching policy gives a number, clamped to
0..100; the node's score is the weighted mean of those, divided by 10 and
rounded half up. An evaluation error counts 0 with failurePolicy Fail and
leaves the rule out of the mean with Ignore. Audit rules are evaluated and
explained but never counted. With no score rule, every node scores 0.

This module scores every node it is given; remembering scores for pods of the
same equivalence class is a layer around it (``engine.equivalence.scoring``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

from engine import cel
from engine.cluster.nodeinfo import NodesByName, node_name
from engine.decisions.deadline import Deadline, Overdue
from engine.decisions.evaluation import MatchMemo, Outcome, PolicyScope, matching_scopes, request_inputs, run_rule
from engine.decisions.filtering import NO_NODE_INFO, RuleEvent
from engine.policy.model import PolicySet, ScoreRule

_SCORE = attrgetter("score")
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

    def defer(self, names: list[str], results: Sequence[NodeScore]) -> None:
        """The scores are those of ``results``, in ``names``' order: another window of names
        comes with nearly every pod, so the dict is built only if someone reads ``scores``."""
        self._scores, self._pending = None, (names, list(results) if not isinstance(results, list) else results)


def to_rule_score(value: Any) -> float:
    """A rule's value as a 0..100 number; anything but int or double is an error."""
    t = type(value)
    if t is bool or not (t is int or t is float or isinstance(value, int)):
        raise cel.EvalError(f"score must give an int or double, got {cel.type_name(value)}")
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


Rules = list[tuple[PolicyScope, ScoreRule]]


@dataclass
class ScoreRequest:
    """One prioritize request once its policies are matched: the score rules and how often
    each ran (``counts``), with the result being filled in."""

    result: ScoreResult
    scopes: list[PolicyScope]
    rules: Rules
    counts: list[int]

    @classmethod
    def of(
        cls, policy_set: PolicySet, pod: Mapping[str, Any], *, now: Any = None, explain: bool = False, match_memo: MatchMemo | None = None,
        counts: Any = None, namespaces: Mapping[str, Any] | None = None,
    ) -> ScoreRequest:
        result = ScoreResult(generation=policy_set.generation, explanation=[] if explain else None)
        extra = {} if counts is None else {"counts": counts}  # counts: as FilterRequest.of
        inputs = request_inputs(pod, now, namespaces=namespaces, **extra)
        scopes = matching_scopes(policy_set, pod, inputs, memo=match_memo)
        result.matched = [s.policy.name for s in scopes]
        rules = [(scope, rule) for scope in scopes for rule in scope.policy.scores]
        return cls(result, scopes, rules, [0] * len(rules))

    def bind(self) -> list[Planned]:
        """The rules bound to the request's pod."""
        return [(scope, rule, *scope.caller(rule.expression)) for scope, rule in self.rules]

    def evaluate(self, nodes: Sequence[Mapping[str, Any]], node_info: Mapping[str, Any] | None, deadline: Deadline | None) -> ScoreResult:
        """Score every node; past ``deadline`` a node scores 0 unevaluated."""
        result = self.result
        plan: list[Planned] | None = None  # bound to the pod when the first node is scored
        for node in nodes:
            name = node_name(node)
            try:
                if deadline is not None:
                    deadline.check()
                if plan is None:
                    plan = self.bind()
                outcome = score_node(plan, self.counts, node, node_info.get(name, NO_NODE_INFO) if node_info is not None else NO_NODE_INFO, name, explain=result.explanation is not None)
            except Overdue:
                result.scores[name] = 0
                result.overdue += 1
                continue
            result.scores[name] = outcome.score
            result.errors += outcome.errors
            if result.explanation is not None:
                result.explanation.append(outcome)
        return self.finish()

    def finish(self) -> ScoreResult:
        result = self.result
        result.rule_counts = [(scope.policy.name, rule.name, n) for (scope, rule), n in zip(self.rules, self.counts)]
        result.evaluations = sum(self.counts)
        return result


def score_nodes(
    policy_set: PolicySet,
    pod: Mapping[str, Any],
    nodes: Sequence[Mapping[str, Any]] | NodesByName,
    *,
    node_info: Mapping[str, Any] | None = None,
    now: Any = None,
    explain: bool = False,
    deadline: Deadline | None = None,
    counts: Any = None,
    namespaces: Mapping[str, Any] | None = None,
) -> ScoreResult:
    """Score ``nodes`` for ``pod``. ``nodes`` given by name (``NodesByName``) are resolved
    first; names not known are left out and listed in the result's ``unknown``."""
    request = ScoreRequest.of(policy_set, pod, now=now, explain=explain, counts=counts, namespaces=namespaces)
    if isinstance(nodes, NodesByName):
        nodes, request.result.unknown = nodes.resolve()
    return request.evaluate(nodes, node_info, deadline)


Planned = tuple[PolicyScope, ScoreRule, int, Any, BaseException | None]


def score_node(plan: list[Planned], counts: list[int], node: Any, info: Any, name: str, *, explain: bool) -> NodeScore:
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
