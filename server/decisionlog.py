"""A bounded in-memory log of recent decisions, for ``/apis/v1/decisions``:
what kpe answered for which pod, on which generation, and why."""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any


class DecisionLog:
    def __init__(self, size: int) -> None:
        self._entries: deque[dict[str, Any]] = deque(maxlen=max(1, size))
        self._lock = threading.Lock()
        self._seq = 0

    def record(self, verb: str, pod: str, generation: str, **details: Any) -> None:
        with self._lock:
            self._seq += 1
            self._entries.append({"seq": self._seq, "time": time.time(), "verb": verb, "pod": pod, "generation": generation, **details})

    def recent(self, *, verb: str | None = None, pod: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        with self._lock:
            entries = list(self._entries)
        out = [e for e in reversed(entries) if (verb is None or e["verb"] == verb) and (pod is None or e["pod"] == pod)]
        return out[: max(0, limit)]
