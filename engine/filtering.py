"""The filter decision: which nodes may run the pod, and why the others may not.

Every matching policy applies and filters are AND-ed. Per node, rules run in
a fixed order: Enforce rules marked ``unresolvable`` first, then the other
Enforce rules, each policy in name order; the first rule that rejects the
node gives its reason (``policy/rule: message``) and decides whether it is
unresolvable. Audit-mode rules run on every node afterwards, are counted and
explained, and never change the verdict.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import compress
from operator import attrgetter
from time import perf_counter
from typing import Any

from . import cel
from .cel.runtime import Unbound
from .deadline import Deadline, Overdue
from .equivalence import ClassMemo, EquivalenceCache, Offload, PolicyReads, Snapshot, TrackedNodeInfo
from .evaluation import Outcome, PolicyScope, matching_scopes, request_inputs, run_rule
from .nodeinfo import NodesByName, node_name, node_names
from .policy import FilterRule, PolicySet

NO_NODE_INFO = Unbound("nodeInfo")


@dataclass
class RuleEvent:
    """An evaluation error or an Audit-mode rejection, for logs and metrics."""

    policy: str
    rule: str
    node: str
    message: str


@dataclass
class NodeVerdict:
    node: str
    verdict: str  # "pass" | "fail" | "unresolvable"
    reason: str = ""
    outcomes: list[Outcome] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"node": self.node, "verdict": self.verdict, "reason": self.reason, "rules": [o.to_dict() for o in self.outcomes]}


@dataclass
class FilterResult:
    generation: str
    passed: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    unresolvable: dict[str, str] = field(default_factory=dict)
    errors: list[RuleEvent] = field(default_factory=list)
    audit_rejections: list[RuleEvent] = field(default_factory=list)
    evaluations: int = 0
    rule_counts: list[tuple[str, str, int]] = field(default_factory=list)  # (policy, rule, evaluations)
    explanation: list[NodeVerdict] | None = None
    matched: list[str] = field(default_factory=list)
    match_outcomes: list[Outcome] = field(default_factory=list)
    memo_hits: int = 0  # nodes answered from the equivalence cache
    memo_misses: int = 0
    rejections: dict[str, int] = field(default_factory=dict)  # "policy/rule" -> nodes it failed (unresolvable included)
    overdue: int = 0  # nodes answered without evaluation: the request's deadline had passed
    unknown: list[str] = field(default_factory=list)  # names of nodes given by name that are not known (left out)


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
    max_misses: int | None = None,
) -> FilterResult:
    """Split ``nodes`` into passing, failed and unresolvable for ``pod``.

    Past ``deadline``, the nodes not evaluated yet are answered under each
    policy's failurePolicy (see ``engine.deadline``). ``names``, when given, are
    the nodes' names in order (the request's own, which saves reading them back).
    With ``max_misses``, a request that would evaluate more nodes than that raises
    ``Offload`` before evaluating any.

    With ``memo``, per-node results of rules that do not read ``now`` are kept
    for the pod's equivalence class and reused while the node and its
    ``nodeInfo`` are the same objects (see ``engine.equivalence``). ``nodes`` given
    by name (``NodesByName``, with ``node_info`` a ``TrackedNodeInfo`` that logs every
    node's change) are resolved only where a result is not remembered; names not
    known are listed in the result's ``unknown``."""
    result = FilterResult(generation=policy_set.generation, explanation=[] if explain else None)
    match_log: list[Outcome] | None = [] if explain else None
    scopes = matching_scopes(policy_set, pod, request_inputs(pod, now), explain=match_log, memo=memo.match if memo is not None else None)
    result.matched = [s.policy.name for s in scopes]
    result.match_outcomes = match_log or []
    ordered: list[tuple[PolicyScope, FilterRule]] = []
    for unresolvable_first in (True, False):
        ordered += [(s, r) for s in scopes if s.policy.enforce for r in s.policy.filters if r.unresolvable == unresolvable_first]
    ordered += [(s, r) for s in scopes if not s.policy.enforce for r in s.policy.filters]
    counts = [0] * len(ordered)
    table = None if explain or memo is None else memo.table(generation=policy_set.generation, verb="filter", scopes=scopes, pod=pod)
    if isinstance(nodes, NodesByName) and (table is None or not isinstance(node_info, TrackedNodeInfo)):
        names = nodes.names
        nodes, result.unknown = nodes.resolve()
        names = None if result.unknown else names
    if max_misses is not None and table is None and ordered and len(nodes) > max_misses:
        raise Offload(len(nodes))
    if table is not None and memo is not None:
        try:
            _memoized(result, ordered, counts, nodes, node_info, table, lambda scope: memo.reads(scope.policy), deadline, names, max_misses)
        except Overdue:
            # What was computed is remembered for the next request of this class; this one
            # answers every node as overdue rather than assemble a partial view.
            assert deadline is not None
            result.passed.clear()
            result.failed.clear()
            result.unresolvable.clear()
            _overdue(result, scopes, nodes.names if isinstance(nodes, NodesByName) else node_names(nodes), deadline)
            result.rejections = _count_rules(result.failed.values(), result.unresolvable.values())
    else:
        assert not isinstance(nodes, NodesByName)
        plan = [(scope, rule, *scope.caller(rule.expression)) for scope, rule in ordered]
        if explain:
            _explained(result, plan, counts, nodes, node_info)
        else:
            done = _fast(result, plan, counts, nodes, node_info, deadline)
            if done < len(nodes):
                assert deadline is not None
                _overdue(result, scopes, node_names(nodes[done:]), deadline)
        result.rejections = _count_rules(result.failed.values(), result.unresolvable.values())
    result.rule_counts = [(scope.policy.name, rule.name, n) for (scope, rule), n in zip(ordered, counts)]
    result.evaluations = sum(counts)
    return result


Plan = list[tuple[PolicyScope, FilterRule, int, Any, BaseException | None]]


def _judge(scope: PolicyScope, rule: FilterRule, node: Any, info: Any, cache: dict[str, Any], value: Any, error: str | None, name: str, errors: list[RuleEvent]) -> tuple[bool, str, str]:
    """(rejected, message, effect) for one evaluation that did not simply pass; an error is added to ``errors``."""
    if error is None and value is not True and value is not False:
        error = f"filter must give a bool, got {cel.values.type_name(value)}"
    label = f"{scope.policy.name}/{rule.name}"
    if error is not None:
        errors.append(RuleEvent(scope.policy.name, rule.name, name, error))
        rejected = scope.policy.fail_closed
        effect = "rejected (error, failurePolicy Fail)" if rejected else "ignored error (failurePolicy Ignore)"
        return rejected, f"{label}: evaluation error: {error}", effect
    if value is True:
        return False, "", "kept"
    return True, f"{label}: {_message(scope, rule, node, info, cache)}", "rejected"


def _evaluate(scope: PolicyScope, rule: FilterRule, arity: int, fn: Any, bind_error: BaseException | None, node: Any, info: Any, cache: dict[str, Any]) -> tuple[Any, str | None]:
    try:
        if bind_error is not None:
            raise bind_error
        if arity == 2:
            return fn(node, info), None
        if arity == 1:
            return fn(node), None
        if arity == 0:
            return fn(), None
        return scope.evaluate(rule.expression, {"node": node, "nodeInfo": info}, cache), None
    except cel.EvalError as exc:
        return None, exc.message


def _fast(
    result: FilterResult, plan: Plan, counts: list[int], nodes: Sequence[Mapping[str, Any]], node_info: Mapping[str, Any] | None, deadline: Deadline | None
) -> int:
    """The scheduler's path: stop at the first rejecting Enforce rule; Audit rules always run.
    Returns how many nodes were evaluated before the deadline (all of them without one)."""
    enforce = [(i, *entry) for i, entry in enumerate(plan) if entry[0].policy.enforce]
    audit = [(i, *entry) for i, entry in enumerate(plan) if not entry[0].policy.enforce]
    info_get = node_info.get if node_info is not None else None
    passed, failed, unresolvable = result.passed, result.failed, result.unresolvable
    due = deadline.at if deadline is not None else None
    for done, node in enumerate(nodes):
        if due is not None and perf_counter() > due:
            return done
        name = node_name(node)
        info = info_get(name, NO_NODE_INFO) if info_get is not None else NO_NODE_INFO
        cache: dict[str, Any] = {}
        for i, scope, rule, arity, fn, bind_error in enforce:
            counts[i] += 1
            if arity == 2 and bind_error is None:
                try:
                    value, error = fn(node, info), None
                except cel.EvalError as exc:
                    value, error = None, exc.message
                if value is True:
                    continue
            else:
                value, error = _evaluate(scope, rule, arity, fn, bind_error, node, info, cache)
            rejected, message, _ = _judge(scope, rule, node, info, cache, value, error, name, result.errors)
            if rejected:
                (unresolvable if rule.unresolvable else failed)[name] = message
                break
        else:
            passed.append(name)
        for i, scope, rule, arity, fn, bind_error in audit:
            counts[i] += 1
            if arity == 2 and bind_error is None:
                try:
                    value, error = fn(node, info), None
                except cel.EvalError as exc:
                    value, error = None, exc.message
            else:
                value, error = _evaluate(scope, rule, arity, fn, bind_error, node, info, cache)
            if value is True:
                continue
            rejected, message, _ = _judge(scope, rule, node, info, cache, value, error, name, result.errors)
            if rejected:
                result.audit_rejections.append(RuleEvent(scope.policy.name, rule.name, name, message))
    return len(nodes)


def _overdue(result: FilterResult, scopes: Sequence[PolicyScope], names: list[str], deadline: Deadline) -> None:
    """Answer ``names`` unevaluated, as an evaluation error would be: rejected when a matching
    Enforce policy with filters fails closed, otherwise not held against the node."""
    closed = [s for s in scopes if s.policy.enforce and s.policy.filters and s.policy.fail_closed]
    result.overdue += len(names)
    if not closed:
        result.passed.extend(names)
        return
    reason = f"{closed[0].policy.name}/(deadline): {deadline.message}"
    for name in names:
        result.failed[name] = reason
    result.errors.append(RuleEvent(closed[0].policy.name, "(deadline)", "", f"{len(names)} nodes not evaluated: {deadline.message}"))


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
            rejections=_count_rules(failed.values(), unresolvable.values()),
        )

    def patched(self, names: list[str], results: list[Remembered], previous: Snapshot, changed: list[int]) -> FilterView:
        if any(previous.names[i] != names[i] for i in changed):
            return FilterView.build(names, results, eventful=True)  # the node list moved: patching by name would be wrong
        view = FilterView(self.passing.copy(), self.failed.copy(), self.unresolvable.copy(), set(self.timed), set(self.eventful), dict(self.rejections))
        for i in changed:
            name = names[i]
            old = previous.results[i]
            if not old.timed and old.verdict != PASS:
                _count_rejection(view.rejections, old.reason, -1)
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
            _count_rejection(self.rejections, r.reason)
        if r.final_events:
            self.eventful.add(i)


