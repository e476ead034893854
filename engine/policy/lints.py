"""Lints: reads that fail on ordinary objects, in rules whose failure blocks pods.

A CEL read of a map key the map lacks (``pod.metadata.labels.app`` on a pod without the
label) or of a field the object lacks (``node.spec.taints`` on an untainted node) is an
evaluation error, not ``false``. In an Enforce policy under failurePolicy Fail that error
rejects the node, or applies the policy when it is the match: a rule written for the pods
that have the label then keeps every other pod off every node, and nothing says so before
it is served. These lints find such reads when the policy is compiled (KPE600, a warning:
the rule may be right for the pods it is meant for), in match, variables, filters and
scores, and name the guarded form.

A read is guarded when the expression around it cannot reach it unless the field is there:
``has()`` or ``'key' in map`` on the other side of ``&&`` (CEL's ``&&`` and ``||`` absorb
an error whichever side it is on, so the guard may come after the read), the negated test
on the other side of ``||``, the condition of ``? :``, and the policy's match
(``podSelector`` keys that must exist, the match expression's tests). Optional reads
(``.?labels``, ``[?'app']``) never fail. What every object has is not linted: fields the
schema requires or defaults, and those the API server or the kubelet always sets
(``engine.cel.checker.schema``), plus the labels every node and namespace carries
(``ALWAYS_THERE``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from engine.cel.checker.typemodel import ObjectType, Type
from engine.cel.parser import ast

# A read's path from a root variable: field names and constant keys, or the AST of a computed key.
Part = str | ast.Node
Path = tuple[Part, ...]

_NODE_LABELS = ("kubernetes.io/hostname", "kubernetes.io/os", "kubernetes.io/arch", "beta.kubernetes.io/os", "beta.kubernetes.io/arch")
_NODE_RESOURCES = ("cpu", "memory", "pods", "ephemeral-storage")
# Keys every object of the root's kind has: the kubelet labels every node with its name, OS and
# architecture and reports these four resources; the API server labels every namespace with its name.
ALWAYS_THERE: frozenset[Path] = frozenset(
    [("node", "metadata", "labels"), ("namespaceObject", "metadata", "labels"), ("namespaceObject", "metadata", "labels", "kubernetes.io/metadata.name")]
    + [("node", "metadata", "labels", key) for key in _NODE_LABELS]
    + [("node", "status", kind, key) for kind in ("allocatable", "capacity") for key in _NODE_RESOURCES]
)

# What an error of each kind of expression does under failurePolicy Fail.
_EFFECT = {
    "match": "the policy applies to that pod (a match that fails counts as a match)",
    "filter": "the node is rejected",
    "score": "the node scores 0",
    "variable": "every rule that reads the variable fails",
}
_OWNER = {"pod": "a pod", "node": "a node", "namespaceObject": "a namespace", "nodeInfo": "a node", "victim": "a pod"}
_ZERO = {"string": "''", "int": "0", "uint": "0u", "double": "0.0", "bool": "false", "list": "[]", "map": "{}"}

LINTED_KINDS = frozenset(_EFFECT)


@dataclass(frozen=True)
class Unguarded:
    """One read that fails on objects without the field or key: where (offset in the expression) and why."""

    offset: int
    message: str


def selector_guards(required: Iterable[str]) -> frozenset[Path]:
    """What a pod the policy's ``podSelector`` matched has: the label keys it requires."""
    labels: Path = ("pod", "metadata", "labels")
    keys = list(required)
    return frozenset([labels] + [(*labels, k) for k in keys]) if keys else frozenset()


def unguarded_reads(
    root: ast.Node, types: Mapping[str, Type], variable_types: Mapping[str, Type], *, kind: str, known: frozenset[Path] = frozenset()
) -> list[Unguarded]:
    """The reads in ``root`` (an expression of ``kind``) that fail when an ordinary object lacks
    the field or key, given ``known``: what the policy's match already ensures."""
    lint = _Lint(types, variable_types, kind)
    lint.walk(root, ALWAYS_THERE | known, {})
    return lint.found


def guards_of(root: ast.Node) -> frozenset[Path]:
    """What is known to be there when ``root`` (a bool expression) is true."""
    return _facts(root, True)


