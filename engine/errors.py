"""Policy errors: one hierarchy, a stable code, where it is, and what is wrong.

Rendered as ``file:line:column: error[CODE] policy: field.path: message`` so
editors and CI logs link straight to the spot; a CEL error adds the expression
with a caret under the offending character.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


# Stable codes: tools and docs refer to these, never renumber.
CODES = {
    "KPE100": "file cannot be read",
    "KPE101": "invalid YAML",
    "KPE102": "duplicate key in a YAML mapping",
    "KPE103": "document is not a kpe object",
    "KPE104": "document over the size limit",
    "KPE200": "schema violation",
    "KPE300": "CEL syntax error",
    "KPE301": "undeclared reference in CEL",
    "KPE302": "CEL type error",
    "KPE303": "expression result has the wrong type",
    "KPE304": "variable refers to a later or unknown variable",
    "KPE305": "scope not available in this expression",
    "KPE306": "estimated worst-case cost over the limit",
    "KPE307": "field not in the Kubernetes object's schema",
    "KPE308": "counts across nodes the cache cannot keep",
    "KPE309": "too slow to check within the policy webhook's time",
    "KPE400": "duplicate policy name",
    "KPE401": "duplicate rule or variable name",
    "KPE402": "the policy set is empty",
    "KPE403": "a reservation's template holds a bad quantity",
    "KPE404": "two policies share a scheduling gate",
    "KPE500": "policy test failed to load",
    "KPE600": "a read that fails on objects without the field or key, in a rule that fails closed (a warning)",
}


@dataclass(frozen=True, order=True)
class Location:
    file: str = ""
    line: int = 0
    column: int = 0

    def __str__(self) -> str:
        if not self.file:
            return "<input>"
        return f"{self.file}:{self.line}:{self.column}" if self.line else self.file


@dataclass(frozen=True)
class PolicyError:
    """One problem found while loading policies."""

    code: str
    message: str
    location: Location = field(default_factory=Location)
    policy: str = ""
    path: str = ""
    snippet: str = ""
    severity: str = "error"  # or "warning": reported, and the policy is served all the same

    def sort_key(self) -> tuple[Any, ...]:
        return (self.location, self.policy, self.path, self.code, self.message)

    def render(self) -> str:
        subject = ": ".join(part for part in (self.policy, self.path) if part)
        head = f"{self.location}: {self.severity}[{self.code}] " + (f"{subject}: " if subject else "") + self.message
        if self.snippet:
            head += "\n" + "\n".join("    " + line for line in self.snippet.split("\n"))
        return head

    def to_dict(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "file": self.location.file,
            "line": self.location.line,
            "column": self.location.column,
            "policy": self.policy,
            "path": self.path,
            "message": self.message,
        }


class PolicyLoadError(Exception):
    """A load that found problems; carries all of them, sorted by location."""

    def __init__(self, errors: list[PolicyError]) -> None:
        self.errors = sorted(errors, key=PolicyError.sort_key)
        count = len(self.errors)
        super().__init__(f"{count} error{'s' if count != 1 else ''} in policies:\n" + self.render())

    def render(self) -> str:
        return "\n".join(e.render() for e in self.errors)
