"""The extender verbs kube-scheduler calls for every pod: filter and prioritize.

Each request reads the policy set reference once and answers from that
generation (named in the ``X-Kpe-Policy-Generation`` header and the logs).
Bad input is a 400 with a message; evaluation errors are node failures, never
HTTP errors. After a filter with node names, the prioritize that should follow
is worked out ahead (``server.verbs.lookahead``).
"""

from __future__ import annotations

import gc
import logging
import time
from functools import partial
from operator import itemgetter, methodcaller
from collections.abc import Callable
from typing import Any

import orjson

from engine.decisions.deadline import Deadline
from engine.equivalence.memo import Offload
from engine.decisions.filtering import FilterResult
from engine.decisions.scoring import ScoreResult
from engine.cluster.nodeinfo import NodesByName
from engine.equivalence.filtering import filter_nodes
from engine.equivalence.scoring import score_nodes
from engine.policy.model import PolicySet

from server.http.responses import HTTPProblem, parse_json
from server.http.wire import ExtenderArgs, decode_extender_args, filter_result, host_priority, host_priority_json, host_priority_list
from server.state import ServerState
from server.verbs.inflight import counted, in_flight, record, to_count
from server.verbs.answer import GENERATION_HEADER, INLINE_BUDGET_S, NO_CLUSTER, Answer, Remaining, cache_unusable, evaluate
from server.verbs.lookahead import Expected
from server.verbs.reserved import keep_off_reserved
from server.verbs.wholenodes import remember_nodes

log = logging.getLogger("kpe.extender")


def cached_copies(state: ServerState) -> Callable[[list[Any]], list[dict[str, Any] | None]] | None:
    """For whole nodes from kube-scheduler: kpe's cached object of each node at the same
    resourceVersion (the same state of the node, so the same answers), None where there is
    none. The request's objects are new on every request, and the equivalence cache remembers
    results per object: with kpe's copies, whole-node requests are answered from it as node
    names are, and the copies need no checking. A node the cache has at another version (or
    not at all) is checked and evaluated as the scheduler sent it. Looked up in C, a list at
    a time: a request holds hundreds of nodes."""
    cache = state.cache
    if cache is None or not cache.synced.is_set():
        return None

    def copies(nodes: list[Any]) -> list[dict[str, Any] | None]:
        try:
            metas = list(map(_METADATA, nodes))
            versions = list(map(_RESOURCE_VERSION, metas))
            cached = cache.nodes_named(list(map(_NAME, metas)))
        except (KeyError, TypeError, AttributeError):
            return [None] * len(nodes)  # not node objects: the checks say what is wrong
        return [c if c is not None and v and c["metadata"].get("resourceVersion") == v else None for c, v in zip(cached, versions)]

    return copies


def own_names(state: ServerState) -> Callable[[list[str]], list[str]] | None:
    """The node cache's own string of each name a request sends (``ClusterCache.own_names``)."""
    return state.cache.own_names if state.cache is not None else None


_METADATA, _NAME = itemgetter("metadata"), itemgetter("name")
_RESOURCE_VERSION = methodcaller("get", "resourceVersion")


