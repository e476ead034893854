"""A bounded in-memory log of recent decisions, for ``/apis/v1/decisions``:
what kpe answered for which pod, on which generation, and why.

Bounded twice: by entries (``--decision-log-size``) and by bytes
(``--decision-log-bytes``), the oldest going first. A whole-node filter at
1,000 nodes can name every node with its reason (about 170 KB), so one entry
keeps at most 1/16 of the byte budget: its largest mappings and lists are cut
to their first items, and ``leftOut`` says how many of each were dropped.

Each entry is kept as its JSON, which is what ``/apis/v1/decisions`` sends, so the
byte budget is the memory it takes. Kept as Python dicts, the same entries took
2.3 times their JSON: scheduling 2,000 varied pods (``bench/memory_bench.py
--schedule``) grew kpe by 36 MiB for a 16 MiB budget. A request reads back only the
entries it returns.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any

import orjson

ENTRY_SHARE = 16  # one entry keeps at most 1/ENTRY_SHARE of the byte budget


Encoded = bytes  # an entry's JSON (the log's property ``bytes`` hides the name inside the class)


def _encoded(entry: dict[str, Any]) -> Encoded:
    return orjson.dumps(entry, default=str)


class DecisionLog:
    def __init__(self, size: int, max_bytes: int = 4 * 1024 * 1024) -> None:
        self.size = max(1, size)
        self.max_bytes = max_bytes
        self._entries: deque[tuple[int, str, str, Encoded]] = deque()  # seq, verb, pod, the entry's JSON
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
        # seq is given under the lock, after encoding: the JSON holds 0 and recent() puts it back.
        entry = {"seq": 0, "time": time.time(), "verb": verb, "pod": pod, "generation": generation, **details}
        encoded = _encoded(entry)
        if len(encoded) > self.max_entry_bytes:
            encoded = self._shrink(entry, encoded)
        # A copy of exactly its length (engine.cluster.keptjson says why): orjson's own bytes
        # would make the kept log four times its budget.
        encoded = memoryview(encoded).tobytes()
        with self._lock:
            self._seq += 1
            self._entries.append((self._seq, verb, pod, encoded))
            self._bytes += len(encoded)
            while len(self._entries) > 1 and (len(self._entries) > self.size or self._bytes > self.max_bytes):
                gone = self._entries.popleft()[3]
                self._bytes -= len(gone)

    def _shrink(self, entry: dict[str, Any], encoded: Encoded) -> Encoded:
        """Cut the entry's mappings and lists to their first items until it fits (or nothing is left to cut)."""
        size = len(encoded)
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
            encoded = _encoded(entry)
            size = len(encoded)
        return encoded

    def recent(self, *, verb: str | None = None, pod: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        with self._lock:
            entries = list(self._entries)
        out: list[dict[str, Any]] = []
        for seq, kind, subject, encoded in reversed(entries):
            if len(out) >= limit:
                break
            if (verb is None or kind == verb) and (pod is None or subject == pod):
                entry: dict[str, Any] = orjson.loads(encoded)
                entry["seq"] = seq
                out.append(entry)
        return out
