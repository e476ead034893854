"""What the fake records: revisions, requests, scripted faults, webhooks."""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .wire import Obj, Resource, bad_request

Key = tuple[str, str]  # (namespace, name); namespace "" for cluster-scoped


def now_rfc3339(clock: Callable[[], dt.datetime]) -> str:
    return clock().astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Change:
    """One revision: what happened to one object."""

    rv: int
    res: Resource
    key: Key
    type: str  # ADDED, MODIFIED, DELETED
    obj: Obj  # the object after the change (DELETED: its last state, at the deleting revision)
    prev: Obj | None


@dataclass
class Request:
    """One request as the fake received it."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes
    at: float = field(default_factory=time.monotonic)  # when it arrived

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None

    def __repr__(self) -> str:
        q = "&".join(f"{k}={v}" for k, v in self.query.items())
        return f"<{self.method} {self.path}{'?' + q if q else ''}>"


@dataclass
class Fault:
    remaining: int
    code: int
    method: str | None
    path: str | None
    message: str | None
    body: Obj | None
    watch: bool | None = None  # only watch requests (True), only others (False), or both


@dataclass
class Interlude:
    """Another client's write, staged to land just before a matching request is served."""

    change: Callable[[Any], Any]  # called with the State
    method: str | None
    path: str | None


@dataclass
class MutatingWebhook:
    name: str
    url: str
    verify: Any = True  # passed to httpx: True, False, a CA file path or an ssl.SSLContext
    resources: tuple[str, ...] = ("pods",)
    operations: tuple[str, ...] = ("CREATE",)
    failure_policy: str = "Fail"
    timeout_seconds: int = 10
    reviews: list[Obj] = field(default_factory=list)  # every AdmissionReview sent and its answer


def go_bool(text: str) -> bool:
    if text in ("1", "t", "T", "TRUE", "true", "True"):
        return True
    if text in ("0", "f", "F", "FALSE", "false", "False", ""):
        return False
    raise bad_request(f'strconv.ParseBool: parsing "{text}": invalid syntax')
