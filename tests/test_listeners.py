"""kpe's listeners over real sockets: each surface on its own port with its own client
authentication, bind only when asked for, and connections that neither hang for ever
nor close under kube-scheduler's feet."""

from __future__ import annotations

import socket
import ssl
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import orjson
import pytest
import trustme

from server.app import create_app
from server.http.listeners import plan, running, surface_of
from server.settings import Settings

POLICIES = Path(__file__).parent / "cases" / "wire-policies.yaml"
FILTER = {"Pod": {"metadata": {"name": "p", "namespace": "demo"}}, "Nodes": {"items": [{"metadata": {"name": "node-1", "labels": {}}}]}}
REVIEW = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "u1", "operation": "DELETE"}}


def files(tmp_path: Path, ca: trustme.CA, name: str) -> tuple[str, str]:
    cert = ca.issue_cert("127.0.0.1")
    cert.cert_chain_pems[0].write_to_path(str(tmp_path / f"{name}.crt"))
    cert.private_key_pem.write_to_path(str(tmp_path / f"{name}.key"))
    return str(tmp_path / f"{name}.crt"), str(tmp_path / f"{name}.key")


def client(ca: trustme.CA, cert: tuple[str, str] | None = None) -> httpx.Client:
    context = ssl.create_default_context(cafile=None)
    ca.configure_trust(context)
    if cert is not None:
        context.load_cert_chain(*cert)
    return httpx.Client(verify=context, timeout=5)


def test_every_surface_has_its_own_port_and_client_ca_and_answers_only_there(tmp_path: Path) -> None:
    serving, scheduler_ca, apiserver_ca = trustme.CA(), trustme.CA(), trustme.CA()
    cert, key = files(tmp_path, serving, "kpe")
    scheduler_ca.cert_pem.write_to_path(str(tmp_path / "scheduler-ca.pem"))
    apiserver_ca.cert_pem.write_to_path(str(tmp_path / "apiserver-ca.pem"))
    scheduler = files(tmp_path, scheduler_ca, "scheduler")
    apiserver = files(tmp_path, apiserver_ca, "apiserver")
    settings = Settings(policies=str(POLICIES), cluster="off", port=0, tls_cert=cert, tls_key=key,
                        tls_client_ca=str(tmp_path / "scheduler-ca.pem"), webhook_port=_free(), webhook_client_ca=str(tmp_path / "apiserver-ca.pem"),
                        introspection_port=_free(), health_port=_free())
    assert settings.validate() == []
    assert [sorted(listener.surfaces) for listener in plan(settings)] == [["scheduler"], ["webhook"], ["introspection"], ["health"]]
    with running(create_app(settings), settings) as urls:
        assert set(urls) == {"scheduler", "webhook", "introspection", "health"} and len(set(urls.values())) == 4
        assert urlsplit(urls["health"]).scheme == "http"
        with client(serving, scheduler) as as_scheduler, client(serving, apiserver) as as_apiserver, client(serving) as anyone:
            assert as_scheduler.post(urls["scheduler"] + "/scheduler/filter", json=FILTER).json()["Error"] == ""
            assert as_apiserver.post(urls["webhook"] + "/admission/pods", json=REVIEW).json()["response"]["allowed"] is True
            # The wrong client certificate, or none, does not get through TLS.
            for who, url in ((as_apiserver, urls["scheduler"] + "/scheduler/filter"), (anyone, urls["scheduler"] + "/scheduler/filter"),
                             (as_scheduler, urls["webhook"] + "/admission/pods"), (anyone, urls["webhook"] + "/admission/pods")):
                with pytest.raises(httpx.TransportError):
                    who.post(url, json={})
            assert anyone.get(urls["introspection"] + "/apis/v1/policies").status_code == 200
            assert httpx.get(urls["health"] + "/healthz").text == "ok"
            assert "kpe_requests_total" in httpx.get(urls["health"] + "/metrics").text
            # Each surface only on its own listener.
            elsewhere = as_scheduler.get(urls["scheduler"] + "/apis/v1/decisions")
            assert elsewhere.status_code == 404 and "introspection listener" in elsewhere.json()["Error"]
            assert as_scheduler.post(urls["scheduler"] + "/admission/pods", json=REVIEW).status_code == 404
            assert as_scheduler.get(urls["scheduler"] + "/healthz").status_code == 404
            assert anyone.post(urls["introspection"] + "/scheduler/filter", json=FILTER).status_code == 404
            assert httpx.post(urls["health"] + "/scheduler/filter", json=FILTER).status_code == 404
    assert urlsplit(urls["introspection"]).hostname == "127.0.0.1"


