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


_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


def label_key_problems(key: str) -> list[str]:
    """validation.IsQualifiedName (k8s.io/apimachinery/pkg/api/validate/content.IsLabelKey):
    [prefix/]name, the prefix a DNS-1123 subdomain; the messages are Kubernetes'."""
    from engine.cel.ext.kubescheduling import _DNS1123_SUBDOMAIN, _QUALIFIED_NAME

    parts = key.split("/")
    if len(parts) > 2:
        return [
            "a valid label key must consist of alphanumeric characters, '-', '_' or '.', and must start and end with "
            "an alphanumeric character, with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    problems = []
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix:
            problems.append("prefix part must be non-empty")
        else:
            if len(prefix) > 253:
                problems.append("prefix part must be no more than 253 characters")
            if not _DNS1123_SUBDOMAIN.fullmatch(prefix):
                problems.append(
                    "prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
                    "'-' or '.', and must start and end with an alphanumeric character"
                )
    name = parts[-1]
    if not name:
        problems.append("name part must be non-empty")
    elif len(name) > 63:
        problems.append("name part must be no more than 63 characters")
    if not _QUALIFIED_NAME.fullmatch(name):
        problems.append(
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
        )
    return problems


def label_value_problems(value: str) -> list[str]:
    """validation.IsValidLabelValue: empty, or at most 63 characters of [-A-Za-z0-9_.] starting
    and ending with an alphanumeric character."""
    from engine.cel.ext.kubescheduling import _QUALIFIED_NAME

    problems = []
    if len(value) > 63:
        problems.append("must be no more than 63 characters")
    if value and not _QUALIFIED_NAME.fullmatch(value):
        problems.append(
            "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
            "and must start and end with an alphanumeric character"
        )
    return problems


def _quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def parse_selector(raw: Mapping[str, Any]) -> tuple[LabelSelector, list[tuple[tuple[str | int, ...], str]]]:
    """A selector from its JSON form, with the problems Kubernetes' ValidateLabelSelector
    (k8s.io/apimachinery/pkg/apis/meta/v1/validation) finds, as (path, message): label keys
    and values that are not valid labels, values required by In/NotIn and forbidden for
    Exists/DoesNotExist, unknown operators. A selector with problems must not be used: the
    loader refuses the policy (Kubernetes refuses such an object; kpe would otherwise match
    every pod, or none, by a key no pod can carry)."""
    problems: list[tuple[tuple[str | int, ...], str]] = []
    match_labels = raw.get("matchLabels") or {}
    for k, v in sorted(match_labels.items()):
        for msg in label_key_problems(str(k)):
            problems.append((("matchLabels", k), f"Invalid value: {_quoted(str(k))}: {msg}"))
        for msg in label_value_problems(str(v)) if isinstance(v, str) else ():
            problems.append((("matchLabels", k), f"Invalid value: {_quoted(v)}: {msg}"))
    reqs = [Requirement(k, "In", frozenset([v])) for k, v in sorted(match_labels.items())]
    for i, expr in enumerate(raw.get("matchExpressions") or []):
        op, values, key = expr.get("operator"), expr.get("values") or [], expr.get("key", "")
        if op in ("In", "NotIn") and not values:
            problems.append((("matchExpressions", i, "values"), f"operator {op} needs at least one value"))
        elif op in ("Exists", "DoesNotExist") and values:
            problems.append((("matchExpressions", i, "values"), f"operator {op} takes no values"))
        elif op not in _OPERATORS:
            problems.append((("matchExpressions", i, "operator"), f"Invalid value: {_quoted(str(op))}: not a valid selector operator"))
        for msg in label_key_problems(str(key)):
            problems.append((("matchExpressions", i, "key"), f"Invalid value: {_quoted(str(key))}: {msg}"))
        for j, value in enumerate(values):
            for msg in label_value_problems(str(value)):
                problems.append((("matchExpressions", i, "values", j), f"Invalid value: {_quoted(str(value))}: {msg}"))
        reqs.append(Requirement(str(key), str(op), frozenset(values)))
    return LabelSelector(tuple(reqs)), problems
