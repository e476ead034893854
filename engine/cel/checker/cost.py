"""Static worst-case cost of a CEL expression, in the spirit of cel-go's
``checker/cost.go`` and Kubernetes' admission-policy cost limits.

``estimate(root, roots)`` walks the syntax tree once and returns an upper bound
of the work one evaluation can do, in the units the run-time budget spends
(``limits.py``): one per comprehension element, one per ``SCAN_CHARS_PER_UNIT``
characters a string function reads or builds (times a factor of the pattern's
length for regular expressions), ``FIND_RESULT_UNITS`` per possible ``findAll``
result, plus one per operator, field selection and call. Comprehensions multiply
the cost of their body by the largest size of the list or map they iterate.

Sizes come from ``Shape``s (``engine.cel.checker.shapes``): the longest string,
the most items, and the shapes of items and fields a value can have.

The estimate also says *why* an expression is expensive (``Estimate.reason``):
the comprehension nesting and sizes, or the string function and string size,
that dominate it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from engine.cel.parser import ast
from engine.cel.limits import FIND_RESULT_UNITS, MAX_LIST_SIZE as MAX_RANGE, regex_factor, scan_units

from engine.cel.checker import kubecost
from engine.cel.checker.shapes import DEFAULT_LIST, DEFAULT_STRING, GENERIC, LABEL_KEY_CHARS, SCALAR, SCALAR_CHARS, Shape, join, of_value, string

# -- the estimate ----------------------------------------------------------------


@dataclass(frozen=True)
class Estimate:
    """``cost``: worst-case units of one evaluation; ``shape``: of its result;
    ``reason``: what dominates the cost, in words (empty when nothing stands out)."""

    cost: int
    shape: Shape
    reason: str = ""


@dataclass(frozen=True)
class _Why:
    """The dominant part of a cost: nested loops (kind, size), then what each iteration does."""

    loops: tuple[tuple[str, int], ...] = ()
    inner: str = ""

    def render(self) -> str:
        parts = []
        if self.loops:
            kinds = "/".join(dict.fromkeys(f"{k}()" for k, _ in self.loops))
            sizes = " x ".join(f"{n:,}" for _, n in self.loops)
            nested = "nested " if len(self.loops) > 1 else ""
            parts.append(f"{nested}{kinds} over {sizes} items")
        if self.inner:
            parts.append(("each with " if self.loops else "") + self.inner)
        return ", ".join(parts)


_NONE = _Why()


@dataclass
class _Part:
    cost: int
    shape: Shape
    why: _Why = _NONE


# String functions that read their receiver (and string arguments) once.
_SCANS = frozenset(("contains", "startsWith", "endsWith", "indexOf", "lastIndexOf", "lowerAscii", "upperAscii", "trim", "reverse"))
_SAME_SIZE = frozenset(("lowerAscii", "upperAscii", "trim", "reverse", "substring", "charAt"))
_LIST_SCANS = frozenset(("sum", "min", "max", "isSorted", "indexOf", "lastIndexOf"))


class _Estimator:
    def __init__(self, roots: Mapping[str, Shape], variables: Mapping[str, Estimate], on_variable: Callable[[str], None]) -> None:
        self.roots = roots
        self.variables = variables
        self.on_variable = on_variable
        self.scopes: list[dict[str, Shape]] = []

    def lookup(self, name: str) -> Shape | None:
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        return self.roots.get(name.lstrip("."))

    def visit(self, node: ast.Node) -> _Part:
        method: Callable[[Any], _Part] = getattr(self, "visit_" + type(node).__name__)
        return method(node)

    def combine(self, base: int, parts: list[_Part], shape: Shape) -> _Part:
        why = max(parts, key=lambda p: p.cost).why if parts else _NONE
        return _Part(base + sum(p.cost for p in parts), shape, why)

    # -- leaves and selections -------------------------------------------------
    def visit_Literal(self, node: ast.Literal) -> _Part:
        return _Part(0, of_value(node.value) if isinstance(node.value, (str, bytes)) else SCALAR)

    def visit_Ident(self, node: ast.Ident) -> _Part:
        shape = self.lookup(node.name)
        return _Part(1, shape if shape is not None else GENERIC)

    def visit_Select(self, node: ast.Select) -> _Part:
        if isinstance(node.operand, ast.Ident) and node.operand.name == "variables" and self.lookup("variables") is None:
            found = self.variables.get(node.field)
            self.on_variable(node.field)
            return _Part(1, found.shape if found is not None else GENERIC)
        operand = self.visit(node.operand)
        return _Part(operand.cost + 1, operand.shape.field(node.field), operand.why)

    def visit_Has(self, node: ast.Has) -> _Part:
        operand = self.visit(node.operand)
        return _Part(operand.cost + 1, SCALAR, operand.why)

    def visit_Index(self, node: ast.Index) -> _Part:
        operand, index = self.visit(node.operand), self.visit(node.index)
        shape = operand.shape
        if isinstance(node.index, ast.Literal) and isinstance(node.index.value, str):
            result = shape.field(node.index.value)
        else:
            result = shape.element()
        return self.combine(1, [operand, index], result)

    # -- operators -----------------------------------------------------------------
    def visit_Unary(self, node: ast.Unary) -> _Part:
        operand = self.visit(node.operand)
        return _Part(operand.cost + 1, SCALAR, operand.why)

    def visit_Binary(self, node: ast.Binary) -> _Part:
        left, right = self.visit(node.left), self.visit(node.right)
        a, b = left.shape, right.shape
        parts = [left, right]
        if node.op == "+" and (a.kind in ("string", "list") or b.kind in ("string", "list")):
            if "list" in (a.kind, b.kind):
                shape = Shape("list", items=a.items + b.items, item=join(a.element(), b.element()))
                extra = scan_units(shape.items)
            else:
                shape = string(a.chars + b.chars)
                extra = scan_units(shape.chars)
            result = self.combine(1 + extra, parts, shape)
            if extra >= max(left.cost, right.cost):
                built = f"a string of up to {shape.chars:,} characters" if shape.kind == "string" else f"a list of up to {shape.items:,} items"
                result.why = _Why(inner=f"_+_ building {built}")
            return result
        # A search through a list costs its length (cel-go's estimate); comparisons
        # run at memory speed in C and cost one unit, as at run time.
        extra = b.items if node.op == "in" and b.kind != "map" else 0
        return self.combine(1 + extra, parts, SCALAR)

    def visit_Logical(self, node: ast.Logical) -> _Part:
        return self.combine(len(node.operands) - 1, [self.visit(o) for o in node.operands], SCALAR)

    def visit_Conditional(self, node: ast.Conditional) -> _Part:
        cond, then, other = self.visit(node.condition), self.visit(node.then), self.visit(node.otherwise)
        branch = then if then.cost >= other.cost else other
        why = max((cond, branch), key=lambda p: p.cost).why
        return _Part(cond.cost + branch.cost, join(then.shape, other.shape), why)

    def visit_ListLit(self, node: ast.ListLit) -> _Part:
        parts = [self.visit(e) for e in node.elements]
        item: Shape | None = None
        for p in parts:
            item = p.shape if item is None else join(item, p.shape)
        return self.combine(1, parts, Shape("list", items=len(parts), item=item or SCALAR))

    def visit_MapLit(self, node: ast.MapLit) -> _Part:
        keys = [self.visit(e.key) for e in node.entries]
        values = [self.visit(e.value) for e in node.entries]
        fields = {e.key.value: v.shape for e, v in zip(node.entries, values) if isinstance(e.key, ast.Literal) and isinstance(e.key.value, str)}
        item: Shape | None = None
        for v in values:
            item = v.shape if item is None else join(item, v.shape)
        key: Shape | None = None
        for k in keys:
            key = k.shape if key is None else join(key, k.shape)
        shape = Shape("map", items=len(values), item=item or SCALAR, key=key or SCALAR, fields=fields, other=item or SCALAR)
        return self.combine(1, keys + values, shape)

    def visit_StructLit(self, node: ast.StructLit) -> _Part:
        return self.combine(1, [self.visit(v) for _, v in node.fields], SCALAR)

    # -- calls -----------------------------------------------------------------------
    def visit_Call(self, node: ast.Call) -> _Part:
        name = node.function
        target_node = node.target
        if isinstance(target_node, ast.Ident) and self.lookup(target_node.name) is None and target_node.name.lstrip(".") in _namespaces():
            # A namespaced function (`strings.quote(s)`, `kube.podRequests(pod)`): a global call.
            name, target_node = f"{target_node.name.lstrip('.')}.{name}", None
        target = self.visit(target_node) if target_node is not None else None
        args = [self.visit(a) for a in node.args]
        parts = ([target] if target is not None else []) + args
        # Receiver-style and global forms read the same: the string or list first.
        subject = target if target is not None else (args[0] if args else None)
        rest = args if target is not None else args[1:]
        s = subject.shape if subject is not None else SCALAR
        extra, shape, inner = 0, _result_shape(name, parts), ""
        if name in ("matches", "find", "findAll") and rest:
            extra = scan_units(s.chars) * regex_factor(rest[0].shape.chars)
            inner = f"{name}() over a string of up to {s.chars:,} characters"
            if name == "findAll":
                limit = node.args[1] if len(node.args) > 1 else None
                found = s.chars + 1
                if isinstance(limit, ast.Literal) and type(limit.value) is int and limit.value >= 0:
                    found = min(found, limit.value)
                extra += FIND_RESULT_UNITS * found
                shape = Shape("list", items=found, item=string(s.chars))
                inner = f"findAll() with up to {found:,} results"
            elif name == "find":
                shape = string(s.chars)
        elif name in _SCANS and s.kind != "list":
            extra = scan_units(s.chars + sum(a.shape.chars for a in rest))
            if name in _SAME_SIZE:
                shape = string(s.chars)
            inner = f"{name}() over a string of up to {s.chars:,} characters"
        elif name in _LIST_RESULTS and s.kind in ("list", "any") and target is not None:
            extra, shape, inner = _list_function(name, s, node.args)
        elif name in _SAME_SIZE:
            shape = string(s.chars)
        elif name in _LIST_SCANS and s.kind in ("list", "any"):
            extra = s.items
        elif name == "split":
            pieces = s.chars + 1
            extra = scan_units(s.chars) + pieces
            shape = Shape("list", items=pieces, item=string(s.chars))
            inner = f"split() of a string of up to {s.chars:,} characters"
        elif name == "replace" and len(rest) >= 2:
            new = rest[1].shape.chars
            chars = s.chars + (s.chars + 1) * new
            extra = scan_units(s.chars + chars)
            shape = string(chars)
            inner = f"replace() building a string of up to {chars:,} characters"
        elif name == "join":
            item = s.element()
            sep = rest[0].shape.chars if rest else 0
            chars = s.items * item.chars + max(s.items - 1, 0) * sep
            extra = scan_units(chars)
            shape = string(chars)
            inner = f"join() building a string of up to {chars:,} characters"
        elif name == "format" and rest:
            values = rest[0].shape
            chars = s.chars + values.items * max(values.element().chars, SCALAR_CHARS)
            extra = scan_units(chars) + values.items
            shape = string(chars)
            inner = f"format() building a string of up to {chars:,} characters"
        elif name == "strings.quote":
            shape = string(2 * s.chars + 2)
            extra = scan_units(shape.chars)
        elif name in _SETS and len(args) == 2:
            pairs = _SETS[name] * args[0].shape.items * args[1].shape.items
            extra, inner = pairs, f"{name}() over {args[0].shape.items:,} x {args[1].shape.items:,} items"
        elif name == "lists.range":
            n = node.args[0].value if node.args and isinstance(node.args[0], ast.Literal) and type(node.args[0].value) is int else MAX_RANGE
            n = min(max(n, 0), MAX_RANGE)
            extra, shape, inner = n, Shape("list", items=n, item=SCALAR), f"lists.range() building a list of up to {n:,} items"
        elif name == "validate" and rest:
            regex = _format_regex_size(node.target)
            extra = scan_units(rest[0].shape.chars + 1) * regex_factor(regex)
            shape = Shape("list", items=DEFAULT_LIST, item=string(DEFAULT_STRING))
            inner = f"validate() of a string of up to {rest[0].shape.chars:,} characters"
        elif name in _KUBE:
            extra, shape, inner = _KUBE[name]([a.shape for a in args])
        elif name in ("orValue", "or", "optional.of", "optional.ofNonZeroValue", "value", "dyn"):
            shape = parts[0].shape
            for p in parts[1:]:
                shape = join(shape, p.shape)
        result = self.combine(1 + extra, parts, shape)
        if inner and extra >= max((p.cost for p in parts), default=0):
            result.why = _Why(inner=inner)
        return result

    # -- comprehensions ------------------------------------------------------------
    def visit_Comprehension(self, node: ast.Comprehension) -> _Part:
        rng = self.visit(node.range)
        r = rng.shape
        if node.kind in ("optMap", "optFlatMap"):
            self.scopes.append({node.var: r})
            try:
                mapped = self.visit(node.transform) if node.transform is not None else _Part(0, SCALAR)
            finally:
                self.scopes.pop()
            return self.combine(1, [rng, mapped], mapped.shape)
        is_map = r.kind == "map"
        if node.var2 is None:
            scope = {node.var: r.map_key() if is_map else r.element()}
        else:
            scope = {node.var: r.map_key() if is_map else SCALAR, node.var2: r.element()}
        self.scopes.append(scope)
        try:
            body = [self.visit(x) for x in (node.predicate, node.transform) if x is not None]
        finally:
            self.scopes.pop()
        step = 1 + sum(p.cost for p in body)
        n = r.items
        inner = max(body, key=lambda p: p.cost).why if body else _NONE
        why = _Why(((node.kind, n),) + inner.loops, inner.inner)
        if node.kind in ("all", "exists", "exists_one"):
            shape = SCALAR
        elif node.kind == "transformMap":
            shape = Shape("map", items=n, item=body[-1].shape if body else SCALAR, key=scope[node.var])
        else:
            item = body[-1].shape if node.transform is not None and body else r.element()
            shape = Shape("list", items=n, item=item)
        total = rng.cost + n * step
        return _Part(total, shape, why if n * step >= rng.cost else rng.why)


# -- cel-go's lists and sets extensions, Kubernetes' format library (ext/lists.py, sets.py,
# comprehensions.py, format.py): their run-time COSTS, for the largest lists the shapes allow.
_LIST_RESULTS = frozenset(("reverse", "slice", "flatten", "distinct", "sort", "sortBy", "transformMapEntry"))
_SETS = {"sets.contains": 1, "sets.intersects": 1, "sets.equivalent": 2}


def _list_function(name: str, s: Shape, args: tuple[ast.Node, ...]) -> tuple[int, Shape, str]:
    n = s.items
    if name == "distinct":
        return n * n, s, f"distinct() over a list of up to {n:,} items"
    if name == "flatten":
        depth = args[0].value if args and isinstance(args[0], ast.Literal) and type(args[0].value) is int else 1
        items, item = n, s
        for _ in range(max(min(depth, 4), 1)):
            items, item = items * max(item.element().items, 1), item.element()
        items = min(items, MAX_RANGE)
        return n + items, Shape("list", items=items, item=item.element()), f"flatten() of a list of up to {n:,} items"
    if name == "transformMapEntry":
        entries = n * max(s.element().items, 1)
        return entries, Shape("map", items=entries, item=s.element().element(), key=s.element().map_key()), ""
    if name == "sortBy":  # over the [element, key] pairs the macro builds
        return n, Shape("list", items=n, item=s.element().element()), ""
    return (n if name in ("slice", "sort") else 0), s, ""


def _format_regex_size(target: ast.Node | None) -> int:
    """The regex size Kubernetes prices a format's validate() at (the largest, unless
    the format is named in place: ``format.dns1123Label().validate(s)``)."""
    from engine.cel.ext.format import FORMATS

    if isinstance(target, ast.Call) and isinstance(target.target, ast.Ident) and target.target.name == "format" and target.function in FORMATS:
        return FORMATS[target.function].max_regex_size
    return max(f.max_regex_size for f in FORMATS.values())


@lru_cache(maxsize=1)
def _namespaces() -> frozenset[str]:
    """The qualifiers of the library's namespaced functions (late: the library imports this package)."""
    from engine.cel import default_library

    return default_library().namespaces