def test_without_ports_of_their_own_every_surface_is_served_on_the_one_port() -> None:
    settings = Settings(policies=str(POLICIES), cluster="off", port=0)
    [listener] = plan(settings)
    assert sorted(listener.surfaces) == ["health", "introspection", "scheduler", "webhook"]
    with running(create_app(settings), settings) as urls:
        url = urls["scheduler"]
        assert httpx.post(url + "/scheduler/filter", json=FILTER).json()["Error"] == ""
        assert httpx.get(url + "/healthz").text == "ok"
        assert httpx.get(url + "/apis/v1/policies").status_code == 200


def test_bind_is_served_only_when_asked_for_and_unknown_paths_answer_json() -> None:
    for bind in (False, True):
        settings = Settings(policies=str(POLICIES), cluster="off", port=0, bind=bind)
        with running(create_app(settings), settings) as urls:
            answer = httpx.post(urls["scheduler"] + "/scheduler/bind", json={"PodName": "p", "PodNamespace": "d", "PodUID": "u", "Node": "n"})
            assert (answer.status_code == 404) is not bind
            assert answer.json()["Error"] == ("kpe's bind verb is off: start kpe with --bind (KPE_BIND=true) to serve it" if not bind else
                                              "kpe has no cluster access, so it cannot bind pods: remove bindVerb or give kpe credentials")
            wrong_method = httpx.get(urls["scheduler"] + "/scheduler/filter")
            assert wrong_method.status_code == 405 and wrong_method.json()["Error"] == "GET /scheduler/filter: Method Not Allowed"


def test_surfaces_are_told_apart_by_path() -> None:
    paths = ("/scheduler/filter", "/admission/pods", "/apis/v1/gated", "/metrics", "/readyz", "/ui/pending", "/x")
    assert [surface_of(p, "/scheduler") for p in paths] == [
        "scheduler", "webhook", "introspection", "health", "health", "introspection", "introspection"]  # the web view is introspection's


def test_ports_must_differ_and_a_webhook_client_ca_needs_its_own_tls_listener() -> None:
    problems = Settings(policies=str(POLICIES), port=8443, webhook_port=8443, webhook_client_ca="ca.pem").validate()
    assert "--port, --webhook-port, --introspection-port and --health-port must differ (0 serves a surface on --port)" in problems
    assert "--webhook-client-ca needs --webhook-port, --tls-cert and --tls-key" in problems


# -- connections -----------------------------------------------------------------


def raw(url: str) -> socket.socket:
    parts = urlsplit(url)
    sock = socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 80), timeout=5)
    return sock


def closed_by_server(sock: socket.socket, within: float) -> bool:
    sock.settimeout(within)
    try:
        while True:
            data = sock.recv(4096)
            if not data:
                return True
    except (TimeoutError, socket.timeout):
        return False
    except ConnectionResetError:
        return True


def request(path: str = "/healthz") -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: kpe\r\n\r\n".encode()


def answer(sock: socket.socket) -> bytes:
    """One whole response (headers and a Content-Length body) read from ``sock``."""
    sock.settimeout(5)
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(4096)
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:"))
    while len(body) < length:
        body += sock.recv(4096)
    return head + b"\r\n\r\n" + body


