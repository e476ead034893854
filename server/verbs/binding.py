"""The extender verbs around binding: preempt (which victims make room, kept only where
kpe's filters would pass once they are gone), bind (only to a node that exists), and
kpe's own admit (the gate decision for one pod, for tools and tests).

Preempt reads the nodes from kpe's cache, or without one (whole-node mode) from the
nodes the filter and prioritize requests carried (``server.verbs.wholenodes``); a node
kpe does not know either way is left to failurePolicy. The nodes a policy's rule kept
out are told to the pod as an Event (``server.verbs.vetoes``).
"""

from __future__ import annotations

import re
from typing import Any

from engine.decisions.admission import admit
from engine.decisions.deadline import Deadline
from engine.cluster.kubefilters import priority
from engine.cluster.nodeinfo import pod_key
from engine.decisions.preemption import preempt

from server.cluster.apierrors import ApiError
from server.http.responses import HTTPProblem, parse_json
from server.http.wire import WireError, decode_binding_args, decode_pod, decode_preemption_args, preemption_result
from server.state import ServerState
from server.verbs.answer import GENERATION_HEADER, NO_CLUSTER, Answer, cache_unusable
from server.verbs.reserved import keep_evictions_off_reserved


async def handle_preempt(raw: bytes, deadline: Deadline, state: ServerState) -> Answer:
    policy_set = state.store.current
    args = decode_preemption_args(parse_json(raw))
    headers = {GENERATION_HEADER: policy_set.generation}
    candidates: dict[str, list[dict[str, Any]]] = {}
    rejected: dict[str, str] = {}
    if args.victims is not None:
        candidates = args.victims
    else:
        if state.cache is None:
            raise HTTPProblem(422, NO_CLUSTER)
        unusable = cache_unusable(state)
        if unusable:
            raise HTTPProblem(503, unusable)
        for node, uids in (args.meta_victims or {}).items():
            pods = [state.cache.pod_by_uid(uid) for uid in uids]
            missing = [uid for uid, p in zip(uids, pods) if p is None]
            if missing:
                state.metrics.unknown_victims.inc(len(missing))
                rejected[node] = f"kpe's pod cache does not know victim(s) {', '.join(missing)}"
                continue
            candidates[node] = [p for p in pods if p is not None]
    known: dict[str, Any]
    if state.cache is not None:
        known = {name: found for name in candidates if (found := state.cache.node(name)) is not None}
    else:
        # Whole-node mode without a cache: the nodes the filter and prioritize requests carried.
        known = state.whole_nodes.nodes(candidates) if state.whole_nodes is not None else {}
    # The pods nominated to (or in flight on) each candidate count after the evictions, as in the filter.
    in_flight = state.cache.in_flight.on(candidates, besides=pod_key(args.pod), priority=priority(args.pod)) if state.cache is not None else None
    result = await state.worker.run(
        lambda: keep_evictions_off_reserved(state, policy_set, args.pod, known, preempt(
            policy_set, args.pod, candidates, nodes=known, node_info=state.node_info(), deadline=deadline, counts=state.counts(),
            namespaces=state.namespaces(), dra=state.dra(), in_flight=in_flight,
        ))
    )
    state.count_overdue("preempt", result.overdue)
    rejected.update(result.rejected)
    state.metrics.count_rules("preemption", [], result.errors, result.audit_rejections)
    state.metrics.count_rejections(result.rejections, preemption=True)
    kept = {node: [str((v.get("metadata") or {}).get("uid", "")) for v in victims] for node, victims in result.candidates.items()}
    if args.meta_victims is not None:
        # Answer only UIDs the scheduler sent, in its order.
        sent = args.meta_victims
        kept = {node: [u for u in sent.get(node, []) if u in set(ids)] for node, ids in kept.items()}
    kept = {node: ids for node, ids in kept.items() if ids}
    details: dict[str, Any] = {"unchecked": result.unchecked} if result.unchecked else {}
    state.record("preempt", args.pod, policy_set.generation, candidates=sorted(kept), rejected=rejected, **details)
    state.vetoes.notice(state.client, bool(state.settings.controller_set), args.pod, rejected)
    return Answer(preemption_result(kept, args.pdb_violations), headers=headers)


async def handle_bind(raw: bytes, deadline: Deadline, state: ServerState) -> Answer:
    args = decode_binding_args(parse_json(raw))
    pod = f"{args.pod_namespace}/{args.pod_name}"
    if state.client is None:
        state.metrics.binds.labels("no-cluster").inc()
        return Answer({"Error": "kpe has no cluster access, so it cannot bind pods: remove bindVerb or give kpe credentials"})
    missing = await _missing_node(state, args.node)
    if missing:
        state.metrics.binds.labels("error").inc()
        state.decisions.record("bind", pod, state.store.current.generation, node=args.node, error=missing)
        return Answer({"Error": missing})
    try:
        await state.client.bind(args.pod_namespace, args.pod_name, args.pod_uid, args.node)
    except ApiError as exc:
        state.metrics.binds.labels("error").inc()
        message = without_uids(exc.message)
        state.decisions.record("bind", pod, state.store.current.generation, node=args.node, error=message)
        return Answer({"Error": message})
    state.metrics.binds.labels("bound").inc()
    state.decisions.record("bind", pod, state.store.current.generation, node=args.node, error="")
    return Answer({"Error": ""})


_UID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


def without_uids(message: str) -> str:
    """The API's message with object UIDs masked. A bind refused for a wrong UID is
    answered with the pod's real one ("UID in object meta: ..."): passed on, it would
    hand a caller the one secret a Binding needs."""
    return _UID.sub("<uid>", message)


async def _missing_node(state: ServerState, node: str) -> str:
    """Why ``node`` cannot take a pod ("" when it can). The API server accepts a
    Binding to any name, existing or not, and a pod bound to a node that is gone
    stays stuck for good: so kpe checks its cache, and asks the API server before
    refusing a node the cache may simply not have seen yet."""
    assert state.client is not None
    known = state.cache.node(node) if state.cache is not None else None
    if known is None:
        try:
            known = await state.client.get_node(node)
        except ApiError as exc:
            if exc.status == 404:
                return f"kpe: node {node} does not exist (the API server has no such node); not binding to it"
            return f"kpe: cannot check that node {node} exists: {exc.message or exc.reason}; not binding to it"
    if (known.get("metadata") or {}).get("deletionTimestamp"):
        return f"kpe: node {node} is being deleted; not binding to it"
    return ""


async def handle_admit(raw: bytes, deadline: Deadline, state: ServerState) -> Answer:
    policy_set = state.store.current
    body = parse_json(raw)
    if not isinstance(body, dict):
        raise WireError("admit request body must be a JSON object with Pod")
    pod = decode_pod(body)
    nodes = state.cache.nodes() if state.cache is not None else []
    pods = state.cache.pods() if state.cache is not None else []
    result = await state.worker.run(lambda: admit(policy_set, pod, nodes=nodes, pods=pods, namespaces=state.namespaces(), dra=state.dra()))
    answer = {
        "Gates": result.gates,
        "Admitted": result.admitted,
        "Pending": [{"Gate": d.gate, "Policy": d.policy, "Message": d.message} for d in result.pending],
        "Decisions": [d.to_dict() for d in result.decisions],
        "ClusterView": "cache" if state.cache is not None else "none",
    }
    state.record("admit", pod, policy_set.generation, gates=result.gates, admitted=result.admitted)
    return Answer(answer, headers={GENERATION_HEADER: policy_set.generation})
