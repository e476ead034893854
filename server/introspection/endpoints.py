"""Endpoints for people and probes: health, readiness, metrics, the served
routes, the policies, cached nodes, explanations and recent decisions."""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from engine.reports.explain import explain

from server.http.responses import HTTPProblem, json_response, read_json
from server.introspection.documents import Answer, LiveSource
from server.state import ServerState
from server.http.wire import WireError, decode_extender_args


log = logging.getLogger("kpe.introspection")
Endpoint = Callable[[Request], Awaitable[Response]]


def guarded(endpoint: Endpoint) -> Endpoint:
    """An unexpected exception becomes a JSON 500 that names it. Left to Starlette, it
    would be a plain-text 500 followed by uvicorn closing the connection."""

    @functools.wraps(endpoint)
    async def wrapper(request: Request) -> Response:
        try:
            return await endpoint(request)
        except Exception as exc:  # noqa: BLE001 - answer, log, keep the connection
            log.exception("internal error in %s", request.url.path)
            return json_response({"error": f"kpe internal error in {request.url.path}: {type(exc).__name__}: {exc}"}, 500)

    return wrapper


def _state(request: Request) -> ServerState:
    state: ServerState = request.app.state.kpe
    return state


@guarded
async def healthz(request: Request) -> Response:
    return PlainTextResponse("ok")


@guarded
async def readyz(request: Request) -> Response:
    state = _state(request)
    problems = []
    if not state.store.ready:
        problems.append("policies not loaded")
    if state.cache is not None and not state.cache.synced.is_set():
        problems.append("node and pod cache not synced yet")
    elif state.cache is not None and (lost := state.cache.disconnection()) is not None:
        # Past its first sync too: from a watch break until the cache has caught up, it may
        # miss any change, and the verbs do not answer node names from it.
        problems.append(f"node and pod cache not connected to the API server for {lost[0]:.0f} s ({lost[1]})")
    if problems:
        return PlainTextResponse("not ready: " + "; ".join(problems), status_code=503)
    # Ready all the same with these: a replica that refused to serve would fail every pod
    # kube-scheduler sends it, for one policy's sake.
    notes = []
    if state.store.degraded is not None:
        # The fallback set keeps the protection that was served (PolicyStore.fall_back).
        notes.append(f"on a fallback set: {state.store.degraded}")
    if state.cache is not None and (unread := state.cache.configmaps.problems()):
        listed = "; ".join(f"namespace {ns}: {why}" for ns, why in unread.items())
        notes.append(f"policy params not read ({listed}): the policies taking params from there act on their parameterNotFoundAction")
    return PlainTextResponse("ok" + "".join(f", {note}" for note in notes))


@guarded
async def metrics(request: Request) -> Response:
    state = _state(request)
    current = state.store.current
    state.metrics.set_generation(current.generation, len(current))
    last = state.store.last
    state.metrics.load_errors.set(len(last.errors) if last and not last.ok else 0)
    state.metrics.fallback.set(0 if state.store.degraded is None else 1)
    state.metrics.count_reloads(state.store.reloads)
    if state.elector is not None:
        state.metrics.leader.set(1 if state.elector.is_leader else 0)
    if state.cache is not None:
        for kind in ("node", "pod"):
            state.metrics.cache_lag.labels(kind).set(state.cache.lag_seconds(kind))
    return Response(state.metrics.render(), media_type=state.metrics.content_type)


@guarded
async def services(request: Request) -> Response:
    routes = []
    for route in request.app.routes:
        methods = sorted(getattr(route, "methods", None) or [])
        routes.append({"path": route.path, "methods": [m for m in methods if m != "HEAD"], "name": route.name})
    return json_response({"routes": routes})


def _source(request: Request) -> LiveSource:
    return LiveSource(_state(request))


def _answer(answer: Answer) -> Response:
    status, document = answer
    return json_response(document, status)


@guarded
async def policies(request: Request) -> Response:
    return _answer(await _source(request).policies())


