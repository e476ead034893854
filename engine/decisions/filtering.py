"""The filter decision: which nodes may run the pod, and why the others may not.

Every matching policy applies and filters are AND-ed. Per node, rules run in
a fixed order: Enforce rules marked ``unresolvable`` first, then the other
Enforce rules, each policy in name order; the first rule that rejects the
node gives its reason (``policy/rule: message``) and decides whether it is
unresolvable. Audit-mode rules run on every node afterwards, are counted and
explained, and never change the verdict.

This module evaluates every node it is given. Remembering results for pods of
the same equivalence class is a layer around it (``engine.equivalence.filtering``),
built from the pieces here: ``FilterRequest``, ``judge``, ``evaluate_rule``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from time import perf_counter
from typing import Any

from engine import cel
from engine.cel.interpreter.runtime import Unbound
from engine.cluster.nodeinfo import NodesByName, node_name, node_names
from engine.decisions.deadline import Deadline
from engine.decisions.evaluation import MatchMemo, Outcome, PolicyScope, matching_scopes, request_inputs, run_rule
from engine.policy.model import FilterRule, PolicySet

NO_NODE_INFO = Unbound("nodeInfo")


@dataclass
class RuleEvent:
    """An evaluation error or an Audit-mode rejection, for logs and metrics."""

    policy: str
    rule: str
    node: str
    message: str


@dataclass
class NodeVerdict:
    node: str
    verdict: str  # "pass" | "fail" | "unresolvable"
    reason: str = ""
    outcomes: list[Outcome] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"node": self.node, "verdict": self.verdict, "reason": self.reason, "rules": [o.to_dict() for o in self.outcomes]}


@dataclass
class FilterResult:
    generation: str
    passed: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    unresolvable: dict[str, str] = field(default_factory=dict)
    errors: list[RuleEvent] = field(default_factory=list)
    audit_rejections: list[RuleEvent] = field(default_factory=list)
    evaluations: int = 0
    rule_counts: list[tuple[str, str, int]] = field(default_factory=list)  # (policy, rule, evaluations)
    explanation: list[NodeVerdict] | None = None
    matched: list[str] = field(default_factory=list)
    match_outcomes: list[Outcome] = field(default_factory=list)
    memo_hits: int = 0  # nodes answered from the equivalence cache
    memo_misses: int = 0
    rejections: dict[str, int] = field(default_factory=dict)  # "policy/rule" -> nodes it failed (unresolvable included)
    overdue: int = 0  # nodes answered without evaluation: the request's deadline had passed
    unknown: list[str] = field(default_factory=list)  # names of nodes given by name that are not known (left out)
    first_of_class: bool = False  # the first request one of its equivalence classes answered (engine.equivalence.warming)
    recurring: bool = False  # the second filter one of its equivalence classes answered: worth filling ahead
    together: bool = False  # and that second filter came soon after the class's first (engine.equivalence.warming)


Ordered = list[tuple[PolicyScope, FilterRule]]


@dataclass
class FilterRequest:
    """One filter request once its policies are matched: the rules in the order they run
    (``ordered``) and how often each ran (``counts``), with the result being filled in."""

    result: FilterResult
    scopes: list[PolicyScope]
    ordered: Ordered
    counts: list[int]

    @classmethod
    def of(
        cls, policy_set: PolicySet, pod: Mapping[str, Any], *, now: Any = None, explain: bool = False, match_memo: MatchMemo | None = None,
        counts: Any = None, namespaces: Mapping[str, Any] | None = None, dra: Mapping[str, Any] | None = None,
    ) -> FilterRequest:
        """Match the pod's policies and order their filter rules. ``match_memo`` remembers
        match outcomes for equivalent pods (``engine.decisions.evaluation.matching_scopes``);
        ``counts`` is what ``counts`` reads (engine/cel/types/counts.py; none kept: an error)."""
        result = FilterResult(generation=policy_set.generation, explanation=[] if explain else None)
        match_log: list[Outcome] | None = [] if explain else None
        extra = {} if counts is None else {"counts": counts}
        inputs = request_inputs(pod, now, namespaces=namespaces, dra=dra, **extra)
        scopes = matching_scopes(policy_set, pod, inputs, explain=match_log, memo=match_memo)
        result.matched = [s.policy.name for s in scopes]
        result.match_outcomes = match_log or []
        ordered: Ordered = []
        for unresolvable_first in (True, False):
            ordered += [(s, r) for s in scopes if s.policy.enforce for r in s.policy.filters if r.unresolvable == unresolvable_first]
        ordered += [(s, r) for s in scopes if not s.policy.enforce for r in s.policy.filters]
        return cls(result, scopes, ordered, [0] * len(ordered))

    def evaluate(self, nodes: Sequence[Mapping[str, Any]], node_info: Mapping[str, Any] | None, deadline: Deadline | None) -> FilterResult:
        """Evaluate every rule that decides on every node (with ``explain``, every rule)."""
        result = self.result
        plan = [(scope, rule, *scope.caller(rule.expression)) for scope, rule in self.ordered]
        if result.explanation is not None:
            _explained(result, plan, self.counts, nodes, node_info)
        else:
            done = _fast(result, plan, self.counts, nodes, node_info, deadline)
            if done < len(nodes):
                assert deadline is not None
                answer_overdue(result, self.scopes, node_names(nodes[done:]), deadline)
        result.rejections = count_rules(result.failed.values(), result.unresolvable.values())
        return self.finish()

    def finish(self) -> FilterResult:
        result = self.result
        result.rule_counts = [(scope.policy.name, rule.name, n) for (scope, rule), n in zip(self.ordered, self.counts)]
        result.evaluations = sum(self.counts)
        return result


def filter_nodes(
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
) -> FilterResult:
    """Split ``nodes`` into passing, failed and unresolvable for ``pod``.

    Past ``deadline``, the nodes not evaluated yet are answered under each
    policy's failurePolicy (see ``engine.decisions.deadline``). ``nodes`` given by
    name (``NodesByName``) are resolved first; names not known are listed in the
    result's ``unknown``."""
    request = FilterRequest.of(policy_set, pod, now=now, explain=explain, counts=counts, namespaces=namespaces, dra=dra)
    if isinstance(nodes, NodesByName):
        nodes, request.result.unknown = nodes.resolve()
    return request.evaluate(nodes, node_info, deadline)


