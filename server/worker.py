"""The evaluation worker: one thread that runs the engine's decisions off the event loop.

A decision is pure Python and can take a while (a large cluster, an expensive
policy). Run on the event loop, it would hold up every other request for that
long: the scheduler's next call, the webhook, ``/healthz`` and the liveness
probe. In one worker thread it still holds the interpreter, but Python hands
the event loop a turn every few milliseconds, so those keep answering.

One thread, not a pool: decisions share the equivalence cache and the cache's
``nodeInfo`` map, which only this thread reads and rebuilds; kube-scheduler
sends one request at a time anyway.
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
    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kpe-evaluation")
        sys.setswitchinterval(SWITCH_INTERVAL_S)

    async def run(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` in the worker thread (with the caller's context: the request id)."""
        context = contextvars.copy_context()
        call = functools.partial(context.run, fn, *args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(self._pool, call)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
