"""One open watch stream and what the watch cache sends on it."""

from __future__ import annotations

import asyncio
import copy

from .records import Change
from .selectors import Predicate
from .wire import Obj, Resource, canonical, dumps


class Watcher:
    """One open watch stream. Items reach the stream's event loop in revision order."""

    def __init__(self, res: Resource, namespace: str | None, pred: Predicate, bookmarks: bool, loop: asyncio.AbstractEventLoop) -> None:
        self.res = res
        self.namespace = namespace
        self.pred = pred
        self.bookmarks = bookmarks
        self.loop = loop
        self.queue: asyncio.Queue[tuple[str, bytes]] = asyncio.Queue()
        self.start_rv = 0

    def push(self, kind: str, data: bytes = b"") -> None:
        try:
            self.loop.call_soon_threadsafe(self.queue.put_nowait, (kind, data))
        except RuntimeError:  # the loop is gone: the stream is over anyway
            pass

    def convert(self, ch: Change) -> tuple[str, Obj] | None:
        """The watch cache's rule: a change moving an object into or out of the selection is ADDED or DELETED."""
        if self.namespace is not None and ch.key[0] != self.namespace:
            return None
        cur = ch.type != "DELETED" and self.pred(ch.obj)
        old = ch.prev is not None and self.pred(ch.prev)
        if cur and not old:
            return "ADDED", ch.obj
        if cur and old:
            return "MODIFIED", ch.obj
        if old and ch.prev is not None:
            gone = copy.deepcopy(ch.prev)
            gone["metadata"]["resourceVersion"] = str(ch.rv)
            return "DELETED", gone
        return None

    def offer(self, ch: Change) -> None:
        event = self.convert(ch)
        if event:
            self.push("data", dumps({"type": event[0], "object": canonical(event[1])}))


def bookmark_line(res: Resource, rv: int) -> bytes:
    """A BOOKMARK: the kind's zero value with only the resourceVersion set (nodes-watch-stream.jsonl)."""
    obj = {"kind": res.kind, "apiVersion": res.api_version,
           "metadata": {"resourceVersion": str(rv), "creationTimestamp": None}, **copy.deepcopy(res.zero)}
    return dumps({"type": "BOOKMARK", "object": obj})
