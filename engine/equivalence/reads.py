"""What a policy's expressions read: the pod fields that make two pods equivalent for it,
whether its rules read ``nodeInfo`` or the clock, and the part of a rule that holds
whatever the time (its guard). Worked out once per policy from the compiled syntax trees.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
import hashlib
from typing import Any

import orjson

from engine import cel
from engine.cel.parser import ast
from engine.cluster.keptjson import dumps_kept
from engine.policy.model import Expression, Policy

Path = tuple[str, ...]
# What changes between two requests without any node or nodeInfo being replaced: the clock,
# and pods counted across nodes (a pod bound on one node changes the count of every other
# node in its zone), so rules reading them are evaluated anew, never remembered.
PER_REQUEST = frozenset(("now", "counts"))
# The cluster's DRA objects: a claim allocated anywhere changes what is free on its node, and no
# nodeInfo is replaced for it. The same ``dra`` object is handed out until something changes
# (engine.cluster.devices.DeviceIndex.snapshot), so for a policy that reads it the object is
# part of the class key (``EquivalenceCache.table``): results are remembered until it changes.
DRA = "dra"


def policy_digest(policy: Policy) -> bytes:
    """What a policy decides with, as a hash: its document (a reservation's included), the file
    it came from (its messages name it), and the values of a ConfigMap it takes its params from.
    Two loads of the same content give the same digest, so what was remembered for one serves
    the other (``engine.equivalence.classes``)."""
    content = [policy.name, policy.file, policy.source, policy.params if policy.params_from else None, policy.params_error]
    return hashlib.blake2b(orjson.dumps(content, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS, default=str), digest_size=16).digest()


class PolicyReads:
    """What one policy's node-facing expressions read of the pod, and which of its rules read the clock."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.digest = policy_digest(policy)
        expressions: list[Expression] = [v.expression for v in policy.variables]
        for rule in policy.filters:
            expressions.append(rule.expression)
            if rule.message_expression is not None:
                expressions.append(rule.message_expression)
        expressions += [rule.expression for rule in policy.scores]
        params = policy.params if isinstance(policy.params, Mapping) else None
        self.pod_paths: frozenset[Path] = frozenset(p for e in expressions for p in pod_paths(e.root, params))
        # Per verb, what its rules and every variable read: a score does not read a filter's message,
        # so the pods of apps whose images differ are one class for scoring (arm64-readiness's
        # message names the image).
        # A filter's class leaves out what only its messages read (arm64-readiness's message
        # names the image): whether a rule holds does not read its message, and the few nodes a
        # rule with a message expression rejects are worded for each pod anew (``worded_apart``).
        variables = [v.expression for v in policy.variables]
        messages = [rule.message_expression for rule in policy.filters if rule.message_expression is not None]
        self._verb_paths: dict[str, tuple[frozenset[Path], frozenset[Path]]] = {
            verb: (frozenset(p for e in variables + rules for p in pod_paths(e.root, params)),
                   frozenset(p for e in variables + rules for p in object_paths(e.root, "namespaceObject")))
            for verb, rules in (("filter", [rule.expression for rule in policy.filters]), ("score", [rule.expression for rule in policy.scores]))
        }
        decided = self._verb_paths["filter"]
        # Whether the messages read of the pod or its namespace what the filter rules do not.
        self.worded_apart = any(not decided[0].issuperset(pod_paths(e.root, params)) or not decided[1].issuperset(object_paths(e.root, "namespaceObject"))
                                for e in messages)
        # What they read of the pod's Namespace: pods of namespaces that differ there are not equivalent.
        self.namespace_paths: frozenset[Path] = frozenset(p for e in expressions for p in object_paths(e.root, "namespaceObject"))
        self.reads_dra = any(DRA in e.program.free_variables for e in expressions)
        # The compiler flags filter rules that read nodeInfo; their messages and the scores are looked at here.
        self._node_info = {
            "filter": any(rule.reads_node_info or (rule.message_expression is not None and _reads_node_info(policy, rule.message_expression)) for rule in policy.filters),
            "score": any(_reads_node_info(policy, rule.expression) for rule in policy.scores),
        }
        self._timed: dict[str, bool] = {}
        self._guards: dict[str, Expression | None] = {}
        self._remembers: bool | None = None
        self._node_paths: dict[str, tuple[Path, ...] | None] = {}
        match = policy.match.expression
        # What a match expression's outcome is remembered by (None: it reads now, so never).
        self.match_paths: tuple[Path, ...] | None = None
        self.match_namespace_paths: tuple[Path, ...] = ()
        # A match that reads dra is remembered while the DRA objects are the same object (EquivalenceCache.match).
        self.match_reads_dra = match is not None and DRA in match.program.free_variables
        if match is not None and not self.timed(match):
            self.match_namespace_paths = tuple(sorted(self.namespace_paths | frozenset(object_paths(match.root, "namespaceObject"))))
            self.match_paths = tuple(sorted(self.pod_paths | frozenset(pod_paths(match.root, params))))

    def paths(self, verb: str) -> tuple[frozenset[Path], frozenset[Path]]:
        """What the policy's rules for ``verb`` (filter or score) and its variables read of the pod
        and of its namespace (any other verb: what every expression reads)."""
        return self._verb_paths.get(verb, (self.pod_paths, self.namespace_paths))

    def remembers_filter(self) -> bool:
        """Whether a class of this policy remembers anything of a filter: some rule does not read
        ``now`` or ``counts``, or has a part that does not (``guard``). A class of a policy whose
        every rule runs on every request (a cap over ``counts``) is not worth filling ahead."""
        if self._remembers is None:
            self._remembers = any(not self.timed(r.expression, r.message_expression) or self.guard(r.expression) is not None for r in self.policy.filters)
        return self._remembers

    def node_paths(self, rules: str) -> tuple[Path, ...] | None:
        """What the policy's ``rules`` read of the node, with the variables they read, as paths:
        "filter" (what a class remembers: the rules that do not read now or counts, their
        messages, the others' ``guard``), "score", or "timed" (the filter rules that run on every
        request, ``timed``, and their messages); None when one reads the node whole or reads
        ``nodeInfo``.
        Two nodes equal at these paths get the same results from those rules for one class
        (for "timed", within one request: one ``now``, one set of counts), so a class new to
        the cluster, or a cap per zone, evaluates once per kind of node, not once per node
        (``engine.equivalence.filtering`` and ``scoring``)."""
        if rules not in self._node_paths:
            policy, params = self.policy, (self.policy.params if isinstance(self.policy.params, Mapping) else None)
            if rules == "score":
                chosen = [r.expression for r in policy.scores]
            elif rules == "timed":
                chosen = [e for r in policy.filters if self.timed(r.expression, r.message_expression) for e in (r.expression, r.message_expression) if e is not None]
            else:
                # What a class remembers of a node: the rules that do not read now or counts, their
                # messages, and the guards of those that do (``_remember`` runs nothing else).
                chosen = [e for r in policy.filters
                          for e in ((self.guard(r.expression),) if self.timed(r.expression, r.message_expression) else (r.expression, r.message_expression))
                          if e is not None]
            expressions = chosen + self._variables_of(chosen)
            paths = frozenset(p for e in expressions for p in node_paths(e.root, params))
            blind = not any("nodeInfo" in e.program.free_variables for e in expressions)
            self._node_paths[rules] = tuple(sorted(paths)) if blind and () not in paths else None
        return self._node_paths[rules]

    def _variables_of(self, expressions: list[Expression]) -> list[Expression]:
        """The policy's variables ``expressions`` read, directly or through other variables."""
        found: dict[str, Expression] = {}
        waiting = [name for e in expressions for name in e.variables]
        while waiting:
            name = waiting.pop()
            if name not in found:
                found[name] = self.policy.variable(name).expression
                waiting += found[name].variables
        return list(found.values())

    def reads_node_info(self, verb: str) -> bool:
        """Whether the policy's rules for ``verb`` (filter or score) read ``nodeInfo``,
        directly or through a variable (any other verb: assumed so)."""
        return self._node_info.get(verb, True)

    def timed(self, *expressions: Expression | None) -> bool:
        """Whether any of the expressions reads ``now`` or ``counts``, directly or through a
        policy variable: what they give changes between requests with no node or nodeInfo
        replaced, so they run on every request and are never remembered."""
        return any(e is not None and self._reads_now(e) for e in expressions)

    def _reads_now(self, expr: Expression) -> bool:
        found = self._timed.get(expr.path)
        if found is None:
            self._timed[expr.path] = False  # variables cannot form cycles (the compiler checks), this only guards
            found = not PER_REQUEST.isdisjoint(ast.free_variables(expr.root)) or any(self._reads_now(self.policy.variable(v).expression) for v in expr.variables)
            self._timed[expr.path] = found
        return found


    def guard(self, expr: Expression) -> Expression | None:
        """For a rule ``a || b(now) || ...``: the operands that do not read ``now``
        (``a || ...``) as an expression of their own. When it is true for a node,
        the rule is true whatever the time (CEL's ``||`` is true as soon as one
        operand is, errors in the others notwithstanding), so the node's result
        can be remembered. None when the rule has no such operand."""
        if expr.path in self._guards:
            return self._guards[expr.path]
        guard = None
        root = expr.root
        if isinstance(root, ast.Logical) and root.op == "||":
            timeless = tuple(op for op in root.operands if not self._operand_reads_now(op))
            if timeless:
                guard_root = timeless[0] if len(timeless) == 1 else ast.Logical("||", timeless, offset=root.offset)
                program = cel.Program(expr.text, variables=expr.parameters, library=cel.default_library(), check=False, root=guard_root)
                guard = Expression(
                    text=expr.text,
                    program=program,
                    path=expr.path + " (the operands that do not read now)",
                    location=expr.location,
                    variables=expr.variables,
                    parameters=expr.parameters,
                    root=guard_root,
                )
        self._guards[expr.path] = guard
        return guard

    def _operand_reads_now(self, node: ast.Node) -> bool:
        free = ast.free_variables(node)
        if not PER_REQUEST.isdisjoint(free):
            return True
        return "variables" in free and any(self._reads_now(self.policy.variable(v).expression) for v in _variables_read(node))


def _reads_node_info(policy: Policy, expr: Expression) -> bool:
    # As the compiler judges a filter rule (FilterRule.reads_node_info).
    return "nodeInfo" in expr.program.free_variables or any(v.reads_node_info for v in policy.variables if v.name in expr.variables)


def _variables_read(node: ast.Node) -> set[str]:
    if isinstance(node, (ast.Select, ast.Has)) and isinstance(node.operand, ast.Ident) and node.operand.name == "variables":
        return {node.field}
    found: set[str] = set()
    for child in ast.children(node):
        found |= _variables_read(child)
    return found


def pod_paths(root: ast.Node, params: Mapping[str, Any] | None = None) -> Iterable[Path]:
    """Field paths below ``pod`` that an expression reads: ``pod.spec.?containers``
    gives ``("spec", "containers")``; a use of ``pod`` itself gives ``()``, except as the
    argument of a function that declares what it reads (``READS`` in ``engine.cel.library``):
    ``kube.podRequests(pod)`` reads each container's requests, not the pod's name or its
    images, so pods of different apps with equal requests read alike. A key that is one of the
    policy's ``params`` (``pod.metadata.labels[params.podTeamLabel]``) is its value: params are
    part of the policy's digest, so the key cannot change while the path is in use. An element
    of a list by a constant index (``pod.spec.containers[0].image``) reads that field of every
    element: more than the expression reads, never less."""
    path = _chain(root, "pod", params)
    if path is not None:
        yield path
        return
    declared = _declared_reads(root)
    if declared is not None:
        for arg, paths in declared:
            head = _chain(arg, "pod", params)
            if head is None or paths is None:
                yield from pod_paths(arg, params)
                continue
            for read in paths:
                steps = tuple(read.split(".")) if isinstance(read, str) else tuple(read)
                if steps[0] == "status":
                    continue  # read of a bound pod only (kube.podRequests: a resize); the pod placed is not bound
                # A declared path may pass through a list (``spec.containers.resources``): the
                # fingerprint takes that field of each element (``pod_fingerprint``).
                yield (*head, *steps)
        return
    for child in ast.children(root):
        yield from pod_paths(child, params)


def node_paths(root: ast.Node, params: Mapping[str, Any] | None = None) -> Iterable[Path]:
    """Field paths below ``node`` that an expression reads, as ``pod_paths`` gives the pod's
    (``()``: the node whole). ``counts.inDomain(node, key, ...)`` reads the node's label
    ``key`` and nothing else of it."""
    path = _chain(root, "node", params)
    if path is not None:
        yield path
        return
    if (isinstance(root, ast.Call) and isinstance(root.target, ast.Ident) and root.target.name == "counts"
            and root.function == "inDomain" and len(root.args) == 3 and _chain(root.args[0], "node", params) == ()):
        given = root.args[1]
        # The compiler takes only a literal key (KPE308).
        yield ("metadata", "labels", given.value) if isinstance(given, ast.Literal) and isinstance(given.value, str) else ()
        for arg in root.args[1:]:
            yield from node_paths(arg, params)
        return
    for child in ast.children(root):
        yield from node_paths(child, params)


def _declared_reads(node: ast.Node) -> list[tuple[ast.Node, Any]] | None:
    """(argument, declared paths or None) of a call to a namespaced function with a READS entry."""
    if not isinstance(node, ast.Call) or not isinstance(node.target, ast.Ident):
        return None
    reads = cel.default_library().reads.get(f"{node.target.name.lstrip('.')}.{node.function}")
    if reads is None:
        return None
    return [(arg, reads[i] if i < len(reads) else None) for i, arg in enumerate(node.args)]


def object_paths(root: ast.Node, variable: str) -> Iterable[Path]:
    """Field paths below ``variable`` that an expression reads (``()``: the whole object).
    ``variable == null`` and ``!= null`` read none: whether it is null is in every class key
    (``engine.equivalence.classes.namespace_fingerprint``)."""
    if isinstance(root, ast.Binary) and root.op in ("==", "!=") and any(
        isinstance(side, ast.Literal) and side.value is None for side in (root.left, root.right)
    ) and any(isinstance(side, ast.Ident) and side.name == variable for side in (root.left, root.right)):
        return
    path = _chain(root, variable)
    if path is not None:
        yield path
        return
    for child in ast.children(root):
        yield from object_paths(child, variable)


def _chain(node: ast.Node, variable: str = "pod", params: Mapping[str, Any] | None = None) -> Path | None:
    match node:
        case ast.Ident(name=found) if found == variable:
            return ()
        case ast.Select(operand=operand, field=name) | ast.Has(operand=operand, field=name):
            head = _chain(operand, variable, params)
            return None if head is None else (*head, name)
        case ast.Index(operand=operand, index=ast.Literal(value=str() as name)):
            head = _chain(operand, variable, params)
            return None if head is None else (*head, name)
        case ast.Index(operand=operand, index=ast.Literal(value=int() as position)) if type(position) is int and variable == "pod":
            # An element of a list: the fingerprint goes on into every element (``_at``).
            return _chain(operand, variable, params)
        case ast.Index(operand=operand, index=ast.Select(operand=ast.Ident(name="params"), field=key)) if (
            params is not None and isinstance(params.get(key), str)
        ):
            head = _chain(operand, variable, params)
            return None if head is None else (*head, params[key])
    return None


def pod_fingerprint(pod: Mapping[str, Any], paths: Sequence[Path], *, kept: bool = True) -> bytes | None:
    """The values at ``paths`` as canonical JSON (None if they are not plain JSON). A path that
    meets a list goes on in each element (``spec.containers.resources``: each container's
    resources, ``[value]`` where it has them and ``[]`` where not, so that absent and null
    differ). Any object's (a node's too); ``kept=False`` for one used only while a request
    lasts (not copied to its length)."""
    values: list[Any] = []
    for i, path in enumerate(paths):
        value = _at(pod, path, 0)
        if value is not _ABSENT:
            values.append((i, value))
    try:
        return dumps_kept(values, option=orjson.OPT_SORT_KEYS) if kept else orjson.dumps(values, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        return None


_ABSENT: Any = object()


def _at(value: Any, path: Path, start: int) -> Any:
    k = start
    for name in path[start:] if start else path:  # by name, without indexing: every class key walks here
        if type(value) is dict or isinstance(value, Mapping):  # a dict without the ABC check
            value = value.get(name, _ABSENT)
            if value is _ABSENT:
                return _ABSENT
        elif type(value) is list and k > 0:
            return [[] if (found := _at(item, path, k)) is _ABSENT else [found] for item in value]
        else:
            return _ABSENT
        k += 1
    return value


def node_key(result: int, node: Mapping[str, Any], paths: tuple[tuple[str, ...], ...]) -> Any:
    """What rules read of ``node`` at ``paths`` (``PolicyReads.node_paths``), as a key, with
    ``result`` (what else the key must tell apart): the values themselves when all are strings
    (labels and annotations), walked here rather than by ``_at`` (0.4 µs a node against 1.0
    through it: a key must cost well under the 6 µs a run of the rules does); else their
    canonical JSON (None when not plain JSON: no sharing)."""
    values: list[Any] = [result]
    for path in paths:
        value: Any = node
        for step in path:
            if type(value) is not dict and not isinstance(value, Mapping):
                value = _ABSENT
                break
            value = value.get(step, _ABSENT)
            if value is _ABSENT:
                break
        values.append(value)
        if type(value) is not str and value is not _ABSENT:
            # 1, 1.0 and true are equal keys in Python, not in CEL; JSON tells them apart.
            print_ = pod_fingerprint(node, paths, kept=False)
            return (result, print_) if print_ is not None else None
    return tuple(values)
