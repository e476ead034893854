"""The admission decision: which scheduling gates kpe puts on a pod and which are lifted.

A matching Enforce policy with an ``admission`` section contributes one gate
(``spec.admission.gate``, default ``kpe.dev/<policy>``). The gate is satisfied
when the expression is true; an evaluation error keeps it with failurePolicy
Fail and lifts it with Ignore. Audit-mode policies are evaluated and reported
but never add or hold a gate.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import cel
from .evaluation import PolicyScope, matching_scopes, request_inputs, run_rule
from .policy import PolicySet


@dataclass
class GateDecision:
    policy: str
    gate: str
    satisfied: bool
    message: str
    error: str | None = None
    audit: bool = False
    elapsed_us: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "gate": self.gate,
            "satisfied": self.satisfied,
            "message": self.message,
            "error": self.error,
            "audit": self.audit,
            "elapsedMicroseconds": round(self.elapsed_us, 2),
        }


@dataclass
class AdmissionResult:
    generation: str
    decisions: list[GateDecision] = field(default_factory=list)

    @property
    def gates(self) -> list[str]:
        """The gates kpe adds to this pod at creation (Enforce policies only)."""
        return [d.gate for d in self.decisions if not d.audit]

    @property
    def pending(self) -> list[GateDecision]:
        """Enforce gates not yet satisfied: the pod must keep waiting for these."""
        return [d for d in self.decisions if not d.audit and not d.satisfied]

    @property
    def admitted(self) -> bool:
        return not self.pending


def admit(
    policy_set: PolicySet,
    pod: Mapping[str, Any],
    *,
    nodes: Sequence[Mapping[str, Any]] = (),
    pods: Sequence[Mapping[str, Any]] = (),
    now: Any = None,
) -> AdmissionResult:
    """Evaluate every matching admission rule for ``pod`` against a cluster view."""
    result = AdmissionResult(policy_set.generation)
    fixed = request_inputs(pod, now, nodes=list(nodes), pods=list(pods))
    for scope in matching_scopes(policy_set, pod, fixed):
        admission = scope.policy.admission
        if admission is None:
            continue
        outcome = run_rule(scope, admission.expression, {}, None, rule="admission", kind="admission", timed=True)
        error = outcome.error
        if error is None and not isinstance(outcome.value, bool):
            error = f"admission must give a bool, got {cel.values.type_name(outcome.value)}"
        if error is not None:
            satisfied = not scope.policy.fail_closed
            message = f"{scope.policy.name}: evaluation error: {error}"
        else:
            satisfied = outcome.value is True
            message = "" if satisfied else f"{scope.policy.name}: {_message(scope)}"
        result.decisions.append(
            GateDecision(scope.policy.name, admission.gate, satisfied, message, error, not scope.policy.enforce, outcome.elapsed_us)
        )
    return result


def _message(scope: PolicyScope) -> str:
    admission = scope.policy.admission
    assert admission is not None
    if admission.message_expression is None:
        return admission.message
    try:
        value = scope.evaluate(admission.message_expression, {})
    except cel.EvalError:
        return admission.message
    return value if isinstance(value, str) and value else admission.message