# -- kpe's Kubernetes helpers (kube.py): one unit per item they visit, as their run-time COSTS charge.


def _arg(shapes: list[Shape], i: int) -> Shape:
    return shapes[i] if i < len(shapes) else GENERIC


def _kube_pod_requests(shapes: list[Shape]) -> tuple[int, Shape, str]:
    spec = _arg(shapes, 0).field("spec")
    n = spec.field("containers").items + spec.field("initContainers").items
    shape = SCALAR if len(shapes) > 1 else Shape("map", items=DEFAULT_LIST, item=SCALAR, key=string(LABEL_KEY_CHARS))
    return n, shape, f"kube.podRequests() over up to {n:,} containers"


def _kube_tolerations(shapes: list[Shape]) -> tuple[int, Shape, str]:
    n = _arg(shapes, 0).field("spec").field("tolerations").items
    return n, SCALAR, f"kube.podToleratesTaint() over up to {n:,} tolerations"


def _kube_taints(name: str) -> Callable[[list[Shape]], tuple[int, Shape, str]]:
    def estimate(shapes: list[Shape]) -> tuple[int, Shape, str]:
        tolerations = _arg(shapes, 0).field("spec").field("tolerations").items
        taints = _arg(shapes, 1).field("spec").field("taints")
        n = tolerations * taints.items
        shape = Shape("list", items=taints.items, item=taints.element()) if name == "kube.untoleratedTaints" else SCALAR
        return n, shape, f"{name}() over up to {tolerations:,} tolerations x {taints.items:,} taints"

    return estimate


