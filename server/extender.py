"""The extender verbs kube-scheduler calls: filter, prioritize, preempt, bind, and kpe's admit.

Each request reads the policy set reference once and answers from that
generation (named in the ``X-Kpe-Policy-Generation`` header and the logs).
Bad input is a 400 with a message; evaluation errors are node failures, never
HTTP errors.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import re
import time
from functools import partial
from operator import itemgetter, methodcaller
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import orjson
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from engine.admission import admit
from engine.deadline import Deadline
from engine.equivalence import Offload
from engine.filtering import FilterResult, filter_nodes
from engine.nodeinfo import NodesByName
from engine.preemption import preempt
from engine.policy import PolicySet
from engine.scoring import ScoreResult, score_nodes

from .body import decode, implausible
from .lookahead import Expected
from .state import ServerState
from .wire import (
    ExtenderArgs,
    WireError,
    decode_binding_args,
    decode_extender_args,
    decode_pod,
    decode_preemption_args,
    filter_result,
    host_priority,
    host_priority_json,
    host_priority_list,
    preemption_result,
)

log = logging.getLogger("kpe.extender")
GENERATION_HEADER = "X-Kpe-Policy-Generation"
NO_CLUSTER = (
    "kpe has no cluster access, so it cannot resolve node names: configure the extender with "
    "nodeCacheCapable: false, or give kpe credentials (in-cluster service account or --kubeconfig)"
)


NOT_SYNCED = (
    "kpe's node and pod cache has not synced with the API server yet; kpe cannot resolve node names "
    "or victims until it has (its /readyz says when)"
)


def cache_unusable(state: ServerState) -> str:
    """Why node names cannot be answered from kpe's cache now ("" when they can): before its
    first sync every name would be unknown, and after a long cut-off from the API server
    (--cache-stale-after-s) its nodes and pods may be long gone. Said as an error, the
    scheduler retries the pod; said as FailedNodes, it would take them as real verdicts."""
    cache = state.cache
    assert cache is not None
    why = f" (last error: {cache.last_error})" if cache.last_error else ""
    if not cache.synced.is_set():
        return NOT_SYNCED + why
    limit = state.settings.cache_stale_after_s
    stale = cache.stale_seconds() if limit > 0 else 0.0
    if stale > limit:
        return (
            f"kpe's node and pod cache has heard nothing from the API server for {stale:.0f} s "
            f"(over --cache-stale-after-s {limit:g}){why}; not answering from it"
        )
    return ""


class HTTPProblem(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def json_response(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(data), status_code=status, media_type="application/json", headers=headers)


class ClientGone(ClientDisconnect):
    """The client closed the connection before its body arrived: nobody to answer (Starlette's
    routes meet it as the ClientDisconnect their own body reading raises)."""


async def read_body(receive: Any, declared: bytes | str | None, limit: int, timeout: float) -> bytes:
    """The request body, refusing more than ``limit`` bytes before reading them all."""
    if declared is not None:
        try:
            size = int(declared)
        except ValueError:
            raise HTTPProblem(400, "invalid Content-Length header") from None
        if size > limit:
            raise HTTPProblem(413, f"request body of {size} bytes is over the limit of {limit} bytes (--max-body-bytes)")
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(timeout):
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    raise ClientGone()
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > limit:
                    raise HTTPProblem(413, f"request body is over the limit of {limit} bytes (--max-body-bytes)")
                chunks.append(chunk)
                if not message.get("more_body", False):
                    break
    except TimeoutError:
        raise HTTPProblem(408, f"request body not received within {timeout:g} s (--body-timeout-s)") from None
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


async def read_json(request: Request, limit: int) -> Any:
    """The body as JSON, refusing more than ``limit`` bytes before reading them all."""
    timeout = request.app.state.kpe.settings.body_timeout_s
    return parse_json(await read_body(request.receive, request.headers.get("content-length"), limit, timeout))


def parse_json(raw: bytes) -> Any:
    """A request body as JSON, or the 4xx that says why not."""
    if not raw.strip():
        raise HTTPProblem(400, "request body is empty; expected JSON")
    refused = implausible(raw)
    if refused:
        raise HTTPProblem(413, refused)
    try:
        return decode(raw)
    except orjson.JSONDecodeError as exc:
        raise HTTPProblem(400, f"malformed JSON: {exc}") from None


def pod_label(pod: dict[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', 'default')}/{meta.get('name', '?')}"


@dataclass(frozen=True, slots=True)
class Answer:
    """A verb's answer: the JSON body, its status and extra headers."""

    data: Any
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    encoded: bytes | None = None  # ``data`` already encoded as JSON (sent instead of encoding it)
    after: Callable[[], None] | None = None  # called on the event loop once the answer is written


