"""What a policy set counts across nodes (``counts``: engine/cel/types/counts.py), found in
its compiled expressions, and the rule that makes it known at load time.

kpe's cache keeps the counts incrementally (``engine.cluster.counts``), which it can do only
for selectors it knows before any pod asks: so every call names its topology key as a
string literal and its selector as a map literal whose keys are string literals (the
values may be any expression: ``{'app': pod.metadata.labels.app}`` counts by ``app``
whatever the pod's app is). ``counts`` is only ever the receiver of those calls.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from engine.cel.parser import ast
from engine.cluster.counts import CountSpecs, Keys
from engine.policy.model import Expression, Policy

# The functions and the position of their topology key and selector arguments.
FUNCTIONS: dict[str, tuple[int | None, int]] = {"inDomain": (1, 2), "domains": (0, 1), "cluster": (None, 0)}


def call_problems(root: ast.Node) -> list[tuple[int, str]]:
    """(offset, message) for every use of ``counts`` the cache could not keep counts for."""
    problems: list[tuple[int, str]] = []
    for node, parent in _walk(root, None):
        if not (isinstance(node, ast.Ident) and node.name == "counts"):
            continue
        if not (isinstance(parent, ast.Call) and parent.target is node and parent.function in FUNCTIONS):
            problems.append((node.offset, f"counts can only be called: {', '.join(f'counts.{f}(...)' for f in FUNCTIONS)}"))
            continue
        _spec(parent, problems)
    return problems


def _spec(call: ast.Call, problems: list[tuple[int, str]]) -> tuple[Keys, str | None] | None:
    at_key, at_selector = FUNCTIONS[call.function]
    if len(call.args) != at_selector + 1:
        return None  # the typed check reports the wrong number of arguments
    topology: str | None = None
    if at_key is not None:
        arg = call.args[at_key]
        if not (isinstance(arg, ast.Literal) and isinstance(arg.value, str) and arg.value):
            problems.append((arg.offset, f"counts.{call.function}: the topology key must be a string literal (a node label key such as 'topology.kubernetes.io/zone')"))
            return None
        topology = arg.value
    selector = call.args[at_selector]
    keys = _literal_keys(selector)
    if keys is None:
        problems.append((selector.offset, f"counts.{call.function}: the selector must be a map literal with literal label keys, such as {{'app': pod.metadata.labels.app}}"))
        return None
    return keys, topology


def _literal_keys(node: ast.Node) -> Keys | None:
    if not isinstance(node, ast.MapLit) or not node.entries:
        return None
    keys = []
    for entry in node.entries:
        if entry.optional or not (isinstance(entry.key, ast.Literal) and isinstance(entry.key.value, str)):
            return None
        keys.append(entry.key.value)
    return tuple(sorted(keys))


def _walk(node: ast.Node, parent: ast.Node | None) -> Iterator[tuple[ast.Node, ast.Node | None]]:
    yield node, parent
    for child in ast.children(node):
        yield from _walk(child, node)


def expressions(policy: Policy) -> Iterator[Expression]:
    """Every expression of the policy that may read ``counts``."""
    for variable in policy.variables:
        yield variable.expression
    for rule in policy.filters:
        yield rule.expression
        if rule.message_expression is not None:
            yield rule.message_expression
    for score in policy.scores:
        yield score.expression
    if policy.preemption is not None:
        yield from (e for e in (policy.preemption.victim, policy.preemption.node) if e is not None)


def count_specs(policies: Iterable[Policy]) -> CountSpecs:
    """What the policies count by (engine.cluster.counts keeps exactly that)."""
    domains: set[tuple[Keys, str]] = set()
    clusters: set[Keys] = set()
    for policy in policies:
        for expr in expressions(policy):
            if expr.root is None or "counts" not in expr.program.free_variables:
                continue
            for node, _ in _walk(expr.root, None):
                if isinstance(node, ast.Call) and isinstance(node.target, ast.Ident) and node.target.name == "counts" and node.function in FUNCTIONS:
                    found = _spec(node, [])
                    if found is None:
                        continue
                    keys, topology = found
                    if topology is None:
                        clusters.add(keys)
                    else:
                        domains.add((keys, topology))
    return CountSpecs(frozenset(domains), frozenset(clusters))


def reads_counts(policy: Policy, *, verb: str = "filter") -> bool:
    """Whether the policy's ``verb`` rules (filter, score, preemption) read ``counts``, directly
    or through a variable (node-scoped variables are inlined into the rules that read them)."""
    if verb == "filter":
        exprs: Iterable[Expression] = (e for r in policy.filters for e in (r.expression, r.message_expression) if e is not None)
    elif verb == "score":
        exprs = (r.expression for r in policy.scores)
    else:
        exprs = expressions(policy)
    return any("counts" in e.program.free_variables for e in exprs)
