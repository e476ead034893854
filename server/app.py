"""The Starlette application: routes, and a lifespan that owns every background task.

Background work (policy reload watcher, node and pod informers) starts in the
lifespan and stops with it; nothing runs from module globals, so several apps
can live in one process.
"""

from __future__ import annotations

import asyncio
import gc
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.middleware import Middleware
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from engine.policy.compiler import CostLimits
from engine.cluster.inflight import InFlight
from engine.equivalence.classes import EquivalenceCache
from engine.equivalence.warming import Exemplars, Warming

from server.introspection import endpoints as introspection, web
from server.introspection.documents import LiveSource
from server.http.certificate import ServingCertificate
from server.telemetry.decisionlog import DecisionLog
from server.http.responses import json_response
from server.verbs.endpoints import VERBS
from server.http.listeners import POLICY_WEBHOOK_PATH, WEBHOOK_PATH, SurfaceGuard
from server.telemetry.logs import new_request_id, request_id
from server.reload.store import NoConfigMaps, PolicyStore
from server.settings import NO_POLICIES, Settings, env_name
from server.state import ServerState
from server.verbs.endpoints import VerbDispatch, VerbEndpoint
from server.verbs.wholenodes import WholeNodes
from server.verbs import warming as warm_classes
from server.admission.webhook import handle_admission
from server.admission.policies import handle_policy_admission


log = logging.getLogger("kpe.server")
LEASE_RELEASE_TIMEOUT_S = 5.0


class RequestIdMiddleware:
    """Takes ``X-Request-Id`` from the caller or makes one; logs and the response carry it."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = ""
        for key, value in scope.get("headers", []):
            if key == b"x-request-id":
                rid = value.decode("latin-1")[:64]
        rid = rid or new_request_id()
        token = request_id.set(rid)

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                message["headers"] = list(message["headers"]) + [(b"x-request-id", rid.encode("latin-1"))]
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            request_id.reset(token)


async def freeze_after_sync(cache: Any, stop: asyncio.Event, *, every_s: float = 60.0, release: Callable[[int], Any] | None = None) -> None:
    """Once the first list is in, move everything alive to the collector's permanent
    generation: a 5,000-node, 15,000-pod cache is about half a million objects, and a
    full collection walking them measured 223 ms, a stall inside a scheduler request.
    Objects still go when their last reference does; only cycle detection skips them.

    Then give the C heap's free pages back to the system, after the sync and every
    ``every_s`` from then on: glibc keeps what the first list's pages and a burst's
    requests freed (4 of 107 MiB after a sync of 20,000 lean pods), and under a
    container's memory limit pages kept and unused count as used. ``release``: instead of
    ``malloc_trim``."""
    await cache.synced.wait()
    gc.collect()
    gc.freeze()
    release = release or _heap_release()
    while release is not None:
        release(0)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), every_s)
        if stop.is_set():
            return


def _heap_release() -> Any:
    """glibc's ``malloc_trim`` (a fraction of a millisecond), or None where the C library has
    none (musl): there the heap is left as the allocator keeps it."""
    import ctypes

    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None


async def serve_cluster_policies(state: ServerState, stop: asyncio.Event) -> list[asyncio.Task[Any]]:
    """``--policy-source cluster``: list and watch kpe's objects, load the first set from them,
    then reload on every change. A first set that is refused does not stop start-up: kpe serves
    the last good set kept in the cluster, or the objects that compile (``PolicyStore.fall_back``)."""
    from engine.errors import PolicyLoadError

    from server.cluster import lastgood
    from server.cluster.informer import Informer
    from server.cluster.policyobjects import PolicyObjects, PolicySourceError

    settings, store, client = state.settings, state.store, state.client
    if client is None:
        raise PolicySourceError("--policy-source cluster needs cluster access: no credentials were found (--kubeconfig, or run in a pod)")
    objects = state.policy_objects = PolicyObjects(
        lambda kind, path, sink: Informer(kind, path, client=client, sink=sink, metrics=state.metrics, backoff_max=settings.relist_backoff_max_s)
    )
    store.objects = objects
    try:
        await objects.start(client, stop)
        try:
            store.load_initial()
        except PolicyLoadError as refused:
            store.fall_back(refused, await lastgood.read(client, settings.lease_namespace))
    except BaseException:
        await objects.close()
        raise
    objects.dirty.clear()  # the first list is what the first set was loaded from
    return [asyncio.create_task(objects.serve(store, stop), name="policy-objects-reload")]


async def connect_cluster(settings: Settings) -> Any:
    """A Kubernetes client, or None when kpe runs without cluster access."""
    if settings.cluster == "off":
        return None
    from server.cluster.kube import KubeClient

    return await KubeClient.connect(kubeconfig=settings.kubeconfig, required=settings.cluster == "on")


def start_gate_controller(state: ServerState, stop: asyncio.Event) -> list[asyncio.Task[Any]]:
    """The Lease campaign and the controllers --controllers switched on, which act while this replica leads."""
    from server.admission.gates import GateController
    from server.cluster.leader import LeaderElector, default_identity
    from server.cluster.policystatus import StatusWriter
    from server.reservations.controller import ReservationController

    settings = state.settings
    assert state.client is not None, "the gate controller runs only with cluster access"
    elector = LeaderElector(
        state.client,
        namespace=settings.lease_namespace,
        name=settings.lease_name,
        identity=settings.identity or default_identity(),
        lease_duration_s=settings.lease_duration_s,
    )
    state.elector = elector
    tasks = [asyncio.create_task(elector.run(stop), name="leader-election")]
    if "gates" in settings.controller_set:
        gates = state.gates = GateController(state, resync_s=settings.gate_resync_s, debounce_s=settings.gate_debounce_ms / 1000)
        tasks.append(asyncio.create_task(gates.run(stop, elector.leading), name="gate-controller"))
    if "reservations" in settings.controller_set:
        reservations = state.reservations = ReservationController(state, resync_s=settings.gate_resync_s or 30.0)
        tasks.append(asyncio.create_task(reservations.run(stop, elector.leading), name="reservation-controller"))
    if "status" in settings.controller_set and state.policy_objects is not None:
        from server.cluster.lastgood import LastGoodKeeper

        writer = StatusWriter(state.client, state.policy_objects, state.store)
        tasks.append(asyncio.create_task(writer.run(stop, elector.leading), name="policy-status"))
        keeper = state.last_good = LastGoodKeeper(state.client, state.store, namespace=settings.lease_namespace)
        tasks.append(asyncio.create_task(keeper.run(stop, elector.leading), name="last-good-policies"))
    if settings.policy_reports:
        from server.reports.controller import AuditReporter

        reporter = AuditReporter(state, interval_s=settings.policy_report_interval_s)
        tasks.append(asyncio.create_task(reporter.run(stop, elector.leading), name="policy-reports"))
    return tasks


BIND_OFF = f"kpe's bind verb is off: start kpe with --bind ({env_name('bind')}=true) to serve it"


async def _json_http_error(request: Request, exc: Exception) -> Response:
    """Unknown paths and wrong methods answer JSON, like every other error of kpe's."""
    assert isinstance(exc, HTTPException)
    settings: Settings = request.app.state.kpe.settings
    if exc.status_code == 404 and not settings.bind and request.url.path == f"{settings.prefix.rstrip('/')}/bind":
        # A scheduler whose bindVerb kpe does not serve: a bare Not Found would send its
        # operator checking the URL, when the fix is a flag of kpe's.
        return json_response({"Error": BIND_OFF}, 404)
    return json_response({"Error": f"{request.method} {request.url.path}: {exc.detail}"}, exc.status_code, headers=dict(exc.headers or {}))