Handler = Callable[[bytes, Deadline, ServerState], Awaitable[Answer]]
"""A verb: the request body as received, the request's deadline and the state in; the answer out."""

# Nodes a filter or prioritize may evaluate on the event loop. Most requests of the scheduler's
# stream need a handful (the equivalence cache holds the rest): answered in place, they skip the
# hand-off to the worker thread and back, about a fifth of kpe's CPU per scheduled pod. A request
# with more waits for the worker, so a large evaluation never holds up the other listeners.
INLINE_MISSES = 32
T = TypeVar("T")


async def evaluate(state: ServerState, verb: str, decide: Callable[[int | None], T]) -> T:
    """``decide(max_misses)`` on the event loop when it is cheap and the worker is idle (so the
    two never share the equivalence cache), else ``decide(None)`` on the worker thread."""
    if state.worker.idle:
        try:
            return decide(INLINE_MISSES)
        except Offload:
            pass
    state.metrics.offloaded.labels(verb).inc()
    return await state.worker.run(decide, None)


def cached_copies(state: ServerState) -> Callable[[list[Any]], list[dict[str, Any] | None]] | None:
    """For whole nodes from kube-scheduler: kpe's cached object of each node at the same
    resourceVersion (the same state of the node, so the same answers), None where there is
    none. The request's objects are new on every request, and the equivalence cache remembers
    results per object: with kpe's copies, whole-node requests are answered from it as node
    names are, and the copies need no checking. A node the cache has at another version (or
    not at all) is checked and evaluated as the scheduler sent it. Looked up in C, a list at
    a time: a request holds hundreds of nodes."""
    cache = state.cache
    if cache is None or not cache.synced.is_set():
        return None

    def copies(nodes: list[Any]) -> list[dict[str, Any] | None]:
        try:
            metas = list(map(_METADATA, nodes))
            versions = list(map(_RESOURCE_VERSION, metas))
            cached = cache.nodes_named(list(map(_NAME, metas)))
        except (KeyError, TypeError, AttributeError):
            return [None] * len(nodes)  # not node objects: the checks say what is wrong
        return [c if c is not None and v and c["metadata"].get("resourceVersion") == v else None for c, v in zip(cached, versions)]

    return copies


_METADATA, _NAME = itemgetter("metadata"), itemgetter("name")
_RESOURCE_VERSION = methodcaller("get", "resourceVersion")


async def handle_filter(raw: bytes, deadline: Deadline, state: ServerState) -> Answer:
    policy_set = state.store.current
    body = parse_json(raw)
    args = decode_extender_args(body, "filter", known=cached_copies(state))
    headers = {GENERATION_HEADER: policy_set.generation}
    failed: dict[str, str] = {}
    nodes: list[dict[str, Any]] | NodesByName
    if args.nodes is not None:
        nodes = args.known_nodes or []
    else:
        if state.cache is None:
            return Answer(filter_result(nodes=None, node_names=[], list_meta={}, failed={}, unresolvable={}, error=NO_CLUSTER), headers=headers)
        unusable = cache_unusable(state)
        if unusable:
            # kube-scheduler reads a filter's Error from a 200 and fails the attempt (retried later).
            return Answer(filter_result(nodes=None, node_names=[], list_meta={}, failed={}, unresolvable={}, error=unusable), headers=headers)
        nodes = state.nodes_by_name(args.node_names or [])
    # Only cached nodes can be remembered (they are the same objects until the cache replaces
    # them): whole nodes are, too, once cached_copies has swapped in kpe's copies.
    memo = state.equivalence if args.nodes is None or state.cache is not None else None
    result = await evaluate(
        state,
        "filter",
        lambda limit: state.keep_off_reserved(
            policy_set, args.pod, nodes, filter_nodes(policy_set, args.pod, nodes, node_info=state.node_info(), memo=memo, deadline=deadline, max_misses=limit)
        ),
    )
    if result.unknown:
        failed = state.unknown_nodes(result.unknown, "filter")
        failed.update(result.failed)  # the names kpe does not know, then the rejected ones
    else:
        failed = result.failed
    if args.nodes is not None:
        passed = set(result.passed)
        answer = filter_result(
            nodes=[n for n in args.nodes if n["metadata"]["name"] in passed],
            node_names=None,
            list_meta=args.node_list_meta,
            failed=failed,
            unresolvable=result.unresolvable,
        )
    else:
        answer = filter_result(
            nodes=None,
            node_names=result.passed,  # the resolved names, in the scheduler's order
            list_meta={},
            failed=failed,
            unresolvable=result.unresolvable,
        )
    return Answer(answer, headers=headers, after=partial(_after_filter, state, raw, body, args, len(nodes), result, failed, policy_set))


