"""What every extender verb shares: the answer it gives, the errors it says when kpe's
cache cannot serve node names, and where its decision runs (the event loop when cheap,
else the worker thread).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from engine.decisions.deadline import Deadline
from engine.equivalence.classes import Offload

from server.state import ServerState

GENERATION_HEADER = "X-Kpe-Policy-Generation"
NO_CLUSTER = (
    "kpe has no cluster access, so it cannot resolve node names: configure the extender with "
    "nodeCacheCapable: false, or give kpe credentials (in-cluster service account or --kubeconfig)"
)


NOT_SYNCED = (
    "kpe's node and pod cache has not synced with the API server yet; kpe cannot resolve node names "
    "or victims until it has (its /readyz says when)"
)


def cache_unusable(state: ServerState) -> str:
    """Why node names cannot be answered from kpe's cache now ("" when they can): before its
    first sync every name would be unknown, and after a long cut-off from the API server
    (--cache-stale-after-s) its nodes and pods may be long gone. Said as an error, the
    scheduler retries the pod; said as FailedNodes, it would take them as real verdicts."""
    cache = state.cache
    assert cache is not None
    why = f" (last error: {cache.last_error})" if cache.last_error else ""
    if not cache.synced.is_set():
        return NOT_SYNCED + why
    limit = state.settings.cache_stale_after_s
    stale = cache.stale_seconds() if limit > 0 else 0.0
    if stale > limit:
        return (
            f"kpe's node and pod cache has heard nothing from the API server for {stale:.0f} s "
            f"(over --cache-stale-after-s {limit:g}){why}; not answering from it"
        )
    return ""


def pod_label(pod: dict[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', 'default')}/{meta.get('name', '?')}"


@dataclass(frozen=True, slots=True)
class Answer:
    """A verb's answer: the JSON body, its status and extra headers."""

    data: Any
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    encoded: bytes | None = None  # ``data`` already encoded as JSON (sent instead of encoding it)
    after: Callable[[], None] | None = None  # called on the event loop once the answer is written


Handler = Callable[[bytes, Deadline, ServerState], Awaitable[Answer]]
"""A verb: the request body as received, the request's deadline and the state in; the answer out."""

# Nodes a filter or prioritize may evaluate on the event loop. Most requests of the scheduler's
# stream need a handful (the equivalence cache holds the rest): answered in place, they skip the
# hand-off to the worker thread and back, about a fifth of kpe's CPU per scheduled pod. A request
# with more waits for the worker, so a large evaluation never holds up the other listeners.
INLINE_MISSES = 32
T = TypeVar("T")


async def evaluate(state: ServerState, verb: str, decide: Callable[[int | None], T]) -> T:
    """``decide(max_misses)`` on the event loop when it is cheap and the worker is idle (so the
    two never share the equivalence cache), else ``decide(None)`` on the worker thread."""
    if state.worker.idle:
        try:
            return decide(INLINE_MISSES)
        except Offload:
            pass
    state.metrics.offloaded.labels(verb).inc()
    return await state.worker.run(decide, None)
