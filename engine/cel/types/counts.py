"""``counts``: how many pods match a label selector per topology domain and across the
cluster, as filters and scores read it (docs/guides/counts.md).

    counts.inDomain(node, 'topology.kubernetes.io/zone', {'app': pod.metadata.labels.app})  # in node's zone
    counts.domains('kubernetes.io/hostname', {'team': 'ml'})                                 # nodes with one
    counts.cluster({'team': pod.metadata.labels.team})                                       # in the cluster

A domain is a value of a node label (the zone, a rack, the hostname); a selector is a map
of label keys to the values a pod must carry (all of them). Pods are the active ones bound
to nodes, in every namespace. The numbers come from whoever evaluates the expression
(kpe's cache keeps them as the watch reports pods, ``engine.cluster.counts``) through the
``CountSource`` protocol: this module only checks the arguments and asks, so each call is
a dictionary lookup, charged as one call.

This module is the library engine/cel/__init__.py loads as ``ext.counts``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from engine.cel.errors import EvalError, no_such_overload
from engine.cel.types.values import register_type

Selector = tuple[tuple[str, ...], tuple[str, ...]]
"""A selector as the sources look it up: its label keys, sorted, and their values in that order."""


class CountSource(Protocol):
    """What kpe's counts are read from (``engine.cluster.counts``)."""

    def in_domain(self, node: Mapping[str, Any], key: str, selector: Selector) -> int: ...

    def domains(self, key: str, selector: Selector) -> int: ...

    def cluster(self, selector: Selector) -> int: ...


class Counts:
    """The ``counts`` variable: a ``CountSource`` behind CEL's argument checks."""

    __slots__ = ("source",)

    def __init__(self, source: CountSource | None) -> None:
        self.source = source

    def __repr__(self) -> str:
        return "counts"

    def _source(self, name: str) -> CountSource:
        if self.source is None:
            raise EvalError(f"counts.{name}: no cluster counts are kept where this expression is evaluated")
        return self.source


def selector_of(name: str, selector: Any) -> Selector:
    """A CEL map of label keys to values as a ``Selector`` (an error for anything else)."""
    if type(selector) is dict and len(selector) == 1:
        # The common case, on every node of a request: one label, no sorting.
        for key, value in selector.items():
            if type(key) is str and type(value) is str:
                return (key,), (value,)
    if type(selector) is not dict and not isinstance(selector, Mapping):
        raise EvalError(f"counts.{name}: the selector must be a map of label keys to values, got {type(selector).__name__}")
    keys = tuple(sorted(selector))
    values = tuple(selector[k] for k in keys)
    if not all(type(k) is str for k in keys) or not all(type(v) is str for v in values):
        raise EvalError(f"counts.{name}: the selector's label keys and values must be strings")
    return keys, values


def _key(name: str, key: Any) -> str:
    if type(key) is not str or not key:  # the compiler takes literals only: a check, not a cost
        raise EvalError(f"counts.{name}: the topology key must be a node label key, got {key!r}")
    return key


def in_domain(counts: Any, node: Any, key: Any, selector: Any) -> int:
    if type(counts) is not Counts or (type(node) is not dict and not isinstance(node, Mapping)):
        raise no_such_overload("inDomain", counts, node, key, selector)
    return counts._source("inDomain").in_domain(node, _key("inDomain", key), selector_of("inDomain", selector))


def domains(counts: Any, key: Any, selector: Any) -> int:
    if type(counts) is not Counts:
        raise no_such_overload("domains", counts, key, selector)
    return counts._source("domains").domains(_key("domains", key), selector_of("domains", selector))


def cluster(counts: Any, selector: Any) -> int:
    if type(counts) is not Counts:
        raise no_such_overload("cluster", counts, selector)
    return counts._source("cluster").cluster(selector_of("cluster", selector))


register_type(Counts, "kpe.Counts")

NO_COUNTS = Counts(None)
"""``counts`` where nothing keeps them: every call is an evaluation error saying so."""

METHODS: dict[str, dict[type, Callable[..., Any]]] = {
    "inDomain": {Counts: in_domain},
    "domains": {Counts: domains},
    "cluster": {Counts: cluster},
}

RESULT_TYPES: dict[str, str] = {"inDomain": "int", "domains": "int", "cluster": "int"}
