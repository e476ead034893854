"""Request bodies judged before they are parsed: what they would cost in memory, and how much
of that the bodies being parsed and answered may hold at once.

Parsed JSON takes far more room than its text, and how much more depends on its shape.
orjson parses in two steps: yyjson reads the text into a document of 16-byte values (it
reserves 12 bytes per byte of text for it and writes a copy of the text and the values it
finds), then Python objects are built from the document and the document freed. Measured
per shape, 1 and 16 MiB bodies, each parsed once in a fresh process with the collector off
(as ``decode`` parses), peak RSS growth (the kernel's VmHWM) and tracemalloc's peak, both
as a multiple of the body's size, beside ``Estimate``'s two figures:

                                        RSS   estimated   allocated   estimated
    [1,1,...], [0,0,...]                13.0     37.0        16.0        48.0
    [true,...], [null,...]               5.8     15.4        13.6        26.4
    [257,...], [1.5,...], [1e1,...]     15.0     19.0        21.0        30.0
    ["a",...]                           23.1     31.0        26.5        42.0
    ["é",...]                           21.9     25.0        28.4        36.0
    [{},...]                            30.4     57.0        36.0        68.0
    [[],...]                            30.4     62.3        33.3        73.3
    [{"":0},...]                        36.6     49.0        39.4        60.0
    {"0":0,"1":0,...}, distinct keys    17.5     24.2        23.6        35.2
    {"0":1000,...}, distinct keys       16.7     19.0        22.8        30.0
    [[[...]]], 1,000 deep               49.1     57.0        44.0        68.0
    {"a":{"a":...}}, 500 deep           38.5     45.0        42.6        56.0
    [{"a":[{"a":...}]}], 500 deep       41.2     48.0        43.0        59.0
    whole nodes, captured and grown      5.8     16.0        15.4        27.0
    victims, captured and grown          7.0     16.9        16.5        27.9
    node names, captured and grown       7.2      9.4        16.8        20.4

(``tests/test_body_memory.py`` measures over 40 shapes at three sizes and holds both figures
above what it measures.) tracemalloc counts all of yyjson's reservation, but pages never
written are never resident: RSS, which is what a container's memory limit counts, is bounded
by ``parsed_bytes``, and kpe's limits are in those. The estimate is a count of five bytes in
C over the body, priced at the dearest each can be: a ``[`` a list (its object, its items, a
yyjson value and a slot in its parent: 96 bytes measured for a list of one in a list), a
``{`` an empty dict, a string pair of ``"`` a new str, a ``,`` another value (an int past
CPython's cached ones takes 56 bytes with its slot and yyjson value), a ``:`` a key with its
share of the dict's table (a dict of one key measured 225 bytes with its key and value); each
priced at least 10% above the densest shape that needed it. The price is the estimate's slack
on real requests: they estimate 9 to 17 times their size and take 6 to 7.

A body over 1 MiB whose estimate is more than ``MAX_EXPANSION`` times its size is refused
before parsing: no real request is that dense. Every body kpe parses holds its bytes and
their estimate in ``BodiesInFlight`` from when it has arrived until it is answered (a verb)
or parsed, and one that does not fit beside the others waits for them
(``server/http/responses.py``).
"""

from __future__ import annotations

import asyncio
import gc
from collections import deque
from dataclasses import dataclass
from typing import Any

import orjson

# What parsing a body takes per byte of its text, before the values in it: the copy yyjson
# parses in place (written, so resident), and the whole document it reserves (allocated).
COPIED_PER_BYTE = 1
RESERVED_PER_BYTE = 12
# Per byte that starts a JSON value, at the dearest the measured shapes needed: see above.
ARRAY_BYTES = 112
OBJECT_BYTES = 96
STRING_BYTES = 48
ITEM_BYTES = 72
KEY_BYTES = 120
# Real requests (whole nodes, node names, victims, AdmissionReviews) estimate at 9 to 17 times
# their size; the dense shapes above at 19 to 62.
MAX_EXPANSION = 20.0
JUDGED_FROM_BYTES = 1 << 20
# What a body too small to be judged is charged per byte: no shape measured estimates more.
UNJUDGED_EXPANSION = 64


@dataclass(frozen=True)
class Estimate:
    size: int
    arrays: int
    objects: int
    strings: int
    items: int
    keys: int

    @property
    def values_bytes(self) -> int:
        return self.arrays * ARRAY_BYTES + self.objects * OBJECT_BYTES + self.strings * STRING_BYTES + self.items * ITEM_BYTES + self.keys * KEY_BYTES

    @property
    def parsed_bytes(self) -> int:
        """At least the RSS that parsing the body adds at its peak."""
        return self.size * COPIED_PER_BYTE + self.values_bytes

    @property
    def allocated_bytes(self) -> int:
        """At least what parsing the body allocates at its peak (tracemalloc's peak)."""
        return self.size * RESERVED_PER_BYTE + self.values_bytes

    @property
    def expansion(self) -> float:
        return self.parsed_bytes / self.size if self.size else 0.0


def estimate(raw: bytes) -> Estimate:
    return Estimate(len(raw), raw.count(b"["), raw.count(b"{"), raw.count(b'"') // 2, raw.count(b","), raw.count(b":"))


def judged(raw: bytes) -> tuple[int, str]:
    """What ``raw`` holds while it is parsed and answered (its bytes and the parsed values), and
    why it is refused before parsing ("" when it is parsed). A small body is not counted over:
    it is charged as the densest JSON would cost."""
    if len(raw) < JUDGED_FROM_BYTES:
        return len(raw) * (1 + UNJUDGED_EXPANSION), ""
    found = estimate(raw)
    held = found.size + found.parsed_bytes
    if found.expansion <= MAX_EXPANSION:
        return held, ""
    return held, (
        f"request body of {found.size:,} bytes holds {found.arrays + found.objects:,} JSON objects and arrays and {found.strings:,} strings, "
        f"about {found.parsed_bytes / 2**20:,.0f} MiB once parsed ({found.expansion:.0f} times its size; kpe parses at most "
        f"{MAX_EXPANSION:g} times): no kube-scheduler or API server request is shaped like that"
    )


def implausible(raw: bytes) -> str:
    """Why ``raw`` is refused before parsing ("" when it is parsed)."""
    return judged(raw)[1]


class BodiesInFlight:
    """The bytes that request bodies being parsed and answered hold at once, kept within
    ``budget``. A body that does not fit waits, in order of arrival, for others to be
    answered; one that does fit goes ahead of those waiting, so a large body that waits
    never holds up the scheduler's small ones behind it."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.held = 0
        self._waiting: deque[tuple[int, asyncio.Future[None]]] = deque()

    async def take(self, amount: int, timeout: float) -> bool:
        """Hold ``amount`` bytes, waiting at most ``timeout`` seconds for room (False: none came)."""
        if self.held + amount <= self.budget:
            self.held += amount
            return True
        turn = asyncio.get_running_loop().create_future()
        entry = (amount, turn)
        self._waiting.append(entry)
        try:
            await asyncio.wait((turn,), timeout=timeout)
        except BaseException:
            # Cancelled (the client went away) perhaps just as its turn came.
            if turn.done():
                self.give_back(amount)
            else:
                self._waiting.remove(entry)
            raise
        if turn.done():
            return True
        self._waiting.remove(entry)
        return False

    def give_back(self, amount: int) -> None:
        self.held -= amount
        while self._waiting and self.held + self._waiting[0][0] <= self.budget:
            amount, turn = self._waiting.popleft()
            self.held += amount
            turn.set_result(None)


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