def _memoized(
    result: FilterResult,
    ordered: list[tuple[PolicyScope, FilterRule]],
    counts: list[int],
    nodes: Sequence[Mapping[str, Any]] | NodesByName,
    node_info: Mapping[str, Any] | None,
    memo: ClassMemo,
    reads: Callable[[PolicyScope], PolicyReads],
    deadline: Deadline | None = None,
    names: list[str] | None = None,
    max_misses: int | None = None,
) -> None:
    """The fast path's verdicts from remembered results. Rules that read ``now`` run
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
            memo.bound = (plan, guards)
        plan, guards = memo.bound
        remembered = _remember(plan, timed, guards, enforced, counts, node, info, name)
        if remembered.events:
            memo.eventful = memo.eventful or bool(remembered.replay)
            return remembered
        # Equal results are one object: a window's hundreds of passing nodes then read one
        # result, not hundreds scattered over the heap (each a cache miss, measured as most
        # of FilterView.build's time in the real request stream).
        shared = memo.shared.get(remembered)
        if shared is None:
            if len(memo.shared) >= SHARED_RESULTS:
                memo.shared.clear()
            shared = memo.shared[remembered] = remembered
        return shared

    found = memo.lookup_nodes(nodes, node_info, NO_NODE_INFO, remember, names=names, max_misses=max_misses)
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
        passing = passing.copy()
        bound: dict[int, Entry] = {}
        for i in sorted(view.timed):
            name = names[i]
            r = results[i]
            for k in r.timed:
                if k not in bound:
                    scope, rule = ordered[k]
                    bound[k] = (k, scope, rule, *scope.caller(rule.expression))
            position, unresolvable_, reason = _run_timed(result, r, [bound[k] for k in r.timed], counts, enforced, found.node(i, nodes), found.info(i), name)
            if position == NEVER:
                passing[i] = 1
            else:
                (result.unresolvable if unresolvable_ else result.failed)[name] = reason
                _count_rejection(result.rejections, reason)
    result.passed.extend(compress(names, passing))
    for i in sorted(view.eventful):
        for audit, event in results[i].final_events:
            (result.audit_rejections if audit else result.errors).append(event)


def _count_rules(*reasons: Iterable[str]) -> dict[str, int]:
    per_reason: Counter[str] = Counter()
    for some in reasons:
        per_reason.update(some)  # counted in C; most rules have one message, so few distinct reasons remain
    per_rule: dict[str, int] = {}
    for reason, n in per_reason.items():
        _count_rejection(per_rule, reason, n)
    return per_rule


def _count_rejection(per_rule: dict[str, int], reason: str, n: int = 1) -> None:
    """Add ``n`` to the count of the rule a ``policy/rule: message`` reason names."""
    label = reason.partition(":")[0]
    per_rule[label] = per_rule.get(label, 0) + n


def _run_timed(result: FilterResult, r: Remembered, entries: list[Entry], counts: list[int], enforced: int, node: Any, info: Any, name: str) -> tuple[int, bool, str]:
    """Run a node's rules that read ``now`` around its remembered ones: (position, unresolvable, reason) of the first rejection."""
    position, unresolvable_, reason = r.position, r.unresolvable, r.reason
    cache: dict[str, Any] = {}
    for i, scope, rule, arity, fn, bind_error in entries:
        if i >= enforced or i > position:
            break
        counts[i] += 1
        value, error = _evaluate(scope, rule, arity, fn, bind_error, node, info, cache)
        if value is True:
            continue
        rejected, message, _ = _judge(scope, rule, node, info, cache, value, error, name, result.errors)
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
        value, error = _evaluate(scope, rule, arity, fn, bind_error, node, info, cache)
        if value is not True:
            rejected, message, _ = _judge(scope, rule, node, info, cache, value, error, name, result.errors)
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
) -> Remembered:
    """Run the rules that do not read ``now`` (Enforce ones up to the first that
    rejects, Audit ones all) and the guards of those that do."""
    cache: dict[str, Any] = {}
    events: list[tuple[int, bool, RuleEvent]] = []
    position, unresolvable_, reason = NEVER, False, ""
    for i, scope, rule, arity, fn, bind_error in plan:
        audit = i >= enforced
        if timed[i] or (not audit and position != NEVER):
            continue
        counts[i] += 1
        value, error = _evaluate(scope, rule, arity, fn, bind_error, node, info, cache)
        if value is True:
            continue
        errors: list[RuleEvent] = []
        rejected, message, _ = _judge(scope, rule, node, info, cache, value, error, name, errors)
        events += [(i, False, e) for e in errors]
        if rejected and audit:
            events.append((i, True, RuleEvent(scope.policy.name, rule.name, name, message)))
        elif rejected:
            position, unresolvable_, reason = i, rule.unresolvable, message
    pending: list[int] = []
    for entry in plan:
        i = entry[0]
        if not timed[i] or (i < enforced and i > position):
            continue
        guard = guards.get(i)
        if guard is not None:
            arity, fn, bind_error = guard
            value, _error = _evaluate(entry[1], entry[2], arity, fn, bind_error, node, info, cache)
            if value is True:
                continue  # true whatever the time
        pending.append(i)
    verdict = PASS if position == NEVER else (UNRESOLVABLE if unresolvable_ else FAIL)
    final = tuple((audit, e) for i, audit, e in events if audit or i <= position or i >= enforced)
    return Remembered(verdict, reason, position, unresolvable_, tuple(pending), tuple(events), final, TIMED if pending else verdict, () if pending else final)