def _terms(selector: Shape) -> int:
    terms = selector.field("nodeSelectorTerms")
    term = terms.element()
    return terms.items * (1 + term.field("matchExpressions").items + term.field("matchFields").items)


def _kube_node_selector(shapes: list[Shape]) -> tuple[int, Shape, str]:
    n = _terms(_arg(shapes, 0))
    return n, SCALAR, f"kube.nodeSelectorMatches() over up to {n:,} selector terms and requirements"


def _kube_affinity(shapes: list[Shape]) -> tuple[int, Shape, str]:
    spec = _arg(shapes, 0).field("spec")
    required = spec.field("affinity").field("nodeAffinity").field("requiredDuringSchedulingIgnoredDuringExecution")
    n = spec.field("nodeSelector").items + _terms(required)
    return n, SCALAR, f"kube.podNodeAffinityMatches() over up to {n:,} selector labels, terms and requirements"


_KUBE: dict[str, Callable[[list[Shape]], tuple[int, Shape, str]]] = {
    "kube.podRequests": _kube_pod_requests,
    "kube.podToleratesTaint": _kube_tolerations,
    "kube.untoleratedTaints": _kube_taints("kube.untoleratedTaints"),
    "kube.podToleratesNodeTaints": _kube_taints("kube.podToleratesNodeTaints"),
    "kube.nodeSelectorMatches": _kube_node_selector,
    "kube.podNodeAffinityMatches": _kube_affinity,
}