async def handle_filter(raw: bytes, deadline: Deadline, state: ServerState) -> Answer:
    policy_set = state.store.current
    body = parse_json(raw)
    args = decode_extender_args(body, "filter", known=cached_copies(state), own_names=own_names(state))
    remember_nodes(state.whole_nodes, args.nodes)
    headers = {GENERATION_HEADER: policy_set.generation}
    failed: dict[str, str] = {}
    nodes: list[dict[str, Any]] | NodesByName
    if args.nodes is not None:
        nodes = args.known_nodes or []
    else:
        if state.cache is None:
            return Answer(filter_result(nodes=None, node_names=[], list_meta={}, failed={}, unresolvable={}, error=NO_CLUSTER), headers=headers)
        unusable = cache_unusable(state)
        if unusable:
            # kube-scheduler reads a filter's Error from a 200 and fails the attempt (retried later).
            return Answer(filter_result(nodes=None, node_names=[], list_meta={}, failed={}, unresolvable={}, error=unusable), headers=headers)
        nodes = state.nodes_by_name(args.node_names or [])
    # Only cached nodes can be remembered (they are the same objects until the cache replaces
    # them): whole nodes are, too, once cached_copies has swapped in kpe's copies.
    memo = state.equivalence if args.nodes is None or state.cache is not None else None

    def decide(inline_s: float | None) -> FilterResult:
        flying = in_flight(state)  # before the filter reads any nodeInfo (to_count says why)
        result = filter_nodes(policy_set, args.pod, nodes, node_info=state.node_info(), memo=memo, deadline=deadline, inline_s=inline_s,
                              counts=state.counts(), namespaces=state.namespaces(), dra=state.dra())
        todo = to_count(state, policy_set, args.pod, result, flying)
        if todo is None:
            return keep_off_reserved(state, policy_set, args.pod, nodes, result)

        def count(_: float | None) -> FilterResult:
            return keep_off_reserved(state, policy_set, args.pod, nodes, counted(state, policy_set, args.pod, nodes, result, todo, deadline=deadline))

        if inline_s is not None:
            raise Remaining(count)  # counting the pods in flight is evaluation: the filter's result goes with it
        return count(None)

    result = await evaluate(state, "filter", decide)
    record(state, policy_set, args.pod, result.passed)  # before the answer goes: the scheduler's next filter finds it
    if result.unknown:
        failed = state.unknown_nodes(result.unknown, "filter")
        failed.update(result.failed)  # the names kpe does not know, then the rejected ones
    else:
        failed = result.failed
    if args.nodes is not None:
        passed = set(result.passed)
        answer = filter_result(
            nodes=[n for n in args.nodes if n["metadata"]["name"] in passed],
            node_names=None,
            list_meta=args.node_list_meta,
            failed=failed,
            unresolvable=result.unresolvable,
        )
    else:
        answer = filter_result(
            nodes=None,
            node_names=result.passed,  # the resolved names, in the scheduler's order
            list_meta={},
            failed=failed,
            unresolvable=result.unresolvable,
        )
    return Answer(answer, headers=headers, after=partial(_after_filter, state, raw, body, args, len(nodes), result, failed, policy_set))


def _after_filter(
    state: ServerState, raw: bytes, body: Any, args: ExtenderArgs, requested: int, result: FilterResult, failed: dict[str, str], policy_set: PolicySet
) -> None:
    """What a filter's answer does not depend on, done once the answer is written (kube-scheduler
    waits for the answer, not for this): its metrics, the decision log, the requeue's note of a
    pod some node rejected, and with node names the prioritize expected next."""
    state.metrics.observe_nodes("filter", requested)
    state.count_overdue("filter", result.overdue)
    state.count_equivalence("filter", result.memo_hits, result.memo_misses)
    state.metrics.count_rules("filter", result.rule_counts, result.errors, result.audit_rejections)
    state.metrics.count_rejections(result.rejections)
    if state.requeue is not None:
        if failed or result.unresolvable:
            state.requeue.remember(args.pod, policy_set.generation, policies=frozenset(rule.split("/", 1)[0] for rule in result.rejections))
        else:
            state.requeue.forget(args.pod)
    state.record("filter", args.pod, policy_set.generation, passed=len(result.passed), failed=failed, unresolvable=result.unresolvable, policies=result.matched, rejections=result.rejections)
    if args.nodes is None and state.warming is not None:
        state.warming.saw(args.node_names or [])  # the scheduler's order of its nodes, window by window
        if result.recurring and state.cache is not None:
            state.warming.asked_again(policy_set, args.pod, list(state.cache.states), together=result.together)
    if args.nodes is None:
        _look_ahead(state, raw, body, args.pod, result.passed, policy_set)


async def handle_prioritize(raw: bytes, deadline: Deadline, state: ServerState) -> Answer:
    expected = state.lookahead.take(raw)
    if expected is not None:
        if state.store.current is expected.policy_set and not cache_unusable(state):
            if expected.answer is not None and _unchanged(state, expected):
                state.lookahead.count("answered")
                state.metrics.observe_nodes("prioritize", len(expected.names))
                state.record("prioritize", expected.pod, expected.policy_set.generation, scores=_logged(state, expected.answer), policies=expected.matched)
                return Answer(None, headers={GENERATION_HEADER: expected.policy_set.generation}, encoded=expected.answer)
            state.lookahead.count("rescored")
            # The body is the expected one: its pod and names are known without decoding it.
            return await _prioritize(state, expected.policy_set, expected.pod, state.nodes_by_name(expected.names), expected.names, None, deadline)
        state.lookahead.count("rescored")
    policy_set = state.store.current
    args = decode_extender_args(parse_json(raw), "prioritize", known=cached_copies(state), own_names=own_names(state))
    remember_nodes(state.whole_nodes, args.nodes)
    nodes: list[dict[str, Any]] | NodesByName
    if args.nodes is not None:
        nodes, order = args.known_nodes or [], list(map(_NAME, map(_METADATA, args.nodes)))
    else:
        if state.cache is None:
            # Prioritize has no Error field: a 4xx is what the scheduler logs (and ignores, as it does every prioritize error).
            raise HTTPProblem(422, NO_CLUSTER)
        unusable = cache_unusable(state)
        if unusable:
            raise HTTPProblem(503, unusable)
        order = list(args.node_names or [])
        nodes = state.nodes_by_name(order)
    # Whole nodes: their names, in order, are given to the engine.
    return await _prioritize(state, policy_set, args.pod, nodes, order, order if args.nodes is not None else None, deadline)


