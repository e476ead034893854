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
"""

from __future__ import annotations

import keyword
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, cast

from . import ast
from .errors import CompileError, EvalError
from .library import Library
from .limits import FREE_SCAN_CHARS
from .values import CelType, UInt

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


@dataclass
class _Scope:
    names: dict[str, str] = field(default_factory=dict)


class CodeGenerator:
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
        self.scopes: list[_Scope] = []
        self.namespace: dict[str, Any] = {}
        self.statement_memo: dict[int, bool] = {}
        self.inline_only = False
        self.uses_cost = False  # comprehensions, and string scans in functions with loops, spend the budget
        self.has_loops = False
        self.cost_limit = 0

    # -- entry points ------------------------------------------------------
    def function(self, root: ast.Node, *, name: str, params: Iterable[str], cost_limit: int) -> Generated:
        """``def name(params): return <root>`` with the cost budget and error conversion."""
        header = f"def {name}({', '.join(params)}):"
        self.indent = 2
        self.cost_limit = int(cost_limit)
        self.has_loops = _has_loops(root)
        code, typ = self.expr(root)
        body = self.lines
        out = [header]
        if self.uses_cost:
            out.append(f"    _c = [{int(cost_limit)}]")
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

    def dotted(self, node: ast.Node) -> str | None:
        """``a.b.c`` as a name, when the node is a chain of plain selections on an identifier."""
        parts: list[str] = []
        while isinstance(node, ast.Select) and not node.optional:
            parts.append(node.field)
            node = node.operand
        if isinstance(node, ast.Ident):
            parts.append(node.name)
            return ".".join(reversed(parts))
        return None

    def expr_Select(self, node: ast.Select) -> tuple[str, str]:
        if not node.optional:
            name = self.dotted(node)
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

    def expr_Conditional(self, node: ast.Conditional) -> tuple[str, str]:
        cond, ctype = self.expr(node.condition)
        self.expect_type(node.condition, ctype, ("bool",), "_?_:_")
        if not (self.needs_statements(node.then) or self.needs_statements(node.otherwise)):
            then, tt = self.expr(node.then)
            other, ot = self.expr(node.otherwise)
            t = self.tmp()
            return f"({then} if ({t} := {cond}) is True else {other} if {t} is False else _raise_nso('_?_:_', {t}))", (
                tt if tt == ot else "dyn"
            )
        t, r = self.tmp(), self.tmp("_r")
        self.emit(f"{t} = {cond}")
        with self.block():
            self.emit(f"if {t} is True:")
            self.indent += 1
            then, tt = self.expr(node.then)
            self.emit(f"{r} = {then}")
            self.indent -= 1
            self.emit(f"elif {t} is False:")
            self.indent += 1
            other, ot = self.expr(node.otherwise)
            self.emit(f"{r} = {other}")
            self.indent -= 1
            self.emit("else:")
            self.emit(f"    raise _nso('_?_:_', {t})")
        return r, (tt if tt == ot else "dyn")

    def expr_Logical(self, node: ast.Logical) -> tuple[str, str]:
        # Fold left to right; the first operand that decides the result (false for
        # &&, true for ||) wins over errors from any other operand.
        if self.inline_only:
            thunks = ", ".join(f"lambda: {self.expr(o)[0]}" for o in node.operands)
            return f"{'_and' if node.op == '&&' else '_or'}({thunks})", "bool"
        if not any(self.needs_statements(o) for o in node.operands):
            return self.pure_logical(node)
        decisive = "False" if node.op == "&&" else "True"
        r, e, v = self.tmp("_r"), self.tmp("_e"), self.tmp("_v")
        self.emit(f"{r} = {'True' if node.op == '&&' else 'False'}")
        self.emit(f"{e} = None")
        with self.block():
            self.emit("while True:")
            self.indent += 1
            for operand in node.operands:
                with self.block():
                    self.emit("try:")
                    self.indent += 1
                    code, otype = self.expr(operand)
                    self.expect_type(operand, otype, ("bool",), f"_{node.op}_")
                    self.emit(f"{v} = {code}")
                    self.indent -= 1
                    self.emit("except _Reraise:")
                    self.emit("    raise")
                    self.emit("except Exception as _x:")
                    self.emit(f"    if {e} is None: {e} = _x")
                    self.emit("else:")
                    self.emit(f"    if {v} is {decisive}:")
                    self.emit(f"        {r} = {decisive}")
                    self.emit("        break")
                    self.emit(f"    if {v} is not {'True' if decisive == 'False' else 'False'} and {e} is None:")
                    self.emit(f"        {e} = _nso('_{node.op}_', {v})")
            self.emit("break")
            self.indent -= 1
        self.emit(f"if {r} is not {decisive} and {e} is not None:")
        self.emit(f"    raise {e}")
        return r, "bool"

    def pure_logical(self, node: ast.Logical) -> tuple[str, str]:
        """Operands without statements: one Python expression for the usual case
        (every operand a bool, no error), and the exact CEL fold only when an
        operand raised or was not a bool."""
        decisive = "False" if node.op == "&&" else "True"
        other = "True" if decisive == "False" else "False"
        codes = []
        for operand in node.operands:
            code, otype = self.expr(operand)
            self.expect_type(operand, otype, ("bool",), f"_{node.op}_")
            codes.append(code)
        temps = [self.tmp("_v") for _ in codes]
        fast = " else ".join(f"{decisive} if ({t} := {c}) is {decisive}" for t, c in zip(temps, codes))
        all_other = " and ".join(f"{t} is {other}" for t in temps)
        r = self.tmp("_r")
        slow = f"{'_and' if node.op == '&&' else '_or'}({', '.join(f'lambda: {c}' for c in codes)})"
        with self.block():
            self.emit("try:")
            self.emit(f"    {r} = {fast} else {other} if ({all_other}) else _raise_nso('_{node.op}_', None)")
            self.emit("except _Reraise:")
            self.emit("    raise")
            self.emit("except Exception:")
            self.emit(f"    {r} = {slow}")
        return r, "bool"

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

    # -- calls -------------------------------------------------------------
    def expr_Call(self, node: ast.Call) -> tuple[str, str]:
        if node.target is not None:
            qualified = self.dotted(node.target)
            if qualified is not None and self.resolve(qualified.split(".")[0]) is None:
                fname = f"{qualified.lstrip('.')}.{node.function}"
                if fname in self.library.functions:
                    return self.global_call(node, fname)
            return self.method_call(node)
        return self.global_call(node, node.function)

    def global_call(self, node: ast.Call, name: str) -> tuple[str, str]:
        args = [self.expr(a) for a in node.args]
        codes = [c for c, _ in args]
        if name == "size" and len(args) == 1:
            t = self.tmp()
            return f"(len({t}) if type({t} := {codes[0]}) in _SIZED else _size({t}))", "int"
        if name == "type" and len(args) == 1:
            return f"_type_of({codes[0]})", "type"
        if name == "dyn" and len(args) == 1:
            return codes[0], "dyn"
        fn = self.library.functions.get(name)
        if fn is None:
            if self.check:
                raise self.error(f"undeclared reference to '{name}'", node)
            return f"_unknown_function({name!r})({', '.join(codes)})", "dyn"
        charged = self.charged_call(name, codes, method=False)
        if charged is not None:
            return charged, self.library.result_types.get(name, "dyn")
        ref = self.function_ref("_fn_", name, fn)
        return f"{ref}({', '.join(codes)})", self.library.result_types.get(name, "dyn")

    def function_ref(self, prefix: str, name: str, fn: Any) -> str:
        ref = prefix + "".join(ch if ch.isalnum() else "_" for ch in name)
        self.namespace[ref] = fn
        return ref

    def optional_chain(self, node: ast.Node) -> tuple[ast.Node, list[ast.Node | str]] | None:
        """``base.?a[?k].b`` as (base, [a, k, b]) when the chain has an optional step;
        every step from the first optional one on is a presence test."""
        steps: list[tuple[ast.Node, bool]] = []
        probe = node
        while isinstance(probe, (ast.Select, ast.Index)):
            steps.append((probe, probe.optional))
            probe = probe.operand
        first = max((i for i, (_, optional) in enumerate(steps) if optional), default=None)
        if first is None:
            return None
        chain = [n for n, _ in steps[: first + 1]][::-1]
        keys: list[ast.Node | str] = [n.field if isinstance(n, ast.Select) else cast(ast.Index, n).index for n in chain]
        return cast("ast.Select | ast.Index", chain[0]).operand, keys

    def method_call(self, node: ast.Call) -> tuple[str, str]:
        assert node.target is not None
        if node.function in ("orValue", "hasValue") and len(node.args) == (1 if node.function == "orValue" else 0):
            chain = self.optional_chain(node.target)
            if chain is not None:
                # The Kubernetes idiom `labels[?'k'].orValue('')`: walk the maps
                # directly instead of building an optional at every step.
                base, key_nodes = chain
                current = self.expr(base)[0]
                for key in key_nodes:
                    t = self.tmp()
                    if isinstance(key, str) or (isinstance(key, ast.Literal) and type(key.value) is str):
                        literal = repr(key if isinstance(key, str) else key.value)
                        current = f"({t}.get({literal}, _ABSENT) if type({t} := {current}) is dict else _optstep({t}, {literal}))"
                    else:
                        k = self.tmp()
                        code = self.expr(key)[0]
                        current = f"({t}.get({k}, _ABSENT) if (type({k} := {code}) is str) & (type({t} := {current}) is dict) else _optstep({t}, {k}))"
                v = self.tmp()
                if node.function == "orValue":
                    if self.needs_statements(node.args[0]):
                        # The default's statements run only when the chain is absent.
                        return self.lazy_alternative(f"{v} = {current}", f"{v} is not _ABSENT", v, node.args[0], "{}"), "dyn"
                    default = self.expr(node.args[0])[0]
                    return f"({default} if ({v} := {current}) is _ABSENT else {v})", "dyn"
                return f"({current} is not _ABSENT)", "bool"
        if node.function in ("orValue", "or") and len(node.args) == 1 and node.function in self.library.methods:
            return self.optional_alternative(node)
        target, ttype = self.expr(node.target)
        args = [self.expr(a)[0] for a in node.args]
        name = node.function
        t = self.tmp()
        # Fast paths for the string tests policies use on every node.
        if name in ("startsWith", "endsWith", "contains") and len(args) == 1:
            py = {"startsWith": f"{t}.startswith({args[0]})", "endsWith": f"{t}.endswith({args[0]})", "contains": f"({args[0]} in {t})"}[name]
            fallback = self.call(node, name, [t, args[0]], method=True)
            # contains() scans its receiver: past the free size it is charged (limits.py).
            short = f" and len({t}) <= {FREE_SCAN_CHARS}" if name == "contains" else ""
            return f"({py} if type({t} := {target}) is str{short} and type({args[0]}) is str else {fallback})", "bool"
        if name == "size" and not args:
            return f"(len({t}) if type({t} := {target}) in _SIZED else _size({t}))", "int"
        if name == "matches" and len(node.args) == 1 and isinstance(node.args[0], ast.Literal) and type(node.args[0].value) is str:
            matcher = self.literal_regex(node, node.args[0].value)
            if matcher is not None:
                # The matcher charges a long string's first scan itself (memoized answers cost
                # nothing): to the evaluation's budget where there are loops, else to a budget
                # of its own, as charged_call does.
                budget = ""
                if self.has_loops:
                    self.uses_cost = True
                    budget = ", _c"
                return f"({matcher}({t}{budget}) if type({t} := {target}) is str else {self.method_ref(node, name)}({t}, {args[0]}))", "bool"
        charged = self.charged_call(name, [target] + args, method=True)
        if charged is not None:
            return charged, self.library.result_types.get(name, "dyn")
        ref = self.method_ref(node, name)
        table = self.library.methods.get(name, {})
        if len(table) == 1:
            # One receiver type (quantity's methods, most library calls): test it inline.
            (cls, impl), = table.items()
            impl_ref = self.function_ref("_impl_", f"{name}_{cls.__name__}", impl)
            cls_ref = self.function_ref("_cls_", cls.__name__, cls)
            call_args = ", ".join([t] + args)
            return f"({impl_ref}({call_args}) if type({t} := {target}) is {cls_ref} else {ref}({call_args}))", self.library.result_types.get(name, "dyn")
        return f"{ref}({', '.join([target] + args)})", self.library.result_types.get(name, "dyn")

    def optional_alternative(self, node: ast.Call) -> tuple[str, str]:
        """``opt.orValue(x)`` and ``opt.or(x)``: ``x`` is evaluated only when ``opt``
        is absent (or not an optional, for the error), as in cel-go and cel-cpp, so
        ``optional.of(1).orValue(pod.missing)`` is 1, not an error."""
        assert node.target is not None
        target, _ = self.expr(node.target)
        t = self.tmp()
        present = f"{t}.value" if node.function == "orValue" else t
        ref = self.method_ref(node, node.function)
        typ = "dyn" if node.function == "orValue" else "optional"
        if self.needs_statements(node.args[0]):
            return self.lazy_alternative(f"{t} = {target}", f"type({t}) is _Optional and {t}.present", present, node.args[0], f"{ref}({t}, {{}})"), typ
        arg, _ = self.expr(node.args[0])
        return f"({present} if (type({t} := {target}) is _Optional) and {t}.present else {ref}({t}, {arg}))", typ

    def lazy_alternative(self, setup: str, test: str, present: str, alternative: ast.Node, fallback: str) -> str:
        """Statements for ``present if test else fallback.format(alternative)``, where the
        alternative needs statements of its own: they run only in the else branch."""
        r = self.tmp("_r")
        self.emit(setup)
        with self.block():
            self.emit(f"if {test}:")
            self.emit(f"    {r} = {present}")
            self.emit("else:")
            self.indent += 1
            code, _ = self.expr(alternative)
            self.emit(f"{r} = {fallback.format(code)}")
            self.indent -= 1
        return r

    def literal_regex(self, node: ast.Call, pattern: str) -> str | None:
        """A matcher compiled now for a literal pattern; an invalid pattern is a compile error."""
        from .regex import literal_matcher
        from .runtime import make_cost_check

        try:
            matcher = literal_matcher(pattern, make_cost_check(self.text, self.cost_limit), self.cost_limit)
        except EvalError as exc:
            if self.check:
                raise self.error(exc.message, node.args[0]) from None
            return None
        name = self.tmp("_rx")
        self.namespace[name] = matcher
        return name

    def call(self, node: ast.Node, name: str, args: list[str], *, method: bool) -> str:
        """The code of a call through the library (charged to the budget where the function is)."""
        charged = self.charged_call(name, args, method=method)
        if charged is not None:
            return charged
        return f"{self.method_ref(node, name)}({', '.join(args)})"

    def charged_call(self, name: str, args: list[str], *, method: bool) -> str | None:
        """A call that spends the run-time budget, or None for a function that does not.

        In a function with comprehensions the budget is the evaluation's ``_c``; in one
        without, every call site runs at most once per evaluation, so each call gets a
        budget of its own and no list is built on the fast path."""
        if name not in self.library.budgeted and name not in self.library.costs:
            return None
        if method and name not in self.library.methods or not method and name not in self.library.functions:
            return None
        impl = self.library.charged(name, method=method)
        ref = self.function_ref("_charged_m_" if method else "_charged_f_", name, impl)
        if self.has_loops:
            self.uses_cost = True
            budget = "_c"
        else:
            budget = f"[{self.cost_limit}]"
        return f"{ref}({', '.join([budget, '_cost_exceeded', *args])})"

    def method_ref(self, node: ast.Node, name: str) -> str:
        if name not in self.library.methods:
            if self.check:
                raise self.error(f"undeclared reference to '{name}'", node)
            return f"_unknown_method({name!r})"
        ref = "_m_" + name
        if ref not in self.namespace:
            self.namespace[ref] = self.library.method(name)
        return ref

    # -- comprehensions ----------------------------------------------------
    def expr_Comprehension(self, node: ast.Comprehension) -> tuple[str, str]:
        if node.kind in ("optMap", "optFlatMap") and not self.inline_only:
            return self.optional_map(node)
        self.uses_cost = True
        rng, _ = self.expr(node.range)
        two = node.var2 is not None
        v1 = self.tmp("_v")
        v2 = self.tmp("_v") if two else None
        scope = _Scope({node.var: v1})
        if node.var2 is not None and v2 is not None:
            scope.names[node.var2] = v2
        loop_vars = f"{v1}, {v2}" if two else v1
        if self.inline_only:
            return self.inline_comprehension(node, rng, scope, loop_vars)
        it = self.tmp("_it")
        if two:
            self.emit(f"{it} = _range({rng}, True)")
        else:
            self.emit(f"{it} = {it} if type({it} := {rng}) is list else _range({it}, False)")
        self.emit(f"_c[0] -= len({it})")
        self.emit(f"if _c[0] < 0: _cost_exceeded({node.kind!r})")
        self.scopes.append(scope)
        try:
            return getattr(self, "loop_" + node.kind)(node, it, loop_vars)  # type: ignore[no-any-return]
        finally:
            self.scopes.pop()

    def inline_comprehension(self, node: ast.Comprehension, rng: str, scope: _Scope, loop_vars: str) -> tuple[str, str]:
        self.scopes.append(scope)
        try:
            pred = f"lambda {loop_vars}: {self.expr(node.predicate)[0]}" if node.predicate is not None else "None"
            transform = f"lambda {loop_vars}: {self.expr(node.transform)[0]}" if node.transform is not None else "None"
        finally:
            self.scopes.pop()
        typ = {"all": "bool", "exists": "bool", "exists_one": "bool", "transformMap": "map"}.get(node.kind, "list")
        if node.kind in ("optMap", "optFlatMap"):
            typ = "optional"
        return f"_comprehension({node.kind!r}, _c, _cost_exceeded, {rng}, {pred}, {transform})", typ

    def _predicate(self, node: ast.Comprehension) -> str:
        assert node.predicate is not None
        code, ptype = self.expr(node.predicate)
        self.expect_type(node.predicate, ptype, ("bool",), node.kind)
        return code

    def loop_all(self, node: ast.Comprehension, it: str, loop_vars: str) -> tuple[str, str]:
        return self._fold(node, it, loop_vars, decisive="False")

    def loop_exists(self, node: ast.Comprehension, it: str, loop_vars: str) -> tuple[str, str]:
        return self._fold(node, it, loop_vars, decisive="True")

    def _fold(self, node: ast.Comprehension, it: str, loop_vars: str, *, decisive: str) -> tuple[str, str]:
        other = "True" if decisive == "False" else "False"
        r, e, p = self.tmp("_r"), self.tmp("_e"), self.tmp("_p")
        self.emit(f"{r} = {other}")
        self.emit(f"{e} = None")
        with self.block():
            self.emit(f"for {loop_vars} in {it}:")
            self.indent += 1
            with self.block():
                self.emit("try:")
                self.indent += 1
                code = self._predicate(node)
                self.emit(f"{p} = {code}")
                self.indent -= 1
                self.emit("except _Reraise:")
                self.emit("    raise")
                self.emit("except Exception as _x:")
                self.emit(f"    if {e} is None: {e} = _x")
                self.emit("else:")
                self.emit(f"    if {p} is {decisive}:")
                self.emit(f"        {r} = {decisive}")
                self.emit("        break")
                self.emit(f"    if {p} is not {other} and {e} is None:")
                self.emit(f"        {e} = _nso({node.kind!r}, {p})")
            self.indent -= 1
        self.emit(f"if {r} is {other} and {e} is not None:")
        self.emit(f"    raise {e}")
        return r, "bool"

    def loop_exists_one(self, node: ast.Comprehension, it: str, loop_vars: str) -> tuple[str, str]:
        n, p = self.tmp("_n"), self.tmp("_p")
        self.emit(f"{n} = 0")
        with self.block():
            self.emit(f"for {loop_vars} in {it}:")
            self.indent += 1
            code = self._predicate(node)
            self.emit(f"{p} = {code}")
            self.emit(f"if {p} is True: {n} += 1")
            self.emit(f"elif {p} is not False: raise _nso('exists_one', {p})")
            self.indent -= 1
        return f"({n} == 1)", "bool"

    def loop_filter(self, node: ast.Comprehension, it: str, loop_vars: str) -> tuple[str, str]:
        return self._collect(node, it, loop_vars, value=loop_vars, into="list")

    def loop_map(self, node: ast.Comprehension, it: str, loop_vars: str) -> tuple[str, str]:
        return self._collect(node, it, loop_vars, value=None, into="list")

    def loop_transformList(self, node: ast.Comprehension, it: str, loop_vars: str) -> tuple[str, str]:
        return self._collect(node, it, loop_vars, value=None, into="list")

    def loop_transformMap(self, node: ast.Comprehension, it: str, loop_vars: str) -> tuple[str, str]:
        return self._collect(node, it, loop_vars, value=None, into="map")

    def _collect(self, node: ast.Comprehension, it: str, loop_vars: str, *, value: str | None, into: str) -> tuple[str, str]:
        r = self.tmp("_r")
        key = loop_vars.split(",")[0]
        filter_kind = node.kind == "filter"
        predicate = node.predicate
        simple = not any(self.needs_statements(x) for x in (predicate, node.transform) if x is not None)
        if simple and into == "list":
            out = value if value is not None else self.expr(node.transform)[0]  # type: ignore[arg-type]
            cond = ""
            if predicate is not None:
                cond = f" if _truth({self._predicate(node)}, {node.kind!r})"
            self.emit(f"{r} = [{out} for {loop_vars} in {it}{cond}]")
            return r, "list"
        self.emit(f"{r} = {'[]' if into == 'list' else '{}'}")
        with self.block():
            self.emit(f"for {loop_vars} in {it}:")
            self.indent += 1
            if predicate is not None:
                p = self.tmp("_p")
                self.emit(f"{p} = {self._predicate(node)}")
                self.emit(f"if {p} is False: continue")
                self.emit(f"if {p} is not True: raise _nso({node.kind!r}, {p})")
            out = loop_vars if filter_kind else self.expr(node.transform)[0]  # type: ignore[arg-type]
            if into == "list":
                self.emit(f"{r}.append({out})")
            else:
                self.emit(f"{r}[_mapkey({key})] = {out}")
            self.indent -= 1
        return r, "list" if into == "list" else "map"

    def optional_map(self, node: ast.Comprehension) -> tuple[str, str]:
        rng, _ = self.expr(node.range)
        o, r = self.tmp(), self.tmp("_r")
        v = self.tmp("_v")
        self.emit(f"{o} = _as_optional({rng}, {node.kind!r})")
        with self.block():
            self.emit(f"if {o}.present:")
            self.indent += 1
            self.emit(f"{v} = {o}.value")
            self.scopes.append(_Scope({node.var: v}))
            try:
                assert node.transform is not None
                code, _ = self.expr(node.transform)
            finally:
                self.scopes.pop()
            if node.kind == "optMap":
                self.emit(f"{r} = _Optional({code})")
            else:
                self.emit(f"{r} = _as_optional({code}, 'optFlatMap')")
            self.indent -= 1
            self.emit("else:")
            self.emit(f"    {r} = {o}")
        return r, "optional"


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