def create_app(settings: Settings, *, store: PolicyStore | None = None, client: Any = None, connect: bool = True) -> Starlette:
    """The kpe app. ``client`` injects a Kubernetes client (tests); otherwise the
    lifespan connects according to ``settings.cluster`` unless ``connect`` is False."""
    cluster_source = settings.policy_source == "cluster"
    if store is None and not settings.policies and not cluster_source:
        # An empty path would load whatever lies in the working directory.
        raise ValueError(NO_POLICIES)
    store = store or PolicyStore(
        settings.policies,
        allow_empty=settings.allow_empty_policies,
        cost_limits=CostLimits(settings.cel_cost_limit, settings.cel_admission_cost_limit),
        excluded_namespaces=settings.excluded_namespace_set,
    )
    if store.params is None:
        # paramsFrom's ConfigMaps: none found until the cluster cache watches them (it
        # becomes the store's source), so such a policy starts denying, not on its defaults.
        store.params = NoConfigMaps()
    if not store.ready and not cluster_source:
        store.load_initial()  # the cluster's objects are loaded once listed, in the lifespan
    state = ServerState(
        settings=settings,
        store=store,
        decisions=DecisionLog(settings.decision_log_size, settings.decision_log_bytes),
        client=client,
        equivalence=EquivalenceCache(classes=settings.equivalence_classes),
        certificate=ServingCertificate(settings.tls_cert, settings.tls_key) if settings.tls else None,
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        stop = asyncio.Event()
        tasks: list[asyncio.Task[Any]] = []
        if not cluster_source:
            tasks.append(asyncio.create_task(store.watch(debounce_ms=settings.reload_debounce_ms, stop=stop), name="policy-watch"))
        if state.certificate is not None and state.certificate.context is not None:
            tasks.append(asyncio.create_task(state.certificate.watch(stop=stop, debounce_ms=settings.reload_debounce_ms), name="certificate-watch"))
        if state.client is None and connect:
            state.client = await connect_cluster(settings)
        if cluster_source and not store.ready:
            try:
                tasks += await serve_cluster_policies(state, stop)
            except Exception as exc:
                # Said by `kpe serve` once the listeners have stopped (server.cli.serve).
                app.state.startup_error = exc
                stop.set()
                for task in tasks:
                    task.cancel()
                if state.client is not None and client is None:
                    await state.client.close()
                raise
        if state.client is None:
            log.warning(
                "no cluster credentials: serving whole-node requests only; requests with node names "
                "(nodeCacheCapable: true), victims by UID and bind will be answered with an error"
            )
            state.whole_nodes = WholeNodes()  # the nodes kube-scheduler sends, for the preempt verb
        else:
            from server.cluster.cache import ClusterCache

            state.client.measure(state.metrics.kube_api_requests)
            controllers = settings.controller_set
            requeue = None
            if "requeue" in controllers and settings.requeue_rate > 0:
                from server.admission.requeue import Requeuer

                requeue = state.requeue = Requeuer(rate=settings.requeue_rate)
            also_keep = None
            if settings.policy_reports:
                from engine.reports.audit import audit_projection

                also_keep = audit_projection  # bound pods keep what Audit rules read of them: the reports judge every pod
            state.cache = ClusterCache(
                state.client, metrics=state.metrics, backoff_max=settings.relist_backoff_max_s, policies=store, in_flight=InFlight(ttl=settings.in_flight_s),
                also_keep=also_keep,
                on_event=requeue.pod_event if requeue is not None else None,  # a placeholder bound: its owners are retried
            )
            tasks.append(asyncio.create_task(state.cache.run(stop), name="cluster-cache"))
            tasks.append(asyncio.create_task(freeze_after_sync(state.cache, stop), name="gc-freeze"))
            if settings.warm_classes and settings.equivalence_classes > 0:
                state.warming = Warming()
                state.cache.exemplars = Exemplars(limit=state.warming.recent)
                tasks.append(asyncio.create_task(warm_classes.run(state, state.warming, stop), name="warm-classes"))
            if requeue is not None:
                state.cache.namespaces.on_change = requeue.namespace_changed
                tasks.append(asyncio.create_task(requeue.run(state, stop), name="requeue-after-reload"))
            if controllers & {"gates", "reservations", "status"} or settings.policy_reports:
                tasks += start_gate_controller(state, stop)
            else:
                # A kpe started by hand with someone's kubeconfig must not act on their cluster.
                log.info("controllers off: kpe reads the cluster but never writes to it (--controllers gates,reservations,requeue turns them on)")
        log.info("kpe serving", extra={"generation": store.current.generation, "prefix": settings.prefix, "cluster": state.client.source if state.client is not None else None, "controllers": sorted(settings.controller_set)})
        try:
            yield
        finally:
            stop.set()
            # The Lease campaign gives the Lease up on its way out, so another replica takes
            # over at once instead of after it expires: let it finish a renewal in flight
            # and the release, rather than cancel it in the middle of either.
            campaign = [t for t in tasks if t.get_name() == "leader-election"]
            if campaign:
                await asyncio.wait(campaign, timeout=LEASE_RELEASE_TIMEOUT_S)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            state.worker.close()
            state.admission_worker.close()
            if state.policy_objects is not None:
                await state.policy_objects.close()
            if state.client is not None and client is None:
                await state.client.close()

    prefix = settings.prefix.rstrip("/")
    # Binding changes the cluster: served only when asked for (--bind), as kube-scheduler's bindVerb is.
    served = {name: handler for name, handler in VERBS.items() if name != "bind" or settings.bind}
    dispatch = VerbDispatch(None, prefix=prefix, verbs=served)  # for routes only: serve() never passes a request on
    routes = [Route(f"{prefix}/{name}", VerbEndpoint(dispatch, name, handler), methods=["POST"], name=name) for name, handler in served.items()]
    routes += [
        Route("/healthz", introspection.healthz, methods=["GET"]),
        Route("/readyz", introspection.readyz, methods=["GET"]),
        Route("/metrics", introspection.metrics, methods=["GET"]),
        Route("/apis/v1/__services__", introspection.services, methods=["GET"]),
        Route("/apis/v1/policies", introspection.policies, methods=["GET"]),
        Route("/apis/v1/nodes/{name}", introspection.node, methods=["GET"]),
        Route("/apis/v1/explain", introspection.explain_endpoint, methods=["POST"]),
        Route("/apis/v1/explain", introspection.explain_pod, methods=["GET"], name="explain_pod"),
        Route("/apis/v1/decisions", introspection.decisions, methods=["GET"]),
        Route("/apis/v1/gated", introspection.gated, methods=["GET"]),
        Route("/apis/v1/reservations", introspection.reservations, methods=["GET"]),
        Route("/apis/v1/pending", introspection.pending, methods=["GET"]),
        *web.routes(lambda request: LiveSource(request.app.state.kpe)),
        Route(WEBHOOK_PATH, handle_admission, methods=["POST"], name="admission"),
        Route(POLICY_WEBHOOK_PATH, handle_policy_admission, methods=["POST"], name="policy-admission"),
    ]
    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        # The verbs' POSTs are served by the first layer (server.verbs.endpoints), the rest by Starlette's stack.
        middleware=[Middleware(VerbDispatch, prefix=prefix, verbs=served), Middleware(SurfaceGuard, prefix=prefix), Middleware(RequestIdMiddleware)],
        exception_handlers={HTTPException: _json_http_error},
    )
    app.state.kpe = state
    return app