def _after_filter(
    state: ServerState, raw: bytes, body: Any, args: ExtenderArgs, requested: int, result: FilterResult, failed: dict[str, str], policy_set: PolicySet
) -> None:
    """What a filter's answer does not depend on, done once the answer is written (kube-scheduler
    waits for the answer, not for this): its metrics, the decision log, the requeue's note of a
    pod some node rejected, and with node names the prioritize expected next."""
    state.metrics.observe_nodes("filter", requested)
    state.count_overdue("filter", result.overdue)
    state.count_equivalence("filter", result.memo_hits, result.memo_misses)
    state.metrics.count_rules("filter", result.rule_counts, result.errors, result.audit_rejections)
    state.metrics.count_rejections(result.rejections)
    if state.requeue is not None:
        if failed or result.unresolvable:
            state.requeue.remember(args.pod, policy_set.generation)
        else:
            state.requeue.forget(args.pod)
    state.record("filter", args.pod, policy_set.generation, passed=len(result.passed), failed=failed, unresolvable=result.unresolvable, policies=result.matched)
    if args.nodes is None:
        _look_ahead(state, raw, body, args.pod, result.passed, policy_set)


async def handle_prioritize(raw: bytes, deadline: Deadline, state: ServerState) -> Answer:
    expected = state.lookahead.take(raw)
    if expected is not None:
        if state.store.current is expected.policy_set and not cache_unusable(state):
            if expected.answer is not None and _unchanged(state, expected):
                state.lookahead.count("answered")
                state.metrics.observe_nodes("prioritize", len(expected.names))
                state.record("prioritize", expected.pod, expected.policy_set.generation, scores=_logged(state, expected.answer), policies=expected.matched)
                return Answer(None, headers={GENERATION_HEADER: expected.policy_set.generation}, encoded=expected.answer)
            state.lookahead.count("rescored")
            # The body is the expected one: its pod and names are known without decoding it.
            return await _prioritize(state, expected.policy_set, expected.pod, state.nodes_by_name(expected.names), expected.names, None, deadline)
        state.lookahead.count("rescored")
    policy_set = state.store.current
    args = decode_extender_args(parse_json(raw), "prioritize", known=cached_copies(state))
    nodes: list[dict[str, Any]] | NodesByName
    if args.nodes is not None:
        nodes, order = args.known_nodes or [], list(map(_NAME, map(_METADATA, args.nodes)))
    else:
        if state.cache is None:
            # Prioritize has no Error field: a 4xx is what the scheduler logs (and ignores, as it does every prioritize error).
            raise HTTPProblem(422, NO_CLUSTER)
        unusable = cache_unusable(state)
        if unusable:
            raise HTTPProblem(503, unusable)
        order = list(args.node_names or [])
        nodes = state.nodes_by_name(order)
    # Whole nodes: their names, in order, are given to the engine.
    return await _prioritize(state, policy_set, args.pod, nodes, order, order if args.nodes is not None else None, deadline)


async def _prioritize(
    state: ServerState,
    policy_set: PolicySet,
    pod: dict[str, Any],
    nodes: list[dict[str, Any]] | NodesByName,
    order: list[str],
    names: list[str] | None,
    deadline: Deadline,
) -> Answer:
    headers = {GENERATION_HEADER: policy_set.generation}
    state.metrics.observe_nodes("prioritize", len(order))
    memo = state.equivalence if not isinstance(nodes, list) or state.cache is not None else None
    result = await evaluate(
        state,
        "prioritize",
        lambda limit: score_nodes(
            policy_set, pod, nodes, node_info=state.node_info(), memo=memo, deadline=deadline, names=names, max_misses=limit, encode=host_priority
        ),
    )
    _count_scoring(state, result)
    if result.encoded is not None and not result.unknown:
        # Every node known, in the request's order: the remembered entries are the answer (and
        # what the decision log keeps, as sent: no dict of scores is built for it).
        encoded = host_priority_json(result.encoded)
        state.record("prioritize", pod, policy_set.generation, scores=_logged(state, encoded), policies=result.matched)
        return Answer(None, headers=headers, encoded=encoded)
    answer = host_priority_list(result.scores, order)
    state.record("prioritize", pod, policy_set.generation, scores=answer, policies=result.matched)
    return Answer(answer, headers=headers)


