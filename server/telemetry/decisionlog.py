"""A bounded in-memory log of recent decisions, for ``/apis/v1/decisions``:
what kpe answered for which pod, on which generation, and why.

Bounded twice: by entries (``--decision-log-size``) and by bytes
(``--decision-log-bytes``), the oldest going first. A whole-node filter at
1,000 nodes can name every node with its reason (about 170 KB), so one entry
keeps at most 1/16 of the byte budget: its largest mappings and lists are cut
to their first items, and ``leftOut`` says how many of each were dropped. An
entry's size is the length of its JSON, which is what ``/apis/v1/decisions``
sends and close to what it holds in memory.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any

import orjson

ENTRY_SHARE = 16  # one entry keeps at most 1/ENTRY_SHARE of the byte budget


def _size(entry: dict[str, Any]) -> int:
    return len(orjson.dumps(entry, default=str))


class DecisionLog:
    def __init__(self, size: int, max_bytes: int = 16 * 1024 * 1024) -> None:
        self.size = max(1, size)
        self.max_bytes = max_bytes
        self._entries: deque[tuple[dict[str, Any], int]] = deque()
        self._bytes = 0
        self._lock = threading.Lock()
        self._seq = 0

    @property
    def max_bytes(self) -> int:
        return self._max_bytes

    @max_bytes.setter
    def max_bytes(self, value: int) -> None:
        self._max_bytes = max(1024, value)
        self.max_entry_bytes = self._max_bytes // ENTRY_SHARE

    @property
    def bytes(self) -> int:
        """The estimated size of the entries kept now."""
        return self._bytes

    def record(self, verb: str, pod: str, generation: str, **details: Any) -> None:
        entry = {"seq": 0, "time": time.time(), "verb": verb, "pod": pod, "generation": generation, **details}
        size = _size(entry)
        if size > self.max_entry_bytes:
            entry, size = self._shrink(entry, size)
        with self._lock:
            self._seq += 1
            entry["seq"] = self._seq
            self._entries.append((entry, size))
            self._bytes += size
            while len(self._entries) > 1 and (len(self._entries) > self.size or self._bytes > self.max_bytes):
                _, gone = self._entries.popleft()
                self._bytes -= gone

    def _shrink(self, entry: dict[str, Any], size: int) -> tuple[dict[str, Any], int]:
        """Cut the entry's mappings and lists to their first items until it fits (or nothing is left to cut)."""
        left_out: dict[str, int] = {}
        for _ in range(4):
            collections = [k for k, v in entry.items() if k != "leftOut" and isinstance(v, (dict, list)) and len(v) > 1]
            if not collections or size <= self.max_entry_bytes:
                break
            # Keep the same share of each, sized from how far over the entry is (with a margin for the leftOut note).
            share = self.max_entry_bytes * 0.9 / size
            for key in collections:
                value = entry[key]
                keep = max(1, int(len(value) * share))
                if keep >= len(value):
                    continue
                left_out[key] = left_out.get(key, 0) + len(value) - keep
                entry[key] = dict(list(value.items())[:keep]) if isinstance(value, dict) else value[:keep]
            entry["leftOut"] = dict(left_out)
            size = _size(entry)
        return entry, size

    def recent(self, *, verb: str | None = None, pod: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        with self._lock:
            entries = [e for e, _ in self._entries]
        out = [e for e in reversed(entries) if (verb is None or e["verb"] == verb) and (pod is None or e["pod"] == pod)]
        return out[: max(0, limit)]
