"""The watch reader of server.cluster.kube: HTTP/1.1 framing parsed from whatever pieces the
socket delivers, the error mapping of ``KubeClient.watch``, credentials reloaded on
401/403 (asked again only when they changed), the read timeout, cancellation and flow control.

Framing is checked by feeding ``WatchStream`` directly (every split of the bytes is
then possible); the rest against a scripted HTTP server on loopback that writes exactly
the bytes a test gives it, so answers the fake API server never sends can be tried."""

from __future__ import annotations

import asyncio
import contextlib
import random
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
import trustme

from server.cluster import kube
from server.cluster import watchstream
from server.cluster.kube import ApiError, Expired, KubeClient, WatchError
from server.cluster.watchstream import WatchStream


def run(test: Callable[[], Awaitable[None]], timeout: float = 10.0) -> None:
    asyncio.run(asyncio.wait_for(test(), timeout))


def event(kind: str, name: str, rv: int, pad: int = 0) -> bytes:
    obj = {"type": kind, "object": {"kind": "Pod", "metadata": {"name": name, "resourceVersion": str(rv)}, "pad": "x" * pad}}
    return orjson.dumps(obj) + b"\n"


EVENTS = [event("ADDED", f"pod-{i}", 100 + i, pad=i * 37 % 300) for i in range(12)]
HEAD_200 = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"


def chunked(pieces: list[bytes], *, extensions: bool = False, trailer: bytes = b"") -> bytes:
    out = b""
    for i, piece in enumerate(pieces):
        ext = b";name=value;flag" if extensions and i % 2 else b""
        out += b"%x%s\r\n%s\r\n" % (len(piece), ext, piece)
    return out + b"0\r\n" + trailer + b"\r\n"


def regrouped(body: bytes, rng: random.Random) -> list[bytes]:
    """The body cut into chunks at random places: chunks end mid-event and hold several events."""
    cuts = sorted(rng.sample(range(1, len(body)), 9))
    return [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)]


def split_randomly(data: bytes, rng: random.Random) -> list[bytes]:
    pieces, at = [], 0
    while at < len(data):
        step = rng.choice((1, 2, 3, 7, 64, 500, 4096))
        pieces.append(data[at : at + step])
        at += step
    return pieces


class FakeTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.paused = False
        self.pauses = 0
        self.aborted = False

    def pause_reading(self) -> None:
        self.paused = True
        self.pauses += 1

    def resume_reading(self) -> None:
        self.paused = False

    def abort(self) -> None:
        self.aborted = True

    def write(self, data: Any) -> None:
        pass

    def is_closing(self) -> bool:
        return self.aborted


def fed(pieces: list[bytes], read_timeout: float = 60.0) -> tuple[WatchStream, FakeTransport]:
    stream = WatchStream(asyncio.get_running_loop(), read_timeout)
    transport = FakeTransport()
    stream.connection_made(transport)
    for piece in pieces:
        stream.data_received(piece)
    return stream, transport


def body_of(stream: WatchStream) -> bytes:
    return b"".join(stream.take() for _ in range(len(stream.chunks)))


# --- framing -------------------------------------------------------------------


def test_a_chunked_body_comes_out_whole_however_the_reads_cut_it() -> None:
    body = b"".join(EVENTS)
    rng = random.Random(7)

    async def check() -> None:
        for extensions in (False, True):
            answer = HEAD_200 + chunked(regrouped(body, rng), extensions=extensions, trailer=b"X-Trailer: yes\r\n")
            splits = [[answer], [answer[i : i + 1] for i in range(len(answer))]] + [split_randomly(answer, rng) for _ in range(40)]
            for pieces in splits:
                stream, transport = fed(pieces)
                assert stream.failure is None and stream.finished and stream.status == 200
                assert body_of(stream) == body
                assert not transport.aborted

    run(check)


def test_every_split_of_the_framing_between_two_reads_parses_alike() -> None:
    # Each CRLF, size line and extension cut at every place: one split point per position.
    answer = HEAD_200 + chunked([EVENTS[0], EVENTS[1][:10], EVENTS[1][10:]], extensions=True)

    async def check() -> None:
        for at in range(1, len(answer)):
            stream, _ = fed([answer[:at], answer[at:]])
            assert stream.finished and stream.failure is None, at
            assert body_of(stream) == EVENTS[0] + EVENTS[1], at

    run(check)