async def _prioritize(
    state: ServerState,
    policy_set: PolicySet,
    pod: dict[str, Any],
    nodes: list[dict[str, Any]] | NodesByName,
    order: list[str],
    names: list[str] | None,
    deadline: Deadline,
) -> Answer:
    headers = {GENERATION_HEADER: policy_set.generation}
    state.metrics.observe_nodes("prioritize", len(order))
    memo = state.equivalence if not isinstance(nodes, list) or state.cache is not None else None
    result = await evaluate(
        state,
        "prioritize",
        lambda inline_s: score_nodes(
            policy_set, pod, nodes, node_info=state.node_info(), memo=memo, deadline=deadline, names=names, inline_s=inline_s, encode=host_priority,
            counts=state.counts(), namespaces=state.namespaces(), dra=state.dra(),
        ),
    )
    _count_scoring(state, result)
    if result.encoded is not None and not result.unknown:
        # Every node known, in the request's order: the remembered entries are the answer (and
        # what the decision log keeps, as sent: no dict of scores is built for it).
        encoded = host_priority_json(result.encoded)
        state.record("prioritize", pod, policy_set.generation, scores=_logged(state, encoded), policies=result.matched)
        return Answer(None, headers=headers, encoded=encoded)
    answer = host_priority_list(result.scores, order)
    state.record("prioritize", pod, policy_set.generation, scores=answer, policies=result.matched)
    return Answer(answer, headers=headers)


def _count_scoring(state: ServerState, result: ScoreResult) -> None:
    if result.unknown:
        state.unknown_nodes(result.unknown, "prioritize")
    state.count_overdue("prioritize", result.overdue)
    state.count_equivalence("prioritize", result.memo_hits, result.memo_misses)
    state.metrics.count_rules("score", result.rule_counts, result.errors, [])


def _logged(state: ServerState, encoded: bytes) -> Any:
    """A prioritize answer as the decision log keeps it: as sent, unless it might not fit the
    log's budget for one entry (a Fragment cannot be cut; a list is cut to its first hosts)."""
    return orjson.Fragment(encoded) if len(encoded) <= state.decisions.max_entry_bytes // 2 else orjson.loads(encoded)


def _unchanged(state: ServerState, expected: Expected) -> bool:
    """Whether none of the expected nodes changed in kpe's cache since their answer was worked out."""
    assert state.cache is not None
    info = state.cache.node_info
    if info.version == expected.version:
        return True
    changed = info.changed_since(expected.version)
    return changed is not None and changed.isdisjoint(expected.names)


def _look_ahead(state: ServerState, raw: bytes, body: Any, pod: dict[str, Any], passed: list[str], policy_set: PolicySet) -> None:
    """After a filter with node names, once its answer is written: expect the prioritize that
    follows it (``server.verbs.lookahead``) and work out its answer. Only what the event loop would
    evaluate in place: with more to evaluate, or the worker busy, the prioritize is scored
    when it comes, as without this."""
    expected = state.lookahead.expect(raw, body, pod, passed, policy_set)
    if expected is None or not state.lookahead.worth_working(policy_set, state.equivalence):
        return
    if state.cache is None or state.store.current is not expected.policy_set or cache_unusable(state) or not state.worker.idle:
        return
    collecting = gc.isenabled()
    gc.disable()  # as around a verb: the objects made here are gone before the collector would look
    start = time.perf_counter()
    try:
        version = state.cache.node_info.version
        deadline = Deadline.after(state.settings.request_deadline_s)
        nodes = state.nodes_by_name(expected.names)
        result = score_nodes(
            expected.policy_set, expected.pod, nodes, node_info=state.node_info(), memo=state.equivalence, deadline=deadline, inline_s=INLINE_BUDGET_S, encode=host_priority,
            counts=state.counts(), namespaces=state.namespaces(), dra=state.dra(),
        )
    except Offload:
        return
    except Exception:
        log.exception("internal error scoring ahead of prioritize")
        return
    finally:
        if collecting:
            gc.enable()
        state.metrics.ahead_seconds.inc(time.perf_counter() - start)
    _count_scoring(state, result)  # what was evaluated, whether or not a prioritize takes it
    if result.encoded is not None and not result.unknown and not result.overdue:
        expected.version, expected.matched = version, result.matched
        expected.answer = host_priority_json(result.encoded)