def _explained(result: FilterResult, plan: Plan, counts: list[int], nodes: Sequence[Mapping[str, Any]], node_info: Mapping[str, Any] | None) -> None:
    """Every rule on every node, timed, with what each did; the verdict is the fast path's."""
    assert result.explanation is not None
    for node in nodes:
        name = node_name(node)
        info = node_info.get(name, NO_NODE_INFO) if node_info is not None else NO_NODE_INFO
        verdict: str | None = None
        reason = ""
        cache: dict[str, Any] = {}
        outcomes: list[Outcome] = []
        for i, (scope, rule, _arity, _fn, _bind_error) in enumerate(plan):
            counts[i] += 1
            outcome = run_rule(scope, rule.expression, {"node": node, "nodeInfo": info}, cache, rule=rule.name, kind="filter", timed=True)
            outcomes.append(outcome)
            rejected, message, effect = _judge(scope, rule, node, info, cache, outcome.value, outcome.error, name, result.errors)
            outcome.message = message if rejected else ""
            if not scope.policy.enforce:
                if rejected:
                    result.audit_rejections.append(RuleEvent(scope.policy.name, rule.name, name, message))
                effect = f"audit: would have {effect}" if rejected else "audit: kept"
            elif rejected and verdict is None:
                verdict = "unresolvable" if rule.unresolvable else "fail"
                reason = message
            outcome.effect = effect
        if verdict is None:
            result.passed.append(name)
        elif verdict == "fail":
            result.failed[name] = reason
        else:
            result.unresolvable[name] = reason
        result.explanation.append(NodeVerdict(name, verdict or "pass", reason, outcomes))


def _message(scope: PolicyScope, rule: FilterRule, node: Any, info: Any, cache: dict[str, Any]) -> str:
    if rule.message_expression is None:
        return rule.message
    try:
        value = scope.evaluate(rule.message_expression, {"node": node, "nodeInfo": info}, cache)
    except cel.EvalError:
        return rule.message
    return value if isinstance(value, str) and value else rule.message
