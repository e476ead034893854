"""Which fields of *other* pods the loaded policies can read: the analysis that
gives the policy set its ``pod_projection`` (``engine.cluster.projection``).

Policies read cached pods through ``nodeInfo.pods`` (filters, scores, their
messages, node-scoped variables, preemption rules), ``victim`` and
``victims`` (preemption: with node names, kube-scheduler sends victims by UID
and kpe takes them from its cache) and ``pods`` and ``admitted``
(admission). The pod a decision is about (``pod``) comes whole from the
request, or is a pending or gated pod, which the cache keeps whole.

The analysis runs over each compiled expression's syntax tree (node-scoped
variables already inlined by the compiler; pod-level variables cannot read
cached pods) and follows a pod value through what CEL can do with it without
looking at the rest of it: field selection (``.f``, ``.?f``), ``has()``,
indexing with a string literal (``['k']``, ``[?'k']``), list elements
(an index, the macros ``all``/``exists``/``exists_one``/``map``/``filter``/
``transformList``, ``optMap``/``optFlatMap``), ``size()``, optionals
(``orValue``, ``value``, ``hasValue``, ``or``, ``optional.of``), conditionals
and list literals. Everything else it cannot follow keeps the whole value at
that point: a value compared (``==``, ``in``, ``<``), given to a function or
operator, converted (``string()``, ``dyn()``), indexed with a key computed at
run time, a map iterated or sized (its keys), the result of an expression.
Conservative is correct (the cache keeps a little more); narrower would change
decisions. A function that takes a pod and reads only some of its fields can
say so in its library's ``READS`` table (``engine.cel.library``); without an
entry every argument is read whole.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engine.cel.parser import ast
from engine.cluster.projection import EMPTY, EVERYTHING, ITEM, KPE_READS, Projection, Builder, from_paths
from engine.policy.model import Expression, Policy, PolicySet

if TYPE_CHECKING:
    from engine.cel.library import Library, Paths

POD_LISTS = ("victims", "pods", "admitted")  # variables that are lists of cached pods
POD_VALUES = ("victim",)  # variables that are one cached pod
NODE_INFO = "nodeInfo"


@dataclass(frozen=True)
class _Pod:
    """A value that is (part of) a cached pod: the value at ``path`` under a pod, inside
    ``lists`` lists that CEL built (``nodeInfo.pods`` is a list of pods: lists=1)."""

    path: tuple[str, ...]
    lists: int = 0


@dataclass(frozen=True)
class _NodeInfo:
    """``nodeInfo`` itself: a map whose ``pods`` are cached pods."""


_Ref = _Pod | _NodeInfo
_Refs = frozenset[_Ref]
_NONE: _Refs = frozenset()
_POD_LIST: _Refs = frozenset([_Pod((), 1)])
_UNKNOWN = object()  # a value known only at run time

# Methods on optionals whose result is the optional's value (or its default): transparent.
_PASS_THROUGH = frozenset(("value", "orValue", "or"))


class _Analysis:
    """``values`` and ``lists``: the variables whose values are (lists of) the pods analysed;
    ``node_info``: whether ``nodeInfo.pods`` are (the cached pods are, the decided one is not)."""

    def __init__(self, library: Library | None, *, values: tuple[str, ...] = POD_VALUES, lists: tuple[str, ...] = POD_LISTS,
                 node_info: bool = True) -> None:
        self.values, self.lists, self.node_info = values, lists, node_info
        self.root = Builder()
        self.reads: Mapping[str, tuple[Paths | None, ...]] = library.reads if library is not None else {}
        self.functions: Mapping[str, Any] = library.functions if library is not None else {}
        self.params: Mapping[str, Any] = {}  # the constants of the policy whose expressions are visited

    # -- recording --------------------------------------------------------------------
    def whole(self, refs: Iterable[_Ref]) -> None:
        """The values are read in full (compared, converted, passed on...)."""
        for ref in refs:
            if isinstance(ref, _NodeInfo):
                self.root.whole = True
            else:
                node = self.root.at(ref.path)
                if node is not None:
                    node.whole = True

    def present(self, ref: _Pod, *extra: str) -> None:
        self.root.at((*ref.path, *extra))

    def keys(self, ref: _Pod) -> None:
        """The value's keys are read if it is a map (a list keeps its length anyway)."""
        if ref.lists == 0:
            node = self.root.at(ref.path)
            if node is not None:
                node.map_whole = True
                if node.items is None:
                    node.items = Builder()

    # -- steps ------------------------------------------------------------------------
    def select(self, refs: _Refs, name: str) -> _Refs:
        out: set[_Ref] = set()
        for ref in refs:
            if isinstance(ref, _NodeInfo):
                if name == "pods":
                    out.add(_Pod((), 1))
            elif ref.lists == 0:  # selecting on a list is an error whatever it holds
                out.add(_Pod((*ref.path, name)))
                self.present(ref, name)
        return frozenset(out)

    def index(self, refs: _Refs, key: object, key_refs: _Refs) -> _Refs:
        """``refs[key]``: ``key`` is the index's value when it is known before run time
        (a literal, or a policy's ``params``), else ``_UNKNOWN``."""
        self.whole(key_refs)
        out: set[_Ref] = set()
        for ref in refs:
            if isinstance(ref, _NodeInfo):
                if key == "pods" or key is _UNKNOWN:
                    out.add(_Pod((), 1))
            elif ref.lists:
                out.add(_Pod(ref.path, ref.lists - 1))
            elif type(key) is str:
                out.add(_Pod((*ref.path, key)))
                self.present(ref, key)
            elif key is not _UNKNOWN:
                out.add(_Pod((*ref.path, ITEM)))  # a list's index; JSON maps have no such key whatever they hold
                self.present(ref, ITEM)
            else:
                # A key known only at run time: a map's (then kept whole) or a list's index.
                self.keys(ref)
                out.add(_Pod((*ref.path, ITEM)))
        return frozenset(out)

    def constant(self, node: ast.Node, env: Mapping[str, _Refs]) -> object:
        """The value of a literal or of ``params.a.b`` / ``params['a']`` (constants of the
        policy), else ``_UNKNOWN``."""
        if isinstance(node, ast.Literal):
            return node.value
        steps: list[object] = []
        while True:
            if isinstance(node, ast.Select) and not node.optional:
                steps.append(node.field)
                node = node.operand
            elif isinstance(node, ast.Index) and not node.optional and isinstance(node.index, ast.Literal):
                steps.append(node.index.value)
                node = node.operand
            else:
                break
        if not (isinstance(node, ast.Ident) and node.name.lstrip(".") == "params" and (node.name.startswith(".") or "params" not in env)):
            return _UNKNOWN
        value: object = self.params
        for step in reversed(steps):
            if type(value) is not dict or type(step) is not str or step not in value:
                return _UNKNOWN
            value = value[step]
        return value if type(value) in (str, int) else _UNKNOWN

    def elements(self, refs: _Refs) -> tuple[_Refs, _Refs]:
        """(what iterating the values gives, what the two-variable forms' second variable is)."""
        first: set[_Ref] = set()
        second: set[_Ref] = set()
        for ref in refs:
            if isinstance(ref, _NodeInfo):
                second.add(_Pod((), 1))  # its values: nodeInfo.pods among them; its keys are not pod data
            elif ref.lists:
                first.add(_Pod(ref.path, ref.lists - 1))
                second.add(_Pod(ref.path, ref.lists - 1))
            else:
                self.keys(ref)  # a map iterates its keys: kept whole
                first.add(_Pod((*ref.path, ITEM)))
                second.add(_Pod((*ref.path, ITEM)))
        return frozenset(first), frozenset(second)

    # -- the walk ---------------------------------------------------------------------
    def visit(self, node: ast.Node, env: Mapping[str, _Refs]) -> _Refs:
        """The pod values ``node`` may evaluate to; records what it reads on the way."""
        match node:
            case ast.Literal():
                return _NONE
            case ast.Ident(name=name):
                if not name.startswith(".") and name in env:
                    return env[name]
                plain = name.lstrip(".")
                if plain == NODE_INFO and self.node_info:
                    return frozenset([_NodeInfo()])
                if plain in self.lists:
                    return _POD_LIST
                if plain in self.values:
                    return frozenset([_Pod(())])
                return _NONE
            case ast.Select(operand=operand, field=name):
                return self.select(self.visit(operand, env), name)
            case ast.Has(operand=operand, field=name):
                self.select(self.visit(operand, env), name)
                return _NONE
            case ast.Index(operand=operand, index=key):
                return self.index(self.visit(operand, env), self.constant(key, env), self.visit(key, env))
            case ast.Call():
                return self.call(node, env)
            case ast.Conditional(condition=c, then=t, otherwise=o):
                self.whole(self.visit(c, env))
                return self.visit(t, env) | self.visit(o, env)
            case ast.ListLit(elements=elements):
                out: set[_Ref] = set()
                for element in elements:
                    for ref in self.visit(element, env):
                        if isinstance(ref, _NodeInfo):
                            self.whole([ref])
                        else:
                            out.add(_Pod(ref.path, ref.lists + 1))
                return frozenset(out)
            case ast.Comprehension():
                return self.comprehension(node, env)
        # Operators, logic, map and struct literals: every operand read in full.
        for child in ast.children(node):
            self.whole(self.visit(child, env))
        return _NONE

    def comprehension(self, node: ast.Comprehension, env: Mapping[str, _Refs]) -> _Refs:
        over = self.visit(node.range, env)
        inner = dict(env)
        if node.kind in ("optMap", "optFlatMap"):
            inner[node.var] = over  # the optional's value (optionals are transparent here)
        else:
            first, second = self.elements(over)
            if node.var2 is None:
                inner[node.var] = first
            else:
                inner[node.var] = _NONE  # an index, or a map's key (the map is then kept whole)
                inner[node.var2] = second
        if node.predicate is not None:
            self.whole(self.visit(node.predicate, inner))
        result = self.visit(node.transform, inner) if node.transform is not None else _NONE
        match node.kind:
            case "map" | "transformList":
                return self._listed(result)
            case "filter":
                listed = frozenset(_Pod(r.path, r.lists + 1) for r in inner[node.var] if isinstance(r, _Pod))
                return listed
            case "optMap" | "optFlatMap":
                return result
        self.whole(result)  # transformMap's values; the boolean macros have no transform
        return _NONE

    def _listed(self, refs: _Refs) -> _Refs:
        out: set[_Ref] = set()
        for ref in refs:
            if isinstance(ref, _NodeInfo):
                self.whole([ref])
            else:
                out.add(_Pod(ref.path, ref.lists + 1))
        return frozenset(out)

    def call(self, node: ast.Call, env: Mapping[str, _Refs]) -> _Refs:
        name, target = node.function, node.target
        if isinstance(target, ast.Ident) and f"{target.name.lstrip('.')}.{name}" in self.functions and (
            target.name.startswith(".") or target.name not in env
        ):
            name, target = f"{target.name.lstrip('.')}.{name}", None  # a namespaced function: optional.of, strings.quote
        operands = ([target] if target is not None else []) + list(node.args)
        values = [self.visit(operand, env) for operand in operands]
        if name == "size" and len(values) == 1:
            for ref in values[0]:
                if isinstance(ref, _Pod):
                    self.keys(ref)
            return _NONE
        if target is not None and name in _PASS_THROUGH:
            return frozenset().union(*values)
        if target is not None and name == "hasValue" and not node.args:
            for ref in values[0]:
                if isinstance(ref, _Pod):
                    self.present(ref)
            return _NONE
        if name == "optional.of" and len(values) == 1:
            return values[0]
        declared = self.reads.get(name)
        for i, refs in enumerate(values):
            paths = declared[i] if declared is not None and i < len(declared) else None
            if paths is None:
                self.whole(refs)
                continue
            for ref in refs:
                if isinstance(ref, _Pod) and ref.lists:
                    self.whole([ref])  # declared reads are of one object, not of a list of them
                    continue
                for path in paths:
                    steps = tuple(path.split(".")) if isinstance(path, str) else tuple(path)
                    if isinstance(ref, _Pod):
                        self.whole([_Pod((*ref.path, *steps))])
                    elif not steps or steps[0] == "pods":
                        # nodeInfo's pods (each, lists being transparent), or nodeInfo whole.
                        self.whole([_Pod(steps[1:]) if steps else ref])
                    # nodeInfo's requested and podCount are not pod data.
        return _NONE


