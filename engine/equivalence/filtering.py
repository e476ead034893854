"""The filter decision with the equivalence cache around it.

Per-node results of rules that do not read ``now`` are kept for the pod's
equivalence class (``engine.equivalence.classes``) and reused while the node and
its ``nodeInfo`` are the same objects; the decision itself
(``engine.decisions.filtering``) knows nothing of it. Results are remembered per
node (``Remembered``) and a class's answer to a window of nodes is kept as a
``FilterView``, patched where nodes changed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import compress
from operator import attrgetter
from typing import Any

from engine.cluster.nodeinfo import NodesByName, node_names
from engine.decisions.deadline import Deadline, Overdue
from engine.decisions.evaluation import PolicyScope
from engine.decisions.filtering import (
    NO_NODE_INFO,
    FilterRequest,
    FilterResult,
    Ordered,
    RuleEvent,
    answer_overdue,
    count_rejection,
    count_rules,
    evaluate_rule,
    judge,
)
from engine.equivalence.classes import EquivalenceCache
from engine.equivalence.memo import ClassMemo, Offload, Snapshot, TrackedNodeInfo, afford_all
from engine.equivalence.merging import merge, reword
from engine.equivalence.reads import PolicyReads, node_key
from engine.policy.model import FilterRule, PolicySet


def filter_nodes(
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
    counts: Any = None,
    namespaces: Mapping[str, Any] | None = None, dra: Mapping[str, Any] | None = None,
    ahead: bool = False,
) -> FilterResult:
    """``engine.decisions.filtering.filter_nodes`` with the equivalence cache.

    ``names``, when given, are the nodes' names in order (the request's own, which
    saves reading them back). With ``inline_s``, a request whose evaluation could take
    longer than that many seconds, by its class's measured cost (per node, and per request
    for rules that read ``now``), raises ``Offload`` before evaluating any node; so does any
    evaluation at all for a class not measured yet or a request without a class.

    With ``memo``, per-node results of rules that do not read ``now`` are kept
    for the pod's equivalence class and reused while the node and its
    ``nodeInfo`` are the same objects (see ``engine.equivalence.classes``). ``nodes`` given
    by name (``NodesByName``, with ``node_info`` a ``TrackedNodeInfo`` that logs every
    node's change) are resolved only where a result is not remembered; names not
    known are listed in the result's ``unknown``. ``ahead``: the filter is worked out ahead of
    the scheduler (``engine.equivalence.warming``), not one it asked."""
    request = FilterRequest.of(policy_set, pod, now=now, explain=explain, match_memo=memo.match if memo is not None else None, counts=counts,
                               namespaces=namespaces, dra=dra)
    result, scopes, ordered = request.result, request.scopes, request.ordered
    # One class per policy with filter rules: its results serve every pod that agrees on what it reads.
    deciding = [scope for scope in scopes if scope.policy.filters]
    tables = None if explain or memo is None else memo.tables(generation=policy_set.generation, verb="filter", scopes=deciding, pod=pod)
    if isinstance(nodes, NodesByName) and (tables is None or not tables or not isinstance(node_info, TrackedNodeInfo)):
        names = nodes.names
        nodes, result.unknown = nodes.resolve()
        names = None if result.unknown else names
    if inline_s is not None and tables is None and ordered and len(nodes):
        raise Offload(len(nodes), None)  # nothing remembered, nothing measured
    if tables is None or memo is None:
        assert not isinstance(nodes, NodesByName)
        return request.evaluate(nodes, node_info, deadline)
    if not tables:  # no policy filters the pod: every node it knows passes
        assert not isinstance(nodes, NodesByName)
        result.passed = list(names) if names is not None else node_names(nodes)
        return request.finish()
    try:
        _by_policy(result, request, deciding, tables, nodes, node_info, lambda scope: memo.reads(scope.policy), deadline, names, inline_s)
    except Overdue:
        # What was computed is remembered for the next request of these classes; this one
        # answers every node as overdue rather than assemble a partial view.
        assert deadline is not None
        result.passed.clear()
        result.failed.clear()
        result.unresolvable.clear()
        answer_overdue(result, scopes, nodes.names if isinstance(nodes, NodesByName) else node_names(nodes), deadline)
        result.rejections = count_rules(result.failed.values(), result.unresolvable.values())
    # Past any Offload: a request sent to the worker thread claims its classes there. Only the
    # classes that remember something are worth filling ahead (engine.equivalence.warming), and
    # only once a second filter asks for one: a pod like no other before it (a class asked once)
    # is not worth filling the cluster for. Whether it came soon after the first tells the
    # warming whether the class's pods come together (``Warming.asked_again``).
    if not ahead:
        memo.requests += 1
    asked = [table.ask(memo.requests) for scope, table in zip(deciding, tables) if memo.reads(scope.policy).remembers_filter()]
    result.first_of_class = any(n == 1 for n, _ in asked)
    result.recurring = any(n == 2 for n, _ in asked)
    result.together = not ahead and any(n == 2 and since is not None and since <= BACK_TO_BACK for n, since in asked)
    return request.finish()


def _by_policy(
    result: FilterResult,
    request: FilterRequest,
    deciding: list[PolicyScope],
    tables: list[ClassMemo],
    nodes: Sequence[Mapping[str, Any]] | NodesByName,
    node_info: Mapping[str, Any] | None,
    reads: Callable[[PolicyScope], PolicyReads],
    deadline: Deadline | None,
    names: list[str] | None,
    inline_s: float | None,
) -> None:
    """Each policy's verdicts from its own class (``_memoized``), put together as one evaluation
    of every rule in ``request.ordered`` would give them. A policy evaluated alone runs its
    Enforce rules up to its own first rejection, which is never before the request's first
    (the least of the policies' firsts), so every rule that a full evaluation runs before its
    first rejection ran here too: a node's reason is its policies' rejection that comes first
    in the request's order, and an error of a rule past it (which the full evaluation never
    ran) is left out (``engine.equivalence.merging``)."""
    ordered = request.ordered
    if len(tables) == 1:  # the rules of one policy, in the request's order: its verdicts are the answer
        found, passing = _memoized(result, ordered, request.counts, nodes, node_info, tables[0], reads, deadline, names, inline_s)
        if reads(deciding[0]).worded_apart:
            reword(result, deciding[0], nodes, node_info, found)
        result.passed.extend(compress(found, passing))
        return
    afford_all(tables, nodes, node_info, NO_NODE_INFO, names, inline_s)  # the request as a whole, before any class computes
    inline_s = None
    parts: list[tuple[FilterResult, list[str], bytearray | bytes]] = []
    for scope, table in zip(deciding, tables):
        positions = [i for i, (s, _) in enumerate(ordered) if s is scope]
        part = FilterResult(generation=result.generation)
        counts = [0] * len(positions)
        found, passing = _memoized(part, [ordered[i] for i in positions], counts, nodes, node_info, table, reads, deadline, names, inline_s)
        if reads(scope).worded_apart:
            reword(part, scope, nodes, node_info, found)
        for i, n in zip(positions, counts):
            request.counts[i] += n
        parts.append((part, found, passing))
    merge(result, parts, {f"{scope.policy.name}/{rule.name}": i for i, (scope, rule) in enumerate(ordered)},
           sum(1 for scope, _ in ordered if scope.policy.enforce))


# A class whose second filter comes within this many of the scheduler's requests of its first
# has its pods coming together (a workload scaling): on a large cluster, only such a class is
# filled ahead for the scheduler's next windows (``FilterResult.together``, ``Warming.asked_again``).
BACK_TO_BACK = 3

NEVER = 1 << 30  # the position of the rejecting rule when no rule rejects
PASS, FAIL, UNRESOLVABLE = 0, 1, 2
Entry = tuple[int, PolicyScope, FilterRule, int, Any, BaseException | None]  # (position, scope, rule, arity, fn, bind error)


@dataclass(frozen=True, slots=True)
class Remembered:
    """What a node's remembered rules decided, for one pod class.

    ``verdict`` and ``reason`` are final unless ``timed`` lists rules that read
    ``now`` and must run (those before ``position``, the first rejecting
    remembered rule, or Audit ones; by position, since they are bound to each
    request's ``now`` anew); ``events`` are the errors and Audit rejections to
    replay, by position."""

    verdict: int
    reason: str
    position: int
    unresolvable: bool
    timed: tuple[int, ...]
    events: tuple[tuple[int, bool, RuleEvent], ...]
    final_events: tuple[tuple[bool, RuleEvent], ...]
    # ``verdict``, or TIMED when rules that read now decide per request; and ``final_events``
    # unless so: what FilterView.build reads of every result, one attribute each.
    flag: int = 0
    replay: tuple[tuple[bool, RuleEvent], ...] = ()


TIMED = 3
# bytes.translate tables: a flag byte -> 1 where it is the one named, else 0.
_IS_PASS, _IS_FAIL, _IS_UNRESOLVABLE, _IS_TIMED = (bytes(int(i == flag) for i in range(256)) for flag in (PASS, FAIL, UNRESOLVABLE, TIMED))
_ONE = b"\x01"
SHARED_RESULTS = 4096  # distinct results without events kept as one object each, per class
_FLAG, _REASON, _REPLAY = attrgetter("flag"), attrgetter("reason"), attrgetter("replay")


@dataclass(slots=True)
class FilterView:
    """A class's filter answer derived from its remembered results, patched as nodes
    change; nodes whose verdict needs rules that read ``now`` are left out."""

    passing: bytearray  # one byte per position: 1 passes
    failed: dict[str, str]
    unresolvable: dict[str, str]
    timed: set[int]  # positions whose rules that read now must run
    eventful: set[int]  # positions with errors or Audit rejections to replay
    rejections: dict[str, int]  # "policy/rule" -> nodes of ``failed`` and ``unresolvable`` it rejected

    @classmethod
    def build(cls, names: list[str], results: list[Remembered], *, eventful: bool = True) -> FilterView:
        """The view of a whole list, assembled in C from each result's ``flag`` and ``replay``:
        kube-scheduler sends each pod another window of names, so this runs on most requests.
        The flags are one byte per node, so every later pass over them (is any node rejected,
        which pass, which fail) is a scan of a few hundred bytes rather than of a list of
        objects. ``eventful=False``: no result has events to replay."""
        flags = bytes(map(_FLAG, results))
        failed: dict[str, str] = {}
        unresolvable: dict[str, str] = {}
        timed: set[int] = set()
        if flags.count(PASS) == len(flags):
            passing = bytearray(_ONE) * len(flags)
        else:
            passing = bytearray(flags.translate(_IS_PASS))
            if UNRESOLVABLE not in flags and TIMED not in flags:
                # Every flag but PASS (0) is FAIL: the flags themselves select the failed.
                failed = dict(zip(compress(names, flags), map(_REASON, compress(results, flags))))
            else:
                failing = flags.translate(_IS_FAIL)
                failed = dict(zip(compress(names, failing), map(_REASON, compress(results, failing))))
                unresolved = flags.translate(_IS_UNRESOLVABLE)
                unresolvable = dict(zip(compress(names, unresolved), map(_REASON, compress(results, unresolved))))
                if TIMED in flags:
                    timed = set(compress(range(len(flags)), flags.translate(_IS_TIMED)))
        return cls(
            passing=passing,
            failed=failed,
            unresolvable=unresolvable,
            timed=timed,
            eventful=set(compress(range(len(flags)), map(_REPLAY, results))) if eventful else set(),
            rejections=count_rules(failed.values(), unresolvable.values()),
        )

    def patched(self, names: list[str], results: list[Remembered], previous: Snapshot, changed: list[int]) -> FilterView:
        if any(previous.names[i] != names[i] for i in changed):
            return FilterView.build(names, results, eventful=True)  # the node list moved: patching by name would be wrong
        view = FilterView(self.passing.copy(), self.failed.copy(), self.unresolvable.copy(), set(self.timed), set(self.eventful), dict(self.rejections))
        for i in changed:
            name = names[i]
            old = previous.results[i]
            if not old.timed and old.verdict != PASS:
                count_rejection(view.rejections, old.reason, -1)
            view.passing[i] = 0
            view.failed.pop(name, None)
            view.unresolvable.pop(name, None)
            view.timed.discard(i)
            view.eventful.discard(i)
            view.add(i, name, results[i])
        return view

    def add(self, i: int, name: str, r: Remembered) -> None:
        if r.timed:
            self.timed.add(i)
            return
        if r.verdict == PASS:
            self.passing[i] = 1
        else:
            (self.failed if r.verdict == FAIL else self.unresolvable)[name] = r.reason
            count_rejection(self.rejections, r.reason)
        if r.final_events:
            self.eventful.add(i)


def _memoized(
    result: FilterResult,
    ordered: Ordered,
    counts: list[int],
    nodes: Sequence[Mapping[str, Any]] | NodesByName,
    node_info: Mapping[str, Any] | None,
    memo: ClassMemo,
    reads: Callable[[PolicyScope], PolicyReads],
    deadline: Deadline | None = None,
    names: list[str] | None = None,
    inline_s: float | None = None,
) -> tuple[list[str], bytearray | bytes]:
    """The fast path's verdicts from remembered results (the nodes' names and whether each
    passes, one byte each). Rules that read ``now`` run
    per request, in plan order around the remembered ones, so the first rejecting
    rule and the errors counted before it are those a full evaluation finds; a
    rule ``a || b(now)`` whose ``a`` holds for a node is remembered as passing.
    Remembered rules are bound to the pod only when some node needs them."""
    enforced = sum(1 for scope, _ in ordered if scope.policy.enforce)
    timed = [reads(scope).timed(rule.expression, rule.message_expression) for scope, rule in ordered]
    def remember(node: Any, info: Any, name: str) -> Remembered:
        if deadline is not None:
            deadline.check()  # raises Overdue: nothing past the deadline is remembered
        if memo.bound is None:
            # Rules that read now are left unbound here: _remember skips them.
            plan = [(i, scope, rule, *((0, None, None) if timed[i] else scope.caller(rule.expression))) for i, (scope, rule) in enumerate(ordered)]
            guards = {}
            for i, scope, rule, *_ in plan:
                guard = reads(scope).guard(rule.expression) if timed[i] else None
                if guard is not None:
                    guards[i] = scope.caller(guard)
            memo.bound = (plan, guards, _node_paths(ordered, reads, "filter"))
        plan, guards, paths = memo.bound
        # A node like one the class has judged (equal in all its rules read of a node) gets the
        # same result: a new class evaluates once per kind of node in the cluster.
        key = node_key(0, node, paths) if paths is not None else None
        if key is not None:
            found: Remembered | None = memo.alike.get(key)
            if found is not None:
                return found
        # Equal results without events are one object (``memo.shared``): a window's hundreds of
        # passing nodes then read one result, not hundreds scattered over the heap (each a cache
        # miss, measured as most of FilterView.build's time in the real request stream).
        remembered = _remember(plan, timed, guards, enforced, counts, node, info, name, memo.shared)
        if remembered.events:
            memo.eventful = memo.eventful or bool(remembered.replay)
        elif key is not None:
            memo.keep_alike(key, remembered)
        return remembered

    found = memo.lookup_nodes(nodes, node_info, NO_NODE_INFO, remember, names=names, inline_s=inline_s)
    result.unknown = found.unknown
    names, results, previous = found.names, found.results, found.previous
    result.memo_hits += found.hits
    result.memo_misses += len(names) - found.hits
    if found.changed is None or previous is None or previous.derived is None:
        view = FilterView.build(names, results, eventful=memo.eventful)
    elif not found.changed:
        view = previous.derived
    else:
        view = previous.derived.patched(names, results, previous, found.changed)
    assert memo.snapshot is not None
    memo.snapshot.derived = view
    passing = view.passing
    result.failed.update(view.failed)
    result.unresolvable.update(view.unresolvable)
    result.rejections = {label: n for label, n in view.rejections.items() if n}
    if view.timed:
        start = memo.clock()
        passing = passing.copy()
        bound: dict[int, Entry] = {}
        # Nodes alike in what the rules that read now or counts read of a node (their zone, for
        # a cap per zone) get the same verdict from them in this request: run once per kind of
        # node, unless a run had events to report (they name their node).
        paths = _node_paths(ordered, reads, "timed")
        alike: dict[Any, tuple[int, bool, str]] = {}  # node_key -> what _run_timed decided
        for i in sorted(view.timed):
            name = names[i]
            r = results[i]
            node = found.node(i, nodes)
            key = None
            if paths is not None and not r.events:
                key = node_key(id(r), node, paths)
            decided = alike.get(key) if key is not None else None
            if decided is None:
                for k in r.timed:
                    if k not in bound:
                        scope, rule = ordered[k]
                        bound[k] = (k, scope, rule, *scope.caller(rule.expression))
                reported = len(result.errors) + len(result.audit_rejections)
                decided = _run_timed(result, r, [bound[k] for k in r.timed], counts, enforced, node, found.info(i), name)
                if key is not None and len(result.errors) + len(result.audit_rejections) == reported:
                    alike[key] = decided
            position, unresolvable_, reason = decided
            if position == NEVER:
                passing[i] = 1
            else:
                (result.unresolvable if unresolvable_ else result.failed)[name] = reason
                count_rejection(result.rejections, reason)
        # Evaluation that even a request of remembered nodes pays: the next one's budget counts it.
        memo.measured_request(memo.clock() - start)
    elif memo.per_request:
        memo.measured_request(0.0)
    for i in sorted(view.eventful):
        for audit, event in results[i].final_events:
            (result.audit_rejections if audit else result.errors).append(event)
    return names, passing


def _node_paths(ordered: Ordered, reads: Callable[[PolicyScope], PolicyReads], rules: str) -> tuple[tuple[str, ...], ...] | None:
    """What the ``rules`` of ``ordered``'s policies read of a node (``PolicyReads.node_paths``), None if one reads more than paths."""
    found: set[tuple[str, ...]] = set()
    for scope in {id(scope): scope for scope, _ in ordered}.values():
        paths = reads(scope).node_paths(rules)
        if paths is None:
            return None
        found.update(paths)
    return tuple(sorted(found))


def _run_timed(result: FilterResult, r: Remembered, entries: list[Entry], counts: list[int], enforced: int, node: Any, info: Any, name: str) -> tuple[int, bool, str]:
    """Run a node's rules that read ``now`` around its remembered ones: (position, unresolvable, reason) of the first rejection."""
    position, unresolvable_, reason = r.position, r.unresolvable, r.reason
    cache: dict[str, Any] = {}
    for i, scope, rule, arity, fn, bind_error in entries:
        if i >= enforced or i > position:
            break
        counts[i] += 1
        value, error = evaluate_rule(scope, rule, arity, fn, bind_error, node, info, cache)
        if value is True:
            continue
        rejected, message, _ = judge(scope, rule, node, info, cache, value, error, name, result.errors)
        if rejected:
            position, unresolvable_, reason = i, rule.unresolvable, message
            break
    for i, audit, event in r.events:
        if audit:
            result.audit_rejections.append(event)
        elif i <= position or i >= enforced:
            result.errors.append(event)
    for i, scope, rule, arity, fn, bind_error in entries:
        if i < enforced:
            continue
        counts[i] += 1
        value, error = evaluate_rule(scope, rule, arity, fn, bind_error, node, info, cache)
        if value is not True:
            rejected, message, _ = judge(scope, rule, node, info, cache, value, error, name, result.errors)
            if rejected:
                result.audit_rejections.append(RuleEvent(scope.policy.name, rule.name, name, message))
    return position, unresolvable_, reason


def _remember(
    plan: list[Entry],
    timed: list[bool],
    guards: dict[int, tuple[int, Any, BaseException | None]],
    enforced: int,
    counts: list[int],
    node: Any,
    info: Any,
    name: str,
    plain: dict[Any, Remembered] | None = None,
) -> Remembered:
    """Run the rules that do not read ``now`` (Enforce ones up to the first that
    rejects, Audit ones all) and the guards of those that do. A result
    without events is the one in ``plain`` for its rejection (if any) and the rules that
    read ``now`` left to run: most nodes of a class decide alike, and a result is built only
    once for them."""
    cache: dict[str, Any] = {}
    events: list[tuple[int, bool, RuleEvent]] = []
    position, unresolvable_, reason = NEVER, False, ""
    for i, scope, rule, arity, fn, bind_error in plan:
        audit = i >= enforced
        if timed[i] or (not audit and position != NEVER):
            continue
        counts[i] += 1
        value, error = evaluate_rule(scope, rule, arity, fn, bind_error, node, info, cache)
        if value is True:
            continue
        errors: list[RuleEvent] = []
        rejected, message, _ = judge(scope, rule, node, info, cache, value, error, name, errors)
        events += [(i, False, e) for e in errors]
        if rejected and audit:
            events.append((i, True, RuleEvent(scope.policy.name, rule.name, name, message)))
        elif rejected:
            position, unresolvable_, reason = i, rule.unresolvable, message
    pending: list[int] = []
    if True in timed:
        for entry in plan:
            i = entry[0]
            if not timed[i] or (i < enforced and i > position):
                continue
            guard = guards.get(i)
            if guard is not None:
                arity, fn, bind_error = guard
                value, _error = evaluate_rule(entry[1], entry[2], arity, fn, bind_error, node, info, cache)
                if value is True:
                    continue  # true whatever the time
            pending.append(i)
    verdict = PASS if position == NEVER else (UNRESOLVABLE if unresolvable_ else FAIL)
    if plain is not None and not events:
        key = (position, unresolvable_, reason, tuple(pending))
        found = plain.get(key)
        if found is None:
            if len(plain) >= SHARED_RESULTS:
                plain.clear()
            found = plain[key] = Remembered(verdict, reason, position, unresolvable_, key[3], (), (), TIMED if pending else verdict, ())
        return found
    final = tuple((audit, e) for i, audit, e in events if audit or i <= position or i >= enforced)
    return Remembered(verdict, reason, position, unresolvable_, tuple(pending), tuple(events), final, TIMED if pending else verdict, () if pending else final)


