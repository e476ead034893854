"""Filling equivalence classes ahead of the scheduler (``engine.equivalence.warming``): after a
class's first filter with node names, for the classes seen last after a reload, and at start-up
for the classes of the pods waiting for a node.

Steps run on the event loop, about 2 ms each (``Warming.step_s``), only while the worker thread
is idle (so the two never share the equivalence cache, as for a request evaluated in place),
with a pause between steps so that requests and watch events waiting for the loop go first. A
request never waits for more than one step. The worker thread would not shorten that wait (a
request queued behind a step there waits as long, and pays the hand-off to the thread and back),
and it would send every request that arrives meanwhile to the thread, since the loop evaluates
only while the thread is idle.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
from collections.abc import Mapping
from typing import Any

from engine.decisions.deadline import Deadline
from engine.equivalence.filtering import filter_nodes
from engine.equivalence.scoring import score_nodes
from engine.equivalence.warming import Warming
from engine.policy.model import PolicySet

from server.http.wire import host_priority
from server.state import ServerState
from server.verbs.answer import cache_unusable

log = logging.getLogger("kpe.extender")

PAUSE_S = 0.001  # between steps: what waits for the event loop runs first
IDLE_WAIT_S = 1.0  # without jobs: how often the task looks at the policy set without being woken


def evaluate(state: ServerState, policy_set: PolicySet, pod: Mapping[str, Any], names: list[str], scores: bool) -> bool:
    """The filter on ``names``, and with ``scores`` the scores of the nodes it passed (what prioritize
    is asked; the filter's results are remembered by then), as the verbs evaluate them, through the
    equivalence cache; whether the filter was its class's first."""
    deadline = Deadline.after(state.settings.request_deadline_s)
    result = filter_nodes(policy_set, pod, state.nodes_by_name(names), node_info=state.node_info(), memo=state.equivalence, deadline=deadline,
                          counts=state.counts(), namespaces=state.namespaces())
    if scores and result.passed and state.lookahead.worth_working(policy_set, state.equivalence):
        score_nodes(policy_set, pod, state.nodes_by_name(result.passed), node_info=state.node_info(), memo=state.equivalence, deadline=deadline,
                    encode=host_priority, counts=state.counts(), namespaces=state.namespaces())
    return result.first_of_class


def step(state: ServerState, warming: Warming) -> None:
    collecting = gc.isenabled()
    gc.disable()  # as around a verb: the objects made here are gone before the collector would look
    before = warming.evaluated
    try:
        warming.step(state.store.current, lambda policy_set, pod, names, scores: evaluate(state, policy_set, pod, names, scores))
    except Exception:
        log.exception("internal error filling an equivalence class ahead of the scheduler")
        warming.clear()
    finally:
        if collecting:
            gc.enable()
        state.metrics.warmed.inc(warming.evaluated - before)


async def run(state: ServerState, warming: Warming, stop: asyncio.Event) -> None:
    """Run ``warming``'s steps until ``stop``; queue the classes seen last whenever the policies are reloaded."""
    wake = asyncio.Event()
    warming.on_job = wake.set
    reloads = state.store.subscribe()
    serving = state.store.current
    started = False
    while not stop.is_set():
        if not started and state.cache is not None and state.cache.synced.is_set():
            started = True
            warming.pending(serving, state.cache.pods(), list(state.cache.states))
        if state.store.current is not serving:
            serving = state.store.current
            if state.cache is not None and state.cache.synced.is_set():
                warming.reloaded(serving, list(state.cache.states))
        ready = state.cache is not None and not cache_unusable(state)
        if warming and ready:
            if state.worker.idle:
                step(state, warming)
            await asyncio.sleep(PAUSE_S)  # after a step, or after the worker thread's call
            continue
        wake.clear()
        reloads.clear()
        waits = [asyncio.ensure_future(event.wait()) for event in (wake, reloads, stop)]
        try:
            await asyncio.wait(waits, timeout=IDLE_WAIT_S, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in waits:
                waiting.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await waiting