def expression_reads(root: ast.Node, library: Library | None = None, params: Mapping[str, Any] | None = None) -> Projection:
    """What one expression reads of cached pods (``EMPTY``: nothing); ``params``: the policy's."""
    if library is None:
        from engine.cel import default_library

        library = default_library()
    analysis = _Analysis(library)
    analysis.params = params or {}
    try:
        analysis.whole(analysis.visit(root, {}))  # the result is used in full
    except RecursionError:
        return EVERYTHING  # too deep to follow: keep everything
    return analysis.root.freeze()


def policy_expressions(policy: Policy) -> Iterator[tuple[Expression, bool]]:
    """Every expression of the policy, and whether its value is used as it is. A node-scoped
    variable's is not: the compiler inlines the variable into the expressions that read it,
    where the analysis follows its value (its own tree is visited for what it reads on the way)."""
    if policy.match.expression is not None:
        yield policy.match.expression, True
    for variable in policy.variables:
        yield variable.expression, not variable.node_scoped
    for rule in policy.filters:
        yield rule.expression, True
        if rule.message_expression is not None:
            yield rule.message_expression, True
    for score in policy.scores:
        yield score.expression, True
    if policy.admission is not None:
        yield policy.admission.expression, True
        if policy.admission.message_expression is not None:
            yield policy.admission.message_expression, True
    if policy.preemption is not None:
        for expr in (policy.preemption.victim, policy.preemption.node):
            if expr is not None:
                yield expr, True


