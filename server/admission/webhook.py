"""The mutating admission webhook: on pod CREATE, add kpe's scheduling gates.

The API server only lets gates be added when a pod is created, so this is
the one chance: every matching Enforce policy with an ``admission`` section
adds its gate (``spec.schedulingGates``), whether or not the pod already has
gates of its own, and the gate controller lifts each when its expression
holds. Pods that already name a node, other operations and other kinds pass
untouched. Audit-mode policies are only counted.

With ``--scheduler-name`` (kpe's own scheduler, deploy/scheduler/) the webhook
also routes pods to that scheduler: kube-scheduler asks kpe only about pods it
schedules, so a pod that a policy with filters, scores or preemption matches
would otherwise escape the policy by not naming it. Only a pod that left the
choice to the cluster is routed; one that names any other scheduler keeps it.
"""

from __future__ import annotations

import base64
import logging
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from engine.decisions.admission import GATES_ANNOTATION, admit
from engine.decisions.evaluation import matching_scopes, request_inputs
from engine.policy.model import PolicySet

from server.http.responses import HTTPProblem, json_response, read_json
from server.state import ServerState
from server.telemetry.metrics import Metrics
from server.http.wire import WireError, check_pod

log = logging.getLogger("kpe.webhook")
REVIEW_VERSION = "admission.k8s.io/v1"
# What the API server fills in before admission when a pod names no scheduler.
DEFAULT_SCHEDULER = "default-scheduler"


def gate_patch(pod: dict[str, Any], gates: list[str]) -> list[dict[str, Any]]:
    """JSONPatch adding ``gates`` that the pod does not have yet (so a replayed review
    changes nothing), and recording them in the ``kpe.dev/gates`` annotation: the
    controller lifts only recorded gates, so a gate the pod came with stays its
    owner's even when it bears a kpe policy's name."""
    spec = pod.get("spec") or {}
    existing = spec.get("schedulingGates")
    present = {g.get("name") for g in existing or [] if isinstance(g, dict)}
    missing = [g for g in dict.fromkeys(gates) if g not in present]
    if not missing:
        return []
    patch: list[dict[str, Any]]
    if existing is None:
        patch = [{"op": "add", "path": "/spec/schedulingGates", "value": [{"name": g} for g in missing]}]
    else:
        patch = [{"op": "add", "path": "/spec/schedulingGates/-", "value": {"name": g}} for g in missing]
    annotations = (pod.get("metadata") or {}).get("annotations")
    recorded = ",".join(g for g in dict.fromkeys([*(annotations or {}).get(GATES_ANNOTATION, "").split(","), *missing]) if g)
    if annotations is None:
        patch.append({"op": "add", "path": "/metadata/annotations", "value": {GATES_ANNOTATION: recorded}})
    else:
        patch.append({"op": "add", "path": "/metadata/annotations/" + GATES_ANNOTATION.replace("~", "~0").replace("/", "~1"), "value": recorded})
    return patch


def scheduling_policies(policy_set: PolicySet, pod: Mapping[str, Any], namespaces: Mapping[str, Any] | None = None,
                        dra: Mapping[str, Any] | None = None) -> list[str]:
    """The matching policies kube-scheduler asks kpe about (filters, scores, preemption, a
    reservation's): admission-only ones apply whichever scheduler places the pod."""
    return [
        scope.policy.name
        for scope in matching_scopes(policy_set, pod, request_inputs(pod, None, namespaces=namespaces, dra=dra))
        if scope.policy.filters or scope.policy.scores or scope.policy.preemption is not None or scope.policy.reservation is not None
    ]


def scheduler_patch(pod: Mapping[str, Any], scheduler_name: str, policies: list[str]) -> list[dict[str, Any]]:
    """JSONPatch routing the pod to ``scheduler_name`` when ``policies`` need it and the pod left
    the choice to the cluster; ``add`` replaces the default name the API server filled in."""
    current = (pod.get("spec") or {}).get("schedulerName") or ""
    if not scheduler_name or not policies or current not in ("", DEFAULT_SCHEDULER):
        return []
    return [{"op": "add", "path": "/spec/schedulerName", "value": scheduler_name}]


def review_response(uid: str, *, allowed: bool = True, patch: list[dict[str, Any]] | None = None, message: str = "", warnings: list[str] | None = None) -> dict[str, Any]:
    response: dict[str, Any] = {"uid": uid, "allowed": allowed}
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(orjson.dumps(patch)).decode()
    if message:
        response["status"] = {"code": 200 if allowed else 403, "message": message}
    if warnings:
        response["warnings"] = warnings
    return {"apiVersion": REVIEW_VERSION, "kind": "AdmissionReview", "response": response}


