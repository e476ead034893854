"""``compile()`` and ``Program``: one CEL expression compiled once, evaluated many times.

A program is built in three steps: parse → pick the sub-trees that can be
computed ahead (constants now; pod/params-only parts at ``bind()``) → generate
and ``exec`` Python source. ``bind(pod=..., params=...)`` returns a function of
the remaining variables in which everything that depends only on the bound
ones was computed once.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from engine.cel.checker import kubecost
from engine.cel.parser import ast
from engine.cel.interpreter.codegen import TYPE_IDENTS, CodeGenerator, python_name
from engine.cel.errors import EvalError
from engine.cel.library import Library
from engine.cel.parser.parser import parse
from engine.cel.interpreter.runtime import Unbound, make_cost_check, namespace

DEFAULT_COST_LIMIT = 1_000_000

# CEL that indexes a literal with the wrong type (`[1, 2]['a']`, an error at run
# time) becomes Python that compile() warns about on stderr; the warning is noise.
warnings.filterwarnings("ignore", category=SyntaxWarning, module="<cel")

_FAILED = object()


class Program:
    """A compiled CEL expression.

    ``evaluate(activation)`` returns the value or raises ``EvalError``;
    ``bind(**fixed)`` precomputes what depends only on ``fixed``.
    """

    def __init__(
        self,
        text: str,
        *,
        variables: Iterable[str],
        library: Library,
        check: bool = True,
        cost_limit: int = DEFAULT_COST_LIMIT,
        root: ast.Node | None = None,
    ) -> None:
        self.text = text
        self.variables: tuple[str, ...] = tuple(dict.fromkeys(variables))
        self._missing = [(name, Unbound(name)) for name in self.variables]
        self.check = check
        self.cost_limit = cost_limit
        self._library = library
        self.root = root if root is not None else parse(text)
        # The namespace of a qualified function (`kube` in `kube.podRequests(pod)`) reads as an
        # identifier but is none: left out, unless a variable of that name is declared.
        self._namespaces = library.namespaces - set(self.variables)
        self.free_variables = frozenset(
            v for v in ast.free_variables(self.root) if v.lstrip(".") not in TYPE_IDENTS and v.lstrip(".") not in self._namespaces
        )
        self._variants: dict[tuple[frozenset[str], frozenset[int]], Callable[..., Any]] = {}
        self._preludes: dict[frozenset[str], tuple[list[ast.Node], Callable[..., list[Any]]]] = {}
        self._lock = threading.Lock()
        # Only an expression that could exceed its limit on objects the API server admits
        # keeps a run-time budget; any other runs without counting (docs/cel-functions.md).
        self.accounting = kubecost.request_bound(self.root, namespaces=library.namespaces) > cost_limit
        # Checks everything once, with nothing hoisted, so compile errors surface here.
        generated = CodeGenerator(text, library=library, variables=list(self.variables), check=check, accounting=self.accounting).function(
            self.root, name="_eval", params=self._params(self.variables), cost_limit=cost_limit
        )
        self.result_type = generated.result_type
        self._evaluate = self._bound_function(frozenset(), {})

    # -- public API --------------------------------------------------------
    def evaluate(self, activation: Mapping[str, object] | None = None) -> object:
        act = activation or {}
        return self._evaluate(*[act.get(name, missing) for name, missing in self._missing])

    def bind(self, **fixed: object) -> Callable[..., object]:
        """A function of the other variables (by keyword, or positionally in
        declaration order) with every sub-expression over ``fixed`` computed now."""
        return self._bound_function(frozenset(fixed), fixed)

    @property
    def source(self) -> str:
        """The generated Python source of the unbound program (for debugging and tests)."""
        return self._source

    # -- machinery -----------------------------------------------------------
    def _params(self, names: Iterable[str]) -> list[str]:
        index = {name: i for i, name in enumerate(self.variables)}
        return [f"{python_name(n, index[n])}=_UNBOUND" for n in names]

    def _bound_function(self, bound: frozenset[str], fixed: Mapping[str, object]) -> Callable[..., Any]:
        candidates, prelude = self._prelude(bound)
        values = prelude(*[fixed[n] for n in self._ordered(bound)])
        failed = frozenset(i for i, v in enumerate(values) if v is _FAILED)
        factory = self._variant(bound, failed, candidates)
        bound_fn: Callable[..., Any] = factory(*[fixed[n] for n in self._ordered(bound)], *[v for v in values if v is not _FAILED])
        return bound_fn

    def _ordered(self, names: frozenset[str]) -> list[str]:
        return [n for n in self.variables if n in names]

    def _prelude(self, bound: frozenset[str]) -> tuple[list[ast.Node], Callable[..., list[Any]]]:
        cached = self._preludes.get(bound)
        if cached is not None:
            return cached
        candidates = hoisting_candidates(self.root, bound, self.variables, namespaces=self._namespaces)
        ns = self._namespace()
        lines = [f"def _prelude({', '.join(self._params(self._ordered(bound)))}):", "    _out = []"]
        for i, node in enumerate(candidates):
            gen = CodeGenerator(self.text, library=self._library, variables=list(self.variables), check=False, accounting=self.accounting)
            fn = gen.function(node, name=f"_cand{i}", params=self._params(self._ordered(bound)), cost_limit=self.cost_limit)
            # Each candidate has its own generator, whose constants (_k1, _rx2...) are
            # numbered from 1 again: it gets its own namespace, so no candidate's
            # constant replaces another's.
            cand_ns = self._namespace()
            cand_ns.update(fn.namespace)
            exec(compile(fn.source, f"<cel prelude: {_label(self.text)}>", "exec"), cand_ns)  # noqa: S102 - see below
            ns[f"_cand{i}"] = cand_ns[f"_cand{i}"]
            args = ", ".join(python_name(n, self.variables.index(n)) for n in self._ordered(bound))
            lines.append(f"    try: _out.append(_cand{i}({args}))")
            lines.append("    except (EvalError, RecursionError): _out.append(_FAILED)")
        lines.append("    return _out")
        exec(compile("\n".join(lines), f"<cel prelude: {_label(self.text)}>", "exec"), ns)  # noqa: S102 - source is generated, policy text only as repr() literals
        result = (candidates, ns["_prelude"])
        with self._lock:
            self._preludes[bound] = result
        return result

    def _variant(self, bound: frozenset[str], failed: frozenset[int], candidates: list[ast.Node]) -> Callable[..., Any]:
        key = (bound, failed)
        cached = self._variants.get(key)
        if cached is not None:
            return cached
        hoisted = {id(node): f"_h{i}" for i, node in enumerate(candidates) if i not in failed}
        gen = CodeGenerator(self.text, library=self._library, variables=list(self.variables), check=False, hoisted=hoisted, accounting=self.accounting)
        remaining = [n for n in self.variables if n not in bound]
        fn = gen.function(self.root, name="_eval", params=self._params(remaining), cost_limit=self.cost_limit)
        outer = [python_name(n, self.variables.index(n)) for n in self._ordered(bound)]
        outer += [f"_h{i}" for i in range(len(candidates)) if i not in failed]
        source = f"def _factory({', '.join(outer)}):\n" + _indent(fn.source) + "\n    return _eval\n"
        ns = self._namespace()
        ns.update(fn.namespace)
        exec(compile(source, f"<cel: {_label(self.text)}>", "exec"), ns)  # noqa: S102 - see above
        factory: Callable[..., Any] = ns["_factory"]
        with self._lock:
            self._variants[key] = factory
        if not bound:
            self._source = source
        return factory

    def _namespace(self) -> dict[str, Any]:
        ns = namespace()
        ns["_cost_exceeded"] = make_cost_check(self.text, self.cost_limit)
        ns["EvalError"] = EvalError
        ns["_FAILED"] = _FAILED
        return ns


def _label(text: str) -> str:
    return text[:60].encode("unicode_escape").decode("ascii")


def _indent(source: str) -> str:
    return "\n".join("    " + line if line else line for line in source.split("\n"))


def hoisting_candidates(
    root: ast.Node, bound: frozenset[str], declared: Iterable[str], *, namespaces: frozenset[str] = frozenset()
) -> list[ast.Node]:
    """Maximal sub-trees that read only ``bound`` variables (or none) and are worth computing ahead.
    ``namespaces`` are the qualifiers of library functions (``kube``, ``strings``), which a
    sub-tree may name without reading anything."""
    declared_set = set(declared)
    out: list[ast.Node] = []

    def fixed(node: ast.Node, scope: frozenset[str]) -> bool:
        free = ast.free_variables(node)
        if free & scope:
            return False
        names = {n.lstrip(".") for n in free}
        return all(n in bound or ((n in TYPE_IDENTS or n in namespaces) and n not in declared_set) for n in names)

    def visit(node: ast.Node, scope: frozenset[str]) -> None:
        if isinstance(node, (ast.Literal, ast.Ident)):
            return
        if fixed(node, scope) and not _is_type_name(node, declared_set):
            out.append(node)
            return
        if isinstance(node, ast.Comprehension):
            visit(node.range, scope)
            inner = scope | {node.var} | ({node.var2} if node.var2 else set())
            for sub in (node.predicate, node.transform):
                if sub is not None:
                    visit(sub, inner)
            return
        for child in ast.children(node):
            visit(child, scope)

    visit(root, frozenset())
    return out


def _is_type_name(node: ast.Node, declared: set[str]) -> bool:
    parts = []
    while isinstance(node, ast.Select) and not node.optional:
        parts.append(node.field)
        node = node.operand
    return isinstance(node, ast.Ident) and ".".join([node.name, *reversed(parts)]) in TYPE_IDENTS