def test_a_content_length_body_ends_at_its_length_and_a_close_delimited_one_at_the_close() -> None:
    status = b'{"kind":"Status","code":410,"reason":"Expired","message":"too old resource version: 1 (5)"}'

    async def check() -> None:
        stream, _ = fed([b"HTTP/1.1 410 Gone\r\nContent-Length: %d\r\n\r\n" % len(status), status[:9], status[9:]])
        assert stream.finished and stream.status == 410 and body_of(stream) == status
        stream, _ = fed([b"HTTP/1.1 200 OK\r\n\r\n", EVENTS[0]])
        assert not stream.finished and stream.failure is None
        stream.connection_lost(None)
        assert stream.finished and stream.failure is None and body_of(stream) == EVENTS[0]

    run(check)


def test_a_chunked_body_cut_short_is_a_lost_connection_and_bad_framing_too() -> None:
    async def check() -> None:
        stream, _ = fed([HEAD_200 + b"%x\r\n" % len(EVENTS[0]) + EVENTS[0][:20]])
        stream.connection_lost(ConnectionResetError("reset by peer"))
        assert stream.failure is not None and stream.failure.reason == "ConnectionLost" and not stream.finished
        for bad in (b"zz\r\n", b"-5\r\n", b"0x5\r\n", b"5\r\nabcdeXY"):
            stream, transport = fed([HEAD_200 + bad])
            assert stream.failure is not None and stream.failure.reason == "ConnectionLost", bad
            assert transport.aborted
        stream, _ = fed([b"SSH-2.0-OpenSSH\r\n\r\n"])
        assert stream.failure is not None and stream.failure.reason == "ConnectionLost"

    run(check)


def test_an_interim_100_answer_is_skipped_for_the_one_that_follows() -> None:
    async def check() -> None:
        stream, _ = fed([b"HTTP/1.1 100 Continue\r\n\r\n" + HEAD_200 + chunked([EVENTS[0]])])
        assert stream.status == 200 and stream.finished and body_of(stream) == EVENTS[0]

    run(check)


def test_reading_pauses_while_a_backlog_builds_up_and_resumes_once_it_is_drained() -> None:
    piece = b"x" * 4096 + b"\n"
    frame = b"%x\r\n%s\r\n" % (len(piece), piece)

    async def check() -> None:
        stream, transport = fed([HEAD_200])
        sent = 0
        while not transport.paused:
            stream.data_received(frame * 8)
            sent += 8
            assert sent * len(piece) < 2 * watchstream.WATCH_HIGH_WATER, "never paused"
        assert transport.pauses == 1
        queued = sum(map(len, stream.chunks))
        assert queued > watchstream.WATCH_HIGH_WATER
        while queued > watchstream.WATCH_LOW_WATER + len(piece):
            queued -= len(stream.take())
            assert transport.paused
        stream.take()
        assert not transport.paused and transport.pauses == 1
        # An error answer is read whole before anyone looks at it: never paused, or it would never end.
        big = b"y" * (2 * watchstream.WATCH_HIGH_WATER)
        stream, transport = fed([b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: %d\r\n\r\n" % len(big), big])
        assert stream.finished and transport.pauses == 0

    run(check)


# --- KubeClient.watch against a scripted server ------------------------------------

Script = Callable[[asyncio.StreamReader, asyncio.StreamWriter, bytes], Awaitable[None]]


class ScriptedServer:
    """Answers the n-th connection with ``scripts[n]``, given the request head it read."""

    def __init__(self, scripts: list[Script]) -> None:
        self.scripts = scripts
        self.requests: list[bytes] = []
        self.closed_by_client = asyncio.Event()
        self.port = 0

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        self.requests.append(head)
        script = self.scripts[min(len(self.requests), len(self.scripts)) - 1]
        with contextlib.suppress(ConnectionError):
            await script(reader, writer, head)
            writer.close()

    @contextlib.asynccontextmanager
    async def running(self, tls: ssl.SSLContext | None = None) -> AsyncIterator[ScriptedServer]:
        server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=tls)
        self.port = server.sockets[0].getsockname()[1]
        async with server:
            yield self


def kubeconfig(path: Path, url: str, token: str, *, cluster: str = "", user: str = "") -> str:
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: x\n"
        f"clusters: [{{name: c, cluster: {{server: '{url}'{cluster}}}}}]\n"
        f"users: [{{name: u, user: {{token: {token}{user}}}}}]\ncontexts: [{{name: x, context: {{cluster: c, user: u}}}}]\n"
    )
    return str(path)


@contextlib.asynccontextmanager
async def client_for(config: str) -> AsyncIterator[KubeClient]:
    client = await KubeClient.connect(kubeconfig=config, required=True)
    assert client is not None
    try:
        yield client
    finally:
        await client.close()