Plan = list[tuple[PolicyScope, FilterRule, int, Any, BaseException | None]]


def judge(scope: PolicyScope, rule: FilterRule, node: Any, info: Any, cache: dict[str, Any], value: Any, error: str | None, name: str, errors: list[RuleEvent]) -> tuple[bool, str, str]:
    """(rejected, message, effect) for one evaluation that did not simply pass; an error is added to ``errors``."""
    if error is None and value is not True and value is not False:
        error = f"filter must give a bool, got {cel.type_name(value)}"
    label = f"{scope.policy.name}/{rule.name}"
    if error is not None:
        errors.append(RuleEvent(scope.policy.name, rule.name, name, error))
        rejected = scope.policy.fail_closed
        effect = "rejected (error, failurePolicy Fail)" if rejected else "ignored error (failurePolicy Ignore)"
        return rejected, f"{label}: evaluation error: {error}", effect
    if value is True:
        return False, "", "kept"
    return True, f"{label}: {rule_message(scope, rule, node, info, cache)}", "rejected"


def evaluate_rule(scope: PolicyScope, rule: FilterRule, arity: int, fn: Any, bind_error: BaseException | None, node: Any, info: Any, cache: dict[str, Any]) -> tuple[Any, str | None]:
    try:
        if bind_error is not None:
            raise bind_error
        if arity == 2:
            return fn(node, info), None
        if arity == 1:
            return fn(node), None
        if arity == 0:
            return fn(), None
        return scope.evaluate(rule.expression, {"node": node, "nodeInfo": info}, cache), None
    except cel.EvalError as exc:
        return None, exc.message


def _fast(
    result: FilterResult, plan: Plan, counts: list[int], nodes: Sequence[Mapping[str, Any]], node_info: Mapping[str, Any] | None, deadline: Deadline | None
) -> int:
    """The scheduler's path: stop at the first rejecting Enforce rule; Audit rules always run.
    Returns how many nodes were evaluated before the deadline (all of them without one)."""
    enforce = [(i, *entry) for i, entry in enumerate(plan) if entry[0].policy.enforce]
    audit = [(i, *entry) for i, entry in enumerate(plan) if not entry[0].policy.enforce]
    info_get = node_info.get if node_info is not None else None
    passed, failed, unresolvable = result.passed, result.failed, result.unresolvable
    due = deadline.at if deadline is not None else None
    for done, node in enumerate(nodes):
        if due is not None and perf_counter() > due:
            return done
        name = node_name(node)
        info = info_get(name, NO_NODE_INFO) if info_get is not None else NO_NODE_INFO
        cache: dict[str, Any] = {}
        for i, scope, rule, arity, fn, bind_error in enforce:
            counts[i] += 1
            if arity == 2 and bind_error is None:
                try:
                    value, error = fn(node, info), None
                except cel.EvalError as exc:
                    value, error = None, exc.message
                if value is True:
                    continue
            else:
                value, error = evaluate_rule(scope, rule, arity, fn, bind_error, node, info, cache)
            rejected, message, _ = judge(scope, rule, node, info, cache, value, error, name, result.errors)
            if rejected:
                (unresolvable if rule.unresolvable else failed)[name] = message
                break
        else:
            passed.append(name)
        for i, scope, rule, arity, fn, bind_error in audit:
            counts[i] += 1
            if arity == 2 and bind_error is None:
                try:
                    value, error = fn(node, info), None
                except cel.EvalError as exc:
                    value, error = None, exc.message
            else:
                value, error = evaluate_rule(scope, rule, arity, fn, bind_error, node, info, cache)
            if value is True:
                continue
            rejected, message, _ = judge(scope, rule, node, info, cache, value, error, name, result.errors)
            if rejected:
                result.audit_rejections.append(RuleEvent(scope.policy.name, rule.name, name, message))
    return len(nodes)