def reads_variable(policies: PolicySet | Iterable[Policy], name: str) -> bool:
    """Whether any expression of the policies reads the variable ``name`` (directly: a policy
    variable that reads it is an expression of its own). What the cache watches follows it:
    ``namespaceObject`` and ``dra`` are listed and watched only while a served set reads them."""
    found = policies.policies if isinstance(policies, PolicySet) else policies
    return any(name in expr.program.free_variables for policy in found for expr, _ in policy_expressions(policy))


def policy_reads(policies: PolicySet | Iterable[Policy], library: Library | None = None) -> Projection:
    """What the policies' expressions read of cached pods (without ``KPE_READS``)."""
    return _reads(policies, library, subject=False)


def subject_reads(policies: PolicySet | Iterable[Policy], library: Library | None = None) -> Projection:
    """What the policies' expressions read of the pod they decide (``pod``): what a pod bound
    long ago must still have to be judged again as it was when pending (PolicyReports)."""
    return _reads(policies, library, subject=True)


def _reads(policies: PolicySet | Iterable[Policy], library: Library | None, *, subject: bool) -> Projection:
    if library is None:
        from engine.cel import default_library

        library = default_library()
    analysis = _Analysis(library, values=("pod",), lists=(), node_info=False) if subject else _Analysis(library)
    try:
        for policy in (policies.policies if isinstance(policies, PolicySet) else policies):
            analysis.params = policy.params
            for expr, used in policy_expressions(policy):
                root = expr.root if expr.root is not None else expr.program.root
                value = analysis.visit(root, {})
                if used:
                    analysis.whole(value)
                if analysis.root.whole:
                    return EVERYTHING
    except RecursionError:
        return EVERYTHING  # too deep to follow: keep everything
    return analysis.root.freeze()


def pod_projection(policies: PolicySet | Iterable[Policy], library: Library | None = None) -> Projection:
    """What kpe's cache keeps of a bound pod under these policies (with the labels they
    count pods by: ``engine.cluster.counts`` reads them)."""
    from engine.policy.counts import count_specs

    listed = policies.policies if isinstance(policies, PolicySet) else tuple(policies)
    labels = from_paths(("metadata", "labels", key) for keys in count_specs(listed).key_sets for key in keys)
    return KPE_READS.union(policy_reads(listed, library)).union(labels)