@guarded
async def node(request: Request) -> Response:
    state = _state(request)
    name = request.path_params["name"]
    if state.cache is None:
        return json_response({"error": "kpe runs without cluster access: it has no node cache"}, 503)
    found = state.cache.node(name)
    if found is None:
        return json_response({"error": f"node {name} is not in kpe's cache"}, 404)
    cache = state.cache
    # nodeInfo is rebuilt only in the evaluation worker (see server.http.worker).
    info = await state.worker.run(lambda: cache.node_info.get(name)) or {}
    summary = {"podCount": info.get("podCount", 0), "requested": info.get("requested", {}), "pods": [
        f"{(p.get('metadata') or {}).get('namespace')}/{(p.get('metadata') or {}).get('name')}" for p in info.get("pods", [])
    ]}
    return json_response({"node": found, "nodeInfo": summary})


@guarded
async def explain_endpoint(request: Request) -> Response:
    state = _state(request)
    policy_set = state.store.current
    try:
        args = decode_extender_args(await read_json(request, state.settings.max_body_bytes), "explain")
    except WireError as exc:
        return json_response({"error": f"invalid explain request: {exc}"}, 400)
    except HTTPProblem as exc:
        return json_response({"error": exc.message}, exc.status)
    unknown: dict[str, str] = {}
    if args.nodes is not None:
        nodes = args.nodes
    elif state.cache is None:
        return json_response({"error": "NodeNames need kpe's node cache; send Nodes instead"}, 400)
    else:
        nodes, unknown = state.resolve_nodes(args.node_names or [], "explain")
    pods = state.cache.pods() if state.cache is not None else []
    # Without a cache, nodeInfo is unknown, as it is to the filter verb: an empty
    # mapping says so (None would make explain count the pods it was given: none).
    latest = state.reservations.latest() if state.reservations is not None else None
    report = await state.worker.run(
        lambda: explain(
            policy_set, args.pod, nodes, cluster_pods=pods, node_info=state.node_info() if state.cache is not None else {},
            homes=latest.homes if latest is not None else None, counts=state.counts(), namespaces=state.namespaces(), dra=state.dra(),
        )
    )
    data = report.to_dict()
    data["unknownNodes"] = unknown
    data["text"] = report.render()
    return json_response(data)


@guarded
async def explain_pod(request: Request) -> Response:
    """``GET /apis/v1/explain?pod=NAMESPACE/NAME``: ``kpe explain pod`` for a pod in kpe's
    cache, with the serving policy set and the cache's nodes and ``nodeInfo``, as the
    extender verbs see them (``engine.reports.diagnosis.diagnose``)."""
    wanted = request.query_params.get("pod", "")
    namespace, _, name = wanted.partition("/")
    if not namespace or not name or "/" in name:
        return json_response({"error": f"pod must be NAMESPACE/NAME, not {wanted!r}"}, 400)
    return _answer(await _source(request).pod(namespace, name))


@guarded
async def decisions(request: Request) -> Response:
    state = _state(request)
    query = request.query_params
    try:
        limit = int(query.get("limit", "100"))
    except ValueError:
        return json_response({"error": "limit must be an integer"}, 400)
    return _answer(await LiveSource(state).decisions(verb=query.get("verb"), pod=query.get("pod"), limit=limit))


@guarded
async def pending(request: Request) -> Response:
    """Every pod not yet bound, with the gates kpe holds it at, kpe's last filter of it and
    kube-scheduler's PodScheduled condition (what the web view groups)."""
    return _answer(await _source(request).pending())


@guarded
async def reservations(request: Request) -> Response:
    """Each reservation's slots, where they are, free or used by which pod."""
    return _answer(await _source(request).reservations())


@guarded
async def gated(request: Request) -> Response:
    """The pods kpe is holding at its gates, with each policy's current message."""
    state = _state(request)
    if state.gates is None:
        return json_response({"error": "the gate controller runs only with cluster access", "pods": []}, 503)
    leader = state.elector.is_leader if state.elector is not None else False
    state.metrics.leader.set(1 if leader else 0)
    policy_set = state.store.current
    pods = [
        {
            "namespace": held.namespace,
            "name": held.name,
            "waitingSeconds": round(max(0.0, time.time() - held.since), 1),
            "gates": [{"gate": gate, "policy": policy_set.gates[gate].name if gate in policy_set.gates else None, "message": message} for gate, message in sorted(held.gates.items())],
        }
        for held in sorted(state.gates.held.values(), key=lambda h: (h.namespace, h.name))
    ]
    return json_response({"leader": leader, "identity": state.elector.identity if state.elector else None, "pods": pods})
