"""Kubernetes LabelSelector semantics (matchLabels AND matchExpressions)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: str  # In | NotIn | Exists | DoesNotExist
    values: frozenset[str]

    def matches(self, labels: Mapping[str, str]) -> bool:
        op = self.operator
        if op == "In":
            return self.key in labels and labels[self.key] in self.values
        if op == "NotIn":
            return self.key not in labels or labels[self.key] not in self.values
        if op == "Exists":
            return self.key in labels
        return self.key not in labels


@dataclass(frozen=True)
class LabelSelector:
    """An empty selector matches every set of labels, as in Kubernetes."""

    requirements: tuple[Requirement, ...]

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        labels = labels or {}
        return all(r.matches(labels) for r in self.requirements)


def parse_selector(raw: Mapping[str, Any]) -> tuple[LabelSelector, list[tuple[tuple[str | int, ...], str]]]:
    """A selector from its JSON form, with the problems the schema cannot see
    (values required by In/NotIn, forbidden for Exists/DoesNotExist) as (path, message)."""
    problems: list[tuple[tuple[str | int, ...], str]] = []
    reqs = [Requirement(k, "In", frozenset([v])) for k, v in sorted((raw.get("matchLabels") or {}).items())]
    for i, expr in enumerate(raw.get("matchExpressions") or []):
        op, values = expr["operator"], expr.get("values") or []
        if op in ("In", "NotIn") and not values:
            problems.append((("matchExpressions", i, "values"), f"operator {op} needs at least one value"))
        if op in ("Exists", "DoesNotExist") and values:
            problems.append((("matchExpressions", i, "values"), f"operator {op} takes no values"))
        reqs.append(Requirement(expr["key"], op, frozenset(values)))
    return LabelSelector(tuple(reqs)), problems