def answer(data: bytes, *, pieces: list[bytes] | None = None, then: Callable[[], Awaitable[None]] | None = None) -> Script:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, head: bytes) -> None:
        for piece in pieces if pieces is not None else [data]:
            writer.write(piece)
            await writer.drain()
            await asyncio.sleep(0)
        if then is not None:
            await then()

    return script


async def watched(client: KubeClient, **options: Any) -> tuple[list[dict[str, Any]], int]:
    opened = 0

    def on_open() -> None:
        nonlocal opened
        opened += 1

    found = [e async for e in client.watch("/api/v1/pods", resource_version="42", on_open=on_open, **options)]
    return found, opened


def test_a_watch_sends_a_plain_get_under_the_servers_path_and_yields_events_cut_anywhere(tmp_path: Path) -> None:
    rng = random.Random(3)
    data = HEAD_200 + chunked(regrouped(b"".join(EVENTS), rng), extensions=True)

    async def check() -> None:
        server = ScriptedServer([answer(data, pieces=split_randomly(data, rng))])
        async with server.running(), client_for(kubeconfig(tmp_path / "kc", f"http://127.0.0.1:{server.port}/prefix/", "s3cret")) as client:
            found, opened = await watched(client, timeout_seconds=77)
        assert found == [orjson.loads(e) for e in EVENTS] and opened == 1
        lines = server.requests[0].decode().split("\r\n")
        assert lines[0] == "GET /prefix/api/v1/pods?watch=true&timeoutSeconds=77&resourceVersion=42&allowWatchBookmarks=true HTTP/1.1"
        headers = {k.lower(): v for k, _, v in (line.partition(": ") for line in lines[1:] if line)}
        assert headers["host"] == f"127.0.0.1:{server.port}" and headers["authorization"] == "Bearer s3cret"
        assert headers["accept"] == "application/json"

    run(check)