class _Lint:
    def __init__(self, types: Mapping[str, Type], variable_types: Mapping[str, Type], kind: str) -> None:
        self.types = types
        self.variable_types = variable_types
        self.kind = kind
        self.found: list[Unguarded] = []

    def walk(self, node: ast.Node, known: frozenset[Path], scope: dict[str, _Bound]) -> None:
        if isinstance(node, (ast.Select, ast.Index)):
            self.chain(node, known, scope)
            return
        if isinstance(node, ast.Logical):
            # Each operand is guarded by what every other one tests: the facts before it and after
            # it, gathered once each way (a chain of 200 ||s is not 200 x 200 walks).
            facts = [_facts(o, node.op == "&&") for o in node.operands]
            after: list[frozenset[Path]] = [frozenset()] * (len(facts) + 1)
            for i in range(len(facts) - 1, -1, -1):
                after[i] = after[i + 1] | facts[i] if facts[i] else after[i + 1]
            before: frozenset[Path] = frozenset()
            for i, operand in enumerate(node.operands):
                self.walk(operand, known | before | after[i + 1], scope)
                before = before | facts[i] if facts[i] else before
            return
        if isinstance(node, ast.Conditional):
            self.walk(node.condition, known, scope)
            self.walk(node.then, known | _facts(node.condition, True), scope)
            self.walk(node.otherwise, known | _facts(node.condition, False), scope)
            return
        if isinstance(node, ast.Comprehension):
            self.walk(node.range, known, scope)
            ranged = self.type_of(node.range, scope)
            items = _text(_path(node.range) or ("the list",))
            inner = dict(scope)
            if node.var2 is None:
                inner[node.var] = _Bound(ranged.elem if ranged is not None and ranged.name == "list" else (ranged.key if ranged is not None else None), items)
            else:
                inner[node.var] = _Bound(None, items)
                inner[node.var2] = _Bound(ranged.elem if ranged is not None else None, items)
            shadowed = frozenset(p for p in known if p[0] not in (node.var, node.var2))
            for sub in (node.predicate, node.transform):
                if sub is not None:
                    self.walk(sub, shadowed, inner)
            return
        for child in ast.children(node):
            self.walk(child, known, scope)

    def chain(self, top: ast.Select | ast.Index, known: frozenset[Path], scope: dict[str, _Bound]) -> None:
        """A read ``a.b['c'].d``: one warning for all its steps that may fail, at the first."""
        steps: list[ast.Select | ast.Index] = []
        node: ast.Node = top
        while isinstance(node, (ast.Select, ast.Index)):
            steps.append(node)
            if isinstance(node, ast.Index):
                self.walk(node.index, known, scope)
            node = node.operand
        self.walk(node, known, scope)
        steps.reverse()
        path = _path(node)
        base = self.type_of(node, scope)
        missing: list[tuple[ast.Node, str]] = []
        for step in steps:
            if path is None:
                return
            key = _key(step)
            if not step.optional and base is not None and path[0] not in ("params", "dra") and (*path, key) not in known:
                what = self.absent(base, path, key)
                if what:
                    missing.append((step, what))
            if step.optional:
                return  # the rest of the chain reads an optional value, which does not fail
            base = self.step_type(base, step, scope)
            path = (*path, key)
        if missing and path is not None:
            root = str(path[0])
            owner = f"an item of {scope[root].items}" if root in scope else _OWNER.get(root, "an object")
            lacking = " or ".join(what for _, what in missing)
            self.found.append(
                Unguarded(
                    _offset(missing[0][0]),
                    f"{self.written(path, known, scope, optional=False)} fails on {owner} without {lacking} (under failurePolicy Fail, {_EFFECT[self.kind]}); "
                    f"read it as {self.written(path, known, scope, optional=True)}, or test {self.tests(path, known, scope)} first",
                )
            )

    def absent(self, base: Type, path: Path, key: Part) -> str:
        """What may be absent at this step (``the field 'taints'``, ``the label 'app'``), or '' when it is always there."""
        if isinstance(base, ObjectType):
            if base.name.startswith("io.k8s.") and isinstance(key, str) and key in base.fields and key not in base.present:
                return f"the field '{key}'"
            return ""
        if base.name != "map":
            return ""
        noun = {"labels": "the label", "annotations": "the annotation"}.get(str(path[-1]), "the key")
        return f"{noun} {_show_key(key)}"

    def step_type(self, base: Type | None, step: ast.Select | ast.Index, scope: dict[str, _Bound]) -> Type | None:
        if base is None:
            if isinstance(step, ast.Select) and isinstance(step.operand, ast.Ident) and step.operand.name == "variables" and "variables" not in scope:
                return self.variable_types.get(step.field)
            return None
        if isinstance(base, ObjectType):
            return base.fields.get(step.field) if isinstance(step, ast.Select) else None
        return base.elem if base.name == "map" or base.name == "list" and isinstance(step, ast.Index) else None

    def type_of(self, node: ast.Node, scope: dict[str, _Bound]) -> Type | None:
        """The type of a plain read (``pod.spec.containers``, ``c.resources``), None for anything else."""
        if isinstance(node, ast.Ident):
            return scope[node.name].type if node.name in scope else self.types.get(node.name)
        if isinstance(node, (ast.Select, ast.Index)) and not node.optional:
            return self.step_type(self.type_of(node.operand, scope), node, scope)
        return None

    def written(self, path: Path, known: frozenset[Path], scope: dict[str, _Bound], *, optional: bool) -> str:
        """The read as CEL: ``pod.metadata.labels['app']``, or with ``optional`` the form that cannot fail,
        ``pod.metadata.?labels[?'app'].orValue('')``, every step from the first that may be absent optional."""
        out = str(path[0])
        absent = False
        base = self._type_at(path[:1], scope)
        for i, part in enumerate(path[1:], start=2):
            absent = optional and (absent or path[:i] not in known and bool(base is not None and self.absent(base, path[: i - 1], part)))
            if isinstance(base, ObjectType) and isinstance(part, str) or base is None and isinstance(part, str) and part.isidentifier():
                out += f".?{part}" if absent else f".{part}"
            else:
                out += f"[?{_show_key(part)}]" if absent else f"[{_show_key(part)}]"
            base = self._type_at(path[:i], scope)
        if not optional:
            return out
        zero = _ZERO.get(base.name) if base is not None else None
        return out + f".orValue({zero or '...'})"

    def tests(self, path: Path, known: frozenset[Path], scope: dict[str, _Bound]) -> str:
        """``has(pod.metadata.labels) && 'app' in pod.metadata.labels``: a test of each step that may be absent."""
        found = []
        for i in range(2, len(path) + 1):
            base = self._type_at(path[: i - 1], scope)
            if path[:i] not in known and base is not None and self.absent(base, path[: i - 1], path[i - 1]):
                part = path[i - 1]
                found.append(f"has({_text(path[:i])})" if isinstance(base, ObjectType) else f"{_show_key(part)} in {_text(path[: i - 1])}")
        return " && ".join(found)

    def _type_at(self, path: Path, scope: dict[str, _Bound]) -> Type | None:
        root = str(path[0])
        t = scope[root].type if root in scope else self.types.get(root)
        for i, part in enumerate(path[1:]):
            if root == "variables" and i == 0 and isinstance(part, str):
                t = self.variable_types.get(part)
            elif isinstance(t, ObjectType):
                t = t.fields.get(part) if isinstance(part, str) else None
            else:
                t = t.elem if t is not None and t.name in ("map", "list") else None
        return t


