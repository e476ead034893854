"""The typed check of a CEL expression, in the spirit of cel-go's ``checker``: every
sub-expression gets a type (``typemodel``) from the types of the variables it reads
(for policies, the Kubernetes schemas: ``schema.kubernetes_types()``), and what can
only fail is reported before the expression ever runs:

- a field a schema object does not have (``node.metadata.lables``), with the
  closest field names (``did you mean 'labels'?``): ``UNKNOWN_FIELD``;
- an operator, index or function applied to types it has no overload for
  (``pod.metadata.labels['gpus'] * 10``: ``string * int``), a field selected from
  a value that has none, a comprehension over a value that cannot be iterated:
  ``TYPE_MISMATCH``.

``check(root, roots, variables)`` walks the syntax tree once and returns the type of
the whole expression and every problem found (not only the first), each at the
offset of the node it is about. What the check cannot know stays ``dyn`` and passes:
labels, annotations and other maps with free keys, ``dyn()``, functions the
signature table (``signatures``) does not list. Like cel-go it looks at the whole
expression, so besides what would fail at run time on valid objects it refuses what
cannot mean anything: a field the object cannot have under ``has()`` or ``.?``, a
comparison CEL has no overload for (``name == 1``, always false), and type errors
in branches ``&&``, ``||`` or ``?:`` never reach.

Undeclared identifiers and functions and literal-only type errors are the code
generator's (``engine.cel.interpreter.codegen``); this check runs after it.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from engine.cel.parser import ast
from engine.cel.types.values import UInt

from engine.cel.checker.signatures import Overload, overloads
from engine.cel.checker.typemodel import (
    BOOL,
    BYTES,
    DOUBLE,
    DURATION,
    DYN,
    INT,
    NULL,
    NUMERIC,
    STRING,
    TIMESTAMP,
    TYPE,
    UINT,
    ObjectType,
    Type,
    assignable,
    comparable,
    is_dyn,
    join,
    list_of,
    map_of,
    optional_of,
    substitute,
)

UNKNOWN_FIELD = "unknown-field"
TYPE_MISMATCH = "type-mismatch"

_TYPE_NAMES = frozenset(
    (
        "int", "uint", "double", "bool", "string", "bytes", "list", "map", "null_type", "type",
        "optional_type", "google.protobuf.Timestamp", "google.protobuf.Duration",
        "kubernetes.Quantity", "kubernetes.URL", "kubernetes.Semver", "net.IP", "net.CIDR",
    )
)
_ORDERED = frozenset(("int", "uint", "double", "string", "bytes", "bool", "timestamp", "duration"))


@dataclass(frozen=True)
class Problem:
    """One type error: ``kind`` is ``UNKNOWN_FIELD`` or ``TYPE_MISMATCH``; ``offset``
    where in the expression text it is."""

    kind: str
    message: str
    offset: int


@dataclass
class Checked:
    """The result of ``check``: the expression's type and every problem found."""

    type: Type
    problems: list[Problem] = field(default_factory=list)


