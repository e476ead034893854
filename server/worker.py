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
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")


class Worker:
    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kpe-evaluation")

    async def run(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` in the worker thread (with the caller's context: the request id)."""
        context = contextvars.copy_context()
        call = functools.partial(context.run, fn, *args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(self._pool, call)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