def _count_scoring(state: ServerState, result: ScoreResult) -> None:
    if result.unknown:
        state.unknown_nodes(result.unknown, "prioritize")
    state.count_overdue("prioritize", result.overdue)
    state.count_equivalence("prioritize", result.memo_hits, result.memo_misses)
    state.metrics.count_rules("score", result.rule_counts, result.errors, [])


def _logged(state: ServerState, encoded: bytes) -> Any:
    """A prioritize answer as the decision log keeps it: as sent, unless it might not fit the
    log's budget for one entry (a Fragment cannot be cut; a list is cut to its first hosts)."""
    return orjson.Fragment(encoded) if len(encoded) <= state.decisions.max_entry_bytes // 2 else orjson.loads(encoded)


def _unchanged(state: ServerState, expected: Expected) -> bool:
    """Whether none of the expected nodes changed in kpe's cache since their answer was worked out."""
    assert state.cache is not None
    info = state.cache.node_info
    if info.version == expected.version:
        return True
    changed = info.changed_since(expected.version)
    return changed is not None and changed.isdisjoint(expected.names)


def _look_ahead(state: ServerState, raw: bytes, body: Any, pod: dict[str, Any], passed: list[str], policy_set: PolicySet) -> None:
    """After a filter with node names, once its answer is written: expect the prioritize that
    follows it (``server.lookahead``) and work out its answer. Only what the event loop would
    evaluate in place: with more to evaluate, or the worker busy, the prioritize is scored
    when it comes, as without this."""
    expected = state.lookahead.expect(raw, body, pod, passed, policy_set)
    if expected is None or not state.lookahead.worth_working(policy_set, state.equivalence):
        return
    if state.cache is None or state.store.current is not expected.policy_set or cache_unusable(state) or not state.worker.idle:
        return
    collecting = gc.isenabled()
    gc.disable()  # as around a verb: the objects made here are gone before the collector would look
    start = time.perf_counter()
    try:
        version = state.cache.node_info.version
        deadline = Deadline.after(state.settings.request_deadline_s)
        nodes = state.nodes_by_name(expected.names)
        result = score_nodes(
            expected.policy_set, expected.pod, nodes, node_info=state.node_info(), memo=state.equivalence, deadline=deadline, max_misses=INLINE_MISSES, encode=host_priority
        )
    except Offload:
        return
    except Exception:
        log.exception("internal error scoring ahead of prioritize")
        return
    finally:
        if collecting:
            gc.enable()
        state.metrics.ahead_seconds.inc(time.perf_counter() - start)
    _count_scoring(state, result)  # what was evaluated, whether or not a prioritize takes it
    if result.encoded is not None and not result.unknown and not result.overdue:
        expected.version, expected.matched = version, result.matched
        expected.answer = host_priority_json(result.encoded)


async def handle_preempt(raw: bytes, deadline: Deadline, state: ServerState) -> Answer:
    policy_set = state.store.current
    args = decode_preemption_args(parse_json(raw))
    headers = {GENERATION_HEADER: policy_set.generation}
    candidates: dict[str, list[dict[str, Any]]] = {}
    rejected: dict[str, str] = {}
    if args.victims is not None:
        candidates = args.victims
    else:
        if state.cache is None:
            raise HTTPProblem(422, NO_CLUSTER)
        unusable = cache_unusable(state)
        if unusable:
            raise HTTPProblem(503, unusable)
        for node, uids in (args.meta_victims or {}).items():
            pods = [state.cache.pod_by_uid(uid) for uid in uids]
            missing = [uid for uid, p in zip(uids, pods) if p is None]
            if missing:
                state.metrics.unknown_victims.inc(len(missing))
                rejected[node] = f"kpe's pod cache does not know victim(s) {', '.join(missing)}"
                continue
            candidates[node] = [p for p in pods if p is not None]
    nodes = {name: state.cache.node(name) for name in candidates} if state.cache is not None else {}
    known = {k: v for k, v in nodes.items() if v is not None}
    result = await state.worker.run(
        lambda: state.keep_evictions_off_reserved(policy_set, args.pod, known, preempt(policy_set, args.pod, candidates, nodes=known, node_info=state.node_info(), deadline=deadline))
    )
    state.count_overdue("preempt", result.overdue)
    rejected.update(result.rejected)
    state.metrics.count_rules("preemption", [], result.errors, result.audit_rejections)
    state.metrics.count_rejections(result.rejections, preemption=True)
    kept = {node: [str((v.get("metadata") or {}).get("uid", "")) for v in victims] for node, victims in result.candidates.items()}
    if args.meta_victims is not None:
        # Answer only UIDs the scheduler sent, in its order.
        sent = args.meta_victims
        kept = {node: [u for u in sent.get(node, []) if u in set(ids)] for node, ids in kept.items()}
    kept = {node: ids for node, ids in kept.items() if ids}
    state.record("preempt", args.pod, policy_set.generation, candidates=sorted(kept), rejected=rejected)
    return Answer(preemption_result(kept, args.pdb_violations), headers=headers)