@dataclass(frozen=True)
class _Bound:
    """A comprehension's variable: its type, and the list it runs over (for messages)."""

    type: Type | None
    items: str


def _facts(node: ast.Node, truth: bool) -> frozenset[Path]:
    """What is there when ``node`` evaluates to ``truth``."""
    if isinstance(node, ast.Unary) and node.op == "!":
        return _facts(node.operand, not truth)
    if isinstance(node, ast.Logical) and (node.op == "&&") == truth:
        return frozenset().union(*(_facts(o, truth) for o in node.operands))
    if not truth:
        return frozenset()
    if isinstance(node, ast.Has):
        path = _path(ast.Select(node.operand, node.field))
        return _with_prefixes(path) if path is not None else frozenset()
    if isinstance(node, ast.Binary) and node.op == "in":
        container = _path(node.right)
        if container is None:
            return frozenset()
        return _with_prefixes((*container, _key(ast.Index(node.right, node.left))))
    return frozenset()


def _with_prefixes(path: Path) -> frozenset[Path]:
    return frozenset(path[:i] for i in range(2, len(path) + 1))


def _key(step: ast.Select | ast.Index) -> Part:
    if isinstance(step, ast.Select):
        return step.field
    index = step.index
    return index.value if isinstance(index, ast.Literal) and isinstance(index.value, str) else index


def _path(node: ast.Node) -> Path | None:
    """``pod.metadata.labels['app']`` → ``('pod', 'metadata', 'labels', 'app')``; None when not a plain read."""
    if isinstance(node, ast.Ident):
        return (node.name,)
    if isinstance(node, (ast.Select, ast.Index)) and not node.optional:
        base = _path(node.operand)
        return (*base, _key(node)) if base is not None else None
    return None


def _offset(node: ast.Node) -> int:
    """Where the failing step starts: the field after its dot (the node's offset is at the dot), or the bracket."""
    return node.offset + 1 if isinstance(node, ast.Select) else node.offset


def _show_key(key: Part) -> str:
    if isinstance(key, str):
        return "'" + key.replace("\\", "\\\\").replace("'", "\\'") + "'"
    name = ast.dotted_name(key)
    return name if name is not None else "…"


def _text(path: Path) -> str:
    out = str(path[0])
    for part in path[1:]:
        out += f".{part}" if isinstance(part, str) and part.isidentifier() else f"[{_show_key(part)}]"
    return out