def test_an_error_answer_with_content_length_is_the_api_error_its_status_body_says(tmp_path: Path) -> None:
    status = orjson.dumps({"kind": "Status", "code": 429, "reason": "TooManyRequests", "message": "slow down",
                           "details": {"retryAfterSeconds": 1}})
    expired = orjson.dumps({"kind": "Status", "code": 410, "reason": "Expired", "message": "too old resource version"})
    scripts = [
        answer(b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 7\r\nContent-Length: %d\r\n\r\n%s" % (len(status), status)),
        answer(b"HTTP/1.1 410 Gone\r\nContent-Length: %d\r\n\r\n%s" % (len(expired), expired)),
        answer(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 11\r\n\r\nupstream!\r\n"),
        answer(b"HTTP/1.1 500 \r\nContent-Length: 0\r\n\r\n"),
    ]

    async def check() -> None:
        server = ScriptedServer(scripts)
        async with server.running(), client_for(kubeconfig(tmp_path / "kc", f"http://127.0.0.1:{server.port}", "t")) as client:
            errors = []
            for _ in scripts:
                with pytest.raises(ApiError) as raised:
                    await watched(client)
                errors.append(raised.value)
        assert (errors[0].status, errors[0].reason, errors[0].message, errors[0].retry_after) == (429, "TooManyRequests", "slow down", 7.0)
        assert isinstance(errors[1], Expired) and errors[1].status == 410
        assert (errors[2].status, errors[2].reason, errors[2].message) == (502, "Bad Gateway", "upstream!")
        assert (errors[3].status, errors[3].reason, errors[3].message) == (500, "Internal Server Error", "Internal Server Error")

    run(check)


def test_error_events_raise_after_the_events_before_them(tmp_path: Path) -> None:
    gone = orjson.dumps({"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired", "message": "gone"}}) + b"\n"
    broken = orjson.dumps({"type": "ERROR", "object": {"kind": "Status", "code": 500, "reason": "InternalError", "message": "etcd"}}) + b"\n"

    async def check() -> None:
        server = ScriptedServer([answer(HEAD_200 + chunked([EVENTS[0], gone])), answer(HEAD_200 + chunked([broken]))])
        async with server.running(), client_for(kubeconfig(tmp_path / "kc", f"http://127.0.0.1:{server.port}", "t")) as client:
            seen = []
            with pytest.raises(Expired):
                async for e in client.watch("/api/v1/pods", resource_version="1"):
                    seen.append(e)
            assert seen == [orjson.loads(EVENTS[0])]
            with pytest.raises(WatchError) as raised:
                await watched(client)
            assert raised.value.status == 500

    run(check)


def test_a_403_reloads_the_credentials_and_asks_again_and_a_refusal_of_unchanged_ones_is_the_error_at_once(tmp_path: Path) -> None:
    config = tmp_path / "kc"
    refusal = orjson.dumps({"kind": "Status", "code": 403, "reason": "Forbidden", "message": "token expired"})
    refused = b"HTTP/1.1 403 Forbidden\r\nContent-Length: %d\r\n\r\n%s" % (len(refusal), refusal)

    async def rotate(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, head: bytes) -> None:
        kubeconfig(config, config.read_text().split("server: '")[1].split("'")[0], "fresh")  # the token rotates meanwhile
        writer.write(refused)
        await writer.drain()

    async def check() -> None:
        server = ScriptedServer([rotate, answer(HEAD_200 + chunked([EVENTS[0]]))])
        async with server.running():
            async with client_for(kubeconfig(config, f"http://127.0.0.1:{server.port}", "stale")) as client:
                found, opened = await watched(client)
            assert found == [orjson.loads(EVENTS[0])] and opened == 1
            assert [b"Bearer stale" in r for r in server.requests] == [True, False]
            assert b"Bearer fresh" in server.requests[1]
            server.scripts, server.requests = [answer(refused.replace(b"403 Forbidden", b"401 Unauthorized"))], []
            async with client_for(str(config)) as client:
                with pytest.raises(ApiError) as raised:
                    await watched(client)
            # Asking again with the very credentials refused would get the same answer (an API server
            # restarting refuses for a moment while it loads RBAC): the informer's backoff retries instead.
            assert raised.value.status == 403 and len(server.requests) == 1  # the Status' code wins over the line's

    run(check)


def test_a_watch_that_hears_nothing_for_its_timeout_and_slack_times_out_but_a_trickle_does_not(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kube, "WATCH_READ_SLACK_S", 0.4)

    async def trickle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, head: bytes) -> None:
        writer.write(HEAD_200)
        for e in EVENTS[:6]:
            await asyncio.sleep(0.15)  # 0.9 s in all, each gap well inside the 0.4 s allowed
            writer.write(b"%x\r\n%s\r\n" % (len(e), e))
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    async def check() -> None:
        server = ScriptedServer([answer(HEAD_200, then=lambda: asyncio.sleep(5)), trickle])
        async with server.running(), client_for(kubeconfig(tmp_path / "kc", f"http://127.0.0.1:{server.port}", "t")) as client:
            started = asyncio.get_running_loop().time()
            with pytest.raises(ApiError) as raised:
                await watched(client, timeout_seconds=0)
            waited = asyncio.get_running_loop().time() - started
            assert raised.value.status == 0 and raised.value.reason == "Timeout" and 0.35 < waited < 2
            found, _ = await watched(client, timeout_seconds=0)
            assert len(found) == 6

    run(check)


def test_cancelling_the_consumer_closes_the_connection(tmp_path: Path) -> None:
    async def check() -> None:
        server = ScriptedServer([])

        async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, head: bytes) -> None:
            writer.write(HEAD_200 + b"%x\r\n%s\r\n" % (len(EVENTS[0]), EVENTS[0]))
            await writer.drain()
            with contextlib.suppress(ConnectionError):
                while await reader.read(1024):
                    pass
            server.closed_by_client.set()

        server.scripts = [hold]
        async with server.running(), client_for(kubeconfig(tmp_path / "kc", f"http://127.0.0.1:{server.port}", "t")) as client:
            first = asyncio.Event()

            async def consume() -> None:
                async for _ in client.watch("/api/v1/pods", resource_version="1"):
                    first.set()

            task = asyncio.create_task(consume())
            await asyncio.wait_for(first.wait(), 3)
            await asyncio.sleep(0.05)  # the consumer is waiting for more
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await asyncio.wait_for(server.closed_by_client.wait(), 3)

    run(check)


