"""The evaluation worker: one thread that runs the engine's decisions off the event loop.

A decision is pure Python and can take a while (a large cluster, an expensive
policy). Run on the event loop, it would hold up every other request for that
long: the scheduler's next call, the webhook, ``/healthz`` and the liveness
probe. In one worker thread it still holds the interpreter, but Python hands
the event loop a turn every few milliseconds, so those keep answering.

One thread, not a pool: decisions share the equivalence cache and the cache's
``nodeInfo`` map; kube-scheduler sends one request at a time anyway. A decision
that needs little evaluation runs on the event loop instead, but only while
this thread is ``idle``, so the two never work on them at once.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")
# How long a thread may hold the interpreter while another waits for it. Python's 5 ms made
# the event loop (applying a watch event, answering a probe) and the worker queue behind each
# other: 0.7 ms more per scheduler request at 1,000 nodes (bench/server_bench.py); at 0.5 ms,
# 0.15 ms more than evaluating on the event loop.
SWITCH_INTERVAL_S = 0.0005


class Worker:
    def __init__(self, *, name: str = "kpe-evaluation") -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        # Each counter has one writer (the event loop, this thread), so no lock: idle when equal.
        # Counted where the call really ends: a caller cancelled while waiting leaves it running.
        self._submitted = 0
        self._finished = 0
        sys.setswitchinterval(SWITCH_INTERVAL_S)

    @property
    def idle(self) -> bool:
        """No call is queued or running (read on the event loop)."""
        return self._submitted == self._finished

    def _call(self, context: contextvars.Context, fn: Callable[..., T], args: Any, kwargs: Any) -> T:
        try:
            return context.run(fn, *args, **kwargs)
        finally:
            self._finished += 1

    async def run(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` in the worker thread (with the caller's context: the request id)."""
        call = functools.partial(self._call, contextvars.copy_context(), fn, args, kwargs)
        self._submitted += 1
        try:
            future = asyncio.get_running_loop().run_in_executor(self._pool, call)
        except BaseException:
            self._submitted -= 1  # never queued (the pool is shut down)
            raise
        return await future

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
