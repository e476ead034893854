"""The score decision with the equivalence cache around it: a node's raw scores (one per
scoring policy, ``NodeScore.raw``) are reused for pods of the same equivalence class while
the node and its ``nodeInfo`` are the same objects (``engine.equivalence.classes``); the
decision itself (``engine.decisions.scoring``) knows nothing of it. The nodes' scores
depend on every node of the request (each policy is normalised over them), so they are
worked out per request from the remembered raw scores (``normalise_columns``), or taken
from the previous request of the class when it had the very same nodes, unchanged.

A prioritize comes with nearly every pod, so a request makes as few passes over its nodes
as it can, each in C where it can: what the class remembers per node is one flat row
(``Row``), the rows are cut into columns by one ``zip``, and the answer is pieces: each
node's remembered prefix, then its score's suffix (``Entries``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import compress
from operator import itemgetter
from typing import Any, Protocol

from engine.cluster.nodeinfo import NodesByName, node_names
from engine.decisions.deadline import Deadline, Overdue
from engine.decisions.filtering import NO_NODE_INFO, RuleEvent
from engine.decisions.scoring import ScoreRequest, ScoreResult, normalise_columns, score_node
from engine.equivalence.classes import EquivalenceCache
from engine.equivalence.memo import ClassMemo, Offload, TrackedNodeInfo
from engine.policy.model import PolicySet

# What the class remembers per node: the raw score of each scoring policy of the request (in
# ``ScoreRequest.weights``' order, None where the policy has none), then the node's answer-entry
# prefix (None when it was computed without ``Entries``), then its evaluation errors. A tuple,
# not an object, so that one ``zip(*rows)`` gives every column.
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
    a node's score is reused for pods of the same equivalence class while the node
    and its ``nodeInfo`` are the same objects (see ``engine.equivalence.classes``). With
    ``inline_s``, a request whose evaluation could take longer than that many seconds, by
    its class's measured cost per node, raises ``Offload`` before evaluating any node; so
    does any evaluation at all for a class not measured yet or a request without a class.
    With ``encode`` (and the cache), each node's entry prefix is kept with its raw scores and
    ``encoded`` lists the answer's pieces in order (each node's prefix, then the suffix of its
    score): an answer assembled without encoding on a hit. ``nodes`` given by
    name: as for ``filter_nodes`` (unknown names are left out and listed in ``unknown``)."""
    request = ScoreRequest.of(policy_set, pod, now=now, explain=explain, match_memo=memo.match if memo is not None else None, counts=counts,
                              namespaces=namespaces, dra=dra)
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
    policies = len(request.weights)
    if encode is not None and table.encoder is None:
        table.encoder = encode  # the prefixes remembered from now on are its

    def scored(node: Any, info: Any, name: str) -> Row:
        if deadline is not None:
            deadline.check()  # raises Overdue: nothing past the deadline is remembered
        # The rules bound to the class's first pod serve the whole class.
        if memo_table.bound is None:
            memo_table.bound = request.bind()
        earlier = memo_table.earlier(name, node, info) if memo_table.earlier is not None else None
        carry = _carry(memo_table, request) if earlier is not None else None
        if carry is None or earlier is None:
            outcome = score_node(memo_table.bound, counts, node, info, name, explain=False, groups=request.groups, policies=policies)
            raw, errors = outcome.raw, outcome.errors
        else:
            skip, groups_from, order = carry
            outcome = score_node(memo_table.bound, counts, node, info, name, explain=False, groups=request.groups, policies=policies, skip=skip)
            raw = _carried_raw(outcome.raw, groups_from, earlier)
            errors = outcome.errors
            shared = tuple(e for e in earlier[-1] if e.policy in memo_table.shared_policies)
            if shared:
                errors = tuple(sorted(errors + shared, key=lambda e: order[e.policy, e.rule]))
        if errors:
            memo_table.eventful = True
        encoder = memo_table.encoder
        if encoder is None:
            memo_table.unencoded = True
            return (*raw, None, errors)
        return (*raw, encoder.prefix(name), errors)

    try:
        found = table.lookup_nodes(nodes, node_info, NO_NODE_INFO, scored, names=names, inline_s=inline_s)
        result.unknown = found.unknown
    except Overdue:
        # Past the deadline a rule counts as failed to evaluate: 0, or left out of the mean.
        result.scores = dict.fromkeys(nodes.names if isinstance(nodes, NodesByName) else node_names(nodes), 0)
        result.overdue = len(result.scores)
        result.rule_counts = [(scope.policy.name, rule.name, n) for (scope, rule), n in zip(rules, counts)]
        return result
    rows: list[Row] = found.results
    count = len(rows)
    result.memo_hits, result.memo_misses = found.hits, count - found.hits
    previous = found.previous
    if found.changed == [] and previous is not None and previous.derived is not None and previous.derived[3] is encode:
        eventful, scores, encoded, _ = previous.derived  # nothing changed: the same answer
    else:
        # One pass over the rows, in C: the raw scores of each policy, the prefixes, the errors.
        columns = list(zip(*rows)) if count else [()] * (policies + 2)
        eventful = list(compress(range(count), columns[-1])) if table.eventful else []
        scores = normalise_columns(columns[:policies], request.weights, count)
        encoded = None
        if encode is not None:
            prefixes = columns[-2] if encode is table.encoder else list(map(encode.prefix, found.names))
            if table.unencoded and None in prefixes:
                prefixes = [encode.prefix(name) if prefix is None else prefix for prefix, name in zip(prefixes, found.names)]
            encoded = _pieces(prefixes, scores, encode)
    assert table.snapshot is not None
    table.snapshot.derived = (eventful, scores, encoded, encode)
    # Another window of names comes with nearly every pod: the scores by name are built
    # only if asked for, the answer is joined from the entries.
    result.defer(found.names, scores)
    result.encoded = encoded
    errors: list[RuleEvent] = result.errors
    for i in eventful:
        errors += rows[i][-1]
    return request.finish()


