"""Filling equivalence classes ahead of the scheduler (``engine.equivalence.warming``): after a
class's second filter with node names (on a large cluster, soon after its first), for the classes seen last after a reload, and at start-up
for the classes of the pods waiting for a node and of the workloads that created pods last.

Steps run on the worker thread, about 2 ms each (``Warming.step_s``; a slow policy is evaluated a
node at a time), one at a time and only while the thread is idle, with a pause between steps in
which the event loop evaluates in place again: a request that comes during a step waits for that
step at most, and a slow policy never holds up the event loop (its probes, watch events, the
webhook), as it never does for a request.
"""

from __future__ import annotations

import asyncio
import contextlib
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


def evaluate(state: ServerState, policy_set: PolicySet, pod: Mapping[str, Any], names: list[str], scores: bool, budget: float | None = None) -> bool:
    """The filter on ``names``, and with ``scores`` the scores of the nodes it passed (what prioritize
    is asked; the filter's results are remembered by then), as the verbs evaluate them, through the
    equivalence cache; whether the filter was its class's first."""
    deadline = Deadline.after(state.settings.request_deadline_s)
    result = filter_nodes(policy_set, pod, state.nodes_by_name(names), node_info=state.node_info(), memo=state.equivalence, deadline=deadline,
                          inline_s=budget, counts=state.counts(), namespaces=state.namespaces(), dra=state.dra(), ahead=True)
    if scores and result.passed and state.lookahead.worth_working(policy_set, state.equivalence):
        score_nodes(policy_set, pod, state.nodes_by_name(result.passed), node_info=state.node_info(), memo=state.equivalence, deadline=deadline,
                    inline_s=budget, encode=host_priority, counts=state.counts(), namespaces=state.namespaces(), dra=state.dra())
    return result.first_of_class


def step(state: ServerState, warming: Warming) -> None:
    """One step, on the worker thread."""
    before = warming.evaluated
    try:
        warming.step(state.store.current, lambda policy_set, pod, names, scores, budget: evaluate(state, policy_set, pod, names, scores, budget))
    except Exception:
        log.exception("internal error filling an equivalence class ahead of the scheduler")
        warming.clear()
    finally:
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
            newest = state.cache.exemplars.take() if state.cache.exemplars is not None else []
            warming.at_start(serving, state.cache.pods(), newest, list(state.cache.states), node=state.cache.node)
        if state.store.current is not serving:
            serving = state.store.current
            if state.cache is not None and state.cache.synced.is_set():
                warming.reloaded(serving, list(state.cache.states))
        ready = state.cache is not None and not cache_unusable(state)
        if warming and ready:
            if state.worker.idle:
                await state.worker.run(step, state, warming)
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