def test_a_connection_that_never_finishes_its_headers_is_closed() -> None:
    settings = Settings(policies=str(POLICIES), cluster="off", port=0, header_timeout_s=0.3)
    with running(create_app(settings), settings) as urls:
        silent = raw(urls["scheduler"])  # connects and says nothing
        trickle = raw(urls["scheduler"])
        trickle.sendall(b"POST /scheduler/filter HTTP/1.1\r\nHost: kpe\r\n")  # and never the blank line
        assert closed_by_server(silent, within=3) and closed_by_server(trickle, within=3)
        # A complete request on a kept-alive connection is not cut by the header limit.
        ok = raw(urls["scheduler"])
        ok.sendall(request())
        assert b"200 OK" in answer(ok)
        time.sleep(0.6)  # idle well past the header limit: idle time is keep-alive's business
        ok.sendall(request())
        assert b"200 OK" in answer(ok)


def test_headers_that_grow_past_the_limit_get_a_json_431_and_the_connection_is_closed() -> None:
    settings = Settings(policies=str(POLICIES), cluster="off", port=0)
    with running(create_app(settings), settings) as urls:
        endless = raw(urls["scheduler"])
        endless.sendall(b"POST /scheduler/filter HTTP/1.1\r\nHost: kpe\r\nX-Padding: " + b"a" * 17_000)  # never ended
        refused = answer(endless)
        assert refused.startswith(b"HTTP/1.1 431 Request Header Fields Too Large\r\n")
        assert refused.endswith(b'{"Error":"request headers over 16384 bytes"}')
        # Headers just under the limit, followed by a body larger than it, are served.
        body = orjson.dumps({**FILTER, "Padding": "b" * 40_000})
        fits = raw(urls["scheduler"])
        fits.sendall(
            b"POST /scheduler/filter HTTP/1.1\r\nHost: kpe\r\nContent-Type: application/json\r\nX-Padding: " + b"a" * 15_000
            + b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
        )
        served = answer(fits)
        assert served.startswith(b"HTTP/1.1 200 OK\r\n") and b'"NodeNames":null' in served
        # A body whose last part, larger than the limit, comes in a read of its own (as a
        # whole-node request from kube-scheduler does) is a body, not the next request's head.
        for _ in range(2):  # twice on one connection: the second head is counted from zero
            head = b"POST /scheduler/filter HTTP/1.1\r\nHost: kpe\r\nContent-Type: application/json\r\nContent-Length: " + str(len(body)).encode()
            fits.sendall(head + b"\r\n\r\n" + body[:100])
            time.sleep(0.1)
            fits.sendall(body[100:])
            served = answer(fits)
            assert served.startswith(b"HTTP/1.1 200 OK\r\n") and b'"NodeNames":null' in served


def test_a_head_over_the_limit_gets_a_431_on_every_listener_however_it_arrives() -> None:
    settings = Settings(policies=str(POLICIES), cluster="off", port=0, webhook_port=_free(), introspection_port=_free(), health_port=_free())
    paths = {"scheduler": "/scheduler/filter", "webhook": "/admission/pods", "introspection": "/apis/v1/policies", "health": "/healthz"}
    padding = b"\r\nX-Padding: " + b"a" * 64 * 1024
    with running(create_app(settings), settings) as urls:
        for surface, path in paths.items():
            for _ in range(10):
                whole = raw(urls[surface])  # the whole head in one write, so most often in one read
                whole.sendall(f"GET {path} HTTP/1.1\r\nHost: kpe".encode() + padding + b"\r\n\r\n")
                refused = answer(whole)
                assert refused.startswith(b"HTTP/1.1 431 Request Header Fields Too Large\r\n"), (surface, refused[:60])
                assert refused.endswith(b'{"Error":"request headers over 16384 bytes"}') and closed_by_server(whole, within=3)
            # Behind a request that fits, in the same write: that one is answered, then the 431.
            pipelined = raw(urls[surface])
            pipelined.sendall(request(path) + f"GET {path} HTTP/1.1\r\nHost: kpe".encode() + padding + b"\r\n\r\n")
            first, refusal, after = until_closed(pipelined).partition(b"HTTP/1.1 431 Request Header Fields Too Large\r\n")
            assert first.startswith(b"HTTP/1.1 ") and refusal and after.endswith(b'{"Error":"request headers over 16384 bytes"}'), surface


