"""CEL syntax tree → Python source over raw JSON values.

Each expression becomes one Python function whose parameters are the declared
variables. Sub-expressions become Python expressions where that keeps CEL's
meaning (walrus temporaries let a value be tested and used once); ``&&``,
``||`` and the comprehension macros become statement blocks with ``try`` so an
error in one operand is absorbed when another decides the result, in either
order, as CEL requires.

Sub-trees whose free variables are all *bound* (known before the per-node
loop, or none at all) are "hoisted": computed once by a prelude and referenced
by name (``_h0``, ``_h1``...). A hoisted value that failed is compiled inline in
a variant instead, so errors keep their CEL meaning.

Policy text reaches the generated source only through ``repr()`` of literals
and through constants passed in the namespace, never spliced.

``CodeGenerator`` is one class in three modules, so each stays readable: this
one holds its state, the entry point and the core expressions (literals,
identifiers, selection, indexing, operators, list and map literals);
``codegencalls`` compiles calls of library functions and methods; ``codegenflow``
the constructs that become statement blocks (``&&``, ``||``, ``_?_:_`` and the
comprehension macros). Both are mixins that only this module imports.
"""

from __future__ import annotations

import keyword
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from engine.cel.checker import kubecost
from engine.cel.errors import CompileError
from engine.cel.interpreter.codegencalls import CallGenerator
from engine.cel.interpreter.codegenflow import FlowGenerator, Scope
from engine.cel.library import Library
from engine.cel.parser import ast
from engine.cel.types.values import CelType, UInt

# Python refuses more than 20 nested blocks in one function and 100 levels of
# indentation; deeper CEL nesting is generated as expressions with lambdas.
_MAX_BLOCK_DEPTH = 16
_MAX_INDENT = 40

TYPE_IDENTS = {
    name: CelType(name)
    for name in (
        "int", "uint", "double", "bool", "string", "bytes", "list", "map", "null_type", "type",
        "optional_type", "google.protobuf.Timestamp", "google.protobuf.Duration",
        "kubernetes.Quantity", "kubernetes.URL", "kubernetes.Semver", "net.IP", "net.CIDR",
    )
}

_ARITH = {"+": "_add", "-": "_sub", "*": "_mul", "/": "_div", "%": "_mod"}
_COMPARE = {"<": "_lt", "<=": "_le", ">": "_gt", ">=": "_ge"}
_NUMERIC_TYPES = ("int", "uint", "double")


def python_name(name: str, index: int) -> str:
    """The parameter name of a declared variable in generated code."""
    if name.isidentifier() and not keyword.iskeyword(name) and not name.startswith("_"):
        return name
    return f"_var{index}"


@dataclass
class Generated:
    source: str
    namespace: dict[str, Any]
    result_type: str


