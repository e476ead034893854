"""CEL errors: compile-time errors carry a location, evaluation errors are CEL values
that the generated code raises as Python exceptions and absorbs where CEL says so."""

from __future__ import annotations

from engine.cel.types.names import type_name


class CelError(Exception):
    """Base of every error the CEL package raises."""


TOO_DEEP = (
    "expression is nested too deeply to compile (parentheses, lists, maps, calls or operators "
    "inside each other a few hundred levels deep); split it into variables"
)


class CompileError(CelError):
    """An expression that cannot be parsed or checked.

    ``line`` and ``column`` are 1-based positions inside the expression text;
    ``snippet`` is the offending line with a caret under the column.
    """

    def __init__(self, message: str, *, text: str = "", offset: int = 0) -> None:
        self.message = message
        self.text = text
        self.offset = offset
        before = text[:offset]
        self.line = before.count("\n") + 1
        self.column = offset - (before.rfind("\n") + 1) + 1
        lines = text.split("\n") if text else [""]
        src = lines[self.line - 1] if self.line - 1 < len(lines) else ""
        self.snippet = f"{src}\n{' ' * (self.column - 1)}^" if text else ""
        super().__init__(self.render())

    def render(self) -> str:
        head = f"ERROR: <input>:{self.line}:{self.column}: {self.message}"
        return f"{head}\n | {self.snippet.replace(chr(10), chr(10) + ' | ')}" if self.snippet else head


class EvalError(CelError):
    """An evaluation error (CEL's error value)."""

    def __init__(self, message: str) -> None:
        self.message = message
        super().__init__(message)


class NoSuchOverloadError(EvalError):
    """An operator or function applied to argument types it has no overload for."""


class NoSuchKeyError(EvalError):
    """A map key or object field that is not present."""


class IntOverflowError(EvalError):
    """An int64 or uint64 result outside its range."""


class DivisionByZeroError(EvalError):
    """Division or modulo by zero."""


class CostLimitError(EvalError):
    """The evaluation did more work than the program's cost limit allows."""


def no_such_overload(name: str, *args: object) -> NoSuchOverloadError:
    """The error for ``name`` applied to ``args`` (names their CEL types)."""
    kinds = ", ".join(type_name(a) for a in args)
    return NoSuchOverloadError(f"no such overload: {name}({kinds})")
