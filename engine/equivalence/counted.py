"""Filter rules that read ``counts`` (and not ``now``), remembered per node with the counts they
read: a class keeps, for each node, the rule's verdict and message and every ``counts`` call
its evaluation made with the number it got, and a later request reuses them while each call
still gives the same number.

Why: a cap over counts (the shipped ``app-zone-cap``: at most two pods of an app in a zone) used
to run on every request and every node of the window, since a pod bound anywhere can change a
count. But a bind changes the counts of the selectors its pod carries, in the domains of its
node only: after a pod of one app lands in one zone, that app's pods see the other zones' counts
unchanged, and another app's pods see nothing changed at all. Asking the counts again is a few
dictionary lookups (``engine.cluster.counts``); evaluating the rule and its message is a CEL
program and a formatted string.

Exact by construction: the rule's other inputs are the class's (the pod's fields the policy
reads, its params and namespace), the node object and its ``nodeInfo`` (the very objects the
verdict was computed with, checked by identity), and the counts it read. An expression is
deterministic in its inputs, so with every count it read the same, it reads the same counts in
the same order and gives the same verdict. A rule whose evaluation or message had an error is
not remembered (its error is reported on every request, as before).

The recording goes through the request's own ``Counts`` object (each request has one: the
cache's ``counts`` property, or the pods in flight added): its source is swapped for a
``Recorder`` while one rule runs, with a cache of variables of its own, so a variable computed
for another rule (whose counts calls were recorded there) is computed again under this one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.cel.types.counts import Counts, CountSource, Selector
from engine.decisions.evaluation import PolicyScope
from engine.decisions.filtering import RuleEvent, evaluate_rule, judge
from engine.policy.model import FilterRule

# Per class, node entries kept (over its rules) before they are all forgotten: a bound like the
# class's own results (a node's entry is replaced, never added to, as counts change).
COUNTED_KEPT = 16384

Call = tuple[int, Any, str, Selector, int]  # (kind: 0 inDomain, 1 domains, 2 cluster, node, topology key, selector, count)


class Kept:
    """What one class keeps: per rule position, per node name, the rule's outcome (``Counted``),
    and the selectors the records name, one tuple each (a CEL map is a new selector tuple at
    every call; a class's pods ask for a few)."""

    __slots__ = ("by_rule", "selectors", "size")

    def __init__(self) -> None:
        self.by_rule: dict[int, dict[str, Counted]] = {}
        self.selectors: dict[Selector, Selector] = {}
        self.size = 0

    def __len__(self) -> int:
        return self.size

    def get(self, i: int, name: str) -> Counted | None:
        rule = self.by_rule.get(i)
        return rule.get(name) if rule is not None else None

    def put(self, i: int, name: str, counted: Counted) -> None:
        if self.size >= COUNTED_KEPT:
            self.by_rule.clear()
            self.selectors.clear()
            self.size = 0
        rule = self.by_rule.setdefault(i, {})
        self.size += name not in rule
        rule[name] = counted


class Recorder:
    """A ``CountSource`` that answers from another and notes each call with its answer."""

    __slots__ = ("source", "calls", "selectors")

    def __init__(self, source: CountSource, selectors: dict[Selector, Selector]) -> None:
        self.source = source
        self.calls: list[Call] = []
        self.selectors = selectors

    def in_domain(self, node: Any, key: str, selector: Selector) -> int:
        n = self.source.in_domain(node, key, selector)
        self.calls.append((0, node, key, self.selectors.setdefault(selector, selector), n))
        return n

    def domains(self, key: str, selector: Selector) -> int:
        n = self.source.domains(key, selector)
        self.calls.append((1, None, key, self.selectors.setdefault(selector, selector), n))
        return n

    def cluster(self, selector: Selector) -> int:
        n = self.source.cluster(selector)
        self.calls.append((2, None, "", self.selectors.setdefault(selector, selector), n))
        return n


@dataclass(frozen=True, slots=True, eq=False)
class Counted:
    """One rule's outcome on one node, with what it was worked out from."""

    rule: FilterRule
    node: Any
    info: Any
    bound: tuple[Call, ...]  # the counts read as the rule was bound, the same for every node of a request
    calls: tuple[Call, ...]  # the counts read while it ran on the node
    rejected: bool
    message: str

    def holds(self, source: CountSource) -> bool:
        """Whether every count the rule read is the same in ``source``."""
        for kind, node, key, selector, n in self.calls:
            if kind == 0:
                now = source.in_domain(node, key, selector)
            elif kind == 1:
                now = source.domains(key, selector)
            else:
                now = source.cluster(selector)
            if now != n:
                return False
        return True


def bind_recorded(scope: PolicyScope, rule: FilterRule, kept: Kept) -> tuple[tuple[int, Any, BaseException | None], tuple[Call, ...] | None]:
    """``scope.caller(rule.expression)``, with the rule's message bound too, and the counts they
    read as they were bound: binding computes every sub-expression over the pod-level inputs
    (``engine.cel``: ``counts.cluster({'team': pod.metadata.labels.team})`` is one), once a
    request, so those counts are read there and not while a node is evaluated. None for the
    counts when they cannot be known (either was bound before, or one reads a variable per node
    of its own): the rule is then evaluated on every request, as it always was."""
    fixed = scope.fixed.get("counts")
    counts = fixed if type(fixed) is Counts else None
    source = counts.source if counts is not None else None
    message = rule.message_expression
    if counts is None or source is None or scope.bound_already(rule.expression) or (message is not None and scope.bound_already(message)):
        return scope.caller(rule.expression), None
    recorder = Recorder(source, kept.selectors)
    counts.source = recorder
    try:
        caller = scope.caller(rule.expression)
        remaining = scope.bind(message)[1] if message is not None else ()
    finally:
        counts.source = source
    if caller[0] < 0 or not set(remaining) <= PER_NODE:
        return caller, None
    return caller, tuple(recorder.calls)


PER_NODE = frozenset(("node", "nodeInfo"))


def judged(
    kept: Kept, keep: bool, i: int, scope: PolicyScope, rule: FilterRule, arity: int, fn: Any, bind_error: BaseException | None,
    bound: tuple[Call, ...] | None, node: Any, info: Any, name: str, errors: list[RuleEvent],
) -> tuple[bool, str, bool]:
    """(rejected, message, evaluated) of rule ``i`` (a rule that reads ``counts`` and not ``now``)
    on ``node``: from ``kept`` while it holds, else evaluated and kept (with ``keep``: a class's
    first request keeps nothing, since most classes of a cap are a pod like no other); an error
    goes to ``errors``. ``bound``: the counts read as the rule was bound (``bind_recorded``), None when
    not known (nothing is kept then)."""
    fixed = scope.fixed.get("counts")
    counts = fixed if type(fixed) is Counts else None
    source = counts.source if counts is not None else None
    found = kept.get(i, name)
    if (bound is not None and source is not None and found is not None and found.rule is rule and found.node is node and found.info is info
            and found.bound == bound and found.holds(source)):
        return found.rejected, found.message, False
    recorder = Recorder(source, kept.selectors) if keep and source is not None and bound is not None else None
    mine: list[RuleEvent] = []
    private: dict[str, Any] = {}  # variables computed under this rule's recording only
    if counts is not None and recorder is not None:
        counts.source = recorder
    try:
        value, error = evaluate_rule(scope, rule, arity, fn, bind_error, node, info, private)
        rejected, message = False, ""
        if value is not True:
            rejected, message, _ = judge(scope, rule, node, info, private, value, error, name, mine)
    finally:
        if counts is not None:
            counts.source = source
    if recorder is not None and bound is not None and error is None and not mine:
        kept.put(i, name, Counted(rule, node, info, bound, tuple(recorder.calls), rejected, message))
    errors.extend(mine)
    return rejected, message, True