def until_closed(sock: socket.socket) -> bytes:
    """Everything ``sock`` receives until the server closes it."""
    sock.settimeout(5)
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def test_requests_cut_anywhere_or_sent_together_are_served() -> None:
    settings = Settings(policies=str(POLICIES), cluster="off", port=0)
    body = orjson.dumps(FILTER)
    post = b"POST /scheduler/filter HTTP/1.1\r\nHost: kpe\r\nContent-Type: application/json\r\nContent-Length: " + str(len(body)).encode()
    with running(create_app(settings), settings) as urls:
        cut = raw(urls["scheduler"])
        for piece in (post + b"\r\n\r", b"\n" + body[:5], body[5:]):  # the blank line between two reads
            cut.sendall(piece)
            time.sleep(0.1)
        assert b'"NodeNames":null' in answer(cut)
        # A chunked body, then a request behind it in the same write, twice on one connection.
        chunked = raw(urls["scheduler"])
        head = b"POST /scheduler/filter HTTP/1.1\r\nHost: kpe\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        chunks = b"".join(b"%x\r\n%s\r\n" % (len(body[i : i + 7]), body[i : i + 7]) for i in range(0, len(body), 7)) + b"0\r\n\r\n"
        chunked.sendall((head + chunks + request()) * 2)
        received = until_closed_or(chunked, responses=4)
        assert received.count(b"HTTP/1.1 200 OK\r\n") == 4 and received.count(b'"NodeNames":null') == 2


