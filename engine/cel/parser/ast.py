"""The CEL syntax tree the parser builds and the compiler reads.

Macros are expanded by the parser into ``Comprehension`` and ``Has`` nodes, so
the compiler never sees ``all``/``exists``/``map``/``has`` as calls. Every node
keeps the character offset of its start for error messages.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from dataclasses import replace as replace_fields


@dataclass(frozen=True, slots=True)
class Node:
    offset: int = field(kw_only=True, default=0, compare=False)


@dataclass(frozen=True, slots=True)
class Literal(Node):
    value: object


@dataclass(frozen=True, slots=True)
class Ident(Node):
    name: str


@dataclass(frozen=True, slots=True)
class Select(Node):
    """``operand.field``, or ``operand.?field`` when ``optional``."""

    operand: Node
    field: str
    optional: bool = False


@dataclass(frozen=True, slots=True)
class Has(Node):
    """``has(operand.field)``: presence test without reading the value."""

    operand: Node
    field: str


@dataclass(frozen=True, slots=True)
class Index(Node):
    """``operand[index]``, or ``operand[?index]`` when ``optional``."""

    operand: Node
    index: Node
    optional: bool = False


@dataclass(frozen=True, slots=True)
class Call(Node):
    """A function call; ``target`` is the receiver of ``target.function(args)``."""

    function: str
    args: tuple[Node, ...]
    target: Node | None = None


@dataclass(frozen=True, slots=True)
class Unary(Node):
    op: str  # "!" or "-"
    operand: Node


@dataclass(frozen=True, slots=True)
class Binary(Node):
    op: str  # arithmetic, comparison or "in"
    left: Node
    right: Node


@dataclass(frozen=True, slots=True)
class Logical(Node):
    """``&&`` or ``||`` over two or more operands (chains are flattened)."""

    op: str
    operands: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Conditional(Node):
    condition: Node
    then: Node
    otherwise: Node


@dataclass(frozen=True, slots=True)
class ListLit(Node):
    elements: tuple[Node, ...]
    optional_indices: frozenset[int] = frozenset()


@dataclass(frozen=True, slots=True)
class MapEntry:
    key: Node
    value: Node
    optional: bool = False


@dataclass(frozen=True, slots=True)
class MapLit(Node):
    entries: tuple[MapEntry, ...]


@dataclass(frozen=True, slots=True)
class StructLit(Node):
    """``Type{field: value}``: protobuf messages, which kpe does not support;
    kept so the compiler can say so precisely."""

    type_name: str
    fields: tuple[tuple[str, Node], ...]


@dataclass(frozen=True, slots=True)
class Comprehension(Node):
    """An expanded macro.

    ``kind`` is one of all, exists, exists_one, map, filter, transformList,
    transformMap, optMap, optFlatMap. ``var2`` is the value variable of the
    two-variable forms (``var`` is then the index or key). ``predicate`` is the
    filter of ``map``/``transform*`` with three arguments, or the condition of
    all/exists/exists_one/filter; ``transform`` the mapped value.
    """

    kind: str
    range: Node
    var: str
    var2: str | None
    predicate: Node | None
    transform: Node | None


def children(node: Node) -> list[Node]:
    """The direct sub-expressions of a node."""
    match node:
        case Select(operand=o) | Has(operand=o) | Unary(operand=o):
            return [o]
        case Index(operand=o, index=i):
            return [o, i]
        case Call(args=args, target=t):
            return ([t] if t is not None else []) + list(args)
        case Binary(left=a, right=b):
            return [a, b]
        case Logical(operands=ops):
            return list(ops)
        case Conditional(condition=c, then=t, otherwise=o):
            return [c, t, o]
        case ListLit(elements=els):
            return list(els)
        case MapLit(entries=entries):
            return [x for e in entries for x in (e.key, e.value)]
        case StructLit(fields=fields):
            return [v for _, v in fields]
        case Comprehension(range=r, predicate=p, transform=t):
            return [r] + [x for x in (p, t) if x is not None]
    return []


def dotted_name(node: Node) -> str | None:
    """``a.b.c`` as a name, when the node is a chain of plain selections on an identifier
    (a namespaced function's name, a qualified variable)."""
    parts: list[str] = []
    while isinstance(node, Select) and not node.optional:
        parts.append(node.field)
        node = node.operand
    if isinstance(node, Ident):
        parts.append(node.name)
        return ".".join(reversed(parts))
    return None


def free_variables(node: Node) -> frozenset[str]:
    """The identifiers a node reads that are not bound by an enclosing comprehension."""
    match node:
        case Ident(name=name):
            return frozenset([name])
        case Comprehension(range=r, var=v, var2=v2, predicate=p, transform=t):
            inner: frozenset[str] = frozenset()
            for sub in (p, t):
                if sub is not None:
                    inner |= free_variables(sub)
            return free_variables(r) | (inner - {v, v2})
    out: frozenset[str] = frozenset()
    for child in children(node):
        out |= free_variables(child)
    return out


def substitute(node: Node, replace: "Callable[[Node], Node | None]") -> Node:
    """A copy of the tree where ``replace`` gives a substitute for some nodes
    (``None`` keeps a node and looks inside it)."""
    found = replace(node)
    if found is not None:
        return found
    changes: dict[str, object] = {}
    for f in fields(node):
        value = getattr(node, f.name)
        if isinstance(value, Node):
            new: object = substitute(value, replace)
        elif isinstance(value, tuple) and value and isinstance(value[0], (Node, MapEntry)):
            new = tuple(
                MapEntry(substitute(v.key, replace), substitute(v.value, replace), v.optional) if isinstance(v, MapEntry) else substitute(v, replace)
                for v in value
            )
        elif isinstance(value, tuple) and value and isinstance(value[0], tuple):
            new = tuple((name, substitute(v, replace)) for name, v in value)
        else:
            continue
        changes[f.name] = new
    return replace_fields(node, **changes) if changes else node  # type: ignore[arg-type]
