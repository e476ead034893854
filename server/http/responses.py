"""Requests and answers of kpe's JSON endpoints: bodies read against a size limit and a
time limit, held within the memory that bodies in flight may take, JSON decoded or refused
with the 4xx that says why, and answers encoded once.

Every surface (the verbs, the webhook, introspection, reservations) reads and answers
through here, so a malformed or oversized body gets the same error wherever it is sent.

A body that has arrived holds its bytes and the estimate of what parsing it takes
(``server/http/body.py``) in the application's ``BodiesInFlight`` until it is answered (a
verb) or parsed (the webhook, introspection), within ``--body-memory-bytes``. One that does
not fit beside the others waits for room, as long as a body may take to arrive
(``--body-timeout-s``), rather than being refused at once: kube-scheduler sends one request
at a time, so one of its requests that finds others in flight most often finds them about
to be answered. If no room comes it gets a 503 with Retry-After, which kube-scheduler
treats as a failed extender call: the pod is tried again after its backoff.
"""

from __future__ import annotations

import asyncio
from contextvars import ContextVar
from typing import Any

import orjson
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from server.http.body import BodiesInFlight, decode, implausible, judged

MiB = float(1 << 20)
# The body admitted in this request's task, already judged: ``parse_json`` need not count over it again.
_admitted: ContextVar[bytes | None] = ContextVar("kpe_admitted_body", default=None)


class HTTPProblem(Exception):
    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}


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
    raw = await read_body(request.receive, request.headers.get("content-length"), limit, timeout)
    in_flight = bodies_in_flight(request.app)
    held = await admit(in_flight, raw, timeout)
    try:
        return parse_json(raw)
    finally:
        release(in_flight, held)


def bodies_in_flight(app: Any) -> BodiesInFlight:
    """The application's bodies in flight, within its ``--body-memory-bytes``."""
    found: BodiesInFlight | None = getattr(app.state, "bodies_in_flight", None)
    if found is None:
        found = app.state.bodies_in_flight = BodiesInFlight(app.state.kpe.settings.body_memory_bytes)
    return found


async def admit(in_flight: BodiesInFlight, raw: bytes, timeout: float) -> int:
    """Hold ``raw`` among the bodies in flight until ``release``; what it holds. A 413 when it is
    shaped as no request is or would alone take more than all bodies may, a 503 when no room
    came beside the others within ``timeout``."""
    held, refused = judged(raw)
    if refused:
        raise HTTPProblem(413, refused)
    if held > in_flight.budget:
        raise HTTPProblem(
            413,
            f"request body of {len(raw):,} bytes would take about {held / MiB:,.1f} MiB with what parsing it makes, over the "
            f"{in_flight.budget / MiB:,.1f} MiB that request bodies being parsed and answered may take at once (--body-memory-bytes)",
        )
    if not await in_flight.take(held, timeout):
        raise HTTPProblem(
            503,
            f"kpe is parsing or answering other request bodies: this one (about {held / MiB:,.1f} MiB with what parsing it makes) "
            f"found no room beside them in the {in_flight.budget / MiB:,.1f} MiB they may take at once (--body-memory-bytes) "
            f"within {timeout:g} s (--body-timeout-s); retry",
            headers={"Retry-After": "1"},
        )
    _admitted.set(raw)  # in the request's own task: nothing else sees it
    return held


def release(in_flight: BodiesInFlight, held: int) -> None:
    _admitted.set(None)
    in_flight.give_back(held)


def parse_json(raw: bytes) -> Any:
    """A request body as JSON, or the 4xx that says why not."""
    if not raw.strip():
        raise HTTPProblem(400, "request body is empty; expected JSON")
    if _admitted.get() is not raw:
        refused = implausible(raw)
        if refused:
            raise HTTPProblem(413, refused)
    try:
        return decode(raw)
    except orjson.JSONDecodeError as exc:
        raise HTTPProblem(400, f"malformed JSON: {exc}") from None
