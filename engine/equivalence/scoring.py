"""The score decision with the equivalence cache around it: a node's raw score from each
scoring policy (``NodeScore.raw``) is reused for pods of that policy's class (the pods that
agree on what it reads, ``engine.equivalence.classes``) while the node and its ``nodeInfo`` are
the same objects; the decision itself (``engine.decisions.scoring``) knows nothing of it. A
node's score depends on every node of the request (each policy is normalised over them), so it
is worked out per request from the policies' remembered raw scores (``normalise_columns``).

A prioritize comes with nearly every pod, so a request makes as few passes over its nodes as it
can, each in C where it can: what a policy's class remembers per node is one flat row (``Row``),
a policy's column of raw scores is taken from its rows by one ``map``, and the answer is pieces:
each node's prefix (remembered by name), then its score's suffix (``Entries``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from operator import itemgetter
from typing import Any, Protocol

from engine.cluster.nodeinfo import NodesByName, node_names
from engine.decisions.deadline import Deadline, Overdue
from engine.decisions.filtering import NO_NODE_INFO
from engine.decisions.evaluation import PolicyScope
from engine.decisions.scoring import ScoreRequest, ScoreResult, normalise_columns, score_node
from engine.equivalence.classes import EquivalenceCache
from engine.equivalence.memo import ClassMemo, Lookup, Offload, TrackedNodeInfo, afford_all
from engine.equivalence.reads import node_key
from engine.policy.model import PolicySet

# What a policy's class remembers per node: the policy's raw score (a scoring policy's: Enforce,
# weighing more than 0), then the node's evaluation errors. A tuple, not an object, so that a
# column is read in C (``_RAW``).
Row = tuple[Any, ...]


class Entries(Protocol):
    """How a node's entry of an answer is encoded, in two pieces: ``prefix(name)`` (remembered
    with the node) followed by ``suffixes[score]`` (one per score, 0..10), so an answer is
    assembled without encoding anything per node. The pieces of an answer are joined with
    nothing between them: a separator belongs to the suffixes."""

    @property
    def suffixes(self) -> Sequence[bytes]: ...

    def prefix(self, name: str) -> bytes: ...


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
    encode: Entries | None = None,
    counts: Any = None,
    namespaces: Mapping[str, Any] | None = None, dra: Mapping[str, Any] | None = None,
) -> ScoreResult:
    """``engine.decisions.scoring.score_nodes`` with the equivalence cache. With ``memo`` (and no score rule reading ``now``),
    a policy's raw score on a node is reused for the pods of that policy's class while the node
    and its ``nodeInfo`` are the same objects (see ``engine.equivalence.classes``). With
    ``inline_s``, a request whose evaluation could take longer than that many seconds, by
    its class's measured cost per node, raises ``Offload`` before evaluating any node; so
    does any evaluation at all for a class not measured yet or a request without a class.
    With ``encode`` (and the cache), each node's entry prefix is kept by its name and
    ``encoded`` lists the answer's pieces in order (each node's prefix, then the suffix of its
    score): an answer assembled without encoding on a hit. ``nodes`` given by
    name: as for ``filter_nodes`` (unknown names are left out and listed in ``unknown``)."""
    request = ScoreRequest.of(policy_set, pod, now=now, explain=explain, match_memo=memo.match if memo is not None else None, counts=counts,
                              namespaces=namespaces, dra=dra)
    result, rules = request.result, request.rules
    scoring = [scope for scope in request.scopes if scope.policy.scores]
    tables = None
    if memo is not None and not explain and not any(memo.reads(scope.policy).timed(rule.expression) for scope, rule in rules):
        tables = memo.tables(generation=policy_set.generation, verb="score", scopes=scoring, pod=pod)
    if isinstance(nodes, NodesByName) and (tables is None or not tables or not isinstance(node_info, TrackedNodeInfo)):
        names = nodes.names
        nodes, result.unknown = nodes.resolve()
        names = None if result.unknown else names
    if inline_s is not None and tables is None and rules and len(nodes):
        raise Offload(len(nodes), None)  # nothing remembered, nothing measured
    if tables is None or memo is None:
        assert not isinstance(nodes, NodesByName)
        return request.evaluate(nodes, node_info, deadline)
    found_names: list[str] = list(names) if names is not None else ([] if isinstance(nodes, NodesByName) else node_names(nodes))
    columns: list[Sequence[float | None]] = []
    erring: list[tuple[list[str], list[Row]]] = []
    if len(tables) > 1:
        afford_all(tables, nodes, node_info, NO_NODE_INFO, names, inline_s)  # the request as a whole, before any class computes
        inline_s = None
    try:
        for scope, table in zip(scoring, tables):
            found, weighted = _policy_rows(request, scope, table, nodes, node_info, deadline, names, inline_s, memo.reads(scope.policy).node_paths("score"))
            found_names = found.names
            result.unknown = found.unknown
            result.memo_hits += found.hits
            result.memo_misses += len(found.names) - found.hits
            if weighted:
                columns.append(list(map(_RAW, found.results)))
            if table.eventful:
                erring.append((found.names, found.results))
    except Overdue:
        # Past the deadline a rule counts as failed to evaluate: 0, or left out of the mean.
        result.scores = dict.fromkeys(nodes.names if isinstance(nodes, NodesByName) else node_names(nodes), 0)
        result.overdue = len(result.scores)
        return request.finish()
    count = len(found_names)
    scores = normalise_columns(columns, request.weights, count)
    # Another window of names comes with nearly every pod: the scores by name are built
    # only if asked for, the answer is joined from the entries.
    result.defer(found_names, scores)
    result.encoded = _pieces(memo.prefixes(encode, found_names), scores, encode) if encode is not None else None
    errors = [event for _, rows in erring for row in rows if row[-1] for event in row[-1]]
    if len(erring) > 1:  # in a full evaluation's order: node by node, rule by rule
        index = {name: i for i, name in enumerate(found_names)}
        position = {(scope.policy.name, rule.name): i for i, (scope, rule) in enumerate(rules)}
        errors.sort(key=lambda e: (index.get(e.node, -1), position[e.policy, e.rule]))
    result.errors += errors
    return request.finish()


_RAW = itemgetter(0)


def _policy_rows(
    request: ScoreRequest,
    scope: PolicyScope,
    table: ClassMemo,
    nodes: Sequence[Mapping[str, Any]] | NodesByName,
    node_info: Mapping[str, Any] | None,
    deadline: Deadline | None,
    names: list[str] | None,
    inline_s: float | None,
    paths: tuple[tuple[str, ...], ...] | None,
) -> tuple[Lookup, bool]:
    """One policy's rows for the nodes, from its class (computed where not remembered), and
    whether the policy is a scoring one (its raw score is the rows' first column; an Audit
    policy's rules are evaluated for their errors only). With ``paths`` (what its score rules
    read of a node, ``PolicyReads.node_paths``), a node like one the class has scored without
    errors gets that node's row (``ClassMemo.alike``)."""
    positions = [i for i, (s, _) in enumerate(request.rules) if s is scope]
    weighted = request.groups[positions[0]] >= 0
    groups = [0 if weighted else -1] * len(positions)
    counts = [0] * len(positions)
    rules = request.rules

    def scored(node: Any, info: Any, name: str) -> Row:
        if deadline is not None:
            deadline.check()  # raises Overdue: nothing past the deadline is remembered
        # The rules bound to the class's first pod serve the whole class.
        if table.bound is None:
            table.bound = [(s, rule, *s.caller(rule.expression)) for s, rule in (rules[i] for i in positions)]
        key = node_key(0, node, paths) if paths is not None else None
        if key is not None:
            found: Row | None = table.alike.get(key)
            if found is not None:
                return found
        outcome = score_node(table.bound, counts, node, info, name, explain=False, groups=groups, policies=1 if weighted else 0)
        if outcome.errors:
            table.eventful = True
        row = (outcome.raw[0], outcome.errors) if weighted else (outcome.errors,)
        if key is not None and not outcome.errors:
            table.keep_alike(key, row)
        return row

    try:
        found = table.lookup_nodes(nodes, node_info, NO_NODE_INFO, scored, names=names, inline_s=inline_s)
    finally:
        for i, n in zip(positions, counts):
            request.counts[i] += n
    return found, weighted


def _pieces(prefixes: Sequence[bytes], scores: list[int], encode: Entries) -> list[bytes]:
    """The answer's entries as pieces, in order: each node's prefix, then its score's suffix.
    Placed by slice into one list and looked up in C (``itemgetter``), so no entry is encoded
    or even joined per node."""
    pieces: list[bytes] = [b""] * (2 * len(scores))
    pieces[0::2] = prefixes
    if len(scores) > 1:
        pieces[1::2] = itemgetter(*scores)(encode.suffixes)
    elif scores:
        pieces[1] = encode.suffixes[scores[0]]
    return pieces