def _result_shape(name: str, parts: list[_Part]) -> Shape:
    """The shape of a library call's result when nothing more specific is known."""
    if name in ("string", "getScheme", "getHost", "getHostname", "getPort", "getEscapedPath"):
        return string(max([SCALAR_CHARS] + [p.shape.chars for p in parts]))
    if name in ("bytes", "dyn"):
        return parts[0].shape if parts else SCALAR
    return SCALAR


def estimate(
    root: ast.Node,
    roots: Mapping[str, Shape],
    variables: Mapping[str, Estimate] | None = None,
) -> tuple[Estimate, list[str]]:
    """The worst-case cost of one evaluation of ``root`` and the ``variables.<name>``
    it reads (in first-read order). ``roots`` gives the shape of each variable the
    expression can read; ``variables`` the estimates of policy variables, whose
    result shapes are used here (their own cost is the caller's to add)."""
    read: dict[str, None] = {}
    estimator = _Estimator(roots, variables or {}, lambda name: read.setdefault(name, None))
    part = estimator.visit(root)
    # The cost itself is Kubernetes' estimate (kubecost.py) for kpe's size assumptions;
    # this walk gives the result's shape and what drives the cost.
    values = {name: kubecost.from_shape(shape) for name, shape in roots.items()}
    known = {name: kubecost.from_shape(e.shape) for name, e in (variables or {}).items()}
    cost = kubecost.estimate(root, values, kubecost.ASSUMED, namespaces=_namespaces(), variables=known)
    return Estimate(cost.hi, part.shape, part.why.render()), list(read)
