"""What kpe's cache must keep of the pods bound to nodes: the fields the loaded
policies can read of *other* pods, plus the fields kpe itself reads.

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

The result is a ``Projection``: a tree of what to keep, applied to a pod as
it enters the cache (``Projection.apply``). Lists are transparent: a path
through a list applies to each element, and a list keeps its length. A kept
field keeps its type (a map stays a map, a list a list), so presence, sizes,
types and every value read are those of the whole pod: decisions are the same.

``KPE_READS`` is what kpe itself reads of cached pods; its readers are listed
in ``server.cache``'s docstring.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .cel import ast
from .cel.kube import POD_REQUEST_READS

if TYPE_CHECKING:
    from .cel.library import Library, Paths
    from .policy import Expression, Policy, PolicySet

ITEM = "[]"
"""A path step into the elements of a list (or, for a map, its values: the map is then kept whole)."""


class Projection:
    """An immutable tree of what to keep of a value.

    ``whole``: keep the value as it is. Otherwise a map keeps only ``fields``
    (each projected by its own tree), unless ``map_whole`` (its keys are read:
    iterated, counted, indexed at run time), when it is kept whole; a list keeps
    every element, each projected by ``items`` (or, without ``items``, by these
    same ``fields``: lists are transparent); anything else is kept as it is.
    ``Projection()`` keeps a value's presence and type only: a map empty, a list
    of emptied elements, a scalar as it is.
    """

    __slots__ = ("_elements", "_key", "fields", "items", "map_whole", "whole")

    def __init__(self, *, whole: bool = False, map_whole: bool = False,
                 fields: Mapping[str, Projection] | None = None, items: Projection | None = None) -> None:
        self.whole = whole
        self.map_whole = map_whole and not whole
        self.fields: Mapping[str, Projection] = {} if whole else dict(sorted((fields or {}).items()))
        self.items = None if whole else items
        self._elements: Projection | None = None
        self._key: tuple[Any, ...] | None = None

    # -- identity --------------------------------------------------------------------
    def key(self) -> tuple[Any, ...]:
        """A canonical value: equal keys, equal trees."""
        if self._key is None:
            self._key = (self.whole, self.map_whole, tuple((k, v.key()) for k, v in self.fields.items()),
                         self.items.key() if self.items is not None else None)
        return self._key

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Projection) and self.key() == other.key()

    def __hash__(self) -> int:
        return hash(self.key())

    def __repr__(self) -> str:
        return f"Projection({', '.join(self.render()) or '(presence only)'})"

    # -- algebra ---------------------------------------------------------------------
    @property
    def elements(self) -> Projection:
        """What is kept of each element when the value is a list."""
        if self.items is not None:
            return self.items
        if self._elements is None:
            self._elements = Projection(fields=self.fields)
        return self._elements

    def union(self, other: Projection) -> Projection:
        """What keeps everything either keeps."""
        if self.whole or other is EMPTY:
            return self
        if other.whole or self is EMPTY:
            return other
        fields = dict(self.fields)
        for name, sub in other.fields.items():
            fields[name] = fields[name].union(sub) if name in fields else sub
        items: Projection | None = None
        if self.items is not None or other.items is not None:
            # A side without items projects list elements by its fields: keep that too.
            items = self.elements.union(other.elements)
        return Projection(map_whole=self.map_whole or other.map_whole, fields=fields, items=items)

    def covers(self, other: Projection) -> bool:
        """Whether everything ``other`` keeps is kept here (a reload that is not covered must relist)."""
        return self.union(other) == self

    # -- applying --------------------------------------------------------------------
    def apply(self, value: Any) -> Any:
        """The value projected: a new object where anything is dropped, shared where kept whole."""
        if self.whole:
            return value
        kind = type(value)
        if kind is dict:
            if self.map_whole:
                return value
            fields = self.fields
            if len(fields) <= len(value):
                return {name: sub.apply(value[name]) for name, sub in fields.items() if name in value}
            return {name: fields[name].apply(item) for name, item in value.items() if name in fields}
        if kind is list:
            elements = self.elements
            return [elements.apply(item) for item in value]
        return value

    # -- reading ---------------------------------------------------------------------
    def render(self) -> list[str]:
        """One line per thing kept, as field paths: ``a.b`` whole, ``a.b?`` present (type
        only), ``a.b{*}`` a map kept whole (a list there is followed), ``a[]`` the
        elements of a list; ``*`` the whole object. Sorted."""
        if self.whole:
            return ["*"]
        out: list[str] = []
        self._render("", out)
        return sorted(out)

    def _render(self, path: str, out: list[str]) -> None:
        if self.whole:
            out.append(path)
            return
        if self.map_whole:
            out.append(path + "{*}")
        for name, sub in self.fields.items():
            sub._render(_step(path, name), out)
        if self.items is not None:
            self.items._render(path + ITEM, out)
        if path and not self.map_whole and not self.fields and self.items is None:
            out.append(path + "?")


_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def _step(path: str, name: str) -> str:
    if _IDENT.match(name):
        return f"{path}.{name}" if path else name
    return f"{path}[{name!r}]"


EMPTY = Projection()
EVERYTHING = Projection(whole=True)


class _Builder:
    """A mutable tree while paths are being recorded."""

    __slots__ = ("fields", "items", "map_whole", "whole")

    def __init__(self) -> None:
        self.whole = False
        self.map_whole = False
        self.fields: dict[str, _Builder] = {}
        self.items: _Builder | None = None

    def at(self, path: Sequence[str]) -> _Builder | None:
        """The node at ``path`` (created present); None under a node already whole."""
        node = self
        for step in path:
            if node.whole:
                return None
            if step == ITEM:
                if node.items is None:
                    node.items = _Builder()
                node = node.items
            else:
                node = node.fields.setdefault(step, _Builder())
        return None if node.whole else node

    def freeze(self) -> Projection:
        if self.whole:
            return EVERYTHING
        if not self.map_whole and not self.fields and self.items is None:
            return EMPTY
        fields = {name: sub.freeze() for name, sub in self.fields.items()}
        items = None
        if self.items is not None:
            # Lists are transparent: what was selected at this level applies to elements too.
            items = self.items.freeze().union(Projection(fields=fields))
            if items.whole and self.map_whole:
                return EVERYTHING  # a map kept whole, a list of whole elements: the value as it is
        return Projection(map_whole=self.map_whole, fields=fields, items=items)


def from_paths(paths: Iterable[str | Sequence[str]]) -> Projection:
    """A projection keeping each path whole (lists transparent). A path is a tuple of field
    names, or a string of them joined with dots (``ITEM`` steps allowed in either)."""
    root = _Builder()
    for path in paths:
        steps = tuple(path.split(".")) if isinstance(path, str) else tuple(path)
        node = root.at(steps)
        if node is not None:
            node.whole = True
    return root.freeze()


# What kpe itself reads of a cached pod (whoever reads it is listed in server.cache).
KPE_READS = from_paths([
    ("metadata", "name"),
    ("metadata", "namespace"),
    ("metadata", "uid"),  # pod_key; victims answered by UID
    ("metadata", "resourceVersion"),  # relist differences; gate controller's catch-up check
    ("metadata", "creationTimestamp"),
    ("metadata", "deletionTimestamp"),
    ("spec", "priority"),  # kube-scheduler's preemption dry run (engine.kubefilters): which pods are victims,
    ("status", "startTime"),  # and in which order (GET /apis/v1/explain?pod=)
    ("metadata", "annotations", "kpe.dev/gates"),  # held_by_kpe, is_admitted
    ("spec", "nodeName"),
    ("spec", "schedulingGates"),
    ("spec", "containers", "resources", "requests"),  # nodeInfo.requested (engine.nodeinfo.pod_requests)
    ("spec", "initContainers", "resources", "requests"),
    ("spec", "overhead"),
    *POD_REQUEST_READS,  # what kube.podRequests reads: sidecars, pod-level resources (pod_requests as kube-scheduler counts)
    ("status", "phase"),  # is_active: finished pods leave nodeInfo
    # Reservations (engine.slots): placeholders, the slots owners use, where owners were nominated.
    ("metadata", "labels", "kpe.dev/reservation"),
    ("metadata", "labels", "kpe.dev/slot"),
    ("metadata", "labels", "app.kubernetes.io/managed-by"),
    ("metadata", "annotations", "kpe.dev/reservation-slot"),
    ("metadata", "annotations", "kpe.dev/template"),
    ("status", "nominatedNodeName"),
])


# -- the analysis ------------------------------------------------------------------------

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
    def __init__(self, library: Library | None) -> None:
        self.root = _Builder()
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
                    node.items = _Builder()

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
                if plain == NODE_INFO:
                    return frozenset([_NodeInfo()])
                if plain in POD_LISTS:
                    return _POD_LIST
                if plain in POD_VALUES:
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
        from .cel import default_library

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


def policy_reads(policy_set: PolicySet, library: Library | None = None) -> Projection:
    """What the set's expressions read of cached pods (without ``KPE_READS``)."""
    if library is None:
        from .cel import default_library

        library = default_library()
    analysis = _Analysis(library)
    try:
        for policy in policy_set.policies:
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


def pod_projection(policy_set: PolicySet, library: Library | None = None) -> Projection:
    """What kpe's cache keeps of a bound pod under this policy set."""
    return KPE_READS.union(policy_reads(policy_set, library))
