"""The filter decision: which nodes may run the pod, and why the others may not.

Every matching policy applies and filters are AND-ed. Per node, rules run in
a fixed order: Enforce rules marked ``unresolvable`` first, then the other
Enforce rules, each policy in name order; the first rule that rejects the
node gives its reason (``policy/rule: message``) and decides whether it is
unresolvable. Audit-mode rules run on every node afterwards, are counted and
explained, and never change the verdict.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import cel
from .cel.runtime import Unbound
from .evaluation import Outcome, PolicyScope, matching_scopes, request_inputs, run_rule
from .policy import FilterRule, PolicySet

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


def node_name(node: Mapping[str, Any]) -> str:
    meta = node.get("metadata") if type(node) is dict or isinstance(node, Mapping) else None
    if type(meta) is dict or isinstance(meta, Mapping):
        name = meta.get("name", "")
        return name if type(name) is str else str(name)
    return ""


def filter_nodes(
    policy_set: PolicySet,
    pod: Mapping[str, Any],
    nodes: Sequence[Mapping[str, Any]],
    *,
    node_info: Mapping[str, Any] | None = None,
    now: Any = None,
    explain: bool = False,
) -> FilterResult:
    """Split ``nodes`` into passing, failed and unresolvable for ``pod``."""
    result = FilterResult(generation=policy_set.generation, explanation=[] if explain else None)
    match_log: list[Outcome] | None = [] if explain else None
    scopes = matching_scopes(policy_set, pod, request_inputs(pod, now), explain=match_log)
    result.matched = [s.policy.name for s in scopes]
    result.match_outcomes = match_log or []
    ordered: list[tuple[PolicyScope, FilterRule]] = []
    for unresolvable_first in (True, False):
        ordered += [(s, r) for s in scopes if s.policy.enforce for r in s.policy.filters if r.unresolvable == unresolvable_first]
    ordered += [(s, r) for s in scopes if not s.policy.enforce for r in s.policy.filters]
    plan = [(scope, rule, *scope.caller(rule.expression)) for scope, rule in ordered]
    counts = [0] * len(plan)
    if explain:
        _explained(result, plan, counts, nodes, node_info)
    else:
        _fast(result, plan, counts, nodes, node_info)
    result.rule_counts = [(scope.policy.name, rule.name, n) for (scope, rule, *_), n in zip(plan, counts)]
    result.evaluations = sum(counts)
    return result


Plan = list[tuple[PolicyScope, FilterRule, int, Any, BaseException | None]]


def _judge(scope: PolicyScope, rule: FilterRule, node: Any, info: Any, cache: dict[str, Any], value: Any, error: str | None, name: str, result: FilterResult) -> tuple[bool, str, str]:
    """(rejected, message, effect) for one evaluation that did not simply pass."""
    if error is None and value is not True and value is not False:
        error = f"filter must give a bool, got {cel.values.type_name(value)}"
    label = f"{scope.policy.name}/{rule.name}"
    if error is not None:
        result.errors.append(RuleEvent(scope.policy.name, rule.name, name, error))
        rejected = scope.policy.fail_closed
        effect = "rejected (error, failurePolicy Fail)" if rejected else "ignored error (failurePolicy Ignore)"
        return rejected, f"{label}: evaluation error: {error}", effect
    if value is True:
        return False, "", "kept"
    return True, f"{label}: {_message(scope, rule, node, info, cache)}", "rejected"


def _evaluate(scope: PolicyScope, rule: FilterRule, arity: int, fn: Any, bind_error: BaseException | None, node: Any, info: Any, cache: dict[str, Any]) -> tuple[Any, str | None]:
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


def _fast(result: FilterResult, plan: Plan, counts: list[int], nodes: Sequence[Mapping[str, Any]], node_info: Mapping[str, Any] | None) -> None:
    """The scheduler's path: stop at the first rejecting Enforce rule; Audit rules always run."""
    enforce = [(i, *entry) for i, entry in enumerate(plan) if entry[0].policy.enforce]
    audit = [(i, *entry) for i, entry in enumerate(plan) if not entry[0].policy.enforce]
    info_get = node_info.get if node_info is not None else None
    passed, failed, unresolvable = result.passed, result.failed, result.unresolvable
    for node in nodes:
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
                value, error = _evaluate(scope, rule, arity, fn, bind_error, node, info, cache)
            rejected, message, _ = _judge(scope, rule, node, info, cache, value, error, name, result)
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
                value, error = _evaluate(scope, rule, arity, fn, bind_error, node, info, cache)
            if value is True:
                continue
            rejected, message, _ = _judge(scope, rule, node, info, cache, value, error, name, result)
            if rejected:
                result.audit_rejections.append(RuleEvent(scope.policy.name, rule.name, name, message))


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
            rejected, message, effect = _judge(scope, rule, node, info, cache, outcome.value, outcome.error, name, result)
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


def _message(scope: PolicyScope, rule: FilterRule, node: Any, info: Any, cache: dict[str, Any]) -> str:
    if rule.message_expression is None:
        return rule.message
    try:
        value = scope.evaluate(rule.message_expression, {"node": node, "nodeInfo": info}, cache)
    except cel.EvalError:
        return rule.message
    return value if isinstance(value, str) and value else rule.message
