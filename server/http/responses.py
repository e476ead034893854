"""Requests and answers of kpe's JSON endpoints: bodies read against a size limit and a
time limit, JSON decoded or refused with the 4xx that says why, and answers encoded once.

Every surface (the verbs, the webhook, introspection, reservations) reads and answers
through here, so a malformed or oversized body gets the same error wherever it is sent.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from server.http.body import decode, implausible


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
