"""The preemption decision: which candidate nodes, with which victims, may be used.

kube-scheduler proposes, per node, the pods it would evict. A node stays a
candidate only if every matching Enforce policy allows the node
(``preemption.node`` over ``victims``) and every victim on it
(``preemption.victim``). A node with no victims is never a candidate. An
evaluation error drops the node with failurePolicy Fail and is ignored with
Ignore. Audit-mode policies are evaluated and reported, never applied.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import cel
from .evaluation import matching_scopes, request_inputs, run_rule
from .filtering import NO_NODE_INFO, RuleEvent
from .policy import PolicySet


@dataclass
class PreemptionResult:
    generation: str
    candidates: dict[str, list[Mapping[str, Any]]] = field(default_factory=dict)
    rejected: dict[str, str] = field(default_factory=dict)
    errors: list[RuleEvent] = field(default_factory=list)
    audit_rejections: list[RuleEvent] = field(default_factory=list)


def victim_name(victim: Mapping[str, Any]) -> str:
    meta = victim.get("metadata") or {}
    return f"{meta.get('namespace', 'default')}/{meta.get('name', '?')}"


def preempt(
    policy_set: PolicySet,
    pod: Mapping[str, Any],
    candidates: Mapping[str, Sequence[Mapping[str, Any]]],
    *,
    nodes: Mapping[str, Mapping[str, Any]] | None = None,
    node_info: Mapping[str, Any] | None = None,
    now: Any = None,
) -> PreemptionResult:
    """Keep the candidate nodes (and their victims) that every policy allows."""
    result = PreemptionResult(policy_set.generation)
    scopes = [s for s in matching_scopes(policy_set, pod, request_inputs(pod, now)) if s.policy.preemption]
    for name, victims in candidates.items():
        if not victims:
            result.rejected[name] = "no victims: preemption would not free anything on this node"
            continue
        node = (nodes or {}).get(name)
        info = node_info.get(name, NO_NODE_INFO) if node_info is not None else NO_NODE_INFO
        reason = ""
        for scope in scopes:
            rules = scope.policy.preemption
            assert rules is not None
            checks: list[tuple[str, Any, dict[str, Any]]] = []
            if rules.node is not None:
                checks.append(("node", rules.node, {"node": node, "nodeInfo": info, "victims": list(victims)}))
            if rules.victim is not None:
                checks += [(f"victim {victim_name(v)}", rules.victim, {"node": node, "nodeInfo": info, "victim": v}) for v in victims]
            for what, expr, inputs in checks:
                outcome = run_rule(scope, expr, inputs, {}, rule=what, kind="preemption", timed=False)
                error = outcome.error
                if error is None and not isinstance(outcome.value, bool):
                    error = f"preemption rule must give a bool, got {cel.values.type_name(outcome.value)}"
                label = f"{scope.policy.name}/preemption.{what.split(' ')[0]}"
                rule = what.split(" ")[0]  # "node" or "victim": one metric label per rule, not per pod
                if error is not None:
                    result.errors.append(RuleEvent(scope.policy.name, rule, name, f"{what}: {error}" if rule == "victim" else error))
                    denied = scope.policy.fail_closed
                    message = f"{label}: evaluation error: {error}"
                else:
                    denied = outcome.value is False
                    message = f"{label}: {what} may not be preempted" if what != "node" else f"{label}: node is not a preemption candidate"
                if not denied:
                    continue
                if not scope.policy.enforce:
                    result.audit_rejections.append(RuleEvent(scope.policy.name, rule, name, message))
                    continue
                reason = message
                break
            if reason:
                break
        if reason:
            result.rejected[name] = reason
        else:
            result.candidates[name] = list(victims)
    return result
