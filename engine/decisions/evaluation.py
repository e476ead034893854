"""Evaluating one pod against a policy set: which policies match, the pod's
variables (computed lazily, once), and rule programs bound to the pod so that
the per-node work is only what depends on the node.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from engine import cel
from engine.cel.types.counts import NO_COUNTS
from engine.cel.interpreter.runtime import Unbound
from engine.cluster.devices import EMPTY_DRA
from engine.policy.model import Expression, Policy, PolicySet

# Names fixed for a whole request (one pod), as opposed to per node or victim.
POD_LEVEL = frozenset(("pod", "namespaceObject", "params", "now", "nodes", "pods", "admitted", "counts", "dra"))


def current_time() -> Any:
    """``now`` for a request: the wall clock as a CEL timestamp."""
    from engine.cel.ext.timestamps import Timestamp

    ns = time.time_ns()
    return Timestamp(ns // 1_000_000_000, ns % 1_000_000_000)


def request_inputs(pod: Mapping[str, Any], now: Any, *, namespaces: Mapping[str, Any] | None = None, dra: Mapping[str, Any] | None = None,
                   **extra: Any) -> dict[str, Any]:
    """The pod-level inputs of one request; ``now`` defaults to the wall clock. ``namespaces``
    (Namespace objects by name, from kpe's cache or a test's fixtures) gives ``namespaceObject``,
    null when the pod's namespace is not among them, as in ValidatingAdmissionPolicy. ``dra``: the
    cluster's Dynamic Resource Allocation objects (engine/cluster/devices.py; none known: empty)."""
    return {"pod": pod, "namespaceObject": namespace_object(pod, namespaces), "now": now if now is not None else current_time(),
            "dra": dra if dra is not None else EMPTY_DRA, **extra}


def namespace_object(pod: Mapping[str, Any], namespaces: Mapping[str, Any] | None) -> Any:
    """The pod's Namespace object among ``namespaces``, or None."""
    if not namespaces:
        return None
    return namespaces.get((pod.get("metadata") or {}).get("namespace") or "default")


@dataclass
class Outcome:
    """One rule evaluated once: its value or error, how long it took, and what it did."""

    policy: str
    rule: str
    kind: str  # filter | score | admission | victim | preemption-node | match
    value: Any = None
    error: str | None = None
    elapsed_us: float = 0.0
    audit: bool = False
    effect: str = ""  # e.g. "rejected", "kept", "ignored error", "scored 80"
    message: str = ""  # the rejection reason ("policy/rule: message") when the rule rejected, Audit rules included

    def to_dict(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "rule": self.rule,
            "kind": self.kind,
            "value": _plain(self.value),
            "error": self.error,
            "elapsedMicroseconds": round(self.elapsed_us, 2),
            "audit": self.audit,
            "effect": self.effect,
            "message": self.message,
        }


def _plain(value: Any) -> Any:
    """A CEL value as JSON-friendly data for explanations."""
    if value is None or type(value) in (bool, int, float, str):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    cel_string = getattr(value, "cel_string", None)
    return cel_string() if callable(cel_string) else repr(value)


class PolicyScope:
    """One matching policy for one pod: lazily computed pod-level variables and
    rule programs bound to them."""

    def __init__(self, policy: Policy, fixed: Mapping[str, Any]) -> None:
        self.policy = policy
        self.fixed = {"params": policy.params, "counts": NO_COUNTS, **fixed}
        self._pod_values: dict[str, Any] = {}
        if policy.params_error:
            # paramsFrom's ConfigMap is missing or malformed under Deny: every read of params fails.
            self._pod_values["params"] = _Failed(cel.EvalError(policy.params_error))
        self._bound: dict[int, tuple[Callable[..., Any] | None, tuple[str, ...], BaseException | None]] = {}

    def pod_value(self, name: str) -> Any:
        """A pod-level input: pod, params, now, nodes, pods, or ``variables.<name>``."""
        if name in self._pod_values:
            value = self._pod_values[name]
            if isinstance(value, _Failed):
                raise value.error
            return value
        if not name.startswith("variables."):
            return self.fixed.get(name)
        variable = self.policy.variable(name[len("variables."):])
        try:
            value = self.evaluate(variable.expression, {})
        except cel.EvalError as exc:
            self._pod_values[name] = _Failed(exc)
            raise
        self._pod_values[name] = value
        return value

    def bind(self, expr: Expression) -> tuple[Callable[..., Any] | None, tuple[str, ...], BaseException | None]:
        """The expression with pod-level inputs fixed, the names it still needs, or
        the error a pod-level variable raised (every use of the rule then fails)."""
        key = id(expr)
        cached = self._bound.get(key)
        if cached is not None:
            return cached
        fixed: dict[str, Any] = {}
        remaining: list[str] = []
        error: BaseException | None = None
        for name in expr.parameters:
            if name in POD_LEVEL or (name.startswith("variables.") and not self.policy.variable(name[10:]).node_scoped):
                try:
                    fixed[name] = self.pod_value(name)
                except cel.EvalError as exc:
                    error = exc
                    break
            else:
                remaining.append(name)
        fn = expr.program.bind(**fixed) if error is None else None
        result = (fn, tuple(remaining), error)
        self._bound[key] = result
        return result

    def evaluate(self, expr: Expression, per_node: Mapping[str, Any], node_cache: dict[str, Any] | None = None) -> Any:
        """Evaluate with pod-level inputs from this scope and per-node inputs from
        ``per_node`` (node, nodeInfo, victim, victims); node-scoped variables are
        computed on first use and kept in ``node_cache``."""
        fn, remaining, error = self.bind(expr)
        if error is not None:
            raise error
        assert fn is not None
        args = []
        for name in remaining:
            if name in per_node:
                args.append(per_node[name])
            elif name.startswith("variables."):
                args.append(self.node_variable(name, per_node, node_cache if node_cache is not None else {}))
            else:
                args.append(Unbound(name))
        return fn(*args)

    def caller(self, expr: Expression) -> tuple[int, Callable[..., Any] | None, BaseException | None]:
        """A fast way to call the bound expression per node: ``(arity, fn, error)``
        where arity 0, 1 or 2 means ``fn()``, ``fn(node)``, ``fn(node, nodeInfo)``
        and -1 means the general ``evaluate`` path (node-scoped variables, victims)."""
        fn, remaining, error = self.bind(expr)
        if error is not None:
            return 0, None, error
        arity = {(): 0, ("node",): 1, ("node", "nodeInfo"): 2}.get(remaining, -1)
        return arity, fn, None

    def node_variable(self, name: str, per_node: Mapping[str, Any], cache: dict[str, Any]) -> Any:
        if name in cache:
            value = cache[name]
            if isinstance(value, _Failed):
                raise value.error
            return value
        variable = self.policy.variable(name[len("variables."):])
        try:
            value = self.evaluate(variable.expression, per_node, cache)
        except cel.EvalError as exc:
            cache[name] = _Failed(exc)
            raise
        cache[name] = value
        return value


