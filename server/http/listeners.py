"""Where kpe listens: one listener per surface, each with its own TLS and client authentication.

kpe has four surfaces, and they are not called by the same clients:

- ``scheduler``: the extender verbs under ``--prefix``, called by kube-scheduler
  (``--port``; ``--tls-client-ca`` requires its client certificate);
- ``webhook``: ``/admission/pods`` and ``/admission/policies``, called by kube-apiserver (``--webhook-port``;
  ``--webhook-client-ca``);
- ``introspection``: ``/apis/v1/...`` and the web view ``/ui/``, which list pods and decisions, for people
  (``--introspection-port``, on ``--introspection-host``, loopback by default:
  reach it with ``kubectl port-forward``, which RBAC guards);
- ``health``: ``/healthz``, ``/readyz`` and ``/metrics``, for probes and Prometheus
  (``--health-port``, plain HTTP).

A surface whose port is 0 is served on ``--port`` with the extender verbs (the
single-listener layout of a laptop or a test). A surface with a port of its own
is served only there: asking another listener for it is a 404.

uvicorn runs one server per listener in one event loop; the first owns the
app's lifespan and the signals. Requests are parsed by llhttp (httptools, uvicorn's
C parser) rather than h11, whose pure-Python parsing and writing cost more of kpe's
CPU per scheduled pod than the verbs' hits. uvicorn's protocol is extended with a
time limit and a size limit on a request's headers: it has neither, so a client
that opens connections and never finishes a request would hold them for ever, and
one that never ends a header would grow it without bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import threading
from http import HTTPStatus
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import orjson
import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from server.settings import Settings

SCHEDULER, WEBHOOK, INTROSPECTION, HEALTH = "scheduler", "webhook", "introspection", "health"
SURFACES = (SCHEDULER, WEBHOOK, INTROSPECTION, HEALTH)
WEBHOOK_PATH = "/admission/pods"
POLICY_WEBHOOK_PATH = "/admission/policies"  # SchedulingPolicy and Reservation writes (server.admission.policies)
HEALTH_PATHS = frozenset(("/healthz", "/readyz", "/metrics"))
SHUTDOWN_TIMEOUT_S = 5
# A request's line and headers, at most: kube-scheduler's and the API server's are a few hundred
# bytes. The same bound uvicorn gives h11 (h11_max_incomplete_event_size).
MAX_HEADER_BYTES = 16 * 1024
# How long a refused connection is read from, after its answer, before it is closed.
LINGER_S = 2.0


def surface_of(path: str, prefix: str) -> str:
    """Which surface a request path belongs to."""
    if path in (WEBHOOK_PATH, POLICY_WEBHOOK_PATH):
        return WEBHOOK
    if path in HEALTH_PATHS:
        return HEALTH
    if path.startswith("/apis/"):
        return INTROSPECTION
    return SCHEDULER if path.startswith(prefix.rstrip("/") + "/") else INTROSPECTION


@dataclass(frozen=True)
class Listener:
    surfaces: frozenset[str]
    host: str
    port: int
    tls: bool
    client_ca: str = ""

    @property
    def name(self) -> str:
        return "+".join(s for s in SURFACES if s in self.surfaces)


def plan(settings: Settings) -> list[Listener]:
    """The listeners ``settings`` ask for; the first serves the extender verbs."""
    own = {WEBHOOK: settings.webhook_port, INTROSPECTION: settings.introspection_port, HEALTH: settings.health_port}
    main = frozenset({SCHEDULER} | {s for s, port in own.items() if not port})
    listeners = [Listener(main, settings.host, settings.port, settings.tls, settings.tls_client_ca)]
    if settings.webhook_port:
        listeners.append(Listener(frozenset({WEBHOOK}), settings.host, settings.webhook_port, settings.tls, settings.webhook_client_ca))
    if settings.introspection_port:
        listeners.append(Listener(frozenset({INTROSPECTION}), settings.introspection_host, settings.introspection_port, settings.tls))
    if settings.health_port:
        listeners.append(Listener(frozenset({HEALTH}), settings.host, settings.health_port, False))
    return listeners


def off_surface(by_port: Mapping[int, frozenset[str]], scope: Any, prefix: str) -> str:
    """Why a request is not served on the listener it came to ("" when it is): each surface
    is served only on its own listener. ``by_port`` is ``ServerState.surfaces_by_port``,
    filled in when the sockets are bound (the OS may choose the ports); empty, one listener
    serves all."""
    if not by_port:
        return ""
    server = scope.get("server")
    allowed = by_port.get(server[1]) if server else None
    surface = surface_of(scope["path"], prefix)
    if allowed is None or surface in allowed:
        return ""
    return f"{scope['path']} is not served on this port (it is on kpe's {surface} listener)"


class SurfaceGuard:
    """Serves a request only on the listener of its surface (a JSON 404 elsewhere)."""

    def __init__(self, app: Any, *, prefix: str) -> None:
        self.app = app
        self.prefix = prefix

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        refused = off_surface(scope["app"].state.kpe.surfaces_by_port, scope, self.prefix) if scope["type"] == "http" else ""
        if refused:
            body = orjson.dumps({"Error": refused})
            await send({"type": "http.response.start", "status": 404, "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})
            return
        await self.app(scope, receive, send)


class CoalescedWrites:
    """A transport whose writes within one event-loop step leave as one write.

    uvicorn's protocols write a response's head and its body separately, and on
    a TCP_NODELAY socket each write is its own segment: the client wakes for the
    head, then again for the body. Under the real kube-scheduler, those two writes
    were a third of kpe's CPU per scheduled pod (on loopback the kernel does the
    receiving side's work in the writer's system call). Joined, a response is one
    segment (one TLS record with TLS)."""

    __slots__ = ("_transport", "_loop", "_pending")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] = []

    def write(self, data: bytes) -> None:
        if not data:
            return
        if not self._pending:
            self._loop.call_soon(self.flush)
        self._pending.append(data)

    def flush(self) -> None:
        if not self._pending:
            return
        data = self._pending[0] if len(self._pending) == 1 else b"".join(self._pending)
        self._pending.clear()
        self._transport.write(data)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class _Handshaken(asyncio.Protocol):
    """What a TLS connection says between the end of its handshake and kpe's protocol taking it
    over (asyncio may hand it on in the same step as the handshake's last bytes), given to
    that protocol when it does, in order."""

    def __init__(self) -> None:
        self.protocol: asyncio.Protocol | None = None
        self.said: list[bytes] = []
        self.lost: tuple[Exception | None] | None = None

    def data_received(self, data: bytes) -> None:
        if self.protocol is not None:
            self.protocol.data_received(data)
        else:
            self.said.append(data)

    def eof_received(self) -> bool | None:
        return self.protocol.eof_received() if self.protocol is not None else None

    def connection_lost(self, exc: Exception | None) -> None:
        if self.protocol is not None:
            self.protocol.connection_lost(exc)
        else:
            self.lost = (exc,)

    def hand_over(self, protocol: asyncio.Protocol) -> None:
        self.protocol = protocol
        for data in self.said:
            protocol.data_received(data)
        self.said.clear()
        if self.lost is not None:
            protocol.connection_lost(self.lost[0])


class GuardedHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with limits on how long a TLS handshake and then a
    request's head may take to arrive (from the connection's start or the end of the previous
    response) and on how large a head may grow, and each response written at once
    (``CoalescedWrites``).

    Every byte of a head is counted before the parser sees it, however the head arrives:
    a read is cut where its head ends (at its blank line), and what follows is a body whose
    length the head gave, or the next head. A 64 KiB head in one read used to go through,
    since only reads that completed no head were counted. Only after a chunked body, whose end
    only the parser finds, is a head counted after it is parsed, and then counted high (with
    the framing of the chunks in the same read).

    The TLS handshake is made here, not in asyncio's server: there it has 60 s, whatever
    uvicorn is told, and a client that never finishes it would hold its connection that long.
    """

    header_timeout: float = 10.0
    max_header_bytes: int = MAX_HEADER_BYTES
    tls: ssl.SSLContext | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._header_timer: asyncio.TimerHandle | None = None
        self._head: int | None = 0  # bytes of the coming request's head so far; None: its body
        self._tail = b""  # the last bytes of the head so far, for a blank line cut between reads
        self._body_left: int | None = 0  # bytes of the body still to come; None: chunked
        self._body_seen = 0  # body bytes given to the application, ever
        self._completed = 0  # requests read whole, ever
        self._refusal: bytes | None = None  # a refusal waiting for the response in progress
        self._handshake: asyncio.Task[None] | None = None
        if self.tls is None:
            self._serve(transport)
            return
        transport.pause_reading()  # the ClientHello is for start_tls, a step later
        self.connections.add(self)  # uvicorn's shutdown ends the handshake too
        self._handshake = self.loop.create_task(self._start_tls(transport, self.tls))

    async def _start_tls(self, transport: asyncio.Transport, context: ssl.SSLContext) -> None:
        early = _Handshaken()
        try:
            tls = await self.loop.start_tls(transport, early, context, server_side=True, ssl_handshake_timeout=self.header_timeout)
        except OSError:  # too slow (ConnectionAbortedError), refused (ssl.SSLError) or gone
            self.connections.discard(self)
            return
        except asyncio.CancelledError:
            self.connections.discard(self)
            raise
        if tls is None:  # gone as the handshake ended
            self.connections.discard(self)
            return
        tls.set_protocol(self)
        self._serve(tls)
        early.hand_over(self)

    def _serve(self, transport: asyncio.Transport) -> None:
        super().connection_made(transport)
        self.transport = CoalescedWrites(transport, self.loop)  # type: ignore[assignment]
        self._arm()

    def shutdown(self) -> None:
        if self._handshake is not None and not self._handshake.done():
            self._handshake.cancel()
            return
        super().shutdown()

    def data_received(self, data: bytes) -> None:
        if self._refusal is not None or self.transport.is_closing():
            return
        if self._header_timer is None and self._head is not None and (self.cycle is None or self.cycle.response_complete):
            self._arm()  # the first bytes of the next request on a kept-alive connection
        rest: bytes | memoryview = data  # a view once cut: a body is not copied to be fed
        while rest:
            piece: bytes | memoryview
            chunked = False
            if self._head is not None:
                head = rest if isinstance(rest, bytes) else bytes(rest)  # a head behind a body in one read
                end = self._head_end(head)
                if self._head + end > self.max_header_bytes:
                    self._refuse(431, f"request headers over {self.max_header_bytes} bytes")
                    return
                self._head += end
                self._tail = (self._tail + head[max(0, end - 3) : end])[-3:]
                piece, rest = (head, b"") if end == len(head) else (head[:end], memoryview(head)[end:])
            elif not self._body_left:  # chunked, or a body whose length was lost track of (below)
                chunked = True
                piece, rest = rest, b""
            else:
                end = min(self._body_left, len(rest))
                self._body_left -= end
                piece, rest = (rest, b"") if end == len(rest) else (rest[:end], memoryview(rest)[end:])
            seen, completed = self._body_seen, self._completed
            super().data_received(piece)  # type: ignore[arg-type]  # httptools reads any buffer
            if self.transport.is_closing() or self.parser is None or self.parser.should_upgrade():
                return
            if chunked and self._completed != completed:
                # What came after the body in this read is a head of unknown length: at most
                # what was not body. A head that ended in it too has a body of which an unknown
                # part came with it: fed whole, as this one was.
                after = len(piece) - (self._body_seen - seen)
                if after > self.max_header_bytes:
                    self._refuse(431, f"request headers over {self.max_header_bytes} bytes")
                    return
                if self._head is not None:
                    self._head, self._tail = after, bytes(piece[-3:])
                else:
                    self._body_left = None

    def _head_end(self, data: bytes) -> int:
        """How many bytes of ``data`` the head takes: up to its blank line, or all of them."""
        joined = self._tail + data[:3]
        found = joined.find(b"\r\n\r\n")
        if found >= 0:
            return found + 4 - len(self._tail)
        found = data.find(b"\r\n\r\n")
        return found + 4 if found >= 0 else len(data)

    def on_headers_complete(self) -> None:
        self._head, self._tail = None, b""  # the body has its own limits
        self._body_left = 0
        for name, value in self.headers:
            if name == b"transfer-encoding":
                self._body_left = None
                break
            if name == b"content-length":
                self._body_left = int(value)  # llhttp has checked it
        self._disarm()
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        self._body_seen += len(body)
        super().on_body(body)

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._head, self._body_left = 0, 0
        self._completed += 1

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self._refusal is not None and not self.transport.is_closing():
            self._send_refusal()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        self._header_timer = self.loop.call_later(self.header_timeout, self._headers_too_slow)

    def _disarm(self) -> None:
        timer = getattr(self, "_header_timer", None)
        if timer is not None:
            timer.cancel()
            self._header_timer = None

    def _headers_too_slow(self) -> None:
        self._header_timer = None
        if not self.transport.is_closing():
            self.transport.close()

    def _refuse(self, status: int, message: str) -> None:
        """Answer ``status`` and close; after the response in progress, if one is (a request
        sent ahead of this head on the same connection)."""
        self._disarm()
        body = orjson.dumps({"Error": message})
        head = f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\nconnection: close\r\n\r\n"
        self._refusal = head.encode("latin-1") + body
        if self.cycle is None or self.cycle.response_complete:
            self._send_refusal()
        else:
            self.flow.pause_reading()

    def _send_refusal(self) -> None:
        assert self._refusal is not None
        self.transport.write(self._refusal)
        if not self.transport.can_write_eof():  # TLS: its close flushes and says goodbye
            self.transport.close()
            return
        # Closed with the rest of the refused head unread, the kernel would reset the connection
        # and the client could lose the answer with it: the rest is read and dropped a while.
        transport: CoalescedWrites = self.transport  # type: ignore[assignment]
        transport.flush()
        transport.write_eof()
        self.flow.resume_reading()
        self.loop.call_later(LINGER_S, transport.close)


def protocol_class(settings: Settings, tls: ssl.SSLContext | None = None) -> type[GuardedHttpProtocol]:
    return type("KpeHttpProtocol", (GuardedHttpProtocol,), {"header_timeout": settings.header_timeout_s, "tls": tls})


def config(app: Any, settings: Settings, listener: Listener, *, lifespan: bool) -> uvicorn.Config:
    options: dict[str, Any] = {
        "log_config": None,
        "access_log": False,
        "lifespan": "on" if lifespan else "off",
        "http": protocol_class(settings),
        # kpe serves no WebSocket: uvicorn would otherwise import a WebSocket implementation
        # (21 modules, 0.4 MiB of every replica's memory) for upgrades nothing asks for.
        "ws": "none",
        # kpe sits behind no proxy: X-Forwarded-* from a local client would only mislead, and
        # the middleware is one more layer on every scheduler request.
        "proxy_headers": False,
        # Longer than kube-scheduler's Go client keeps idle connections (90 s): were kpe to close
        # first, a request sent on the closing connection would fail with EOF, and Go does not retry a POST.
        "timeout_keep_alive": settings.keep_alive_s,  # uvicorn types it int; call_later takes a float
        # On a stop, an idle TLS connection whose client does not answer the close would hold
        # the shutdown for asyncio's 30 s TLS timeout; the Lease is released after it.
        "timeout_graceful_shutdown": SHUTDOWN_TIMEOUT_S,
    }
    if listener.tls:
        options.update(tls_options(settings, client_ca=listener.client_ca, app=app))
    return uvicorn.Config(app, **options)


def tls_options(settings: Settings, *, client_ca: str, app: Any = None) -> dict[str, Any]:
    """uvicorn's TLS options for one listener; with ``app``, the serving certificate keeps
    uvicorn's SSL context, to reload it when the files change."""
    options: dict[str, Any] = {"ssl_certfile": settings.tls_cert, "ssl_keyfile": settings.tls_key}
    certificate = app.state.kpe.certificate if app is not None else None
    if certificate is not None:
        options.update(ssl_context_factory=certificate.context_factory)
    if client_ca:
        options.update(ssl_ca_certs=client_ca, ssl_cert_reqs=ssl.CERT_REQUIRED)
    return options


def bind(listener: Listener) -> socket.socket:
    family = socket.AF_INET6 if ":" in listener.host else socket.AF_INET
    # IPPROTO_TCP, not the default 0: asyncio sets TCP_NODELAY only on sockets that say they are
    # TCP, and without it a response's second write waits for the client's delayed ACK (40 ms).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((listener.host, listener.port))
    sock.listen(2048)
    sock.setblocking(False)
    return sock


class _Follower(uvicorn.Server):
    """A server that leaves signals to the first one."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class Listeners:
    """Bound sockets and their uvicorn servers; ``urls`` once bound."""

    def __init__(self, app: Any, settings: Settings) -> None:
        self.app = app
        self.settings = settings
        self.plan = plan(settings)
        self.sockets = [bind(listener) for listener in self.plan]
        if len(self.plan) > 1:
            app.state.kpe.surfaces_by_port = {sock.getsockname()[1]: listener.surfaces for sock, listener in zip(self.sockets, self.plan)}
        self.servers = [
            (uvicorn.Server if i == 0 else _Follower)(config(app, settings, listener, lifespan=i == 0))
            for i, listener in enumerate(self.plan)
        ]
        for server in self.servers:
            server.config.load()  # every TLS context exists before the lifespan starts the certificate watch
            if server.config.ssl is not None:
                # uvicorn's context (the one the certificate reloads), used by kpe's protocol,
                # which times the handshake: asyncio's server would give it 60 s.
                server.config.http_protocol_class = protocol_class(settings, tls=server.config.ssl)
                server.config.ssl = None

    def urls(self) -> dict[str, str]:
        """Surface -> base URL (with the port the OS chose for a port 0)."""
        out = {}
        for sock, listener in zip(self.sockets, self.plan):
            host, port = sock.getsockname()[:2]
            url = f"{'https' if listener.tls else 'http'}://{host if ':' not in host else f'[{host}]'}:{port}"
            out.update({surface: url for surface in listener.surfaces})
        return out

    async def serve(self) -> int:
        """Serve until stopped; 0, or uvicorn's exit code when the app's lifespan failed (say
        by ``run`` once the loop is closed: a ``SystemExit`` raised inside the loop would leave
        its task's exception unretrieved, and asyncio would log it with a traceback)."""
        first, rest = self.servers[0], self.servers[1:]

        async def leader() -> int:
            try:
                await first.serve(sockets=[self.sockets[0]])
            except SystemExit as exc:  # uvicorn's way of saying the lifespan's startup failed
                return exc.code if isinstance(exc.code, int) else 1
            return 0

        leading = asyncio.create_task(leader())
        followers: list[asyncio.Task[None]] = []
        try:
            # The followers take requests only once the app's lifespan has run in the first
            # server: before that, /readyz on the health listener would answer without a cache.
            while not first.started and not leading.done():
                await asyncio.sleep(0.01)
            if not leading.done():
                followers = [asyncio.create_task(s.serve(sockets=[sock])) for s, sock in zip(rest, self.sockets[1:])]
            return await leading
        finally:
            for server in rest:
                server.should_exit = True
            await asyncio.gather(*followers, return_exceptions=True)

    def stop(self) -> None:
        for server in self.servers:
            server.should_exit = True

    @property
    def started(self) -> bool:
        return all(s.started for s in self.servers)


def run(app: Any, settings: Settings) -> None:
    """``kpe serve``: every listener until a signal; ``SystemExit`` when the app could not start."""
    code = asyncio.run(Listeners(app, settings).serve())
    if code:
        raise SystemExit(code)


@contextlib.contextmanager
def running(app: Any, settings: Settings) -> Iterator[dict[str, str]]:
    """Serve in a background thread (tests): yields surface -> URL."""
    listeners = Listeners(app, settings)
    thread = threading.Thread(target=lambda: asyncio.run(listeners.serve()), daemon=True)
    thread.start()
    try:
        import time

        deadline = time.monotonic() + 15
        while not listeners.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("kpe did not start")
            time.sleep(0.01)
        yield listeners.urls()
    finally:
        listeners.stop()
        thread.join(timeout=10)
