"""The errors of calls to the Kubernetes API: every failure is an ``ApiError`` carrying the
API's ``Status`` (``server.cluster.kube``, ``server.cluster.watchstream``)."""

from __future__ import annotations

from typing import Any

import orjson

Obj = dict[str, Any]


class ApiError(Exception):
    """A refused or failed API call. ``status`` is the HTTP code (0: no answer at
    all, e.g. connection refused or timeout); ``body`` the Status object, if any."""

    def __init__(self, status: int, reason: str, message: str, body: Obj | None = None, *, retry_after: float | None = None) -> None:
        super().__init__(f"{status} {reason}: {message}" if status else f"{reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.body: Obj = body or {}
        details = self.body.get("details")
        hinted = details.get("retryAfterSeconds") if isinstance(details, dict) else None
        # How long the server asked us to wait (429 from API priority and fairness, 503, 504): the
        # Retry-After header, else the Status' details.retryAfterSeconds.
        self.retry_after: float | None = retry_after if retry_after is not None else (float(hinted) if isinstance(hinted, int) and hinted > 0 else None)

    @classmethod
    def from_status(cls, body: Obj, http_status: int = 0) -> ApiError:
        code = body.get("code")
        if not isinstance(code, int):
            code = http_status
        kind = Expired if code == 410 else cls
        return kind(code, str(body.get("reason") or ""), str(body.get("message") or ""), body)


class Expired(ApiError):
    """410 Gone: the resourceVersion was compacted away; list again from scratch."""


class WatchError(ApiError):
    """An ``ERROR`` event inside a watch stream (other than 410): the stream is
    no longer trustworthy, so the informer relists."""



def answer_error(code: int, phrase: str, content: bytes, text: str, retry_after: str) -> ApiError:
    """The ApiError for an answer with HTTP status ``code``, preferring the API's Status body."""
    try:
        body = orjson.loads(content)
    except orjson.JSONDecodeError:
        body = None
    if not (isinstance(body, dict) and body.get("kind") == "Status"):
        body = {"code": code, "reason": phrase, "message": text.strip()[:500] or phrase}
    error = ApiError.from_status(body, code)
    if retry_after.strip().isdigit() and int(retry_after) > 0:
        error.retry_after = float(retry_after)
    return error
