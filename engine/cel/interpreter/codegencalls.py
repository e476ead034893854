"""Code generation for calls: the ``expr_Call`` part of ``CodeGenerator``.

A call is compiled to the library function it names, looked up now rather than
at run time: namespaced global functions (``strings.quote``), receiver-style
methods with inline fast paths for the string tests policies run on every node
(``startsWith``, ``contains``, ``size``, ``matches`` with a literal pattern,
compiled once here), the functions that spend the run-time budget (``charged_call``),
and the optional idioms whose argument must only be evaluated when needed
(``orValue``, ``or``, ``hasValue`` over a ``.?`` / ``[?]`` chain).

It is a mixin rather than part of codegen.py to keep that module to the core
expressions; the generator's state and core methods it relies on are declared
on the class for the type checker and defined by ``CodeGenerator``.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, cast

from engine.cel.errors import CompileError, EvalError
from engine.cel.library import Library
from engine.cel.limits import FREE_SCAN_CHARS
from engine.cel.parser import ast


class CallGenerator:
    """Mixin of ``CodeGenerator`` (codegen.py): global functions, methods and optional alternatives."""

    # Declared, not defined: CodeGenerator sets these, and defining the methods here would
    # shadow its own in the method resolution order.
    text: str
    library: Library
    check: bool
    namespace: dict[str, Any]
    indent: int
    has_loops: bool
    uses_cost: bool
    accounting: bool
    cost_limit: int
    if TYPE_CHECKING:
        def expr(self, node: ast.Node) -> tuple[str, str]: ...
        def tmp(self, prefix: str = "_t") -> str: ...
        def emit(self, line: str) -> None: ...
        def error(self, message: str, node: ast.Node) -> CompileError: ...
        def needs_statements(self, node: ast.Node) -> bool: ...
        def block(self) -> AbstractContextManager[None]: ...
        def resolve(self, name: str) -> str | None: ...

    def expr_Call(self, node: ast.Call) -> tuple[str, str]:
        if node.target is not None:
            qualified = ast.dotted_name(node.target)
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
                if self.accounting:
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
        from engine.cel.ext.regex import literal_matcher
        from engine.cel.interpreter.runtime import make_cost_check

        try:
            matcher = literal_matcher(pattern, make_cost_check(self.text, self.cost_limit), self.cost_limit) if self.accounting else literal_matcher(pattern)
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
        """A call that spends the evaluation's budget ``_c``, or None for a function that
        does not, or in an expression that keeps no budget (``accounting``)."""
        if not self.accounting or name not in self.library.budgeted and name not in self.library.costs:
            return None
        if method and name not in self.library.methods or not method and name not in self.library.functions:
            return None
        impl = self.library.charged(name, method=method)
        ref = self.function_ref("_charged_m_" if method else "_charged_f_", name, impl)
        self.uses_cost = True
        return f"{ref}({', '.join(['_c', '_cost_exceeded', *args])})"

    def method_ref(self, node: ast.Node, name: str) -> str:
        if name not in self.library.methods:
            if self.check:
                raise self.error(f"undeclared reference to '{name}'", node)
            return f"_unknown_method({name!r})"
        ref = "_m_" + name
        if ref not in self.namespace:
            self.namespace[ref] = self.library.method(name)
        return ref