class _Checker:
    def __init__(self, roots: Mapping[str, Type], variables: Mapping[str, Type], functions: frozenset[str]) -> None:
        self.roots = roots
        self.variables = variables
        self.functions = functions
        self.scopes: list[dict[str, Type]] = []
        self.problems: list[Problem] = []

    def problem(self, kind: str, message: str, offset: int) -> Type:
        self.problems.append(Problem(kind, message, offset))
        return DYN

    def mismatch(self, op: str, offset: int, *types: Type) -> Type:
        shown = ", ".join(str(t) for t in types)
        return self.problem(TYPE_MISMATCH, f"found no matching overload for '{op}' applied to '({shown})'", offset)

    def local(self, name: str) -> Type | None:
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        return None

    def declared(self, name: str) -> bool:
        return self.local(name) is not None or name.lstrip(".") in self.roots

    def visit(self, node: ast.Node) -> Type:
        method: Callable[[Any], Type] = getattr(self, "visit_" + type(node).__name__)
        return method(node)

    # -- leaves ------------------------------------------------------------------
    def visit_Literal(self, node: ast.Literal) -> Type:
        v = node.value
        if v is None:
            return NULL
        if isinstance(v, bool):
            return BOOL
        if isinstance(v, UInt):
            return UINT
        if isinstance(v, int):
            return INT
        if isinstance(v, float):
            return DOUBLE
        if isinstance(v, str):
            return STRING
        if isinstance(v, bytes):
            return BYTES
        return DYN

    def visit_Ident(self, node: ast.Ident) -> Type:
        found = self.local(node.name)
        if found is not None:
            return found
        plain = node.name.lstrip(".")
        if plain in self.roots:
            return self.roots[plain]
        if plain in _TYPE_NAMES:
            return TYPE
        return DYN  # undeclared: the code generator reports it

    # -- selection -----------------------------------------------------------------
    def visit_Select(self, node: ast.Select) -> Type:
        operand = node.operand
        if isinstance(operand, ast.Ident) and operand.name == "variables" and not self.declared("variables"):
            found = self.variables.get(node.field, DYN)
            return optional_of(found) if node.optional else found
        dotted = _dotted(node)
        if dotted is not None and dotted.lstrip(".") in _TYPE_NAMES and not self.declared(dotted.split(".")[0]):
            return TYPE
        base = self.visit(operand)
        if base.name == "optional":
            return optional_of(self.field(base.elem, node, node.field))
        result = self.field(base, node, node.field)
        return optional_of(result) if node.optional else result

    def field(self, base: Type, node: ast.Select | ast.Has | ast.Index, name: str) -> Type:
        """The type of field ``name`` of a value of type ``base``."""
        if isinstance(base, ObjectType):
            found = base.fields.get(name)
            if found is not None:
                return found
            if base.open:
                return DYN
            return self.unknown_field(base, node, name)
        if base.name == "map":
            if not comparable(base.key, STRING):
                return self.mismatch("_[_]", _field_offset(node), base, STRING)
            return base.elem
        if is_dyn(base) or base.name == "null_type" or base.is_param:
            return DYN
        return self.problem(TYPE_MISMATCH, f"type '{base}' does not support field selection", _field_offset(node))

    def unknown_field(self, base: ObjectType, node: ast.Select | ast.Has | ast.Index, name: str) -> Type:
        path = _dotted(node.operand)
        where = str(base)
        if path is not None and path != base.label:
            where = f"{path} ({base})" if base.label not in ("object", "") else path
        message = f"{where} has no field '{name}'"
        close = difflib.get_close_matches(name, list(base.fields), n=1, cutoff=0.6)
        if not close:
            lowered = {f.lower(): f for f in base.fields}
            close = [lowered[name.lower()]] if name.lower() in lowered else []
        if close:
            message += f"; did you mean '{close[0]}'?"
        else:
            names = sorted(base.fields)
            shown = ", ".join(names[:12]) + (f" and {len(names) - 12} more" if len(names) > 12 else "")
            message += f" (its fields: {shown})"
        return self.problem(UNKNOWN_FIELD, message, _field_offset(node))

    def visit_Has(self, node: ast.Has) -> Type:
        base = self.visit(node.operand)
        if base.name == "optional":
            base = base.elem
        if isinstance(base, ObjectType) or base.name == "map":
            self.field(base, node, node.field)
        elif not (is_dyn(base) or base.name == "null_type"):
            self.problem(TYPE_MISMATCH, f"has() cannot test a field of type '{base}'", node.offset)
        return BOOL

    def visit_Index(self, node: ast.Index) -> Type:
        base = self.visit(node.operand)
        index = self.visit(node.index)
        wrap = node.optional or base.name == "optional"
        if base.name == "optional":
            base = base.elem
        result = self.index(node, base, index)
        return optional_of(result) if wrap else result

    def index(self, node: ast.Index, base: Type, index: Type) -> Type:
        if is_dyn(base) or base.name == "null_type":
            return DYN
        if base.name == "list":
            if not (is_dyn(index) or index.name in NUMERIC):
                return self.mismatch("_[_]", node.offset, base, index)
            return base.elem
        if base.name == "map":
            if not comparable(base.key, index):
                return self.mismatch("_[_]", node.offset, base, index)
            return base.elem
        if isinstance(base, ObjectType):
            if isinstance(node.index, ast.Literal) and isinstance(node.index.value, str):
                return self.field(base, node, node.index.value)
            if not comparable(STRING, index):
                return self.mismatch("_[_]", node.offset, base, index)
            return DYN
        return self.mismatch("_[_]", node.offset, base, index)

    # -- operators -------------------------------------------------------------------
    def visit_Unary(self, node: ast.Unary) -> Type:
        operand = self.visit(node.operand)
        if node.op == "!":
            if not (is_dyn(operand) or operand == BOOL):
                self.mismatch("!_", node.offset, operand)
            return BOOL
        if is_dyn(operand):
            return DYN
        if operand.name not in ("int", "double", "duration"):
            return self.mismatch("-_", node.offset, operand)
        return operand

    def visit_Binary(self, node: ast.Binary) -> Type:
        left, right = self.visit(node.left), self.visit(node.right)
        op = node.op
        if op in ("==", "!="):
            if not comparable(left, right):
                self.mismatch(f"_{op}_", node.offset, left, right)
            return BOOL
        if op == "in":
            if right.name == "list":
                ok = comparable(left, right.elem)
            elif right.name == "map":
                ok = comparable(left, right.key)
            elif isinstance(right, ObjectType):
                ok = comparable(left, STRING)
            else:
                ok = is_dyn(right) or right.name == "null_type"
            if not ok:
                self.mismatch("@in", node.offset, left, right)
            return BOOL
        if is_dyn(left) or is_dyn(right) or left.name == "null_type" or right.name == "null_type":
            return BOOL if op in ("<", "<=", ">", ">=") else DYN
        if op in ("<", "<=", ">", ">="):
            if not ((left.name == right.name and left.name in _ORDERED) or (left.name in NUMERIC and right.name in NUMERIC)):
                self.mismatch(f"_{op}_", node.offset, left, right)
                if {left.name, right.name} & {"string"} and {left.name, right.name} & NUMERIC:
                    last = self.problems[-1]
                    hint = "; a string is not a number: convert it with int(), double() or quantity()"
                    self.problems[-1] = Problem(last.kind, last.message + hint, last.offset)
            return BOOL
        result = _arithmetic(op, left, right)
        if result is None:
            self.mismatch(f"_{op}_", node.offset, left, right)
            if {left.name, right.name} & {"string"} and {left.name, right.name} & NUMERIC:
                last = self.problems[-1]
                hint = "; a string is not a number: convert it with int(), double() or quantity()"
                self.problems[-1] = Problem(last.kind, last.message + hint, last.offset)
            return DYN
        return result

    def visit_Logical(self, node: ast.Logical) -> Type:
        for operand in node.operands:
            t = self.visit(operand)
            if not (is_dyn(t) or t == BOOL):
                self.mismatch(f"_{node.op}_", operand.offset, t)
        return BOOL

    def visit_Conditional(self, node: ast.Conditional) -> Type:
        cond = self.visit(node.condition)
        if not (is_dyn(cond) or cond == BOOL):
            self.mismatch("_?_:_", node.condition.offset, cond)
        return join(self.visit(node.then), self.visit(node.otherwise))

    def visit_ListLit(self, node: ast.ListLit) -> Type:
        item: Type | None = None
        for i, element in enumerate(node.elements):
            t = self.visit(element)
            if i in node.optional_indices:
                t = t.elem if t.name == "optional" else DYN
            item = t if item is None else join(item, t)
        return list_of(item if item is not None and item != NULL else DYN)

    def visit_MapLit(self, node: ast.MapLit) -> Type:
        key: Type | None = None
        value: Type | None = None
        for entry in node.entries:
            k, v = self.visit(entry.key), self.visit(entry.value)
            if entry.optional:
                v = v.elem if v.name == "optional" else DYN
            key = k if key is None else join(key, k)
            value = v if value is None else join(value, v)
        return map_of(key or DYN, value if value is not None and value != NULL else DYN)

    def visit_StructLit(self, node: ast.StructLit) -> Type:
        for _, value in node.fields:
            self.visit(value)
        return DYN

    # -- calls ---------------------------------------------------------------------------
    def visit_Call(self, node: ast.Call) -> Type:
        name, target = node.function, node.target
        if target is not None:
            qualified = _dotted(target)
            if qualified is not None and not self.declared(qualified.split(".")[0]):
                full = f"{qualified.lstrip('.')}.{name}"
                if full in self.functions:
                    name, target = full, None
        receiver = self.visit(target) if target is not None else None
        args = [self.visit(a) for a in node.args]
        if name == "dyn" and receiver is None:
            return DYN
        candidates = overloads().get((name, receiver is not None))
        if not candidates:
            return DYN
        results: list[Type] = []
        for overload in candidates:
            result = _match(overload, receiver, args)
            if result is not None:
                results.append(result)
        if not results:
            shown = ", ".join(str(a) for a in args)
            applied = f"{receiver}.({shown})" if receiver is not None else f"({shown})"
            return self.problem(TYPE_MISMATCH, f"found no matching overload for '{name}' applied to '{applied}'", node.offset)
        first = results[0]
        return first if all(r == first for r in results) else DYN

    # -- comprehensions --------------------------------------------------------------
    def visit_Comprehension(self, node: ast.Comprehension) -> Type:
        rng = self.visit(node.range)
        if node.kind in ("optMap", "optFlatMap"):
            inner = rng.elem if rng.name == "optional" else DYN
            self.scopes.append({node.var: inner})
            try:
                mapped = self.visit(node.transform) if node.transform is not None else DYN
            finally:
                self.scopes.pop()
            if node.kind == "optMap":
                return optional_of(mapped)
            return mapped if mapped.name == "optional" else optional_of(DYN)
        key, value = self.iteration(node, rng)
        # One variable: a list's items, a map's keys. Two: index or key, and value.
        one = value if rng.name == "list" else key
        scope = {node.var: one} if node.var2 is None else {node.var: key, node.var2: value}
        self.scopes.append(scope)
        try:
            predicate = self.visit(node.predicate) if node.predicate is not None else None
            transform = self.visit(node.transform) if node.transform is not None else None
        finally:
            self.scopes.pop()
        if predicate is not None and not (is_dyn(predicate) or predicate == BOOL):
            self.mismatch(node.kind, node.predicate.offset if node.predicate is not None else node.offset, predicate)
        if node.kind in ("all", "exists", "exists_one"):
            return BOOL
        if node.kind == "filter":
            return list_of(one)
        if node.kind == "transformMap":
            return map_of(key, transform or DYN)
        return list_of(transform or DYN)

    def iteration(self, node: ast.Comprehension, rng: Type) -> tuple[Type, Type]:
        """(key or index, value) of the items a comprehension iterates."""
        if rng.name == "list":
            return INT, rng.elem
        if rng.name == "map":
            return rng.key, rng.elem
        if isinstance(rng, ObjectType):
            return STRING, DYN
        if not (is_dyn(rng) or rng.name == "null_type"):
            self.problem(TYPE_MISMATCH, f"{node.kind}() cannot iterate over a value of type '{rng}'", node.offset)
        return DYN, DYN


