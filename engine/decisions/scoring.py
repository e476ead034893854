"""The score decision: 0..10 per node (kube-scheduler's MaxExtenderPriority).

Scores combine as kube-scheduler combines its score plugins: each policy is
normalised over the nodes of the request, then the policies are summed with
weights (docs/guides/scores.md):

1. Per node, each matching Enforce policy's score rules give numbers clamped to
   0..100; the policy's *raw* score on the node is their weighted mean (rule
   ``weight``). An evaluation error counts 0 with failurePolicy Fail and leaves
   the rule out of the policy's mean with Ignore (a policy with every rule left
   out has no raw score on that node).
2. Per policy, over the request's nodes: min-max to 0..1. A policy that scores
   every node alike (or one node) says nothing about the ranking and is left out.
3. Per node: the mean of the policies' normalised scores weighted by each
   policy's weight (the sum of its score rules' weights), over the policies
   with a raw score on the node.
4. Over the request's nodes: min-max of that mean to 0..10, rounded half up.
   With nothing to tell the nodes apart, every node scores 0.

Audit rules are evaluated and explained but never counted. The raw scores of a
node depend on the node alone, so they can be remembered per node
(``engine.equivalence.scoring``); steps 2-4 are done per request
(``normalise``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from engine import cel
from engine.cluster.nodeinfo import NodesByName, node_name
from engine.decisions.deadline import Deadline, Overdue
from engine.decisions.evaluation import MatchMemo, Outcome, PolicyScope, matching_scopes, request_inputs, run_rule
from engine.decisions.filtering import NO_NODE_INFO, RuleEvent
from engine.policy.model import PolicySet, ScoreRule

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
    # The raw score of each scoring policy of the request (``ScoreRequest.weights``' order) on
    # the node, None where it has none; () when the node was not evaluated (overdue).
    raw: tuple[float | None, ...] = ()

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
    encoded: list[bytes] | None = None  # with ``encode``: the answer's pieces, in the nodes' order, joined with nothing
    unknown: list[str] = field(default_factory=list)  # names of nodes given by name that are not known (left out)
    # Remembered results the scores come from, in the names' order: the dict is built only when
    # someone reads ``scores`` (the server answers from ``encoded`` and needs none).
    _pending: tuple[list[str], list[Any]] | None = field(default=None, repr=False)

    @property
    def scores(self) -> dict[str, int]:
        """Node name -> the node's score (0..10)."""
        if self._scores is None:
            pending, self._pending = self._pending, None
            self._scores = dict(zip(pending[0], pending[1])) if pending is not None else {}
        return self._scores

    @scores.setter
    def scores(self, value: dict[str, int]) -> None:
        self._scores, self._pending = value, None

    def defer(self, names: list[str], scores: list[int]) -> None:
        """The scores are ``scores``, in ``names``' order: another window of names comes with
        nearly every pod, so the dict is built only if someone reads ``scores``."""
        self._scores, self._pending = None, (names, scores)


def to_rule_score(value: Any) -> float:
    """A rule's value as a 0..100 number; anything but int or double is an error."""
    t = type(value)
    if t is bool or not (t is int or t is float or isinstance(value, int)):
        raise cel.EvalError(f"score must give an int or double, got {cel.type_name(value)}")
    number = float(value)
    if math.isnan(number):
        raise cel.EvalError("score is NaN")
    return min(max(number, 0.0), float(RULE_MAX))


# Added before rounding half up, so that a half computed in floating point as 4.4999999 rounds up.
_ROUNDING = 1e-9


def policy_raw(weighted: list[tuple[int, float]]) -> float | None:
    """A policy's raw score on a node: the weighted mean of its 0..100 rule scores; None
    when every rule was left out (or weighs 0)."""
    total = sum(w for w, _ in weighted)
    if total == 0:
        return None
    return sum(w * v for w, v in weighted) / total


# (lowest, highest, whether some node has no number) of a policy's column over the request's nodes
Spread = tuple[float, float, bool]


def _spread(column: Sequence[float | None]) -> Spread | None:
    """The column's spread; None when its numbers do not tell nodes apart."""
    numbers = cast(Sequence[float], column)
    try:
        # In C. A None among numbers cannot be ordered (nor one alone with itself).
        low, high = min(numbers), max(numbers)
        return (low, high, False) if high > low else None
    except TypeError:
        present = [v for v in column if v is not None]
        if not present:
            return None
        low, high = min(present), max(present)
        return (low, high, True) if high > low else None


