"""The typed check of a CEL expression, in the spirit of cel-go's ``checker``: every
sub-expression gets a type (``typemodel``) from the types of the variables it reads
(for policies, the Kubernetes schemas: ``schema.kubernetes_types()``), and what can
only fail is reported before the expression ever runs:

- a field a schema object does not have (``node.metadata.lables``), with the
  closest field names (``did you mean 'labels'?``): ``UNKNOWN_FIELD``;
- an operator, index or function applied to types it has no overload for
  (``pod.metadata.labels['gpus'] * 10``: ``string * int``), a field selected from
  a value that has none, a comprehension over a value that cannot be iterated:
  ``TYPE_MISMATCH``; so are what Kubernetes' CEL rejects when it compiles (cel-go's
  literal validators and homogeneous aggregate literals): a ``duration()`` or
  ``timestamp()`` of a literal that is not one, a literal pattern of ``matches``,
  ``find`` or ``findAll`` that does not compile, a list or map literal whose items
  have different types (``[1, 'a']``; outside ``format()``, as in cel-go), and
  ``sum()``, ``min()``, ``max()``, ``isSorted()`` of a list of what they cannot add
  or order;
- with ``scope`` given (the names the expression may read), an identifier or a
  function nothing declares, with the closest known name (``did you mean ...?``): ``UNDECLARED``.

``check(root, roots, variables)`` walks the syntax tree once and returns the type of
the whole expression and every problem found (not only the first), each at the
offset of the node it is about. What the check cannot know stays ``dyn`` and passes:
labels, annotations and other maps with free keys, ``dyn()``, functions the
signature table (``signatures``) does not list. Like cel-go it looks at the whole
expression, so besides what would fail at run time on valid objects it refuses what
cannot mean anything: a field the object cannot have under ``has()`` or ``.?``, a
comparison CEL has no overload for (``name == 1``, always false), and type errors
in branches ``&&``, ``||`` or ``?:`` never reach.

The code generator (``engine.cel.interpreter.codegen``) stops at the first
undeclared name or literal-only type error; this check reports every one.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from engine.cel.errors import EvalError
from engine.cel.parser import ast
from engine.cel.types.values import UInt


from engine.cel.checker.formatcalls import format_problems
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
    is_concrete,
    is_dyn,
    join,
    list_of,
    map_of,
    optional_of,
    substitute,
)

UNKNOWN_FIELD = "unknown-field"
TYPE_MISMATCH = "type-mismatch"
UNDECLARED = "undeclared"

# What the list functions of Kubernetes' library take (k8s.io/apiserver/pkg/cel/library/lists.go).
_SUMMABLE = frozenset(("int", "uint", "double", "duration"))
_COMPARABLE = frozenset(("int", "uint", "double", "bool", "duration", "timestamp", "string", "bytes"))
_LIST_ELEMENTS = {"sum": _SUMMABLE, "min": _COMPARABLE, "max": _COMPARABLE, "isSorted": _COMPARABLE}
# Functions whose literal argument cel-go's validators check when they compile (the
# receiver-style ones take the pattern as their first argument).
_LITERAL_CONVERSIONS = frozenset(("duration", "timestamp"))
_LITERAL_PATTERNS = frozenset(("matches", "find", "findAll"))

_TYPE_NAMES = frozenset(
    (
        "int", "uint", "double", "bool", "string", "bytes", "list", "map", "null_type", "type",
        "optional_type", "google.protobuf.Timestamp", "google.protobuf.Duration",
        "kubernetes.Quantity", "kubernetes.URL", "kubernetes.Semver", "net.IP", "net.CIDR",
    )
)
_ORDERED = frozenset(("int", "uint", "double", "string", "bytes", "bool", "timestamp", "duration"))


# -- "did you mean" -------------------------------------------------------------------------

# Receiver-style macros (the parser expands them; a wrong name reaches the checks as a call).
MACROS = (
    "all", "exists", "exists_one", "existsOne", "map", "filter", "transformList", "transformMap", "transformMapEntry",
    "optMap", "optFlatMap",
)
# Global functions the code generator compiles itself (not in the library's tables).
BUILTIN_FUNCTIONS = ("size", "type", "dyn", "has")


def closest(name: str, candidates: Iterable[str]) -> str | None:
    """The candidate ``name`` most likely meant: one that differs only in case, else
    the closest by ``difflib`` (ratio 0.6 or more), else ``None``."""
    names = sorted({c for c in candidates if c and c != name})
    lowered = {c.lower(): c for c in names}
    if name.lower() in lowered:
        return lowered[name.lower()]
    found = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
    return found[0] if found else None


def undeclared_identifier(name: str, candidates: Iterable[str]) -> str:
    """The message for an identifier nothing declares; ``candidates``: the names in scope."""
    message = f"undeclared reference to '{name}'"
    close = closest(name, candidates)
    return message + (f"; did you mean '{close}'?" if close else "")


def undeclared_function(name: str, *, functions: Iterable[str], methods: Iterable[str], method: bool) -> str:
    """The message for a function the library does not have: ``method`` when it is
    called on a value (``x.name()``), else a global (possibly namespaced) function."""
    functions, methods = set(functions) | set(BUILTIN_FUNCTIONS), set(methods)
    message = f"undeclared reference to function '{name}'"
    if method and name in functions and "." not in name:
        return message + f"; it is a global function: call it as {name}(x)"
    if not method and name in methods:
        return message + f"; it is a method: call it as x.{name}(...)"
    close = closest(name, (methods | set(MACROS)) if method else functions)
    return message + (f"; did you mean '{close}'?" if close else "")


def unknown_namespace_function(qualified: str, functions: Iterable[str]) -> bool:
    """Whether ``a.b(...)`` on an undeclared ``a`` means a namespaced function that does
    not exist (``kube.podRequest``) rather than a method of an undeclared identifier:
    its qualifier is a namespace of the library, or the whole name is close to a function."""
    names = {f for f in functions if "." in f}
    namespaces = {f.split(".", 1)[0] for f in names}
    return qualified.split(".", 1)[0] in namespaces or closest(qualified, names) is not None


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
    def __init__(
        self,
        roots: Mapping[str, Type],
        variables: Mapping[str, Type],
        functions: frozenset[str],
        methods: frozenset[str],
        scope: frozenset[str] | None,
    ) -> None:
        self.roots = roots
        self.variables = variables
        self.functions = functions
        self.methods = methods
        self.scope = scope  # the top-level names the expression may read (None: every root, nothing undeclared)
        self.scopes: list[dict[str, Type]] = []
        self.problems: list[Problem] = []
        self.in_format = 0  # inside a format() call, where mixed lists are allowed (cel-go exempts them)
        self.types: dict[int, Type] = {}  # by id() of the node: what format() arguments are, for format_problems

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
        plain = name.lstrip(".")
        return self.local(name) is not None or (plain in self.roots and self.readable(plain))

    def readable(self, plain: str) -> bool:
        return self.scope is None or plain in self.scope

    def names_in_scope(self) -> list[str]:
        """What an undeclared identifier may have meant: the names the expression may read
        and the comprehension variables around it."""
        return sorted(self.scope or ()) + [name for scope in self.scopes for name in scope]

    def visit(self, node: ast.Node) -> Type:
        method: Callable[[Any], Type] = getattr(self, "visit_" + type(node).__name__)
        found = self.types[id(node)] = method(node)
        return found

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
        if plain in self.roots and self.readable(plain):
            return self.roots[plain]
        if plain in _TYPE_NAMES:
            return TYPE
        if self.scope is None or plain in self.scope:
            return DYN  # declared without a type (or, with no scope given, left to the code generator)
        return self.problem(UNDECLARED, undeclared_identifier(plain, self.names_in_scope()), node.offset)

    # -- selection -----------------------------------------------------------------
    def visit_Select(self, node: ast.Select) -> Type:
        operand = node.operand
        if isinstance(operand, ast.Ident) and operand.name == "variables" and not self.declared("variables"):
            found = self.variables.get(node.field, DYN)
            return optional_of(found) if node.optional else found
        dotted = ast.dotted_name(node)
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
        path = ast.dotted_name(node.operand)
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
        first: tuple[Type, ast.Node] | None = None
        mixed = False
        for i, element in enumerate(node.elements):
            t = self.visit(element)
            if i in node.optional_indices:
                t = t.elem if t.name == "optional" else DYN
            item = t if item is None else join(item, t)
            if not mixed and is_concrete(t):
                first = first or (t, element)
                mixed = self.homogeneous(first, t, element)
        return list_of(item if item is not None and item != NULL else DYN)

    def homogeneous(self, expected: tuple[Type, ast.Node], actual: Type, node: ast.Node) -> bool:
        """cel-go's homogeneous aggregate literals (Kubernetes enables them): the items of a
        list literal, and the keys and the values of a map literal, have one type. Reports
        ``actual`` and returns True when it differs from the first item's (outside format()).
        Numbers of different kinds count as mixed only when both are literals (``[1, 2.0]``):
        kpe types ``params`` from their YAML values, where Kubernetes would have one schema type."""
        first, first_node = expected
        if self.in_format or actual == first:
            return False
        if first.name in NUMERIC and actual.name in NUMERIC and not (isinstance(first_node, ast.Literal) and isinstance(node, ast.Literal)):
            return False
        self.problem(TYPE_MISMATCH, f"expected type '{first}' but found '{actual}'", node.offset)
        return True

    def visit_MapLit(self, node: ast.MapLit) -> Type:
        key: Type | None = None
        value: Type | None = None
        first_key: tuple[Type, ast.Node] | None = None
        first_value: tuple[Type, ast.Node] | None = None
        for entry in node.entries:
            k, v = self.visit(entry.key), self.visit(entry.value)
            if entry.optional:
                v = v.elem if v.name == "optional" else DYN
            key = k if key is None else join(key, k)
            value = v if value is None else join(value, v)
            if is_concrete(k):
                first_key = first_key or (k, entry.key)
                self.homogeneous(first_key, k, entry.key)
            if is_concrete(v):
                first_value = first_value or (v, entry.value)
                self.homogeneous(first_value, v, entry.value)
        return map_of(key or DYN, value if value is not None and value != NULL else DYN)

    def visit_StructLit(self, node: ast.StructLit) -> Type:
        for _, value in node.fields:
            self.visit(value)
        return DYN

    # -- calls ---------------------------------------------------------------------------
    def visit_Call(self, node: ast.Call) -> Type:
        name, target = node.function, node.target
        if target is not None:
            qualified = ast.dotted_name(target)
            if qualified is not None and not self.declared(qualified.split(".")[0]):
                full = f"{qualified.lstrip('.')}.{name}"
                root = qualified.lstrip(".").split(".")[0]
                if full in self.functions:
                    name, target = full, None
                elif self.scope is not None and root not in self.scope and unknown_namespace_function(full, self.functions):
                    for a in node.args:
                        self.visit(a)
                    message = undeclared_function(full, functions=self.functions, methods=self.methods, method=False)
                    return self.problem(UNDECLARED, message, _leftmost(target).offset)
        self.in_format += name == "format" and target is not None
        try:
            receiver = self.visit(target) if target is not None else None
            if self.scope is not None and receiver is not None and name not in self.methods:
                message = undeclared_function(name, functions=self.functions, methods=self.methods, method=True)
                if closest(name, MACROS) is None:  # `exist(c, ...)`: a misspelt macro, `c` is no reference
                    for a in node.args:
                        self.visit(a)
                return self.problem(UNDECLARED, message, node.offset + 1)
            args = [self.visit(a) for a in node.args]
        finally:
            self.in_format -= name == "format" and target is not None
        if receiver is None and self.scope is not None and name not in self.functions and name not in BUILTIN_FUNCTIONS:
            message = undeclared_function(name, functions=self.functions, methods=self.methods, method=False)
            return self.problem(UNDECLARED, message, node.offset)
        self.literal_arguments(node, name, receiver is not None)
        if name == "format" and isinstance(target, ast.Literal) and isinstance(target.value, str):
            if len(node.args) == 1 and isinstance(node.args[0], ast.ListLit):
                type_of = lambda n: self.types.get(id(n), DYN)  # noqa: E731
                for message, culprit in format_problems(target.value, node.args[0].elements, type_of):
                    self.problem(TYPE_MISMATCH, message, (culprit or node).offset)
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
        allowed = _LIST_ELEMENTS.get(name) if receiver is not None and not args else None
        if allowed is not None and receiver is not None and receiver.name == "list":
            if is_concrete(receiver.elem) and receiver.elem.name not in allowed:
                return self.problem(TYPE_MISMATCH, f"found no matching overload for '{name}' applied to '{receiver}.()'", node.offset)
        first = results[0]
        return first if all(r == first for r in results) else DYN

    def literal_arguments(self, node: ast.Call, name: str, method: bool) -> None:
        """cel-go's literal validators: ``duration('1d')``, ``timestamp('...')`` and a regex
        literal that does not compile fail when Kubernetes compiles the expression, as
        ``invalid <function> argument``; kpe says why as well."""
        if not method and name in _LITERAL_CONVERSIONS and len(node.args) == 1:
            literal = node.args[0]
            if isinstance(literal, ast.Literal):
                try:
                    _library_function(name)(literal.value)
                except EvalError as exc:
                    self.problem(TYPE_MISMATCH, f"invalid {name} argument: {exc.message}", literal.offset)
            return
        if name in _LITERAL_PATTERNS and (method or name == "matches"):
            index = 0 if method else 1
            if len(node.args) > index:
                literal = node.args[index]
                if isinstance(literal, ast.Literal) and isinstance(literal.value, str):
                    from engine.cel.ext.regex import compile_pattern

                    try:
                        compile_pattern(literal.value)
                    except EvalError as exc:
                        self.problem(TYPE_MISMATCH, f"invalid {name} argument: {exc.message}", literal.offset)

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


def _leftmost(node: ast.Node) -> ast.Node:
    """The identifier a chain of selections ``a.b.c`` starts with."""
    while isinstance(node, ast.Select):
        node = node.operand
    return node


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


@lru_cache(maxsize=1)
def _library_methods() -> frozenset[str]:
    """The library's receiver-style function names."""
    from engine.cel import default_library

    return frozenset(default_library().methods)


def _library_function(name: str) -> Callable[..., Any]:
    from engine.cel import default_library

    return default_library().functions[name]


def check(
    root: ast.Node,
    roots: Mapping[str, Type],
    variables: Mapping[str, Type] | None = None,
    *,
    scope: Iterable[str] | None = None,
) -> Checked:
    """Type-check ``root`` given the types of the variables it may read (``roots``)
    and of the policy variables (``variables.<name>``). With ``scope``, the names the
    expression may read (``variables.<name>`` counts as ``variables``), every other
    identifier and every function the library does not have is an ``UNDECLARED`` problem."""
    names = frozenset(name.split(".", 1)[0] for name in scope) if scope is not None else None
    checker = _Checker(roots, variables or {}, _library_functions(), _library_methods(), names)
    result = checker.visit(root)
    return Checked(result, checker.problems)
