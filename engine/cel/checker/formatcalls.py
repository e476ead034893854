"""cel-go's static check of ``string.format`` (its ``stringFormatValidator``, which
Kubernetes' strings extension at version 2 installs): when the format string is a
literal and the arguments a list literal, the clauses are parsed and each one's
argument type checked when the expression is compiled, so ``'%d'.format([1.5])``,
``'%s %s'.format([x])`` and ``'%q'.format([x])`` are refused at ``kpe check``
instead of failing on every evaluation.

The walk over the format string is the formatter's own
(``engine.cel.ext.formatting.interpolate``), run in its checking mode; what a
clause accepts is cel-go's list for each verb, by the kind of the argument's type
(``dyn`` passes, as it does in cel-go; a schema object counts as a map).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final

from engine.cel.checker.typemodel import ObjectType, Type
from engine.cel.ext.formatting import CLAUSE_MESSAGES, Clause, FormatProblem, clause_error, interpolate
from engine.cel.parser import ast

# The kinds of argument each verb takes (cel-go's stringFormatChecker).
_ACCEPTS: Final = {
    "d": frozenset(("int", "uint")),
    "f": frozenset(("double", "string")),  # strings: "NaN", "Infinity" and "-Infinity" are doubles to %f and %e
    "e": frozenset(("double", "string")),
    "b": frozenset(("int", "uint", "bool")),
    "x": frozenset(("int", "uint", "string", "bytes")),
    "X": frozenset(("int", "uint", "string", "bytes")),
    "o": frozenset(("int", "uint")),
}
_PRINTABLE: Final = frozenset(
    ("list", "map", "int", "uint", "double", "bool", "string", "timestamp", "bytes", "duration", "type", "null_type")
)
# cel-go's names of the types kpe's type model calls otherwise.
_GO_NAMES: Final = {
    "timestamp": "google.protobuf.Timestamp",
    "duration": "google.protobuf.Duration",
    "optional": "optional_type",
}


def _kind(t: Type) -> str:
    return "map" if isinstance(t, ObjectType) else t.name


def _shown(t: Type) -> str:
    kind = _kind(t)
    return _GO_NAMES.get(kind, kind)


def _unprintable(node: ast.Node, type_of: Callable[[ast.Node], Type]) -> ast.Node | None:
    """The first (sub-)argument ``%s`` cannot print: literals are looked into, as cel-go does."""
    kind = _kind(type_of(node))
    if kind != "dyn" and kind not in _PRINTABLE:
        return node
    if isinstance(node, ast.ListLit):
        children: list[ast.Node] = list(node.elements)
    elif isinstance(node, ast.MapLit):
        children = [part for entry in node.entries for part in (entry.key, entry.value)]
    else:
        return None
    for child in children:
        found = _unprintable(child, type_of)
        if found is not None:
            return found
    return None


def format_problems(
    fmt: str, arguments: Sequence[ast.Node], type_of: Callable[[ast.Node], Type]
) -> list[tuple[str, ast.Node | None]]:
    """What cel-go reports for ``fmt.format([arguments...])``: each message with the
    argument it is about (``None``: the call itself)."""
    culprits: list[ast.Node] = []

    def check(index: int, clause: Clause) -> str:
        argument = arguments[index]
        if clause.verb == "s":
            culprit = _unprintable(argument, type_of)
        else:
            kind = _kind(type_of(argument))
            culprit = None if kind == "dyn" or kind in _ACCEPTS[clause.verb] else argument
        if culprit is not None:
            culprits.append(culprit)
            raise clause_error(CLAUSE_MESSAGES[clause.verb].format(_shown(type_of(culprit))))
        return ""

    try:
        _, used = interpolate(fmt, len(arguments), check, checking=True)
    except FormatProblem as exc:
        return [(exc.message, culprits[-1] if culprits else None)]
    if len(arguments) > used:
        return [(f"too many arguments supplied to string.format (expected {used}, got {len(arguments)})", None)]
    return []
