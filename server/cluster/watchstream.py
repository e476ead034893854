"""One watch answer of the API server read off its connection (``server.cluster.kube`` opens it).

HTTP/1.1 framing is parsed as bytes arrive and the body queued for the reader, kept to what
the API server sends: one response, chunked, Content-Length or close-delimited, no upgrades.
An event then costs one callback, a few slices and a future at most, where the HTTP client
stack's async-generator layers cost more per event than applying it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import http
from typing import Any

from server.cluster.apierrors import ApiError, answer_error

# Watch body received but not yet consumed: past the high mark the socket is not read
# (the server's writes then wait in TCP buffers) until the consumer is down to the low mark,
# so a burst is held to about this much memory however slowly events are applied.
WATCH_HIGH_WATER = 1 << 20
WATCH_LOW_WATER = 1 << 18
# An answer's status line and headers; the API server's are well under 1 KiB.
_MAX_HEAD = 64 * 1024


# Where a WatchStream is in the answer.
_HEAD, _SIZE, _DATA, _DATA_END, _TRAILER, _LENGTH, _CLOSE, _DONE = range(8)


class WatchStream(asyncio.Protocol):
    """One watch request's connection: HTTP/1.1 framing parsed as bytes arrive, the
    body queued in ``chunks`` for ``KubeClient.watch``. Kept to what the API server
    sends (one response, chunked or Content-Length or close-delimited, no upgrades)
    so that an event costs one callback, a few slices and a future at most."""

    def __init__(self, loop: asyncio.AbstractEventLoop, read_timeout: float) -> None:
        self._loop = loop
        self._read_timeout = read_timeout
        self._transport: asyncio.Transport | None = None
        self._state = _HEAD
        self._pending = b""  # framing bytes (head, chunk size line) waiting for the rest
        self._remaining = 0  # bytes left of the current chunk or Content-Length body
        self._queued = 0
        self._paused = False
        self._streaming = False  # 2xx: the consumer takes chunks as they come; error bodies are read whole
        self._waiter: asyncio.Future[None] | None = None
        self._heard = loop.time()
        self._timer: asyncio.TimerHandle | None = loop.call_later(read_timeout, self._check_quiet)
        self.status = 0
        self.reason = ""
        self.headers: dict[str, str] = {}
        self.head_done = False
        self.chunks: collections.deque[bytes] = collections.deque()
        self.finished = False  # the body ended as its framing says
        self.failure: ApiError | None = None

    # --- the consumer's side --------------------------------------------------

    def send(self, request: bytes) -> None:
        if self._transport is not None and self.failure is None:
            self._transport.write(request)

    async def wait(self) -> None:
        """Until something changes: more data, the end, a failure."""
        if self.finished or self.failure is not None:
            return
        self._waiter = waiter = self._loop.create_future()
        try:
            await waiter
        finally:
            self._waiter = None

    async def wait_for_head(self) -> None:
        while not self.head_done:
            if self.failure is not None:
                raise self.failure
            await self.wait()

    def take(self) -> bytes:
        chunk = self.chunks.popleft()
        self._queued -= len(chunk)
        if self._paused and self._queued <= WATCH_LOW_WATER:
            self._paused = False
            self._heard = self._loop.time()  # the quiet while paused was ours, not the server's
            if self._transport is not None:
                self._transport.resume_reading()
        return chunk

    async def error_answer(self) -> ApiError:
        """The ApiError for a non-2xx answer, once its body is in."""
        while not self.finished:
            if self.failure is not None:
                return self.failure  # the body broke off: a lost connection, as httpx reading it would say
            await self.wait()
        content = b"".join(self.chunks)
        self.chunks.clear()
        phrase = self.reason
        if not phrase:
            with contextlib.suppress(ValueError):
                phrase = http.HTTPStatus(self.status).phrase
        return answer_error(self.status, phrase, content, content.decode("utf-8", "replace"), self.headers.get("retry-after", ""))

    def close(self) -> None:
        # abort, not close: nothing is left to send, and a TLS close would wait for the peer.
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        transport, self._transport = self._transport, None
        if transport is not None:
            transport.abort()

    # --- asyncio's side ---------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        self._heard = self._loop.time()
        if self._pending:
            data = self._pending + data
            self._pending = b""
        try:
            self._parse(data)
        except ValueError as exc:
            self._fail(ApiError(0, "ConnectionLost", f"malformed answer from the API server: {exc}"))
            return
        self._wake()

    def eof_received(self) -> bool | None:
        return None  # close: connection_lost says whether the body was whole

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._state == _CLOSE and exc is None:
            self._state = _DONE
            self.finished = True
        elif not self.finished and self.failure is None:
            cause = f"{type(exc).__name__}: {exc}" if exc is not None else "closed by the server"
            where = "before answering" if not self.head_done else "mid-answer"
            self.failure = ApiError(0, "ConnectionLost", f"the API server connection broke {where} ({cause})")
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _fail(self, failure: ApiError) -> None:
        if self.failure is None and not self.finished:
            self.failure = failure
        self.close()
        self._wake()

    def _check_quiet(self) -> None:
        self._timer = None
        if self.finished or self.failure is not None:
            return
        now = self._loop.time()
        if self._paused:
            self._heard = now  # not reading by choice: the server is not late
        quiet = now - self._heard
        if quiet >= self._read_timeout:
            self._fail(ApiError(0, "Timeout", f"timed out waiting for the Kubernetes API server (nothing heard for {quiet:.0f} s)"))
            return
        # Re-armed lazily here instead of on every data_received: one timer per quiet period.
        self._timer = self._loop.call_later(self._read_timeout - quiet, self._check_quiet)

    def _body(self, piece: bytes) -> None:
        self.chunks.append(piece)
        self._queued += len(piece)
        if self._streaming and not self._paused and self._queued > WATCH_HIGH_WATER and self._transport is not None:
            self._paused = True
            self._transport.pause_reading()

    def _parse(self, data: bytes) -> None:
        """Consume ``data``; what cannot be parsed yet waits in ``_pending``. ValueError: malformed."""
        pos, end = 0, len(data)
        while pos < end:
            state = self._state
            if state == _DATA or state == _LENGTH:
                take = min(self._remaining, end - pos)
                self._body(data if take == end and not pos else data[pos : pos + take])
                pos += take
                self._remaining -= take
                if not self._remaining:
                    if state == _DATA:
                        self._state = _DATA_END
                    else:
                        self._end()
            elif state == _DATA_END:
                first = data[pos]
                if first == 0x0A:  # b"\n": a bare LF, as lenient parsers accept
                    pos += 1
                elif first != 0x0D:
                    raise ValueError("chunk data not followed by CRLF")
                elif pos + 1 == end:
                    break  # the LF is in the next read
                elif data[pos + 1] != 0x0A:
                    raise ValueError("chunk data not followed by CRLF")
                else:
                    pos += 2
                self._state = _SIZE
            elif state == _SIZE or state == _TRAILER:
                newline = data.find(b"\n", pos)
                if newline < 0:
                    if end - pos > _MAX_HEAD:
                        raise ValueError("chunk size line too long")
                    break
                line = data[pos:newline].strip()
                pos = newline + 1
                if state == _TRAILER:
                    if not line:
                        self._end()
                    continue
                size = line.split(b";", 1)[0].strip()  # chunk extensions carry nothing we use
                if not size or size.translate(None, b"0123456789abcdefABCDEF"):
                    raise ValueError(f"bad chunk size {size[:20]!r}")
                self._remaining = int(size, 16)
                self._state = _DATA if self._remaining else _TRAILER
            elif state == _CLOSE:
                self._body(data if pos == 0 else data[pos:])
                pos = end
            elif state == _HEAD:
                start = self._parse_head(data, pos)
                if start < 0:
                    break
                pos = start
            else:  # _DONE: anything after the answer is no answer of ours
                pos = end
        if pos < end:
            self._pending = data[pos:]

    def _parse_head(self, data: bytes, pos: int) -> int:
        """The status line and headers from ``pos``; where the body starts, -1 when incomplete."""
        blank = data.find(b"\r\n\r\n", pos)
        stop = blank + 4
        if blank < 0:
            blank = data.find(b"\n\n", pos)
            stop = blank + 2
        if blank < 0:
            if len(data) - pos > _MAX_HEAD:
                raise ValueError("headers too long")
            return -1
        lines = data[pos:blank].decode("latin-1").split("\n")
        version, _, rest = lines[0].strip().partition(" ")
        code, _, reason = rest.partition(" ")
        if not version.startswith("HTTP/1.") or len(code) != 3 or not code.isdigit():
            raise ValueError(f"bad status line {lines[0][:80]!r}")
        status = int(code)
        if 100 <= status < 200:
            return stop  # an interim answer (100 Continue): the real one follows
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, colon, value = line.partition(":")
            if not colon:
                raise ValueError(f"bad header line {line[:80]!r}")
            name, value = name.strip().lower(), value.strip()
            headers[name] = f"{headers[name]}, {value}" if name in headers else value
        self._streaming = 200 <= status < 300
        if self._streaming and headers.get("content-encoding", "identity").lower() != "identity":
            raise ValueError(f"watch body in {headers['content-encoding']!r} encoding, though identity was asked for")
        self.status, self.reason, self.headers = status, reason.strip(), headers
        self.head_done = True
        coding = headers.get("transfer-encoding", "")
        length = headers.get("content-length", "")
        if status in (204, 304):
            self._end()
        elif coding:
            # Only chunked as the last coding has an end of its own; anything else runs to the close.
            self._state = _SIZE if coding.rsplit(",", 1)[-1].strip().lower() == "chunked" else _CLOSE
        elif length:
            if not length.isdigit():
                raise ValueError(f"bad Content-Length {length[:20]!r}")
            self._remaining = int(length)
            self._state = _LENGTH
            if not self._remaining:
                self._end()
        else:
            self._state = _CLOSE
        return stop

    def _end(self) -> None:
        self._state = _DONE
        self.finished = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
