"""Running the cases of Kubernetes' and cel-go's CEL library tests through kpe
(the JSON of tests/data/kubernetes-cel/, README.md there describes it)."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

import engine.cel as cel
from engine.cel.types import operators
from engine.cel.types.values import Optional, UInt

DATA = Path(__file__).resolve().parents[1] / "data" / "kubernetes-cel"
KNOWN_FILE = Path(__file__).parent / "kubernetes_known_differences.yaml"


@dataclass(frozen=True)
class Case:
    library: str
    id: str
    expr: str
    bindings: dict[str, Any] = field(default_factory=dict)
    value: Any = None
    error: dict[str, Any] | None = None

    @property
    def key(self) -> str:
        return f"{self.library}/{self.id}"


def load_cases() -> list[Case]:
    cases = []
    for path in sorted(DATA.glob("*.json")):
        if path.name == "cost.json":
            continue  # cost cases: tests/cel/test_kubernetes_cost_cases.py
        doc = json.loads(path.read_text())
        for c in doc["cases"]:
            cases.append(
                Case(
                    library=doc["library"],
                    id=c["id"],
                    expr=c["expr"],
                    bindings={k: decode(v) for k, v in (c.get("bindings") or {}).items()},
                    value=c.get("value"),
                    error=c.get("error"),
                )
            )
    return cases


def load_known() -> dict[str, str]:
    return yaml.safe_load(KNOWN_FILE.read_text()) or {}


def decode(tagged: Any) -> Any:
    """A tagged JSON value (README.md) as kpe's run-time value."""
    if isinstance(tagged, list):
        return [decode(v) for v in tagged]
    (kind, v), = tagged.items()
    if kind in ("bool", "string", "int"):
        return v
    if kind == "uint":
        return UInt(v)
    if kind == "double":
        return float(v)
    if kind == "list":
        return [decode(x) for x in v]
    if kind == "optional":
        return Optional(None, False) if v is None else Optional(decode(v))
    if kind == "cel":
        return cel.compile(v).evaluate({})
    raise ValueError(f"unknown value kind {kind!r}")


def _same(actual: Any, expected: Any) -> bool:
    if type(actual) is not type(expected):
        return False
    if type(expected) is float:
        return (math.isnan(actual) and math.isnan(expected)) or actual == expected
    if type(expected) is list:
        return len(actual) == len(expected) and all(_same(a, e) for a, e in zip(actual, expected))
    if type(expected) is Optional:
        return actual.present == expected.present and (not expected.present or _same(actual.value, expected.value))
    return bool(operators.equals(actual, expected))


def _matches(message: str, text: str, how: str) -> bool:
    if how == "exact":
        return message == text
    if how == "regex":
        return re.search(text, message) is not None
    return text in message


def run(case: Case) -> str | None:
    """None when kpe agrees with the case, else what kpe did instead."""
    try:
        program = cel.compile(case.expr, variables=list(case.bindings))
        result = program.evaluate(dict(case.bindings))
    except cel.CelError as exc:
        message = str(getattr(exc, "message", None) or exc)
        if case.error is None:
            return f"raised {type(exc).__name__}: {message}"
        missing = [t for t in case.error["texts"] if not _matches(message, t, case.error["match"])]
        if missing:
            return f"raised {type(exc).__name__}: {message!r}, expected ({case.error['match']}) {missing!r}"
        return None
    if case.error is not None:
        return f"gave {result!r}, expected an error matching {case.error['texts']!r}"
    expected = decode(case.value)
    if not _same(result, expected):
        return f"gave {result!r}, expected {expected!r}"
    return None


def summary(cases: list[Case], known: dict[str, str]) -> tuple[dict[str, dict[str, int]], list[str]]:
    """Per library: cases, agreeing, known differences, unexplained; and the unexplained ones."""
    table: dict[str, dict[str, int]] = {}
    unexplained = []
    for case in cases:
        row = table.setdefault(case.library, {"cases": 0, "agree": 0, "known": 0, "unexplained": 0})
        row["cases"] += 1
        outcome = run(case)
        if outcome is None:
            row["agree"] += 1
        elif case.key in known:
            row["known"] += 1
        else:
            row["unexplained"] += 1
            unexplained.append(f"{case.key}: {case.expr!r} {outcome}")
    return table, unexplained


def render(table: dict[str, dict[str, int]]) -> str:
    lines = [f"{'LIBRARY':16}{'CASES':>7}{'AGREE':>7}{'KNOWN':>7}{'UNEXPLAINED':>13}"]
    for library, row in sorted(table.items()):
        lines.append(f"{library:16}{row['cases']:>7}{row['agree']:>7}{row['known']:>7}{row['unexplained']:>13}")
    total = {k: sum(r[k] for r in table.values()) for k in ("cases", "agree", "known", "unexplained")}
    lines.append(f"{'total':16}{total['cases']:>7}{total['agree']:>7}{total['known']:>7}{total['unexplained']:>13}")
    return "\n".join(lines)


if __name__ == "__main__":  # python -m tests.cel.kubernetes_cases [--all]: the table (and every difference)
    import sys

    cases, known = load_cases(), load_known()
    table, unexplained = summary(cases, known)
    print(render(table))
    if "--all" in sys.argv:
        for line in unexplained:
            print(line)