def _match(overload: Overload, receiver: Type | None, args: list[Type]) -> Type | None:
    """The result type of a call if ``overload`` takes these types, else ``None``."""
    if len(overload.args) != len(args):
        return None
    bindings: dict[str, Type] = {}
    if overload.receiver is not None and receiver is not None and not assignable(overload.receiver, receiver, bindings):
        return None
    for expected, actual in zip(overload.args, args):
        if not assignable(expected, actual, bindings):
            return None
    return substitute(overload.result, bindings)


def _arithmetic(op: str, left: Type, right: Type) -> Type | None:
    """The result of ``left op right`` for known types, ``None`` when CEL has no overload."""
    a, b = left.name, right.name
    if a == b:
        if a in NUMERIC and (op != "%" or a != "double"):
            return left
        if op == "+" and a in ("string", "bytes", "duration"):
            return left
        if op == "+" and a == "list":
            return list_of(join(left.elem, right.elem))
        if op == "-" and a == "duration":
            return DURATION
        if op == "-" and a == "timestamp":
            return DURATION
        return None
    if op in "+-" and {a, b} == {"timestamp", "duration"} and (op == "+" or a == "timestamp"):
        return TIMESTAMP
    return None




def _dotted(node: ast.Node) -> str | None:
    """``a.b.c`` as a name, when the node is a chain of plain selections on an identifier."""
    parts: list[str] = []
    while isinstance(node, ast.Select) and not node.optional:
        parts.append(node.field)
        node = node.operand
    if isinstance(node, ast.Ident):
        parts.append(node.name)
        return ".".join(reversed(parts))
    return None


def _field_offset(node: ast.Select | ast.Has | ast.Index) -> int:
    """Where the field name of ``x.f`` / ``x.?f`` starts (the node's offset is at the dot)."""
    if isinstance(node, ast.Select):
        return node.offset + (2 if node.optional else 1)
    if isinstance(node, ast.Has):
        # has(x.f): the field follows its operand (no offset of its own in the tree).
        operand = node.operand
        if isinstance(operand, ast.Select):
            return operand.offset + (2 if operand.optional else 1) + len(operand.field) + 1
        if isinstance(operand, ast.Ident):
            return operand.offset + len(operand.name) + 1
    return node.offset


@lru_cache(maxsize=1)
def _library_functions() -> frozenset[str]:
    """The library's global function names (late: the library package imports this one)."""
    from engine.cel import default_library

    return frozenset(default_library().functions)


def check(root: ast.Node, roots: Mapping[str, Type], variables: Mapping[str, Type] | None = None) -> Checked:
    """Type-check ``root`` given the types of the variables it may read (``roots``)
    and of the policy variables (``variables.<name>``)."""
    checker = _Checker(roots, variables or {}, _library_functions())
    result = checker.visit(root)
    return Checked(result, checker.problems)