def decode_review(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise HTTPProblem(400, "expected an AdmissionReview object")
    if body.get("apiVersion") != REVIEW_VERSION or body.get("kind") != "AdmissionReview":
        raise HTTPProblem(400, f"expected kind AdmissionReview, apiVersion {REVIEW_VERSION}; got kind {body.get('kind')!r}, apiVersion {body.get('apiVersion')!r}")
    request = body.get("request")
    if not isinstance(request, dict) or not isinstance(request.get("uid"), str) or not request["uid"]:
        raise HTTPProblem(400, "AdmissionReview.request.uid is missing")
    return request


Review = Callable[[dict[str, Any], ServerState, float], Awaitable[Response]]
"""``review(request's review, state, waits)``: ``waits`` is how long the API server waits for the answer."""

DEFAULT_TIMEOUT_S = 10.0  # a webhook's timeoutSeconds when its configuration sets none
_GO_DURATION = re.compile(r"(?:(\d+)h)?(?:(\d+)m(?!s))?(?:(\d+(?:\.\d+)?)s)?(?:(\d+)ms)?")


def api_server_timeout(text: str | None) -> float:
    """The ``timeout`` query parameter the API server adds to a webhook's URL (its
    ``timeoutSeconds``, as a Go duration: ``5s``, ``1m0s``), in seconds; the default without one."""
    found = _GO_DURATION.fullmatch(text or "")
    if not text or found is None or not any(found.groups()):
        return DEFAULT_TIMEOUT_S
    hours, minutes, seconds, millis = found.groups()
    total = int(hours or 0) * 3600 + int(minutes or 0) * 60 + float(seconds or 0) + int(millis or 0) / 1000
    return total if total > 0 else DEFAULT_TIMEOUT_S


def review_endpoint(verb: str, what: str, outcomes: Callable[[Metrics], Any], review: Review) -> Callable[[Request], Awaitable[Response]]:
    """An AdmissionReview endpoint: the body read (size-limited) and decoded, a bad one a 400/413
    in JSON, ``review(request's review, state)`` answering, and all of it counted and timed like
    the extender verbs (``verb``); ``outcomes(metrics)`` counts the reviews by outcome."""
    async def endpoint(request: Request) -> Response:
        state: ServerState = request.app.state.kpe
        start = time.perf_counter()
        try:
            try:
                decoded = decode_review(await read_json(request, state.settings.max_body_bytes))
            except HTTPProblem as exc:
                outcomes(state.metrics).labels("invalid").inc()
                response = json_response({"error": exc.message}, exc.status)
            else:
                response = await review(decoded, state, api_server_timeout(request.query_params.get("timeout")))
        except Exception as exc:  # noqa: BLE001 - a bug must answer in JSON, not reset the API server's connection
            log.exception("internal error in the %s", what)
            response = json_response({"error": f"kpe internal error in the {what}: {type(exc).__name__}: {exc}"}, 500)
        state.metrics.requests.labels(verb, str(response.status_code)).inc()
        state.metrics.latency.labels(verb).observe(time.perf_counter() - start)
        return response

    return endpoint


async def _review(review: dict[str, Any], state: ServerState, waits: float) -> Response:
    uid = review["uid"]
    kind = review.get("kind")
    pod = review.get("object")
    if review.get("operation") != "CREATE" or not isinstance(kind, dict) or kind.get("kind") != "Pod" or not isinstance(pod, dict):
        state.metrics.admission_reviews.labels("skipped").inc()
        return json_response(review_response(uid))
    try:
        check_pod(pod, "AdmissionReview.request.object")
    except WireError as exc:
        state.metrics.admission_reviews.labels("invalid").inc()
        return json_response({"error": str(exc)}, 400)
    if (pod.get("spec") or {}).get("nodeName"):
        state.metrics.admission_reviews.labels("skipped").inc()
        return json_response(review_response(uid))
    if not (pod.get("metadata") or {}).get("namespace") and isinstance(review.get("namespace"), str) and review["namespace"]:
        pod = {**pod, "metadata": {**(pod.get("metadata") or {}), "namespace": review["namespace"]}}
    try:
        policy_set = state.store.current
        nodes = state.cache.nodes() if state.cache is not None else []
        pods = state.cache.pods() if state.cache is not None else []
        namespaces, dra = state.namespaces(), state.dra()
        result = await state.admission_worker.run(lambda: admit(policy_set, pod, nodes=nodes, pods=pods, namespaces=namespaces, dra=dra))
        routed = await state.admission_worker.run(scheduling_policies, policy_set, pod, namespaces, dra) if state.settings.scheduler_name else []
    except Exception as exc:  # noqa: BLE001 - kpe's own failure: the documented setting decides
        log.exception("admission webhook failed")
        state.metrics.admission_reviews.labels("failed").inc()
        message = f"kpe could not evaluate its admission policies: {type(exc).__name__}: {exc}"
        if state.settings.webhook_on_error == "deny":
            return json_response(review_response(uid, allowed=False, message=message))
        return json_response(review_response(uid, warnings=[message + "; pod admitted without kpe's gates"]))
    for decision in result.decisions:
        if decision.audit and not decision.satisfied:
            state.metrics.audit.labels(decision.policy, "admission", "admission").inc()
    route = scheduler_patch(pod, state.settings.scheduler_name, routed)
    scheduler = {"scheduler": state.settings.scheduler_name, "routedBy": routed} if route else {}
    if result.gates and "gates" not in state.settings.controller_set:
        # Nothing would ever lift them: a gated pod would wait for good.
        state.metrics.admission_reviews.labels("allowed").inc()
        state.record("webhook", pod, policy_set.generation, gates=[], pending=[d.gate for d in result.pending], skipped=result.gates, **scheduler)
        return json_response(review_response(uid, patch=route, warnings=[f"kpe's gate controller is off (--controllers gates), so the pod is admitted without the gates {', '.join(result.gates)}"]))
    patch = gate_patch(pod, result.gates)
    for gate in result.gates:
        state.metrics.gates_added.labels(policy_set.gates[gate].name).inc()
    state.metrics.admission_reviews.labels("gated" if patch else "allowed").inc()
    state.record("webhook", pod, policy_set.generation, gates=result.gates, pending=[d.gate for d in result.pending], **scheduler)
    return json_response(review_response(uid, patch=patch + route))


handle_admission = review_endpoint("admission", "admission webhook", lambda metrics: metrics.admission_reviews, _review)