class _Failed:
    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


def run_rule(
    scope: PolicyScope,
    expr: Expression,
    per_node: Mapping[str, Any],
    node_cache: dict[str, Any] | None,
    *,
    rule: str,
    kind: str,
    timed: bool,
) -> Outcome:
    """One evaluation as an ``Outcome`` (errors captured, never raised)."""
    start = time.perf_counter() if timed else 0.0
    outcome = Outcome(scope.policy.name, rule, kind, audit=not scope.policy.enforce)
    try:
        outcome.value = scope.evaluate(expr, per_node, node_cache)
    except cel.EvalError as exc:
        outcome.error = exc.message
    if timed:
        outcome.elapsed_us = (time.perf_counter() - start) * 1e6
    return outcome


# -- matching ------------------------------------------------------------------


def requested_resources(pod: Mapping[str, Any]) -> set[str]:
    """Resource names any container of the pod requests or limits."""
    spec = pod.get("spec") or {}
    names: set[str] = set()
    for key in ("containers", "initContainers"):
        for container in spec.get(key) or []:
            resources = container.get("resources") or {}
            names.update(resources.get("requests") or {})
            names.update(resources.get("limits") or {})
    return names


MatchMemo = Callable[[Policy, Mapping[str, Any], Callable[[], "Outcome"], Any], "Outcome"]
"""``memo(policy, pod, evaluate, fixed)``: the outcome of the policy's match expression for the pod (``fixed``: the
request's other inputs, ``namespaceObject`` and ``dra``),
``evaluate()``'s or one remembered for an equivalent pod (``EquivalenceCache.match``)."""


def matching_scopes(
    policy_set: PolicySet, pod: Mapping[str, Any], fixed: Mapping[str, Any], *, explain: list[Outcome] | None = None, memo: MatchMemo | None = None
) -> list[PolicyScope]:
    """The policies that apply to ``pod``, each as a scope ready to evaluate (none in the set's
    excluded namespaces: the control plane's and kpe's own by default). With ``memo``
    (not with ``explain``), match expressions' outcomes are remembered for equivalent pods."""
    meta = pod.get("metadata") or {}
    namespace = meta.get("namespace") or "default"
    if namespace in policy_set.excluded_namespaces:
        return []
    labels = meta.get("labels") or {}
    resources: set[str] | None = None
    scopes: list[PolicyScope] = []
    for policy in policy_set.policies:
        match = policy.match
        if match.namespaces is not None and namespace not in match.namespaces:
            continue
        if match.selector is not None and not match.selector.matches(labels):
            continue
        if match.resources is not None:
            if resources is None:
                resources = requested_resources(pod)
            if not (match.resources & resources):
                continue
        scope = PolicyScope(policy, fixed)
        if match.expression is not None:
            expression = match.expression

            def evaluate(scope: PolicyScope = scope, expression: Expression = expression) -> Outcome:
                return run_rule(scope, expression, {}, None, rule="match", kind="match", timed=explain is not None)

            outcome = memo(policy, pod, evaluate, scope.fixed) if memo is not None and explain is None else evaluate()
            if outcome.error is not None:
                # failurePolicy Fail: apply the policy (its rules decide); Ignore: skip it.
                outcome.effect = "applies (error, failurePolicy Fail)" if policy.fail_closed else "skipped (error, failurePolicy Ignore)"
                if explain is not None:
                    explain.append(outcome)
                if not policy.fail_closed:
                    continue
            elif outcome.value is not True:
                if explain is not None:
                    outcome.effect = "does not match"
                    explain.append(outcome)
                continue
        scopes.append(scope)
    return scopes
