"""Policy documents → compiled ``Policy`` objects: the CEL compile and static-check step.

Every expression is compiled with exactly the variables its kind may read
(``policy.SCOPES``) plus ``variables.<name>`` for the policy variables it may
use; the checks a policy author would otherwise meet at run time happen here:
unknown identifiers and functions, operators on the wrong types, a filter that
cannot be a bool, a score that cannot be a number, a variable used before it
is defined, and duplicate names. Every expression is also type-checked against
the Kubernetes schemas of the objects it reads (``engine.cel.checker.types``):
fields the objects do not have (KPE307) and operators or functions applied to
types they cannot take (KPE302), with each variable typed by its expression.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from engine import cel
from engine.cel.parser import ast as cel_ast
from engine.cel.checker import cost as cel_cost
from engine.cel.checker import schema as cel_schema
from engine.cel.checker import shapes as cel_shapes
from engine.cel.checker import types as cel_types
from engine.cel.checker.typemodel import Type as CelType
from engine.cel.parser.parser import parse as parse_cel
from engine.policy.documents import Document, Path, format_path
from engine.errors import Location, PolicyError
from engine.policy.counts import call_problems
from engine.policy import lints
from engine.policy.model import (
    COUNTS,
    NODE_SCOPE,
    NODE_VARIABLE_KINDS,
    SCOPES,
    Admission,
    Expression,
    FilterRule,
    Match,
    Policy,
    Preemption,
    ScoreRule,
    Variable,
)
from engine.policy.selectors import parse_selector

# Result types each kind of expression must be able to produce ("dyn" always passes).
RESULT_TYPES = {
    "match": ("bool",),
    "filter": ("bool",),
    "admission": ("bool",),
    "victim": ("bool",),
    "preemption-node": ("bool",),
    "score": ("int", "uint", "double"),
    "message": ("string",),
    "variable": None,
}
_DESCRIBE = {"bool": "a bool", "int": "a number", "string": "a string"}

DEFAULT_COST_LIMIT = 1_000_000
DEFAULT_ADMISSION_COST_LIMIT = 1_000_000_000


@dataclass(frozen=True)
class CostLimits:
    """The most estimated worst-case cost (engine/cel/checker/cost.py) one evaluation of an
    expression may have; also its run-time budget.

    ``per_call``: every expression but admission's. 1,000,000 is Kubernetes'
    PerCallLimit for admission policies' CEL. ``admission``: admission expressions
    (and their messages), which may iterate every pod in the cluster (150,000 at
    Kubernetes' documented maximum): 1,000 times more, which admits a few passes over
    the cluster's pods with a loop over each pod's containers inside (a pass that sums
    the containers' requests is about 130,000,000 in Kubernetes' units) and refuses one
    loop over pods or nodes inside another (billions)."""

    per_call: int = DEFAULT_COST_LIMIT
    admission: int = DEFAULT_ADMISSION_COST_LIMIT

    def for_scope(self, scope_kind: str) -> int:
        return self.admission if scope_kind == "admission" else self.per_call

    @staticmethod
    def flag(scope_kind: str) -> str:
        return "--cel-admission-cost-limit" if scope_kind == "admission" else "--cel-cost-limit"


@dataclass(frozen=True)
class CompileDeadline:
    """When a compile must give up: the policy webhook has the API server's ``timeoutSeconds``
    to answer, and a 1.5 MB object of long expressions takes far longer to compile (150 filters
    of 10,000 characters: 37 s). Checked before each expression; ``clock`` is injected for tests."""

    at: float
    budget: float  # seconds, for the message
    clock: Callable[[], float] = field(default=time.monotonic, compare=False)

    @classmethod
    def after(cls, seconds: float, *, clock: Callable[[], float] = time.monotonic) -> CompileDeadline:
        return cls(clock() + seconds, seconds, clock)

    def passed(self) -> bool:
        return self.clock() > self.at


class CompileOverdue(Exception):
    """A compile ran past its ``CompileDeadline``; nothing it compiled is used."""

    def __init__(self, deadline: CompileDeadline) -> None:
        self.deadline = deadline
        super().__init__(f"checking the expressions took longer than {deadline.budget:g} s")


@dataclass(frozen=True)
class _VariableCost:
    own: int  # one evaluation of the variable's own expression
    reads: frozenset[str]  # the pod-scoped variables it reads, directly or through others
    estimate: cel_cost.Estimate


class _PolicyCompiler:
    def __init__(self, doc: Document, limits: CostLimits | None = None, *, deadline: CompileDeadline | None = None) -> None:
        self.doc = doc
        self.limits = limits or CostLimits()
        self.deadline = deadline
        self.costs: dict[str, _VariableCost] = {}
        self.data: dict[str, Any] = doc.data
        self.name = str(self.data["metadata"]["name"])
        self.spec: dict[str, Any] = self.data["spec"]
        self.errors: list[PolicyError] = []
        self.variables: dict[str, Variable] = {}
        self.broken: set[str] = set()
        params = self.spec.get("params") if isinstance(self.spec, dict) else None
        self.roots = cel_shapes.kubernetes_roots(params)
        # The types of what expressions read: the Kubernetes schemas, params from their values.
        self.types = cel_schema.kubernetes_types(params)
        self.variable_types: dict[str, CelType] = {}
        self.warnings: list[PolicyError] = []
        # Only where an evaluation error blocks pods are unguarded reads worth a warning (lints.py).
        self.linted = isinstance(self.spec, dict) and self.spec.get("mode", "Enforce") == "Enforce" and self.spec.get("failurePolicy", "Fail") == "Fail"
        self.guards: frozenset[lints.Path] = frozenset()  # what the match ensures the rules can read

    def error(self, code: str, path: Path, message: str, *, snippet: str = "", location: Location | None = None, key: bool = False) -> None:
        self.errors.append(
            PolicyError(
                code,
                message,
                location or self.doc.location(path, key=key),
                policy=self.name,
                path=format_path(path),
                snippet=snippet,
            )
        )

    # -- expressions -------------------------------------------------------
    def expression(self, path: Path, kind: str, *, scope_of: str | None = None) -> Expression | None:
        """Compile the expression at ``path``; ``kind`` decides its result type,
        ``scope_of`` (default: ``kind``) what it may read."""
        if self.deadline is not None and self.deadline.passed():
            raise CompileOverdue(self.deadline)
        try:
            return self._expression(path, kind, scope_of=scope_of)
        except RecursionError:
            # The passes over the syntax tree (variables, cost, the equivalence reads) recurse too.
            self.error("KPE300", path, cel.TOO_DEEP)
            return None

    def _defined_later(self, name: str) -> int | None:
        """The index in ``spec.variables`` of ``name``, which is not defined before the current point."""
        entries = self.spec.get("variables") if isinstance(self.spec, dict) else None
        for i, entry in enumerate(entries if isinstance(entries, list) else []):
            if isinstance(entry, dict) and entry.get("name") == name:
                return i
        return None

    def _expression(self, path: Path, kind: str, *, scope_of: str | None = None) -> Expression | None:
        text = self._get(path)
        scope_kind = scope_of or kind
        allow_node_vars = scope_kind in NODE_VARIABLE_KINDS or scope_kind == "variable"
        try:
            root = parse_cel(text)
        except cel.CompileError as exc:
            self._cel_error("KPE300", path, text, exc)
            return None
        counted = call_problems(root) if "counts" in SCOPES[scope_kind] else []
        for offset, message in counted:
            self._cel_error("KPE308", path, text, cel.CompileError(message, text=text, offset=offset))
        if counted:
            return None
        used = _variable_references(root)
        known = set(self.variables)
        if any(name in self.broken for name in used):
            return None  # the variable's own error is reported; repeating it at every use is noise
        if used and scope_kind == "match":
            # match decides whether the policy applies before any variable is evaluated.
            self.error("KPE305", path, f"'variables' is not available in match expression (it can read: {_readable('match')})")
            return None
        unknown = [name for name in used if name not in known]
        for name in unknown:
            defined = ", ".join(self.variables) or "none"
            later = self._defined_later(name)
            if later is not None and tuple(path[:3]) == ("spec", "variables", later):
                self.error("KPE304", path, f"variable 'variables.{name}' reads itself")
                continue
            if later is not None:
                # It exists, so "unknown" would be false: what is wrong is where it is defined.
                self.error(
                    "KPE304",
                    path,
                    f"variable 'variables.{name}' is defined after this point (at spec.variables[{later}]); an expression "
                    f"reads only the variables defined before it (defined before this point: {defined})",
                )
                continue
            close = cel_types.closest(name, known)
            hint = f"; did you mean 'variables.{close}'?" if close else ""
            self.error("KPE304", path, f"unknown variable 'variables.{name}'{hint} (defined before this point: {defined})")
        if unknown:
            return None
        for name in used:
            if self.variables[name].node_scoped and not allow_node_vars:
                self.error(
                    "KPE305",
                    path,
                    f"variable '{name}' reads node or nodeInfo, which {_KIND_TEXT.get(kind, kind)} expression cannot see",
                )
                return None
        scope = list(SCOPES[scope_kind])
        # Node-scoped variables are declared only where they are read: they get inlined below.
        node_vars = [f"variables.{v.name}" for v in self.variables.values() if v.node_scoped and allow_node_vars and v.name in used]
        pod_vars = [f"variables.{v.name}" for v in self.variables.values() if not v.node_scoped]
        # Parameter order puts the per-node names first, then what is fixed per pod.
        per_node = [n for n in scope if n in NODE_SCOPE or n in ("victim", "victims")] + node_vars
        per_pod = [n for n in scope if n not in per_node] + pod_vars
        params = per_node + per_pod
        limit = self.limits.for_scope(scope_kind)
        checked = cel_types.check(root, self.types, self.variable_types, scope=params)
        try:
            program = cel.compile(text, variables=params, cost_limit=limit, root=root)
        except cel.CompileError as exc:
            # The code generator stops at the first error; the typed check finds every one
            # (every undeclared name and function, with the closest known one).
            undeclared = "undeclared reference" in exc.message and any(p.kind == cel_types.UNDECLARED for p in checked.problems)
            if not undeclared and not any(p.offset == exc.offset or p.message == exc.message for p in checked.problems):
                code = "KPE301" if "undeclared reference" in exc.message else "KPE302"
                self._cel_error(code, path, text, exc, scope=scope_kind)
            self._type_errors(path, text, checked.problems, scope_kind)
            return None
        self._type_errors(path, text, checked.problems, scope_kind)
        if checked.problems:
            return None
        if kind == "variable":
            self.variable_types[self.spec["variables"][path[2]]["name"]] = checked.type
        wanted = RESULT_TYPES.get(kind)
        actual = program.result_type
        if actual == "dyn" and checked.type.name not in ("dyn", "optional", "null_type"):
            actual = str(checked.type)  # what the schemas tell of a field, a function's result...
        if wanted and actual not in ("dyn", "optional") and actual not in wanted:
            need = " or ".join(wanted) if kind != "score" else "an int or double"
            self.error("KPE303", path, f"{_KIND_TEXT.get(kind, kind)} expression must give {need}, but it gives {actual}")
            return None
        inlined = [name for name in used if self.variables[name].node_scoped]
        if inlined:
            # Node-scoped variables are inlined into the expression, so a rule needs
            # only node and nodeInfo per node (the fast path) and reads a variable
            # lazily, where CEL would evaluate it.
            params = [p for p in params if not (p.startswith("variables.") and self.variables[p[10:]].node_scoped)]
            program = cel.Program(text, variables=params, library=cel.default_library(), check=False, root=self._inline(root), cost_limit=limit)
        if not self._within_cost(path, text, self._inline(root), scope_kind, kind):
            return None
        if self.linted and kind in lints.LINTED_KINDS:
            for found in lints.unguarded_reads(root, self.types, self.variable_types, kind=kind, known=self.guards):
                at = cel.CompileError(found.message, text=text, offset=found.offset)
                where = _location_in_scalar(self.doc, path, at.line, at.column)
                self.warnings.append(PolicyError("KPE600", found.message, where, policy=self.name, path=format_path(path), snippet=at.snippet, severity="warning"))
        return Expression(
            text=text,
            program=program,
            path=format_path(path),
            location=self.doc.location(path),
            variables=tuple(used),
            parameters=tuple(params),
            root=self._inline(root),
        )

    def _type_errors(self, path: Path, text: str, problems: list[cel_types.Problem], scope_kind: str) -> None:
        codes = {cel_types.UNKNOWN_FIELD: "KPE307", cel_types.UNDECLARED: "KPE301"}
        for problem in problems:
            code = codes.get(problem.kind, "KPE302")
            error = cel.CompileError(problem.message, text=text, offset=problem.offset)
            self._cel_error(code, path, text, error, scope=scope_kind if code == "KPE301" else None)

    def _within_cost(self, path: Path, text: str, root: cel_ast.Node, scope_kind: str, kind: str) -> bool:
        """Estimate the worst-case cost of one evaluation (pod-scoped variables it reads
        are counted once each: they are evaluated once per request); KPE306 over the limit."""
        estimate, read = cel_cost.estimate(root, self.roots, {n: c.estimate for n, c in self.costs.items()})
        reads: set[str] = set()
        for name in read:
            if name in self.costs:
                reads |= {name} | self.costs[name].reads
        total = estimate.cost + sum(self.costs[n].own for n in reads)
        reason = estimate.reason
        heaviest = max(reads, key=lambda n: self.costs[n].own, default=None)
        if heaviest is not None and self.costs[heaviest].own > estimate.cost:
            inner = self.costs[heaviest].estimate.reason
            reason = f"variables.{heaviest}" + (f": {inner}" if inner else "")
        if kind == "variable":
            name = self.spec["variables"][path[2]]["name"]
            self.costs[name] = _VariableCost(estimate.cost, frozenset(reads), cel_cost.Estimate(total, estimate.shape, reason))
        limit = self.limits.for_scope(scope_kind)
        if total <= limit:
            return True
        because = f" ({reason})" if reason else ""
        self.error(
            "KPE306",
            path,
            f"estimated worst-case cost {total:,} exceeds the limit {limit:,}{because}; "
            f"bound the work (iterate smaller lists, filter before nesting loops, give findAll() a limit) "
            f"or raise {self.limits.flag(scope_kind)}",
            snippet=_snippet(text),
        )
        return False

    def _inline(self, root: cel_ast.Node) -> cel_ast.Node:
        if not any(v.node_scoped for v in self.variables.values()):
            return root  # nothing to inline: no copy of the tree (a 10,000-character expression's is 10,000 nodes)

        def replace(node: cel_ast.Node) -> cel_ast.Node | None:
            if isinstance(node, cel_ast.Select) and isinstance(node.operand, cel_ast.Ident) and node.operand.name == "variables":
                variable = self.variables.get(node.field)
                if variable is not None and variable.node_scoped:
                    inlined: cel_ast.Node = variable.expression.root
                    return inlined
            return None

        return cel_ast.substitute(root, replace)

    def _get(self, path: Path) -> Any:
        value: Any = self.data
        for part in path:
            value = value[part]
        return value

    def _cel_error(self, code: str, path: Path, text: str, exc: cel.CompileError, *, scope: str | None = None) -> None:
        location = _location_in_scalar(self.doc, path, exc.line, exc.column)
        message = exc.message
        if message == "reserved identifier 'namespace'":
            message += " (the pod's Namespace object is namespaceObject)"
        if code == "KPE301" and scope is not None and not message.startswith("undeclared reference to function"):
            name = message.split("'")[1] if "'" in message else ""
            readable = _readable(scope)
            if any(name in names for names in SCOPES.values()) or name == "variables":
                code = "KPE305"
                message = f"'{name}' is not available in {_KIND_TEXT.get(scope, scope)} expression (it can read: {readable})"
            else:
                message += f" (this expression can read: {readable})"
        self.error(code, path, message, snippet=exc.snippet, location=location)

    # -- sections ----------------------------------------------------------
    def compile(self) -> Policy | None:
        spec = self.spec
        self._check_unique(("spec", "variables"), "variable")
        self._check_unique(("spec", "filters"), "filter")
        self._check_unique(("spec", "scores"), "score")
        match = self._match()
        for i, raw in enumerate(spec.get("variables") or []):
            expr = self.expression(("spec", "variables", i, "expression"), "variable")
            if expr is None:
                self.broken.add(raw["name"])
                continue
            reads_node = bool(expr.program.free_variables & {*NODE_SCOPE, *COUNTS}) or any(
                self.variables[v].node_scoped for v in expr.variables
            )
            reads_info = "nodeInfo" in expr.program.free_variables or any(self.variables[v].reads_node_info for v in expr.variables)
            self.variables[raw["name"]] = Variable(raw["name"], expr, reads_node, reads_info)
        filters = []
        for i, raw in enumerate(spec.get("filters") or []):
            expr = self.expression(("spec", "filters", i, "expression"), "filter")
            msg_expr = None
            if "messageExpression" in raw:
                msg_expr = self.expression(("spec", "filters", i, "messageExpression"), "message", scope_of="filter")
            if expr is not None:
                message = raw.get("message") or f"rejected by {raw['name']}"
                declared = bool(raw.get("unresolvable", False))
                reads_info = "nodeInfo" in expr.program.free_variables or any(
                    self.variables[v].reads_node_info for v in expr.variables if v in self.variables
                )
                # Evicting pods changes counts across nodes too (victims leave their zone's count).
                resolvable = reads_info or "counts" in expr.program.free_variables
                filters.append(FilterRule(raw["name"], expr, message, msg_expr, declared or not resolvable, declared, reads_info))
        scores = []
        for i, raw in enumerate(spec.get("scores") or []):
            expr = self.expression(("spec", "scores", i, "expression"), "score")
            if expr is not None:
                scores.append(ScoreRule(raw["name"], expr, int(raw.get("weight", 1))))
        admission = None
        if "admission" in spec:
            raw = spec["admission"]
            expr = self.expression(("spec", "admission", "expression"), "admission")
            msg_expr = None
            if "messageExpression" in raw:
                msg_expr = self.expression(("spec", "admission", "messageExpression"), "message", scope_of="admission")
            if expr is not None:
                gate = raw.get("gate") or f"kpe.dev/{self.name}"
                message = raw.get("message") or f"waiting for {self.name}"
                admission = Admission(gate, expr, message, msg_expr)
        preemption = None
        if "preemption" in spec:
            raw = spec["preemption"]
            victim = self.expression(("spec", "preemption", "victim"), "victim") if "victim" in raw else None
            node = self.expression(("spec", "preemption", "node"), "preemption-node") if "node" in raw else None
            preemption = Preemption(victim, node)
        if self.errors:
            return None
        return Policy(
            name=self.name,
            file=self.doc.file,
            enforce=spec.get("mode", "Enforce") == "Enforce",
            fail_closed=spec.get("failurePolicy", "Fail") == "Fail",
            match=match,
            params=spec.get("params") or {},
            variables=tuple(self.variables.values()),
            filters=tuple(filters),
            scores=tuple(scores),
            admission=admission,
            preemption=preemption,
            source=self.data,
            warnings=tuple(self.warnings),
        )

    def _match(self) -> Match:
        raw = self.spec.get("match") or {}
        selector = None
        if "podSelector" in raw:
            selector, problems = parse_selector(raw["podSelector"])
            for sub, message in problems:
                self.error("KPE200", ("spec", "match", "podSelector", *sub), message)
            self.guards = lints.selector_guards(r.key for r in selector.requirements if r.operator in ("In", "Exists"))
        expr = self.expression(("spec", "match", "expression"), "match") if "expression" in raw else None
        if expr is not None:
            self.guards |= lints.guards_of(expr.root)
        return Match(
            namespaces=frozenset(raw["namespaces"]) if "namespaces" in raw else None,
            selector=selector,
            resources=frozenset(raw["resources"]) if "resources" in raw else None,
            expression=expr,
        )

    def _check_unique(self, path: Path, what: str) -> None:
        seen: dict[str, int] = {}
        for i, item in enumerate(self._get(path) if path[-1] in self.spec else []):
            name = item["name"]
            if name in seen:
                self.error("KPE401", (*path, i, "name"), f"duplicate {what} name {name!r} (first at {format_path((*path, seen[name]))})")
            else:
                seen[name] = i


_KIND_TEXT = {
    "match": "match",
    "filter": "a filter",
    "score": "a score",
    "admission": "an admission",
    "victim": "a preemption victim",
    "preemption-node": "a preemption node",
    "message": "a message",
    "variable": "a variable",
}


def _readable(scope: str) -> str:
    """What an expression of this kind can read, as its errors list it (match runs
    before the policy's variables, so it cannot read them)."""
    return ", ".join(SCOPES[scope] + (() if scope == "match" else ("variables",)))


def compile_policy(doc: Document, limits: CostLimits | None = None, *, deadline: CompileDeadline | None = None) -> tuple[Policy | None, list[PolicyError]]:
    """Compile one schema-valid policy document; ``limits`` bound each expression's estimated cost;
    past ``deadline``, ``CompileOverdue``."""
    compiler = _PolicyCompiler(doc, limits, deadline=deadline)
    policy = compiler.compile()
    return policy, compiler.errors


def _snippet(text: str) -> str:
    """The expression, as an error shows it: its first lines, long ones cut."""
    lines = [line if len(line) <= 120 else line[:117] + "..." for line in text.strip().split("\n")]
    return "\n".join(lines[:6] + (["..."] if len(lines) > 6 else []))


def _variable_references(root: cel_ast.Node) -> list[str]:
    """Names read as ``variables.<name>``, in first-use order."""
    found: dict[str, None] = {}

    def visit(node: cel_ast.Node) -> None:
        if isinstance(node, (cel_ast.Select, cel_ast.Has)) and isinstance(node.operand, cel_ast.Ident) and node.operand.name == "variables":
            found.setdefault(node.field, None)
        for child in cel_ast.children(node):
            visit(child)

    visit(root)
    return list(found)


def _location_in_scalar(doc: Document, path: Path, line: int, column: int) -> Location:
    """Where line/column of a CEL expression falls in the YAML file."""
    pos = doc.positions.get(path)
    if pos is None:
        return doc.location(path)
    if pos.style in ("|", ">"):
        # Block content starts on the line after the indicator; YAML strips the
        # indentation of its first line from every line.
        indent = _indent_of(doc, pos.line + 1)
        return Location(doc.file, pos.line + line, indent + column)
    offset = 1 if pos.style in ("'", '"') else 0
    if line == 1:
        return Location(doc.file, pos.line, pos.column + offset + column - 1)
    return Location(doc.file, pos.line + line - 1, _indent_of(doc, pos.line + line - 1) + column)


def _indent_of(doc: Document, line: int) -> int:
    if 0 < line <= len(doc.lines):
        text = doc.lines[line - 1]
        return len(text) - len(text.lstrip(" "))
    return 0
