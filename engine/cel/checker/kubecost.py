"""The cost of a CEL expression in Kubernetes' units: what cel-go's estimator
(``checker/cost.go``) with Kubernetes' library costs (``k8s.io/apiserver/pkg/cel/library/cost.go``)
gives, as a range ``[lo, hi]`` of units for one evaluation.

The units are Kubernetes': 1 per variable, field selection and call; 0 per constant
(and per ``has()``, as Kubernetes configures it); 10, 30 and 40 to create a list, map
or object; 0.1 per character a string function reads (rounded up), times 0.25 per
pattern character for regular expressions; one per item a list function visits; and a
comprehension costs its range plus, per item, what cel-go's expansion of the macro
does (the loop condition, the step that accumulates, the predicate and transform).

Sizes are what the estimate knows: exact for literals, otherwise ``Sizes`` says what a
value of each kind may hold. ``ASSUMED`` reads kpe's size assumptions for Kubernetes
objects (``shapes.py``); ``REQUEST_BOUND`` what Kubernetes itself assumes for a
field without ``maxLength``/``maxItems`` (as much as fits in a 3 MiB request), which
no object from the API server can exceed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from engine.cel.parser import ast

from engine.cel.checker.kubecalls import OPAQUE_EQUAL, CallCosts
from engine.cel.checker.kubeunits import (
    ASSUMED, DYN, FIXED, LIST_CREATE, MAP_CREATE, MAX_FORMAT_SIZE, ONE, REQUEST_BOUND, SCALAR, STRING_FACTOR, STRUCT_CREATE,
    UNKNOWN, ZERO, Cost, Part, Size, Sizes, Value, from_shape, join, sat_add, unsized,
)

__all__ = ["ASSUMED", "DYN", "FIXED", "REQUEST_BOUND", "UNKNOWN", "Cost", "Estimator", "Size", "Sizes", "Value", "estimate", "fixed_costs", "from_shape", "request_bound"]


class Estimator(CallCosts):
    """``visit(node)``: the cost range of one evaluation and what it gives."""

    def __init__(
        self, roots: Mapping[str, Value], sizes: Sizes, namespaces: frozenset[str] = frozenset(), variables: Mapping[str, Value] | None = None
    ) -> None:
        self.roots = roots
        self.variables = variables or {}
        self.sizes = sizes
        self.namespaces = namespaces
        self.scopes: list[dict[str, Value]] = []
        self.per_item: dict[int, int] = {}  # id of each comprehension: the most one iteration costs

    def size(self, value: Value) -> Size:
        if value.size is not None:
            return value.size
        return SCALAR.size if value.kind == "scalar" else self.sizes.of(value.kind)  # type: ignore[return-value]

    def lookup(self, name: str) -> Value | None:
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        return self.roots.get(name.lstrip("."))

    def visit(self, node: ast.Node) -> Part:
        method: Callable[[ast.Node], Part] = getattr(self, "visit_" + type(node).__name__)
        return method(node)

    # -- leaves and selections ----------------------------------------------
    def visit_Literal(self, node: ast.Literal) -> Part:
        v = node.value
        if isinstance(v, str):
            return Part(ZERO, Value("string", Size(len(v), len(v))))
        if isinstance(v, bytes):
            return Part(ZERO, Value("bytes", Size(len(v), len(v))))
        return Part(ZERO, SCALAR)

    def visit_Ident(self, node: ast.Ident) -> Part:
        return Part(ONE, self.lookup(node.name) or DYN)

    def visit_Select(self, node: ast.Select) -> Part:
        if isinstance(node.operand, ast.Ident) and node.operand.name == "variables" and self.lookup("variables") is None:
            return Part(ONE, self.variables.get(node.field, DYN))  # a policy variable: its own cost is the caller's to add
        operand = self.visit(node.operand)
        return Part(operand.cost + ONE, operand.value.field(node.field))

    def visit_Has(self, node: ast.Has) -> Part:
        # Kubernetes prices presence tests at 0 (PresenceTestHasCost(false)).
        return Part(self.visit(node.operand).cost, SCALAR)

    def visit_Index(self, node: ast.Index) -> Part:
        operand, index = self.visit(node.operand), self.visit(node.index)
        value = operand.value
        if isinstance(node.index, ast.Literal) and isinstance(node.index.value, str) and value.kind != "list":
            result = value.field(node.index.value)
        else:
            result = value.element()
        return Part(ONE + operand.cost + index.cost, result)

    # -- operators ------------------------------------------------------------
    def visit_Unary(self, node: ast.Unary) -> Part:
        operand = self.visit(node.operand)
        return Part(ONE + operand.cost, SCALAR)

    def visit_Binary(self, node: ast.Binary) -> Part:
        left, right = self.visit(node.left), self.visit(node.right)
        args = left.cost + right.cost
        a, b = left.value, right.value
        if node.op == "+" and "list" in (a.kind, b.kind):
            item = a.item if b.item is None else b.item if a.item is None else join(a.item, b.item)
            return Part(ONE + args, Value("list", self.size(a).add(self.size(b)), item))
        if node.op == "+" and (a.kind in ("string", "bytes") or b.kind in ("string", "bytes")):
            size = self.size(a).add(self.size(b))
            return Part(size.factor(STRING_FACTOR) + args, Value(a.kind if a.kind != "dyn" else b.kind, size))
        if node.op in ("==", "!="):
            if node.op == "==" and a.kind == b.kind and a.kind in OPAQUE_EQUAL:
                return Part(ONE + args, SCALAR)
            if node.op == "==" and a.kind == b.kind and a.kind == "format":
                return Part(Size(1, MAX_FORMAT_SIZE).factor(STRING_FACTOR) + args, SCALAR)
            return Part(self._compare(a, b) + args, SCALAR)
        if node.op in ("<", "<=", ">", ">=") and a.kind in ("string", "bytes") and b.kind in ("string", "bytes"):
            return Part(self._compare(a, b) + args, SCALAR)
        if node.op == "in" and b.kind in ("list", "dyn") and b.kind != "map":
            if b.kind == "list":
                return Part(Cost(self.size(b).lo, self.size(b).hi) + args, SCALAR)
        return Part(ONE + args, SCALAR)

    def _compare(self, a: Value, b: Value) -> Cost:
        smallest = min(self.size(a).hi, self.size(b).hi)
        return Size(1 if smallest > 0 else 0, smallest).factor(STRING_FACTOR)

    def visit_Logical(self, node: ast.Logical) -> Part:
        parts = [self.visit(o) for o in node.operands]
        total = ZERO
        for p in parts:
            total = total + p.cost
        # Short-circuit: at least the first operand.
        return Part(Cost(parts[0].cost.lo, total.hi), SCALAR)

    def visit_Conditional(self, node: ast.Conditional) -> Part:
        cond, then, other = self.visit(node.condition), self.visit(node.then), self.visit(node.otherwise)
        return Part(cond.cost + then.cost.union(other.cost), join(then.value, other.value))

    def visit_ListLit(self, node: ast.ListLit) -> Part:
        parts = [self.visit(e) for e in node.elements]
        total = Cost(LIST_CREATE, LIST_CREATE)
        item: Value | None = None
        for p in parts:
            total = total + p.cost
            item = p.value if item is None else join(item, p.value)
        n = len(parts)
        return Part(total, Value("list", Size(n, n), unsized(item)))

    def visit_MapLit(self, node: ast.MapLit) -> Part:
        total = Cost(MAP_CREATE, MAP_CREATE)
        item: Value | None = None
        fields: dict[str, Value] = {}
        for entry in node.entries:
            key, value = self.visit(entry.key), self.visit(entry.value)
            total = total + key.cost + value.cost
            item = value.value if item is None else join(item, value.value)
            if isinstance(entry.key, ast.Literal) and isinstance(entry.key.value, str):
                fields[entry.key.value] = value.value
        n = len(node.entries)
        return Part(total, Value("map", Size(n, n), item, SCALAR, fields, item))

    def visit_StructLit(self, node: ast.StructLit) -> Part:
        total = Cost(STRUCT_CREATE, STRUCT_CREATE)
        for _, v in node.fields:
            total = total + self.visit(v).cost
        return Part(total, DYN)

    # -- calls ------------------------------------------------------------------

    def visit_Call(self, node: ast.Call) -> Part:
        name, target_node = node.function, node.target
        if isinstance(target_node, ast.Ident) and self.lookup(target_node.name) is None and target_node.name.lstrip(".") in self.namespaces:
            name, target_node = f"{target_node.name.lstrip('.')}.{name}", None
        if name == "transformMapEntry" and isinstance(target_node, ast.Comprehension) and not node.args:
            # kpe parses m.transformMapEntry(k, v, e) as a transformList whose maps it merges;
            # cel-go's macro inserts each map into the result as it goes.
            return self.visit_Comprehension(target_node, kind="transformMapEntry")
        target = self.visit(target_node) if target_node is not None else None
        args = [self.visit(a) for a in node.args]
        spent = ZERO
        for p in ([target] if target is not None else []) + args:
            spent = spent + p.cost
        own, result = self.call(name, node, target, args)
        return Part(own + spent, result)

    # -- comprehensions ---------------------------------------------------------------
    def visit_Comprehension(self, node: ast.Comprehension, kind: str = "") -> Part:
        kind = kind or node.kind
        rng = self.visit(node.range)
        r = rng.value
        if node.kind in ("optMap", "optFlatMap"):
            # x.optMap(v, t): x.hasValue() ? optional.of(t with v = x.value()) : optional.none()
            self.scopes.append({node.var: r})
            try:
                body = self.visit(node.transform) if node.transform is not None else Part(ZERO, DYN)
            finally:
                self.scopes.pop()
            wrapped = body.cost + ONE + ONE + rng.cost if node.kind == "optMap" else body.cost + ONE + rng.cost
            return Part(ONE + rng.cost + wrapped.union(ONE), body.value)
        is_map = r.kind == "map"
        key = r.key or Value("string") if is_map else SCALAR
        if node.var2 is None:
            scope = {node.var: key if is_map else r.element()}
        else:
            scope = {node.var: key, node.var2: r.element()}
        self.scopes.append(scope)
        try:
            pred = self.visit(node.predicate) if node.predicate is not None else None
            transform = self.visit(node.transform) if node.transform is not None else None
        finally:
            self.scopes.pop()
        init, result, per, value = _macro(kind, pred, transform, scope[node.var] if node.var2 is None else scope[node.var2])
        # A range is a list or a map: one of unknown kind may be as long as a list.
        n = r.size if r.size is not None else self.sizes.of(r.kind if r.kind in ("list", "map") else "list")
        if self.sizes is FIXED:
            n = Size(0, 0)  # the loop charges its items as it starts
        self.per_item[id(node)] = per.hi
        out = Value("list" if kind in ("map", "filter", "transformList") else "map", n, value) if value is not None else SCALAR
        return Part(rng.cost + init + result + per.times(n), out)


def _macro(kind: str, pred: Part | None, transform: Part | None, var: Value) -> tuple[Cost, Cost, Cost, Value | None]:
    """cel-go's expansion of a macro: the cost of its accumulator's start, of its result,
    and of one iteration (loop condition and step), and the items it collects."""
    p = pred.cost if pred is not None else ZERO
    t = transform.cost if transform is not None else ZERO
    item = transform.value if transform is not None else var
    appended = Cost(12, 12) + t  # __result__ + [t]: the addition, the accumulator, the new list
    if kind == "all":  # cond !@not_strictly_false(__result__), step __result__ && p
        return ZERO, ONE, Cost(2, 2) + Cost(1, sat_add(1, p.hi)), None
    if kind == "exists":  # cond @not_strictly_false(!__result__), step __result__ || p
        return ZERO, ONE, Cost(3, 3) + Cost(1, sat_add(1, p.hi)), None
    if kind == "exists_one":  # step p ? __result__ + 1 : __result__; result __result__ == 1
        return ZERO, Cost(2, 2), p + Cost(1, 2), None
    if kind in ("map", "transformList"):
        step = appended if pred is None else p + appended.union(ONE)
        return Cost(LIST_CREATE, LIST_CREATE), ONE, step, item
    if kind == "filter":
        return Cost(LIST_CREATE, LIST_CREATE), ONE, p + Cost(1, 13), var
    if kind in ("transformMap", "transformMapEntry"):
        insert = Cost(3, 3) + t if kind == "transformMap" else Cost(2, 2) + t
        step = insert if pred is None else p + insert.union(ONE)
        return Cost(MAP_CREATE, MAP_CREATE), ONE, step, item
    return ZERO, ONE, Cost(1, 1) + p + t, item


def estimate(
    root: ast.Node, roots: Mapping[str, Value], sizes: Sizes, *, namespaces: frozenset[str] = frozenset(), variables: Mapping[str, Value] | None = None
) -> Cost:
    """The cost range of one evaluation of ``root`` (``variables``: what ``variables.<name>`` give)."""
    return Estimator(roots, sizes, namespaces, variables).visit(root).cost


def fixed_costs(root: ast.Node, *, namespaces: frozenset[str] = frozenset()) -> tuple[int, dict[int, int]]:
    """What the run-time budget charges up front (every operation outside loops, at most,
    taking the dearer branch) and per item of each comprehension (by ``id`` of its node):
    with these and the functions that charge by the length of what they read, an
    evaluation spends Kubernetes' units without counting operation by operation."""
    estimator = Estimator({}, FIXED, namespaces)
    return estimator.visit(root).cost.hi, estimator.per_item


def request_bound(root: ast.Node, *, namespaces: frozenset[str] = frozenset()) -> int:
    """The most one evaluation of ``root`` can cost on objects the API server admits."""
    return estimate(root, {}, REQUEST_BOUND, namespaces=namespaces).hi