def _stretch(column: Sequence[float | None], spread: Spread | None) -> list[int]:
    """Min-max of ``column`` to 0..10, rounded half up; None (and everything, without a spread) is 0.

    ``(v - low) * k`` is at most 10 and a few ulps, so the rounded score never passes 10 and
    needs no clamp; the distance from the lowest is taken first, so a spread of a few ulps
    between large numbers keeps its precision."""
    if spread is None:
        return [0] * len(column)
    low, high, holes = spread
    k = MAX_EXTENDER_PRIORITY / (high - low)
    half = 0.5 + _ROUNDING
    if holes:
        return [0 if v is None else int((v - low) * k + half) for v in column]
    return [int((v - low) * k + half) for v in cast(Sequence[float], column)]  # no holes: no None


def normalise(raws: Sequence[tuple[float | None, ...]], weights: Sequence[int]) -> list[int]:
    """The nodes' scores (0..10) from their policies' raw scores (``NodeScore.raw``, in the
    nodes' order, one per weight) and the policies' weights: min-max per policy over the
    nodes, the weighted mean per node, min-max of that to 0..10 (see the module's docstring)."""
    return normalise_columns(list(zip(*raws)) if raws and weights else [], weights, len(raws))


def normalise_columns(columns: Sequence[Sequence[float | None]], weights: Sequence[int], count: int) -> list[int]:
    """``normalise`` with the raw scores given a policy at a time: ``columns[g]`` holds policy
    ``g``'s raw score on each of the ``count`` nodes.

    On the hot path (a prioritize on every pod): the columns are measured in C, a policy that
    does not tell the nodes apart costs nothing more, a single one that does is stretched
    directly, and the means are a comprehension, not a loop per node and policy. The
    arithmetic is the rule's, operation by operation, so the result is bit for bit that of a
    per-node loop (tests/test_scores_combine.py checks it against one)."""
    if not weights or not count:
        return [0] * count
    # (weight, spread, column) of the policies that tell the nodes apart; the others are left out
    active: list[tuple[int, Spread, Sequence[float | None]]] = []
    for weight, column in zip(weights, columns):
        spread = _spread(column) if weight > 0 else None
        if spread is not None:
            active.append((weight, spread, column))
    if not active:
        return [0] * count
    if len(active) == 1:
        return _stretch(active[0][2], active[0][1])
    means = _means_with_holes(active, count) if any(spread[2] for _, spread, _ in active) else _means(active)
    return _stretch(means, _spread(means))


def _share(weight: int, spread: Spread, total: int) -> tuple[float, float]:
    """(low, factor): a policy's share of a node's mean is ``(v - low) * factor``, its normalised
    score times its part of the total weight. Distances from the lowest are taken first, so a
    spread of a few ulps between large numbers keeps its precision."""
    low, high, _ = spread
    return low, weight / (high - low) / total


def _means(active: list[tuple[int, Spread, Sequence[float | None]]]) -> list[float | None]:
    """Per node, the weighted mean of the policies' normalised scores, every node having a number
    in every column: the policies' shares (``_share``) added in the policies' order (0.0 plus the
    first is the first exactly), as a loop per node computes them; one pass for two or three
    policies (what a pod usually meets), a pass per policy for more."""
    total = sum(weight for weight, _, _ in active)
    (w0, p0, c0), (w1, p1, c1), *more = active
    (l0, k0), (l1, k1) = _share(w0, p0, total), _share(w1, p1, total)
    x0, x1 = cast(Sequence[float], c0), cast(Sequence[float], c1)
    if not more:
        return [(a - l0) * k0 + (b - l1) * k1 for a, b in zip(x0, x1)]
    (w2, p2, c2), *more = more
    (l2, k2), x2 = _share(w2, p2, total), cast(Sequence[float], c2)
    summed = [(a - l0) * k0 + (b - l1) * k1 + (c - l2) * k2 for a, b, c in zip(x0, x1, x2)]
    for w, spread, column in more:
        low, k = _share(w, spread, total)
        summed = [t + (v - low) * k for t, v in zip(summed, cast(Sequence[float], column))]
    return summed  # type: ignore[return-value]  # numbers only


def _means_with_holes(active: list[tuple[int, Spread, Sequence[float | None]]], count: int) -> list[float | None]:
    """Per node, the weighted mean over the policies with a number on it (None: none has)."""
    means: list[float | None] = []
    for i in range(count):
        total = sum(weight for weight, _, column in active if column[i] is not None)
        if not total:
            means.append(None)
            continue
        summed = 0.0
        for weight, spread, column in active:
            v = column[i]
            if v is not None:
                low, k = _share(weight, spread, total)
                summed += (v - low) * k
        means.append(summed)
    return means


Rules = list[tuple[PolicyScope, ScoreRule]]


