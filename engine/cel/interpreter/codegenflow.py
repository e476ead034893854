"""Code generation for control flow: ``&&``, ``||``, ``_?_:_`` and the comprehension
macros (``all``, ``exists``, ``exists_one``, ``filter``, ``map``, ``transformList``,
``transformMap``, ``optMap``, ``optFlatMap``), the ``CodeGenerator`` parts that
become statement blocks (``if``, ``while``, ``for``, ``try``) where their operands
need statements.

``&&``, ``||``, ``all`` and ``exists`` share one technique: CEL lets an operand
that decides the result (false for ``&&``, a true predicate for ``exists``) win
over an error in any other operand, in either order, so each operand runs in its
own ``try`` and the first error is raised only if none decides. Comprehensions
also charge the run-time budget per item and bind their variables in a ``Scope``
that identifiers resolve through. Where Python's nesting limits are near
(``CodeGenerator.expr``), the same constructs are generated as expressions over
run-time helpers (``_and``, ``_or``, ``_comprehension``) instead.

It is a mixin rather than part of codegen.py to keep that module to the core
expressions; the generator's state and core methods it relies on are declared
on the class for the type checker and defined by ``CodeGenerator``.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from engine.cel.parser import ast


@dataclass
class Scope:
    """The variables a comprehension binds: CEL name to the name of its Python local."""

    names: dict[str, str] = field(default_factory=dict)


class FlowGenerator:
    """Mixin of ``CodeGenerator`` (codegen.py): logical operators, conditionals and comprehensions."""

    # Declared, not defined: CodeGenerator sets these, and defining the methods here would
    # shadow its own in the method resolution order.
    indent: int
    scopes: list[Scope]
    inline_only: bool
    uses_cost: bool
    accounting: bool
    per_item: dict[int, int]
    if TYPE_CHECKING:
        def expr(self, node: ast.Node) -> tuple[str, str]: ...
        def tmp(self, prefix: str = "_t") -> str: ...
        def emit(self, line: str) -> None: ...
        def needs_statements(self, node: ast.Node) -> bool: ...
        def block(self) -> AbstractContextManager[None]: ...
        def expect_type(self, node: ast.Node, actual: str, allowed: tuple[str, ...], op: str) -> None: ...

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

    # -- comprehensions ----------------------------------------------------
    def expr_Comprehension(self, node: ast.Comprehension) -> tuple[str, str]:
        if node.kind in ("optMap", "optFlatMap") and not self.inline_only:
            return self.optional_map(node)
        rng, _ = self.expr(node.range)
        two = node.var2 is not None
        v1 = self.tmp("_v")
        v2 = self.tmp("_v") if two else None
        scope = Scope({node.var: v1})
        if node.var2 is not None and v2 is not None:
            scope.names[node.var2] = v2
        loop_vars = f"{v1}, {v2}" if two else v1
        if self.inline_only:
            self.uses_cost = True
            return self.inline_comprehension(node, rng, scope, loop_vars)
        it = self.tmp("_it")
        if two:
            self.emit(f"{it} = _range({rng}, True)")
        else:
            self.emit(f"{it} = {it} if type({it} := {rng}) is list else _range({it}, False)")
        if self.accounting:
            self.uses_cost = True
            per = self.per_item.get(id(node), 1)
            self.emit(f"_c[0] -= len({it})" + (f" * {per}" if per != 1 else ""))
            self.emit(f"if _c[0] < 0: _cost_exceeded({node.kind!r})")
        self.scopes.append(scope)
        try:
            return getattr(self, "loop_" + node.kind)(node, it, loop_vars)  # type: ignore[no-any-return]
        finally:
            self.scopes.pop()

    def inline_comprehension(self, node: ast.Comprehension, rng: str, scope: Scope, loop_vars: str) -> tuple[str, str]:
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
            self.scopes.append(Scope({node.var: v}))
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