class CodeGenerator(CallGenerator, FlowGenerator):
    """Generates one function for one expression.

    ``variables`` are the declared names in parameter order (``None``: accept
    any identifier and fail at run time if it is not bound). ``bound`` are the
    variables fixed before evaluation; ``hoisted`` maps hoisted sub-tree ids to
    the name that holds their value (``None`` compiles a candidate inline).
    """

    def __init__(
        self,
        text: str,
        *,
        library: Library,
        variables: list[str],
        check: bool,
        hoisted: dict[int, str] | None = None,
        accounting: bool = True,
    ) -> None:
        self.text = text
        self.library = library
        self.variables = variables
        self.check = check
        self.params = {name: python_name(name, i) for i, name in enumerate(variables)}
        self.hoisted = hoisted or {}
        self.lines: list[str] = []
        self.indent = 1
        self.block_depth = 0
        self.counter = 0
        self.scopes: list[Scope] = []
        self.namespace: dict[str, Any] = {}
        self.statement_memo: dict[int, bool] = {}
        self.inline_only = False
        self.uses_cost = False  # comprehensions, and string scans in functions with loops, spend the budget
        self.has_loops = False
        self.cost_limit = 0
        # Whether this expression spends a run-time budget at all (Program decides: only
        # one whose cost on the largest objects can exceed its limit), and what the budget
        # charges up front and per comprehension item (kubecost.fixed_costs).
        self.accounting = accounting
        self.per_item: dict[int, int] = {}

    # -- entry points ------------------------------------------------------
    def function(self, root: ast.Node, *, name: str, params: Iterable[str], cost_limit: int) -> Generated:
        """``def name(params): return <root>`` with the cost budget and error conversion."""
        header = f"def {name}({', '.join(params)}):"
        self.indent = 2
        self.cost_limit = int(cost_limit)
        self.has_loops = _has_loops(root)
        base = 0
        if self.accounting:
            base, self.per_item = kubecost.fixed_costs(root, namespaces=self.library.namespaces)
        code, typ = self.expr(root)
        body = self.lines
        out = [header]
        if self.accounting and base > cost_limit:
            # Even on empty values the expression costs more than its limit.
            out.append("    _cost_exceeded('expression')")
        if self.uses_cost:
            out.append(f"    _c = [{int(cost_limit) - base}]")
        out.append("    try:")
        out += body
        out.append(f"        return {code}")
        out.append("    except _Reraise:")
        out.append("        raise")
        out.append("    except Exception as _x:")
        out.append("        raise _convert(_x) from None")
        return Generated("\n".join(out), self.namespace, typ)

    # -- helpers -----------------------------------------------------------
    def tmp(self, prefix: str = "_t") -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def const(self, value: Any) -> str:
        if value is None or type(value) in (bool, int, str, bytes):
            return repr(value)
        if type(value) is float:
            if value != value or value in (float("inf"), float("-inf")):
                name = self.tmp("_k")
                self.namespace[name] = value
                return name
            return repr(value)
        name = self.tmp("_k")
        self.namespace[name] = value
        return name

    def emit(self, line: str) -> None:
        self.lines.append("    " * self.indent + line)

    def error(self, message: str, node: ast.Node) -> CompileError:
        return CompileError(message, text=self.text, offset=node.offset)

    def needs_statements(self, node: ast.Node) -> bool:
        if self.inline_only:
            return False
        key = id(node)
        if key in self.hoisted and self.hoisted[key] is not None:
            return False
        cached = self.statement_memo.get(key)
        if cached is None:
            cached = isinstance(node, (ast.Logical, ast.Comprehension)) or any(
                self.needs_statements(c) for c in ast.children(node)
            )
            self.statement_memo[key] = cached
        return cached

    def block(self) -> "_Block":
        return _Block(self)

    # -- expressions ---------------------------------------------------------
    def expr(self, node: ast.Node) -> tuple[str, str]:
        name = self.hoisted.get(id(node))
        if name is not None:
            return name, "dyn"
        if not self.inline_only and self.needs_statements(node) and (
            self.block_depth >= _MAX_BLOCK_DEPTH or self.indent >= _MAX_INDENT
        ):
            self.inline_only = True
            try:
                return self.expr(node)
            finally:
                self.inline_only = False
        method = getattr(self, "expr_" + type(node).__name__)
        result: tuple[str, str] = method(node)
        return result

    def expr_Literal(self, node: ast.Literal) -> tuple[str, str]:
        v = node.value
        t = type(v)
        typ = {type(None): "null", bool: "bool", int: "int", UInt: "uint", float: "double", str: "string", bytes: "bytes"}[t]
        return self.const(v), typ

    def resolve(self, name: str) -> str | None:
        for scope in reversed(self.scopes):
            if name in scope.names:
                return scope.names[name]
        plain = name[1:] if name.startswith(".") else name
        if plain in self.params:
            return self.params[plain]
        return None

    def expr_Ident(self, node: ast.Ident) -> tuple[str, str]:
        py = self.resolve(node.name)
        if py is not None:
            return py, "dyn"
        plain = node.name.lstrip(".")
        if plain in TYPE_IDENTS:
            return self.const(TYPE_IDENTS[plain]), "type"
        if self.check:
            raise self.error(f"undeclared reference to '{plain}'", node)
        return f"_unbound({plain!r})", "dyn"

    def expr_Select(self, node: ast.Select) -> tuple[str, str]:
        if not node.optional:
            name = ast.dotted_name(node)
            if name is not None and not self._is_local_root(node):
                plain = name.lstrip(".")
                if plain in self.params:
                    return self.params[plain], "dyn"
                if plain in TYPE_IDENTS:
                    return self.const(TYPE_IDENTS[plain]), "type"
        operand, otype = self.expr(node.operand)
        if node.optional:
            return f"_optsel({operand}, {node.field!r})", "optional"
        if otype in ("map", "dyn", "optional"):
            # A plain subscript is CEL's select on a map; an Optional chains through
            # __getitem__; anything else raises TypeError, converted to a CEL error.
            return f"{operand}[{node.field!r}]", ("optional" if otype == "optional" else "dyn")
        return f"_select({operand}, {node.field!r})", "dyn"

    def _is_local_root(self, node: ast.Node) -> bool:
        while isinstance(node, ast.Select):
            node = node.operand
        return isinstance(node, ast.Ident) and any(node.name in s.names for s in self.scopes)

    def expr_Has(self, node: ast.Has) -> tuple[str, str]:
        operand, _ = self.expr(node.operand)
        t = self.tmp()
        return f"({node.field!r} in {t} if type({t} := {operand}) is dict else _has({t}, {node.field!r}))", "bool"

    def expr_Index(self, node: ast.Index) -> tuple[str, str]:
        operand, otype = self.expr(node.operand)
        index, itype = self.expr(node.index)
        if node.optional:
            return f"_optidx({operand}, {index})", "optional"
        if itype == "string" and isinstance(node.index, ast.Literal) and otype in ("map", "dyn", "optional"):
            return f"{operand}[{index}]", ("optional" if otype == "optional" else "dyn")
        c, k = self.tmp(), self.tmp()
        return (
            f"({c}[{k}] if (type({c} := {operand}) is dict) & (type({k} := {index}) is str) else _index({c}, {k}))",
            "optional" if otype == "optional" else "dyn",
        )

    def expr_Unary(self, node: ast.Unary) -> tuple[str, str]:
        operand, otype = self.expr(node.operand)
        if node.op == "!":
            self.expect_type(node.operand, otype, ("bool",), "!_")
            t = self.tmp()
            return f"(False if ({t} := {operand}) is True else True if {t} is False else _not({t}))", "bool"
        self.expect_type(node.operand, otype, ("int", "double", "duration"), "-_")
        return f"_neg({operand})", otype if otype in ("int", "double") else "dyn"

    def expect_type(self, node: ast.Node, actual: str, allowed: tuple[str, ...], op: str) -> None:
        if self.check and actual not in ("dyn", "optional") and actual not in allowed:
            raise self.error(f"found no matching overload for '{op}' applied to '({actual})'", node)

    def expr_Binary(self, node: ast.Binary) -> tuple[str, str]:
        left, lt = self.expr(node.left)
        right, rt = self.expr(node.right)
        op = node.op
        if op in ("==", "!="):
            code = self.equality(node, left, lt, right, rt)
            return (code if op == "==" else f"(not {code})"), "bool"
        if op == "in":
            item, coll = self.tmp(), self.tmp()
            # A string key in a map, or a string in a list, is Python's `in` exactly.
            return (
                f"(({item} in {coll}) if (type({item} := {left}) is str) & (type({coll} := {right}) in _STR_CONTAINERS) "
                f"else _in({coll}, {item}))"
            ), "bool"
        if op in _COMPARE:
            self.check_operands(node, op, lt, rt, ordered=True)
            if lt == rt and lt in ("int", "double", "string"):
                return f"({left} {op} {right})", "bool"
            return f"{_COMPARE[op]}({left}, {right})", "bool"
        typ = self.check_operands(node, op, lt, rt, ordered=False)
        if lt == rt == "double" and op in "+-*":
            return f"({left} {op} {right})", "double"
        return f"{_ARITH[op]}({left}, {right})", typ

    def equality(self, node: ast.Binary, left: str, lt: str, right: str, rt: str) -> str:
        # Equality with a string literal needs no helper: Python's str == is CEL's
        # for strings, and any other kind is simply unequal in both.
        if isinstance(node.right, ast.Literal) and rt == "string":
            return f"({left} == {right})"
        if isinstance(node.left, ast.Literal) and lt == "string":
            return f"({right} == {left})"
        if self.check and lt not in ("dyn", "null") and rt not in ("dyn", "null") and lt != rt:
            if not (lt in _NUMERIC_TYPES and rt in _NUMERIC_TYPES):
                raise self.error(f"found no matching overload for '_==_' applied to '({lt}, {rt})'", node)
        # Same plain type on both sides (the usual case: two strings from JSON) needs no helper.
        # (Conditions use `&`, not `and`, wherever both walrus targets must be bound for the else branch.)
        a, b = self.tmp(), self.tmp()
        if isinstance(node.right, ast.Literal) and rt == "int":
            return f"(({a} == {right}) if type({a} := {left}) is int else _eq({a}, {right}))"
        # Two strings (the usual case in Kubernetes objects) compare directly; the
        # chained `is` tests both types after both walruses have run.
        return f"(({a} == {b}) if type({a} := {left}) is type({b} := {right}) is str else _eq({a}, {b}))"

    def check_operands(self, node: ast.Node, op: str, lt: str, rt: str, *, ordered: bool) -> str:
        """Static result type of an arithmetic/ordering operator; a compile error
        when both operand types are known and no overload exists."""
        known = lt not in ("dyn", "optional") and rt not in ("dyn", "optional")
        if not known:
            return "dyn"
        ok = False
        result = lt
        if ordered:
            ok = (lt == rt and lt in ("int", "uint", "double", "string", "bytes", "bool", "timestamp", "duration")) or (
                lt in _NUMERIC_TYPES and rt in _NUMERIC_TYPES
            )
        elif lt == rt:
            ok = (lt in _NUMERIC_TYPES and (op != "%" or lt != "double")) or (
                op == "+" and lt in ("string", "bytes", "list", "duration")
            ) or (op == "-" and lt == "duration") or (op == "-" and lt == "timestamp")
            result = "duration" if lt == "timestamp" else lt
        elif op in "+-" and {lt, rt} == {"timestamp", "duration"}:
            ok = op == "+" or lt == "timestamp"
            result = "timestamp"
        if not ok and self.check:
            raise self.error(f"found no matching overload for '_{op}_' applied to '({lt}, {rt})'", node)
        return result if ok else "dyn"

    def expr_ListLit(self, node: ast.ListLit) -> tuple[str, str]:
        parts = [self.expr(el)[0] for el in node.elements]
        if node.optional_indices:
            flags = [i in node.optional_indices for i in range(len(parts))]
            return f"_optlist([{', '.join(parts)}], {flags!r})", "list"
        return f"[{', '.join(parts)}]", "list"

    def expr_MapLit(self, node: ast.MapLit) -> tuple[str, str]:
        keys = [self.expr(e.key) for e in node.entries]
        values = [self.expr(e.value)[0] for e in node.entries]
        for entry, (_, ktype) in zip(node.entries, keys):
            if self.check and ktype not in ("dyn", "int", "uint", "bool", "string"):
                raise self.error(f"unsupported map key type: {ktype}", entry.key)
        literal_keys = [e.key.value for e in node.entries if isinstance(e.key, ast.Literal)]
        simple = (
            len(literal_keys) == len(node.entries)
            and all(type(k) is str for k in literal_keys)
            and len(set(literal_keys)) == len(literal_keys)
            and not any(e.optional for e in node.entries)
        )
        if simple:
            return "{" + ", ".join(f"{k}: {v}" for (k, _), v in zip(keys, values)) + "}", "map"
        entries = ", ".join(f"({k}, {v}, {e.optional})" for (k, _), v, e in zip(keys, values, node.entries))
        return f"_makemap([{entries}])", "map"

    def expr_StructLit(self, node: ast.StructLit) -> tuple[str, str]:
        raise self.error(f"message literals are not supported: {node.type_name}", node)


def _has_loops(root: ast.Node) -> bool:
    if isinstance(root, ast.Comprehension) and root.kind not in ("optMap", "optFlatMap"):
        return True
    return any(_has_loops(child) for child in ast.children(root))


class _Block:
    """Counts Python block nesting so deep CEL moves into local functions in time."""

    def __init__(self, gen: CodeGenerator) -> None:
        self.gen = gen

    def __enter__(self) -> None:
        self.gen.block_depth += 1  # each for/while/try is one of Python's 20

    def __exit__(self, *exc: object) -> None:
        self.gen.block_depth -= 1