def test_a_connection_lost_mid_stream_a_refused_one_and_a_clean_end(tmp_path: Path) -> None:
    async def cut(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, head: bytes) -> None:
        writer.write(HEAD_200 + b"%x\r\n%s\r\n" % (len(EVENTS[0]), EVENTS[0]) + b"40\r\n{\"type\"")
        await writer.drain()
        writer.transport.abort()

    async def check() -> None:
        server = ScriptedServer([cut, answer(HEAD_200 + chunked([EVENTS[0], EVENTS[1]]), then=lambda: asyncio.sleep(1))])
        async with server.running(), client_for(kubeconfig(tmp_path / "kc", f"http://127.0.0.1:{server.port}", "t")) as client:
            seen = []
            with pytest.raises(ApiError) as raised:
                async for e in client.watch("/api/v1/pods", resource_version="1"):
                    seen.append(e)
            assert len(seen) == 1 and raised.value.status == 0 and raised.value.reason == "ConnectionLost"
            # The terminating chunk ends the watch though the server keeps the connection open.
            found, _ = await asyncio.wait_for(watched(client), 0.8)
            assert len(found) == 2
        async with client_for(kubeconfig(tmp_path / "kc2", "http://127.0.0.1:9", "t")) as client:
            with pytest.raises(ApiError) as raised:
                await watched(client)
            assert raised.value.status == 0 and raised.value.reason == "Unreachable"

    run(check)


def test_a_client_behind_a_proxy_keeps_the_httpx_watch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async def check() -> None:
        async with client_for(kubeconfig(tmp_path / "kc", "https://10.0.0.1:6443", "t")) as client:
            for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy", "NO_PROXY", "no_proxy"):
                monkeypatch.delenv(name, raising=False)
            assert client._lean_watch_fits()
            monkeypatch.setenv("HTTPS_PROXY", "http://proxy:3128")
            assert not client._lean_watch_fits()
            monkeypatch.setenv("NO_PROXY", "10.0.0.1")
            assert client._lean_watch_fits()

    run(check)


def test_tls_verifies_the_server_by_the_kubeconfig_ca_and_server_name_and_presents_the_client_certificate(tmp_path: Path) -> None:
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(tmp_path / "ca.crt"))
    server_cert = ca.issue_cert("kube.internal")  # not 127.0.0.1: only tls-server-name makes it match
    client_cert = ca.issue_cert("kpe")
    client_cert.private_key_pem.write_to_path(str(tmp_path / "client.key"))
    client_cert.cert_chain_pems[0].write_to_path(str(tmp_path / "client.crt"))
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_cert.configure_cert(server_tls)
    ca.configure_trust(server_tls)
    server_tls.verify_mode = ssl.CERT_REQUIRED
    data = HEAD_200 + chunked([EVENTS[0], EVENTS[1]])
    user = f", client-certificate: {tmp_path / 'client.crt'}, client-key: {tmp_path / 'client.key'}"

    async def check() -> None:
        server = ScriptedServer([answer(data)])
        async with server.running(server_tls):
            url = f"https://127.0.0.1:{server.port}"
            named = f", certificate-authority: {tmp_path / 'ca.crt'}, tls-server-name: kube.internal"
            async with client_for(kubeconfig(tmp_path / "kc", url, "t", cluster=named, user=user)) as client:
                found, opened = await watched(client)
                assert len(found) == 2 and opened == 1
                found, _ = await watched(client)  # a second watch over the same context
                assert len(found) == 2
            unnamed = f", certificate-authority: {tmp_path / 'ca.crt'}"
            async with client_for(kubeconfig(tmp_path / "kc2", url, "t", cluster=unnamed, user=user)) as client:
                with pytest.raises(ApiError) as raised:
                    await watched(client)
                assert raised.value.status == 0 and raised.value.reason == "Unreachable" and "certificate" in raised.value.message.lower()

    run(check)


def test_a_burst_larger_than_the_backlog_arrives_whole_through_pauses_and_resumes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(watchstream, "WATCH_HIGH_WATER", 32 * 1024)
    monkeypatch.setattr(watchstream, "WATCH_LOW_WATER", 8 * 1024)
    burst = [event("MODIFIED", f"pod-{i}", 1000 + i, pad=900) for i in range(1500)]
    data = HEAD_200 + chunked(burst)
    pauses = 0
    pause = kube.WatchStream._body

    def counted(self: WatchStream, piece: bytes) -> None:
        nonlocal pauses
        paused = self._paused
        pause(self, piece)
        pauses += self._paused and not paused

    monkeypatch.setattr(kube.WatchStream, "_body", counted)

    async def check() -> None:
        server = ScriptedServer([answer(data)])
        async with server.running(), client_for(kubeconfig(tmp_path / "kc", f"http://127.0.0.1:{server.port}", "t")) as client:
            names = []
            async for e in client.watch("/api/v1/pods", resource_version="1"):
                names.append(e["object"]["metadata"]["name"])
                if len(names) % 50 == 0:
                    await asyncio.sleep(0.002)  # a consumer slower than the socket
        assert names == [f"pod-{i}" for i in range(1500)]
        assert pauses > 0

    run(check)
