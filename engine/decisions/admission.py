"""The admission decision: which scheduling gates kpe puts on a pod and which are lifted.

A matching Enforce policy with an ``admission`` section contributes one gate
(``spec.admission.gate``, default ``kpe.dev/<policy>``). The gate is satisfied
when the expression is true; an evaluation error keeps it with failurePolicy
Fail and lifts it with Ignore. Audit-mode policies are evaluated and reported
but never add or hold a gate.

Besides ``nodes`` and ``pods`` (kpe's whole view of the cluster), an admission
expression sees ``admitted``: the pods kpe's gates no longer hold back, bound
or still waiting for the scheduler, and not finished. A quota counted over
``admitted`` includes the pods released a moment ago that no node holds yet,
which a count of bound pods misses during a burst.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine import cel
from engine.decisions.evaluation import PolicyScope, matching_scopes, request_inputs, run_rule
from engine.cluster.nodeinfo import is_active
from engine.policy.model import PolicySet

# The webhook records the gates it adds here (comma-separated); kpe lifts only those.
GATES_ANNOTATION = "kpe.dev/gates"


def gate_names(pod: Mapping[str, Any]) -> list[str]:
    """The pod's scheduling gates, whoever added them."""
    spec = pod.get("spec")
    gates = spec.get("schedulingGates") if isinstance(spec, Mapping) else None
    return [g["name"] for g in gates or [] if isinstance(g, Mapping) and "name" in g]


def kpe_gates(pod: Mapping[str, Any]) -> set[str]:
    """The gates kpe may lift on this pod: the ones its webhook recorded adding.
    A gate of the same name put there by anyone else is theirs to lift, and a
    recorded gate whose policy is gone is lifted at the next pass."""
    meta = pod.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    recorded = annotations.get(GATES_ANNOTATION, "") if isinstance(annotations, Mapping) else ""
    return {g for g in str(recorded).split(",") if g}


def held_by_kpe(pod: Mapping[str, Any]) -> bool:
    """True while one of kpe's gates holds the pod back from the scheduler."""
    mine = kpe_gates(pod)
    return bool(mine) and any(g in mine for g in gate_names(pod))


def is_admitted(pod: Mapping[str, Any]) -> bool:
    """Past kpe's admission: bound, or held by none of kpe's gates; and not finished."""
    if not is_active(pod):
        return False
    spec = pod.get("spec")
    return bool(isinstance(spec, Mapping) and spec.get("nodeName")) or not held_by_kpe(pod)


def admitted_pods(pods: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """``admitted`` for admission expressions (see the module docstring)."""
    return [p for p in pods if is_admitted(p)]


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
    admitted: Sequence[Mapping[str, Any]] | None = None,
    now: Any = None,
    namespaces: Mapping[str, Any] | None = None, dra: Mapping[str, Any] | None = None,
) -> AdmissionResult:
    """Evaluate every matching admission rule for ``pod`` against a cluster view.
    ``admitted`` defaults to the admitted ones among ``pods``; the gate controller
    passes its own, which also holds the pods it released since the cache last heard."""
    result = AdmissionResult(policy_set.generation)
    fixed = request_inputs(
        pod, now, namespaces=namespaces, dra=dra, nodes=list(nodes), pods=list(pods), admitted=list(admitted) if admitted is not None else admitted_pods(pods)
    )
    for scope in matching_scopes(policy_set, pod, fixed):
        admission = scope.policy.admission
        if admission is None:
            continue
        outcome = run_rule(scope, admission.expression, {}, None, rule="admission", kind="admission", timed=True)
        error = outcome.error
        if error is None and not isinstance(outcome.value, bool):
            error = f"admission must give a bool, got {cel.type_name(outcome.value)}"
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
