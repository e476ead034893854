"""The score decision with the equivalence cache around it: a node's raw scores (one per
scoring policy, ``NodeScore.raw``) are reused for pods of the same equivalence class while
the node and its ``nodeInfo`` are the same objects (``engine.equivalence.classes``); the
decision itself (``engine.decisions.scoring``) knows nothing of it. The nodes' scores
depend on every node of the request (each policy is normalised over them), so they are
worked out per request from the remembered raw scores (``normalise``), or taken from the
previous request of the class when it had the very same nodes, unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from itertools import compress, repeat
from operator import attrgetter, getitem, is_
from typing import Any

from engine.cluster.nodeinfo import NodesByName, node_names
from engine.decisions.deadline import Deadline, Overdue
from engine.decisions.filtering import NO_NODE_INFO
from engine.decisions.scoring import MAX_EXTENDER_PRIORITY, NodeScore, ScoreRequest, ScoreResult, normalise, score_node
from engine.equivalence.classes import EquivalenceCache, Offload, TrackedNodeInfo
from engine.policy.model import PolicySet

_ERRORS, _RAW, _ENTRIES = attrgetter("errors"), attrgetter("raw"), attrgetter("entries")


def score_nodes(
    policy_set: PolicySet,
    pod: Mapping[str, Any],
    nodes: Sequence[Mapping[str, Any]] | NodesByName,
    *,
    node_info: Mapping[str, Any] | None = None,
    now: Any = None,
    explain: bool = False,
    memo: EquivalenceCache | None = None,
    deadline: Deadline | None = None,
    names: list[str] | None = None,
    inline_s: float | None = None,
    encode: Callable[[str, int], bytes] | None = None,
) -> ScoreResult:
    """``engine.decisions.scoring.score_nodes`` with the equivalence cache. With ``memo`` (and no score rule reading ``now``),
    a node's score is reused for pods of the same equivalence class while the node
    and its ``nodeInfo`` are the same objects (see ``engine.equivalence.classes``). With
    ``inline_s``, a request whose evaluation could take longer than that many seconds, by
    its class's measured cost per node, raises ``Offload`` before evaluating any node; so
    does any evaluation at all for a class not measured yet or a request without a class.
    With ``encode`` (and the cache), each node's
    ``encode(name, score)`` is kept with its raw scores (per final score) and ``encoded``
    lists them in order: an answer assembled without encoding on a hit. ``nodes`` given by
    name: as for ``filter_nodes`` (unknown names are left out and listed in ``unknown``)."""
    request = ScoreRequest.of(policy_set, pod, now=now, explain=explain, match_memo=memo.match if memo is not None else None)
    result, rules, counts = request.result, request.rules, request.counts
    table = None
    if memo is not None and not explain and not any(memo.reads(scope.policy).timed(rule.expression) for scope, rule in rules):
        table = memo.table(generation=policy_set.generation, verb="score", scopes=request.scopes, pod=pod)
    if isinstance(nodes, NodesByName) and (table is None or not isinstance(node_info, TrackedNodeInfo)):
        nodes, result.unknown = nodes.resolve()
    if inline_s is not None and table is None and rules and len(nodes):
        raise Offload(len(nodes), None)  # nothing remembered, nothing measured
    if table is None:
        assert not isinstance(nodes, NodesByName)
        return request.evaluate(nodes, node_info, deadline)
    memo_table = table

    def scored(node: Any, info: Any, name: str) -> NodeScore:
        if deadline is not None:
            deadline.check()  # raises Overdue: nothing past the deadline is remembered
        # The rules bound to the class's first pod serve the whole class.
        if memo_table.bound is None:
            memo_table.bound = request.bind()
        outcome = score_node(memo_table.bound, counts, node, info, name, explain=False, groups=request.groups, policies=len(request.weights))
        outcome.entries = [None] * (MAX_EXTENDER_PRIORITY + 1)  # encoded when first answered with each score
        if outcome.errors:
            memo_table.eventful = True
        return outcome

    try:
        found = table.lookup_nodes(nodes, node_info, NO_NODE_INFO, scored, names=names, inline_s=inline_s)
        result.unknown = found.unknown
    except Overdue:
        # Past the deadline a rule counts as failed to evaluate: 0, or left out of the mean.
        result.scores = dict.fromkeys(nodes.names if isinstance(nodes, NodesByName) else node_names(nodes), 0)
        result.overdue = len(result.scores)
        result.rule_counts = [(scope.policy.name, rule.name, n) for (scope, rule), n in zip(rules, counts)]
        return result
    result.memo_hits, result.memo_misses = found.hits, len(found.names) - found.hits
    previous = found.previous
    derived: tuple[list[int], list[int], list[bytes] | None] | None = None
    if found.changed == [] and previous is not None and previous.derived is not None:
        derived = previous.derived  # nothing changed: the same answer
        eventful, scores, encoded = derived
    else:
        eventful = list(compress(range(len(found.results)), map(_ERRORS, found.results))) if table.eventful else []
        scores = normalise(list(map(_RAW, found.results)), request.weights)
        encoded = None
    if encode is not None and encoded is None:
        encoded = _entries(found.results, found.names, scores, encode)
    assert table.snapshot is not None
    table.snapshot.derived = (eventful, scores, encoded)
    # Another window of names comes with nearly every pod: the scores by name are built
    # only if asked for, the answer is joined from the entries.
    result.defer(found.names, scores)
    if encode is not None:
        result.encoded = encoded
    for i in eventful:
        result.errors += found.results[i].errors
    return request.finish()


def _entries(results: list[NodeScore], names: list[str], scores: list[int], encode: Callable[[str, int], bytes]) -> list[bytes]:
    """Each node's entry of the answer with its score: taken in C from the entries remembered
    with the node, ``encode``d (and remembered) only where a node has not had that score yet."""
    found: list[bytes | None] = list(map(getitem, map(_ENTRIES, results), scores))
    if None in found:
        for i in compress(range(len(found)), map(is_, found, repeat(None))):
            found[i] = results[i].entries[scores[i]] = encode(names[i], scores[i])  # type: ignore[index]
    return found  # type: ignore[return-value]  # no None left
