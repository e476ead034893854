"""JSON kept for as long as the cluster is cached: ``orjson.dumps`` copied to its length.

``orjson.dumps`` writes into a buffer of at least 4 KiB and returns it without shrinking
it (orjson 3.13: a 9-byte result holds 4,097 bytes, a 5 KB one 64 KiB). Encoding to send
or to hash and let go costs nothing more; bytes kept as a key or a record cost that
buffer each. Kept bytes were the largest growth while kpe scheduled
(docs/performance.md, "Memory measured two ways"): the shared parts' keys of
``server.cluster.trim``, the pod fingerprints of the match memo, the whole nodes kept for
``server.verbs.wholenodes`` and the decision log, about 4 KiB of padding each.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson


def dumps_kept(value: Any, *, option: int | None = None, default: Callable[[Any], Any] | None = None) -> bytes:
    """``orjson.dumps(value, ...)`` at its exact length, for bytes that outlive the call.
    Raises what ``orjson.dumps`` raises."""
    return memoryview(orjson.dumps(value, default=default, option=option)).tobytes()