@dataclass
class ScoreRequest:
    """One prioritize request once its policies are matched: the score rules and how often
    each ran (``counts``), with the result being filled in. ``groups`` gives each rule's
    scoring policy (an index into ``weights``, the policies' weights), -1 for a rule that
    is not counted (Audit)."""

    result: ScoreResult
    scopes: list[PolicyScope]
    rules: Rules
    counts: list[int]
    groups: list[int] = field(default_factory=list)
    weights: list[int] = field(default_factory=list)
    # The raw scores of a node left unevaluated (past the deadline): its rules count as
    # failed, 0 with failurePolicy Fail, left out with Ignore.
    unevaluated: tuple[float | None, ...] = ()

    @classmethod
    def of(
        cls, policy_set: PolicySet, pod: Mapping[str, Any], *, now: Any = None, explain: bool = False, match_memo: MatchMemo | None = None,
        counts: Any = None, namespaces: Mapping[str, Any] | None = None, dra: Mapping[str, Any] | None = None,
    ) -> ScoreRequest:
        result = ScoreResult(generation=policy_set.generation, explanation=[] if explain else None)
        extra = {} if counts is None else {"counts": counts}  # counts: as FilterRequest.of
        inputs = request_inputs(pod, now, namespaces=namespaces, dra=dra, **extra)
        scopes = matching_scopes(policy_set, pod, inputs, memo=match_memo)
        result.matched = [s.policy.name for s in scopes]
        rules: Rules = []
        groups: list[int] = []
        weights: list[int] = []
        unevaluated: list[float | None] = []
        for scope in scopes:
            scores = scope.policy.scores
            if not scores:
                continue
            weight = sum(rule.weight for rule in scores) if scope.policy.enforce else 0
            group = len(weights) if weight > 0 else -1
            if group >= 0:
                weights.append(weight)
                unevaluated.append(0.0 if scope.policy.fail_closed else None)
            rules += [(scope, rule) for rule in scores]
            groups += [group] * len(scores)
        return cls(result, scopes, rules, [0] * len(rules), groups, weights, tuple(unevaluated))

    def bind(self) -> list[Planned]:
        """The rules bound to the request's pod."""
        return [(scope, rule, *scope.caller(rule.expression)) for scope, rule in self.rules]

    def evaluate(self, nodes: Sequence[Mapping[str, Any]], node_info: Mapping[str, Any] | None, deadline: Deadline | None) -> ScoreResult:
        """Score every node; past ``deadline`` a node is left unevaluated, its rules counted as failed."""
        result = self.result
        plan: list[Planned] | None = None  # bound to the pod when the first node is scored
        names: list[str] = []
        outcomes: list[NodeScore | None] = []
        for node in nodes:
            name = node_name(node)
            names.append(name)
            try:
                if deadline is not None:
                    deadline.check()
                if plan is None:
                    plan = self.bind()
                info = node_info.get(name, NO_NODE_INFO) if node_info is not None else NO_NODE_INFO
                outcome = score_node(plan, self.counts, node, info, name, explain=result.explanation is not None, groups=self.groups, policies=len(self.weights))
            except Overdue:
                outcomes.append(None)
                result.overdue += 1
                continue
            outcomes.append(outcome)
            result.errors += outcome.errors
        scores = normalise([o.raw if o is not None else self.unevaluated for o in outcomes], self.weights)
        result.scores = dict(zip(names, scores))
        if result.explanation is not None:
            for evaluated, score in zip(outcomes, scores):
                if evaluated is not None:
                    evaluated.score = score
                    result.explanation.append(evaluated)
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
    namespaces: Mapping[str, Any] | None = None, dra: Mapping[str, Any] | None = None,
) -> ScoreResult:
    """Score ``nodes`` for ``pod``. ``nodes`` given by name (``NodesByName``) are resolved
    first; names not known are left out and listed in the result's ``unknown``."""
    request = ScoreRequest.of(policy_set, pod, now=now, explain=explain, counts=counts, namespaces=namespaces, dra=dra)
    if isinstance(nodes, NodesByName):
        nodes, request.result.unknown = nodes.resolve()
    return request.evaluate(nodes, node_info, deadline)


Planned = tuple[PolicyScope, ScoreRule, int, Any, BaseException | None]


def score_node(plan: list[Planned], counts: list[int], node: Any, info: Any, name: str, *, explain: bool, groups: list[int], policies: int) -> NodeScore:
    """Evaluate the rules on one node: its raw score per scoring policy (``NodeScore.raw``;
    ``score`` is left 0, the request's ``normalise`` gives it)."""
    cache: dict[str, Any] = {}
    weighted: list[list[tuple[int, float]]] = [[] for _ in range(policies)]
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
        group = groups[i]
        if value is not None and group >= 0:
            weighted[group].append((rule.weight, value))
        if explain:
            contributions.append(Contribution(scope.policy.name, rule.name, rule.weight, value, error, audit))
            outcomes[-1].effect = "audit: not counted" if audit else ("left out (error, failurePolicy Ignore)" if value is None else f"scored {value:g} x{rule.weight}")
    return NodeScore(name, 0, contributions, outcomes, tuple(errors), raw=tuple(map(policy_raw, weighted)))
