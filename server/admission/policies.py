"""The validating admission webhook for kpe's own kinds: a SchedulingPolicy or Reservation
that ``kpe check`` would refuse is refused at ``kubectl apply``, with kpe's coded message
naming the field (``spec.filters[0].expression: KPE302 ...``).

The check is the engine's, on that one object (``engine.policy.objects.check_object``:
schema, CEL compile and types, cost, under the limits kpe serves with). What only a whole
set can break (two policies of one name or one gate) is not judged here: the object is
admitted, and the set that would hold it is refused as a whole while the last good set
keeps serving.

An UPDATE that leaves ``spec`` as it was (labels, annotations, finalizers, an object being
deleted) is admitted even when the object is broken: refusing it would not mend the object,
and would keep a broken object, written while kpe was down, from being relabelled or
having its finalizers removed. Its problems come back as warnings.

The check answers within the API server's ``timeoutSeconds`` (the ``timeout`` it adds to the
URL) whatever it is sent: an object whose expressions take longer to compile than most of
that time is refused (KPE309, split it), rather than holding the worker that pods' admission
shares while the API server has given up waiting.

When kpe does not answer, deploy/webhook.yaml's ``failurePolicy: Ignore`` lets the write
through: kpe down must never keep the objects that repair it from being written or deleted
(docs/guides/audit-and-admission.md, "When kpe is down").
"""

from __future__ import annotations

import logging
from typing import Any

from starlette.responses import Response

from engine.errors import PolicyError
from engine.policy.compiler import CompileDeadline, CostLimits
from engine.policy.objects import KINDS, admission_text, check_object, object_name

from server.admission.webhook import review_endpoint, review_response
from server.http.responses import json_response
from server.state import ServerState

log = logging.getLogger("kpe.webhook")
CHECKED = ("CREATE", "UPDATE")
# What the API server reports for a refused write: kubectl shows "Error from server (Invalid)".
REFUSED_CODE, REFUSED_REASON = 422, "Invalid"
# The share of the API server's timeout the check may take: the rest is for the queue before it and the answer.
CHECK_SHARE = 0.8


def refusal(uid: str, obj: dict[str, Any], errors: list[PolicyError]) -> dict[str, Any]:
    """``allowed: false`` with every error, one a line, in ``status.message`` and each in
    ``status.details.causes`` with its field path, as the API server's own validation answers."""
    answer = review_response(uid, allowed=False)
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    answer["response"]["status"] = {
        "code": REFUSED_CODE,
        "reason": REFUSED_REASON,
        "message": "\n".join(admission_text(e) for e in errors),
        "details": {
            "group": "kpe.dev",
            "kind": str(obj.get("kind") or ""),
            "name": str((meta or {}).get("name") or ""),
            "causes": [{"reason": "FieldValueInvalid", "field": e.path, "message": f"{e.code} {e.message}"} for e in errors],
        },
    }
    return answer


def unchanged_spec(review: dict[str, Any], obj: dict[str, Any]) -> bool:
    """An UPDATE that keeps the spec (and one of an object being deleted)."""
    if review.get("operation") != "UPDATE":
        return False
    old = review.get("oldObject")
    meta = obj.get("metadata")
    if isinstance(meta, dict) and meta.get("deletionTimestamp"):  # a malformed metadata is the validation's to report
        return True
    return isinstance(old, dict) and old.get("spec") == obj.get("spec")


async def _review(review: dict[str, Any], state: ServerState, waits: float) -> Response:
    uid = review["uid"]
    kind = review.get("kind")
    obj = review.get("object")
    if review.get("operation") not in CHECKED or not isinstance(kind, dict) or kind.get("group") != "kpe.dev" or kind.get("kind") not in KINDS:
        state.metrics.policy_reviews.labels("skipped").inc()
        return json_response(review_response(uid))
    if not isinstance(obj, dict):
        state.metrics.policy_reviews.labels("invalid").inc()
        return json_response({"error": f"AdmissionReview.request.object: expected the {kind.get('kind')} object, got {type(obj).__name__}"}, 400)
    settings = state.settings
    limits = CostLimits(settings.cel_cost_limit, settings.cel_admission_cost_limit)
    # Counted from now: time spent waiting for the worker is time the API server waits too.
    deadline = CompileDeadline.after(waits * CHECK_SHARE)
    checked = await state.admission_worker.run(check_object, obj, cost_limits=limits, deadline=deadline)
    if checked.ok:
        state.metrics.policy_reviews.labels("allowed").inc()
        return json_response(review_response(uid, warnings=checked.warnings))
    if unchanged_spec(review, obj):
        state.metrics.policy_reviews.labels("allowed").inc()
        kept = [f"{object_name(obj)} is admitted with its spec unchanged, which kpe refuses: {admission_text(e)}" for e in checked.errors]
        return json_response(review_response(uid, warnings=checked.warnings + kept))
    state.metrics.policy_reviews.labels("refused").inc()
    log.info("refused %s: %s", object_name(obj), checked.message(), extra={"operation": review.get("operation"), "user": (review.get("userInfo") or {}).get("username")})
    return json_response(refusal(uid, obj, checked.errors))


handle_policy_admission = review_endpoint("policy-admission", "policy webhook", lambda metrics: metrics.policy_reviews, _review)