def answer_overdue(result: FilterResult, scopes: Sequence[PolicyScope], names: list[str], deadline: Deadline) -> None:
    """Answer ``names`` unevaluated, as an evaluation error would be: rejected when a matching
    Enforce policy with filters fails closed, otherwise not held against the node."""
    closed = [s for s in scopes if s.policy.enforce and s.policy.filters and s.policy.fail_closed]
    result.overdue += len(names)
    if not closed:
        result.passed.extend(names)
        return
    reason = f"{closed[0].policy.name}/(deadline): {deadline.message}"
    for name in names:
        result.failed[name] = reason
    result.errors.append(RuleEvent(closed[0].policy.name, "(deadline)", "", f"{len(names)} nodes not evaluated: {deadline.message}"))


def count_rules(*reasons: Iterable[str]) -> dict[str, int]:
    per_reason: Counter[str] = Counter()
    for some in reasons:
        per_reason.update(some)  # counted in C; most rules have one message, so few distinct reasons remain
    per_rule: dict[str, int] = {}
    for reason, n in per_reason.items():
        count_rejection(per_rule, reason, n)
    return per_rule


def count_rejection(per_rule: dict[str, int], reason: str, n: int = 1) -> None:
    """Add ``n`` to the count of the rule a ``policy/rule: message`` reason names."""
    label = reason.partition(":")[0]
    per_rule[label] = per_rule.get(label, 0) + n


def _explained(result: FilterResult, plan: Plan, counts: list[int], nodes: Sequence[Mapping[str, Any]], node_info: Mapping[str, Any] | None) -> None:
    """Every rule on every node, timed, with what each did; the verdict is the fast path's."""
    assert result.explanation is not None
    for node in nodes:
        name = node_name(node)
        info = node_info.get(name, NO_NODE_INFO) if node_info is not None else NO_NODE_INFO
        verdict: str | None = None
        reason = ""
        cache: dict[str, Any] = {}
        outcomes: list[Outcome] = []
        for i, (scope, rule, _arity, _fn, _bind_error) in enumerate(plan):
            counts[i] += 1
            outcome = run_rule(scope, rule.expression, {"node": node, "nodeInfo": info}, cache, rule=rule.name, kind="filter", timed=True)
            outcomes.append(outcome)
            rejected, message, effect = judge(scope, rule, node, info, cache, outcome.value, outcome.error, name, result.errors)
            outcome.message = message if rejected else ""
            if not scope.policy.enforce:
                if rejected:
                    result.audit_rejections.append(RuleEvent(scope.policy.name, rule.name, name, message))
                effect = f"audit: would have {effect}" if rejected else "audit: kept"
            elif rejected and verdict is None:
                verdict = "unresolvable" if rule.unresolvable else "fail"
                reason = message
            outcome.effect = effect
        if verdict is None:
            result.passed.append(name)
        elif verdict == "fail":
            result.failed[name] = reason
        else:
            result.unresolvable[name] = reason
        result.explanation.append(NodeVerdict(name, verdict or "pass", reason, outcomes))


def rule_message(scope: PolicyScope, rule: FilterRule, node: Any, info: Any, cache: dict[str, Any]) -> str:
    """What a rule that rejected a node says: its messageExpression's text, else its message."""
    if rule.message_expression is None:
        return rule.message
    try:
        value = scope.evaluate(rule.message_expression, {"node": node, "nodeInfo": info}, cache)
    except cel.EvalError:
        return rule.message
    return value if isinstance(value, str) and value else rule.message
