"""What every extender verb shares: the answer it gives, the errors it says when kpe's
cache cannot serve node names, and where its decision runs (the event loop when cheap,
else the worker thread).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from engine.decisions.deadline import Deadline
from engine.equivalence.memo import Offload

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
NOT_CONNECTED = "kpe's node and pod cache is not connected to the API server"


def cache_unusable(state: ServerState) -> str:
    """Why node names cannot be answered from kpe's cache now ("" when they can): before its
    first sync every name would be unknown, and from a watch break until the cache has caught
    up again (relisted, or heard from its resumed watch) it may miss any change made meanwhile,
    a node's new label included. Said as an error, the scheduler retries the pod; said as
    FailedNodes, it would take them as real verdicts. --cache-stale-after-s 0 answers from
    whatever the cache holds, connected or not."""
    cache = state.cache
    assert cache is not None
    why = f" (last error: {cache.last_error})" if cache.last_error else ""
    if not cache.synced.is_set():
        return NOT_SYNCED + why
    if state.settings.cache_stale_after_s <= 0:
        return ""
    lost = cache.disconnection()
    if lost is not None:
        seconds, reason = lost
        return (
            f"{NOT_CONNECTED} for {seconds:.0f} s ({reason}){why}; not answering node names from it "
            "until it has caught up (its /readyz says when)"
        )
    return ""



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

# Seconds of evaluation a filter or prioritize may spend on the event loop, by its equivalence
# class's measured cost per node. Most requests of the scheduler's stream evaluate a few nodes
# (the equivalence cache holds the rest): answered in place, they skip the hand-off to the worker
# thread and back, about a fifth of kpe's CPU per scheduled pod. The event loop also answers the
# probes and /metrics and applies watch events, so what it evaluates is bounded by time, not by
# a count of nodes that a slow policy can make last seconds. 5 ms is about the 32 nodes of the
# shipped policies the loop used to take (50 to 140 us a node on bench/cluster.py's nodes): at
# 2 ms, 15% of scheduler_bench.py's prioritizes lost the answer worked out ahead; at 5 ms as many
# kept it as with 32 nodes (2,766 and 2,788 of 3,000). A probe waits milliseconds for it, where
# a slow policy on 32 nodes held it for seconds.
INLINE_BUDGET_S = 0.005
T = TypeVar("T")


class Remaining(Exception):
    """Raised by a decision on the event loop once the part it could do there is done: what is
    left (``rest``, called as a decision is, with no inline budget) is evaluation of its own, and
    runs on the worker thread without the part done being done again. A filter whose pods in
    flight are to be counted used to be evaluated whole a second time on the worker, its
    equivalence classes asked twice."""

    def __init__(self, rest: Callable[[float | None], Any]) -> None:
        super().__init__("the rest of the decision runs on the worker thread")
        self.rest = rest


async def evaluate(state: ServerState, verb: str, decide: Callable[[float | None], T]) -> T:
    """``decide(inline_s)`` on the event loop when the worker is idle (so the two never share the
    equivalence cache) and the engine expects it to fit the inline budget, else ``decide(None)``
    on the worker thread: the engine raises ``Offload`` before evaluating anything it cannot
    vouch for (a class whose cost is not measured yet, a request without a class). A decision
    that raises ``Remaining`` has its rest run on the worker instead."""
    rest: Callable[[float | None], Any] = decide
    if state.worker.idle:
        try:
            return decide(INLINE_BUDGET_S)
        except Offload:
            pass
        except Remaining as left:
            rest = left.rest
    state.metrics.offloaded.labels(verb).inc()
    done: T = await state.worker.run(rest, None)
    return done
