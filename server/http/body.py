"""Request bodies judged before they are parsed: what they would cost in memory.

Parsed JSON takes far more room than its text: a real whole-node request from
kube-scheduler about 16 times its size at its peak, while a body of tiny values
(``[{},{},...]``, ``["a","a",...]``) takes 26 to 36 times, so a 60 MB body of
``{}`` needed about 2 GB. Counting the bytes that open objects, arrays and
strings is a scan in C (a few ms for tens of MB): kpe estimates the parsed size
from those counts and refuses a large body whose estimate is out of proportion
to its size before parsing it. Small bodies are never refused for this: they
cannot hurt.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass
from typing import Any

import orjson

# Bytes of Python objects per JSON value, from tracemalloc over parsed bodies: a dict or
# list with its slot in its parent, a str, and anything else that stands between separators.
CONTAINER_BYTES = 100
STRING_BYTES = 60
VALUE_BYTES = 16
# Real requests (whole nodes, node names, victims, AdmissionReviews) estimate at 5 to 7.5 times
# their size; bodies of tiny values at 16 and more.
MAX_EXPANSION = 12.0
JUDGED_FROM_BYTES = 1 << 20


@dataclass(frozen=True)
class Estimate:
    size: int
    containers: int
    strings: int
    values: int

    @property
    def parsed_bytes(self) -> int:
        return self.containers * CONTAINER_BYTES + self.strings * STRING_BYTES + self.values * VALUE_BYTES

    @property
    def expansion(self) -> float:
        return self.parsed_bytes / self.size if self.size else 0.0


def estimate(raw: bytes) -> Estimate:
    return Estimate(len(raw), raw.count(b"{") + raw.count(b"["), raw.count(b'"') // 2, raw.count(b",") + raw.count(b":"))


def implausible(raw: bytes) -> str:
    """Why ``raw`` is refused before parsing ("" when it is parsed)."""
    if len(raw) < JUDGED_FROM_BYTES:
        return ""
    found = estimate(raw)
    if found.expansion <= MAX_EXPANSION:
        return ""
    return (
        f"request body of {found.size:,} bytes holds {found.containers:,} JSON objects and arrays and {found.strings:,} strings, "
        f"about {found.parsed_bytes / 2**20:,.0f} MiB once parsed ({found.expansion:.0f} times its size; kpe parses at most "
        f"{MAX_EXPANSION:g} times): no kube-scheduler or API server request is shaped like that"
    )


def decode(raw: bytes | str) -> Any:
    """``orjson.loads(raw)`` with the cyclic garbage collector paused. Decoded JSON holds no
    cycles, yet each container it allocates counts toward the collector's thresholds: a
    1 MiB whole-node request set off about 70 young collections, and every tenth of those
    a pass over the older objects, which in kpe's process are the cache's. Measured on 60
    captured whole-node filter bodies beside 20 decoded ones kept alive: 33 ms per body with
    the collector running, 7 ms paused. Objects allocated meanwhile are still counted and
    collected once it runs again."""
    paused = gc.isenabled()
    gc.disable()
    try:
        return orjson.loads(raw)
    finally:
        if paused:
            gc.enable()