async def handle_bind(raw: bytes, deadline: Deadline, state: ServerState) -> Answer:
    args = decode_binding_args(parse_json(raw))
    pod = f"{args.pod_namespace}/{args.pod_name}"
    if state.client is None:
        state.metrics.binds.labels("no-cluster").inc()
        return Answer({"Error": "kpe has no cluster access, so it cannot bind pods: remove bindVerb or give kpe credentials"})
    from .kube import ApiError

    missing = await _missing_node(state, args.node)
    if missing:
        state.metrics.binds.labels("error").inc()
        state.decisions.record("bind", pod, state.store.current.generation, node=args.node, error=missing)
        return Answer({"Error": missing})
    try:
        await state.client.bind(args.pod_namespace, args.pod_name, args.pod_uid, args.node)
    except ApiError as exc:
        state.metrics.binds.labels("error").inc()
        message = without_uids(exc.message)
        state.decisions.record("bind", pod, state.store.current.generation, node=args.node, error=message)
        return Answer({"Error": message})
    state.metrics.binds.labels("bound").inc()
    state.decisions.record("bind", pod, state.store.current.generation, node=args.node, error="")
    return Answer({"Error": ""})


_UID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


def without_uids(message: str) -> str:
    """The API's message with object UIDs masked. A bind refused for a wrong UID is
    answered with the pod's real one ("UID in object meta: ..."): passed on, it would
    hand a caller the one secret a Binding needs."""
    return _UID.sub("<uid>", message)


async def _missing_node(state: ServerState, node: str) -> str:
    """Why ``node`` cannot take a pod ("" when it can). The API server accepts a
    Binding to any name, existing or not, and a pod bound to a node that is gone
    stays stuck for good: so kpe checks its cache, and asks the API server before
    refusing a node the cache may simply not have seen yet."""
    from .kube import ApiError

    assert state.client is not None
    known = state.cache.node(node) if state.cache is not None else None
    if known is None:
        try:
            known = await state.client.get_node(node)
        except ApiError as exc:
            if exc.status == 404:
                return f"kpe: node {node} does not exist (the API server has no such node); not binding to it"
            return f"kpe: cannot check that node {node} exists: {exc.message or exc.reason}; not binding to it"
    if (known.get("metadata") or {}).get("deletionTimestamp"):
        return f"kpe: node {node} is being deleted; not binding to it"
    return ""


async def handle_admit(raw: bytes, deadline: Deadline, state: ServerState) -> Answer:
    policy_set = state.store.current
    body = parse_json(raw)
    if not isinstance(body, dict):
        raise WireError("admit request body must be a JSON object with Pod")
    pod = decode_pod(body)
    nodes = state.cache.nodes() if state.cache is not None else []
    pods = state.cache.pods() if state.cache is not None else []
    result = await state.worker.run(admit, policy_set, pod, nodes=nodes, pods=pods)
    answer = {
        "Gates": result.gates,
        "Admitted": result.admitted,
        "Pending": [{"Gate": d.gate, "Policy": d.policy, "Message": d.message} for d in result.pending],
        "Decisions": [d.to_dict() for d in result.decisions],
        "ClusterView": "cache" if state.cache is not None else "none",
    }
    state.record("admit", pod, policy_set.generation, gates=result.gates, admitted=result.admitted)
    return Answer(answer, headers={GENERATION_HEADER: policy_set.generation})


VERBS: dict[str, Handler] = {
    "filter": handle_filter,
    "prioritize": handle_prioritize,
    "preempt": handle_preempt,
    "bind": handle_bind,
    "admit": handle_admit,
}