def until_closed_or(sock: socket.socket, *, responses: int) -> bytes:
    """What ``sock`` receives until ``responses`` answers have come whole, or it is closed."""
    sock.settimeout(5)
    data = b""
    while data.count(b"HTTP/1.1 ") < responses or not data.endswith((b"}", b"ok")):
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def client_hello() -> bytes:
    """The first flight of a TLS client, as it would send it."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ssl.create_default_context().wrap_bio(incoming, outgoing, server_hostname="kpe")
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def test_a_tls_handshake_that_does_not_finish_is_closed_after_the_header_timeout(tmp_path: Path) -> None:
    serving = trustme.CA()
    cert, key = files(tmp_path, serving, "kpe")
    settings = Settings(policies=str(POLICIES), cluster="off", port=0, tls_cert=cert, tls_key=key, header_timeout_s=0.3)
    with running(create_app(settings), settings) as urls:
        silent = raw(urls["scheduler"])  # connects and says nothing
        partial = raw(urls["scheduler"])
        hello = client_hello()
        partial.sendall(hello[: len(hello) // 2])  # and never the rest of its ClientHello
        assert closed_by_server(silent, within=3) and closed_by_server(partial, within=3)
        with client(serving) as anyone:  # a handshake that finishes is served as ever
            assert anyone.get(urls["scheduler"] + "/healthz").text == "ok"
            time.sleep(0.6)  # idle past the header timeout on a kept-alive connection
            assert anyone.get(urls["scheduler"] + "/healthz").text == "ok"


def test_a_body_that_does_not_arrive_in_time_gets_a_json_408() -> None:
    settings = Settings(policies=str(POLICIES), cluster="off", port=0, body_timeout_s=0.3)
    with running(create_app(settings), settings) as urls:
        sock = raw(urls["scheduler"])
        sock.sendall(b"POST /scheduler/filter HTTP/1.1\r\nHost: kpe\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"Pod\":")
        timed_out = answer(sock)
        assert timed_out.startswith(b"HTTP/1.1 408 ")
        assert timed_out.endswith(b'{"Error":"request body not received within 0.3 s (--body-timeout-s)"}')


def test_idle_keep_alive_connections_outlive_uvicorn_s_5_s_default_and_close_after_the_setting() -> None:
    settings = Settings(policies=str(POLICIES), cluster="off", port=0)
    assert settings.keep_alive_s > 90  # kube-scheduler's Go client keeps idle connections 90 s
    short = Settings(policies=str(POLICIES), cluster="off", port=0, keep_alive_s=0.5)
    with running(create_app(short), short) as urls:
        sock = raw(urls["scheduler"])
        sock.sendall(request())
        assert b"200 OK" in answer(sock)
        assert closed_by_server(sock, within=3)
    with running(create_app(settings), settings) as urls:
        sock = raw(urls["scheduler"])
        sock.sendall(request())
        assert b"200 OK" in answer(sock)
        assert not closed_by_server(sock, within=5.5)  # uvicorn alone would have closed it after 5 s
        sock.sendall(request())
        assert b"200 OK" in answer(sock)


def _free() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_listening_sockets_are_tcp_so_responses_are_not_held_by_nagle() -> None:
    # asyncio sets TCP_NODELAY only on sockets whose protocol says TCP; with proto 0 every
    # response waited for the client's delayed ACK, 40 ms a request.
    settings = Settings(policies=str(POLICIES), cluster="off", port=0, health_port=_free())
    with running(create_app(settings), settings) as urls:
        for surface, path in (("health", "/healthz"), ("scheduler", "/apis/v1/policies")):
            sock = raw(urls[surface])
            sock.sendall(request(path))
            assert b"200 OK" in answer(sock)
    from server.http.listeners import Listeners

    listeners = Listeners(create_app(settings), settings)
    try:
        assert {s.proto for s in listeners.sockets} == {socket.IPPROTO_TCP}
    finally:
        for s in listeners.sockets:
            s.close()


def test_the_other_listeners_answer_only_after_the_app_has_started() -> None:
    import asyncio
    import contextlib
    import threading
    from collections.abc import AsyncIterator

    from server.http.listeners import Listeners

    settings = Settings(policies=str(POLICIES), cluster="off", port=0, health_port=_free())
    app = create_app(settings)
    go = threading.Event()
    inner = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def held(a: object) -> AsyncIterator[None]:
        while not go.is_set():  # start-up that takes a while (the first list from the API server)
            await asyncio.sleep(0.01)
        async with inner(a):
            yield

    app.router.lifespan_context = held
    listeners = Listeners(app, settings)
    thread = threading.Thread(target=lambda: asyncio.run(listeners.serve()), daemon=True)
    thread.start()
    try:
        health = listeners.urls()["health"]
        with pytest.raises(httpx.TimeoutException):
            httpx.get(health + "/readyz", timeout=0.5)  # accepted by the kernel, not answered yet
        go.set()
        deadline = time.monotonic() + 10
        while not listeners.started:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert httpx.get(health + "/readyz", timeout=5).text == "ok"
    finally:
        go.set()
        listeners.stop()
        thread.join(timeout=10)


def test_a_response_written_in_pieces_within_one_step_leaves_as_one_write() -> None:
    import asyncio

    from server.http.listeners import CoalescedWrites

    class Recording:
        def __init__(self) -> None:
            self.writes: list[bytes] = []
            self.closed = False

        def write(self, data: bytes) -> None:
            self.writes.append(data)

        def close(self) -> None:
            self.closed = True

        def get_extra_info(self, name: str) -> str:
            return f"extra {name}"

    async def scenario() -> None:
        real = Recording()
        transport = CoalescedWrites(real, asyncio.get_running_loop())  # type: ignore[arg-type]
        transport.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
        transport.write(b"")
        transport.write(b"{}")
        assert real.writes == [], "nothing leaves before the step ends"
        await asyncio.sleep(0)
        assert real.writes == [b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}"]
        transport.write(b"last words")
        transport.close()
        assert real.writes[-1] == b"last words" and real.closed, "closing sends what is pending first"
        assert transport.get_extra_info("peername") == "extra peername"

    asyncio.run(scenario())


def test_no_listener_loads_a_websocket_implementation_kpe_never_serves() -> None:
    from server.http.listeners import config

    settings = Settings(policies=str(POLICIES), cluster="off", port=0)
    [listener] = plan(settings)
    loaded = config(create_app(settings), settings, listener, lifespan=False)
    loaded.load()
    assert loaded.ws_protocol_class is None
    with running(create_app(settings), settings) as urls:
        upgrade = httpx.get(urls["health"] + "/healthz", headers={"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
                                                                  "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="})
        assert upgrade.status_code == 200 and upgrade.text == "ok"  # served as plain HTTP
