"""kpe's CEL: parse once, compile to Python over raw Kubernetes JSON, evaluate many times.

    >>> program = compile("node.metadata.labels['zone'] == pod.metadata.labels['zone']", variables=["pod", "node"])
    >>> program.evaluate({"pod": pod, "node": node})
    >>> per_node = program.bind(pod=pod)      # pod-only parts computed once
    >>> per_node(node=node)

Evaluation errors raise ``EvalError`` (or a subclass) with a CEL-style message;
compile errors raise ``CompileError`` with line, column and a caret snippet.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from functools import lru_cache

from engine.cel.errors import (
    TOO_DEEP,
    CelError,
    CompileError,
    CostLimitError,
    DivisionByZeroError,
    EvalError,
    IntOverflowError,
    NoSuchKeyError,
    NoSuchOverloadError,
)
from engine.cel.library import Library
from engine.cel.parser import ast
from engine.cel.limits import MAX_LIST_SIZE, MAX_STRING_SIZE, SizeLimitError
from engine.cel.interpreter.program import DEFAULT_COST_LIMIT, Program
from engine.cel.types.values import CelType, Optional, UInt, type_name

# Core CEL, the extensions Kubernetes enables, Kubernetes' own libraries, and kpe's
# Kubernetes helpers (kube.*: what kube-scheduler computes about pods and nodes).
LIBRARY_MODULES = (
    "interpreter.runtime", "ext.strings", "types.conversions", "ext.timestamps", "ext.regex", "ext.lists", "ext.sets", "ext.comprehensions", "ext.format", "ext.quantity",
    "ext.semver", "ext.network", "ext.urls", "ext.kube", "types.counts",
)


@lru_cache(maxsize=1)
def default_library() -> Library:
    return Library([importlib.import_module(f"{__name__}.{name}") for name in LIBRARY_MODULES])


def compile(  # noqa: A001 - the public name the rest of kpe and external checks use
    text: str,
    *,
    variables: Iterable[str] = (),
    check: bool = True,
    cost_limit: int = DEFAULT_COST_LIMIT,
    root: ast.Node | None = None,
) -> Program:
    """Compile ``text`` over the declared ``variables``.

    With ``check`` (the default) an undeclared identifier or function, or an
    operator applied to types that have no overload, is a ``CompileError``;
    without it those become evaluation errors. ``cost_limit`` bounds the
    work of one evaluation: comprehension items and the characters string
    functions scan (``limits.py``). ``root``: ``text`` already parsed, by a caller that
    needed the tree first (the policy compiler), so it is not parsed twice.
    """
    try:
        return Program(text, variables=variables, library=default_library(), check=check, cost_limit=cost_limit, root=root)
    except (RecursionError, SyntaxError, MemoryError):
        # The Python kpe generates gives out on very deep nesting too (Python's own parser
        # allows 200 levels of brackets): a policy's error to report, not a crash of the loader.
        raise CompileError(TOO_DEEP, text=text) from None


__all__ = [
    "TOO_DEEP", "CelError", "CelType", "CompileError", "CostLimitError", "DivisionByZeroError", "EvalError", "IntOverflowError",
    "NoSuchKeyError", "NoSuchOverloadError", "Optional", "Program", "SizeLimitError", "UInt", "compile", "default_library", "type_name",
    "MAX_LIST_SIZE", "MAX_STRING_SIZE",
]