Carry = tuple[frozenset[int], list[tuple[int, int]], dict[tuple[str, str], int]]
"""How a score class takes a node's raw scores from its donor (``ClassMemo.donor``): the rule
positions not to evaluate (the shared policies'), (position in this class's row, position in the
donor's row) per shared scoring policy, and each rule's position (errors are kept in that order)."""


def _carry(table: ClassMemo, request: ScoreRequest) -> Carry | None:
    """The class's ``Carry`` from its donor, worked out once; None without a donor."""
    if table.carried is None:
        donor = table.given()
        if donor is None or donor.bound is None:
            return None
        shared = table.shared_policies
        theirs = _groups(donor.bound)
        mine = _groups(table.bound)
        skip = frozenset(i for i, (scope, _) in enumerate(request.rules) if scope.policy.name in shared)
        table.carried = (skip, [(mine[name], theirs[name]) for name in shared if name in mine],
                         {(scope.policy.name, rule.name): i for i, (scope, rule) in enumerate(request.rules)})
    carried: Carry = table.carried
    return carried


def _groups(plan: Sequence[Any]) -> dict[str, int]:
    """Each scoring policy's position in a row of a plan's raw scores, by name: the policies
    with score rules, Enforce and weighing more than 0, in order (as ``ScoreRequest.of`` has them)."""
    weights: dict[str, int] = {}
    enforce: dict[str, bool] = {}
    for scope, rule, *_ in plan:
        weights[scope.policy.name] = weights.get(scope.policy.name, 0) + rule.weight
        enforce[scope.policy.name] = scope.policy.enforce
    return {name: g for g, name in enumerate(name for name, weight in weights.items() if enforce[name] and weight > 0)}


def _carried_raw(raw: tuple[float | None, ...], groups_from: list[tuple[int, int]], earlier: Row) -> tuple[float | None, ...]:
    row = list(raw)
    for mine, theirs in groups_from:
        row[mine] = earlier[theirs]
    return tuple(row)


def _pieces(prefixes: Sequence[bytes | None], scores: list[int], encode: Entries) -> list[bytes]:
    """The answer's entries as pieces, in order: each node's prefix, then its score's suffix.
    Placed by slice into one list and looked up in C (``itemgetter``), so no entry is encoded
    or even joined per node."""
    pieces: list[bytes] = [b""] * (2 * len(scores))
    pieces[0::2] = prefixes  # type: ignore[assignment]  # no None left
    if len(scores) > 1:
        pieces[1::2] = itemgetter(*scores)(encode.suffixes)
    elif scores:
        pieces[1] = encode.suffixes[scores[0]]
    return pieces
