"""Putting a filter request's answer together from the answers of each of its policies' classes
(``engine.equivalence.filtering._by_policy``), as one evaluation of every rule in the request's
order would give it: the nodes every policy passes, for a node several policies reject the
reason that comes first, and only the errors a full evaluation would have met. And the words of
a policy whose messages read what its rules do not: its class is keyed by what the rules read,
so the nodes it rejected are worded anew for the request's pod.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import compress
from typing import Any

from engine.cluster.nodeinfo import NodesByName
from engine.decisions.evaluation import PolicyScope
from engine.decisions.filtering import NO_NODE_INFO, FilterResult, RuleEvent, count_rules, rule_message


def reword(result: FilterResult, scope: PolicyScope, nodes: Sequence[Mapping[str, Any]] | NodesByName, node_info: Mapping[str, Any] | None,
            names: list[str]) -> None:
    """Word anew, for this request's pod, what the rules of ``scope``'s policy with a message
    expression said of the nodes they rejected: the class was keyed by what the rules read,
    not by what their messages read (``PolicyReads.worded_apart``), so the remembered text may
    be another pod's. An evaluation error's text is the rule's own and stays."""
    worded = {rule.name: rule for rule in scope.policy.filters if rule.message_expression is not None}
    erred = {(e.node, e.rule) for e in result.errors}
    policy = scope.policy.name
    index: dict[str, int] | None = None

    def node_of(name: str) -> tuple[Any, Any]:
        nonlocal index
        if isinstance(nodes, NodesByName):
            state = nodes.states[name]
            return state.node, state.info
        if index is None:
            index = {n: i for i, n in enumerate(names)}
        return nodes[index[name]], node_info.get(name, NO_NODE_INFO) if node_info is not None else NO_NODE_INFO

    def said(name: str, rule_name: str) -> str | None:
        rule = worded.get(rule_name)
        if rule is None or (name, rule_name) in erred:
            return None
        node, info = node_of(name)
        return f"{policy}/{rule_name}: {rule_message(scope, rule, node, info, {})}"

    for rejected in (result.failed, result.unresolvable):
        for name, reason in rejected.items():
            label = reason.partition(":")[0]
            if label.partition("/")[0] == policy and (text := said(name, label.partition("/")[2])) is not None:
                rejected[name] = text
    result.audit_rejections = [RuleEvent(e.policy, e.rule, e.node, text) if e.policy == policy and (text := said(e.node, e.rule)) is not None else e
                               for e in result.audit_rejections]


def merge(result: FilterResult, parts: list[tuple[FilterResult, list[str], bytearray | bytes]], position: dict[str, int], enforced: int) -> None:
    """One answer from the answers of each policy to the same nodes (``_by_policy``): a node
    passes when every policy passes it, in C (the passing bytes of every policy ANDed as one
    integer); a node several policies reject takes the reason that comes first in the
    request's order (``position``, by ``policy/rule``)."""
    first, names, passing = parts[0]
    result.unknown = first.unknown
    together = int.from_bytes(passing, "little")
    for part, found, more in parts[1:]:
        if len(found) != len(names):
            raise AssertionError("the policies of one request resolved different nodes")
        together &= int.from_bytes(more, "little")
    result.passed.extend(compress(names, together.to_bytes(len(names), "little")))
    rejecting = [part for part, _, _ in parts if part.failed or part.unresolvable]
    failed, unresolvable = result.failed, result.unresolvable
    for part in rejecting:
        failed.update(part.failed)
        unresolvable.update(part.unresolvable)
    twice: set[str] = set()
    if len(rejecting) > 1:
        seen: set[str] = set()
        for part in rejecting:
            mine = part.failed.keys() | part.unresolvable.keys()
            twice |= seen & mine
            seen |= mine
    if twice:
        for name in twice:
            failed.pop(name, None)
            unresolvable.pop(name, None)
            best: tuple[int, str, bool] | None = None
            for part in rejecting:
                for source, flag in ((part.failed, False), (part.unresolvable, True)):
                    reason = source.get(name)
                    if reason is not None and (best is None or position[reason.partition(":")[0]] < best[0]):
                        best = (position[reason.partition(":")[0]], reason, flag)
            assert best is not None
            (unresolvable if best[2] else failed)[name] = best[1]
        result.rejections = count_rules(failed.values(), unresolvable.values())
    else:
        for part in rejecting:
            for label, n in part.rejections.items():
                result.rejections[label] = result.rejections.get(label, 0) + n
    for part, _, _ in parts:
        result.audit_rejections += part.audit_rejections
        result.memo_hits += part.memo_hits
        result.memo_misses += part.memo_misses
    erring = [part for part, _, _ in parts if part.errors]
    if erring:
        # A full evaluation stops a node's Enforce rules at its first rejection: errors of the rules after it never happen.
        def ran(event: RuleEvent) -> bool:
            at = position[f"{event.policy}/{event.rule}"]
            reason = failed.get(event.node) or unresolvable.get(event.node)
            return at >= enforced or reason is None or at <= position[reason.partition(":")[0]]

        errors = [event for part in erring for event in part.errors if ran(event)]
        if len(erring) > 1:  # in a full evaluation's order: node by node, rule by rule
            index = {name: i for i, name in enumerate(names)}
            errors.sort(key=lambda e: (index.get(e.node, -1), position[f"{e.policy}/{e.rule}"]))
        result.errors += errors
