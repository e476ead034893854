"""Pods counted per topology domain and across the cluster, kept as pods come and go, for
``counts`` in filters and scores (engine/cel/types/counts.py, docs/guides/counts.md).

The selectors a policy set counts by are known when it is loaded (``engine.policy.counts``
requires their label keys to be literal), so the index is one table per set of label keys:
for each combination of values those keys take on some pod, how many active bound pods
carry it, in the cluster and per value of each topology label asked for. A filter then
costs a dictionary lookup per node, whatever the size of the cluster; a pod bound,
finished or deleted costs an update of the few tables whose keys it carries; a node whose
labels change moves the counts of its pods.

kpe's cache (``server.cluster.cache``) keeps one ``CountIndex`` from the watch; ``kpe test``
and ``kpe explain`` build one from their fixtures. ``Adjusted`` is the same counts with pods
taken out (the victims of a preemption) or added where they may be (pods in flight).
Written on the event loop, read by the evaluation worker: a read is a few ``dict.get``.

``kpe.dev/namespace`` in a selector is no label: it is the pod's namespace, so a team's cap
counts its own namespace's pods only (``{'app': pod.metadata.labels.app, 'kpe.dev/namespace':
pod.metadata.namespace}``); an app of the same name in another namespace is another app.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engine.cel.errors import EvalError
from engine.cel.types.counts import Counts, Selector
from engine.cluster.nodeinfo import is_active, pod_key

Keys = tuple[str, ...]
Values = tuple[str, ...]
Counted = tuple[tuple[Keys, Values], ...]  # what a pod counts as: the values of each set of keys it carries
NAMESPACE = "kpe.dev/namespace"  # a selector key for the pod's namespace (see the module docstring)


@dataclass(frozen=True)
class CountSpecs:
    """What a policy set counts by: (label keys, topology key) pairs for ``inDomain`` and
    ``domains``; label key sets for ``cluster``."""

    domains: frozenset[tuple[Keys, str]] = frozenset()
    clusters: frozenset[Keys] = frozenset()

    def __bool__(self) -> bool:
        return bool(self.domains or self.clusters)

    @property
    def key_sets(self) -> frozenset[Keys]:
        return self.clusters | {keys for keys, _ in self.domains}

    @property
    def topology_keys(self) -> frozenset[str]:
        return frozenset(t for _, t in self.domains)

    def union(self, other: CountSpecs) -> CountSpecs:
        return CountSpecs(self.domains | other.domains, self.clusters | other.clusters)


NO_SPECS = CountSpecs()


def _labels(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    if type(meta) is dict:  # JSON objects: the isinstance checks below only for other mappings
        labels = meta.get("labels")
        if type(labels) is dict:
            return labels
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    return labels if isinstance(labels, Mapping) else {}


def _pod_labels(pod: Mapping[str, Any], namespaced: bool) -> Mapping[str, Any]:
    """A pod's labels as selectors see them: with its namespace under ``NAMESPACE`` when
    ``namespaced`` (a selector's keys ask for it)."""
    labels = _labels(pod)
    if namespaced:
        meta = pod.get("metadata")
        namespace = meta.get("namespace") if isinstance(meta, Mapping) else None
        return {**labels, NAMESPACE: namespace if isinstance(namespace, str) and namespace else "default"}
    return labels


def _values(labels: Mapping[str, Any], keys: Keys) -> Values | None:
    try:
        values = tuple(labels[k] for k in keys)
    except KeyError:
        return None
    return values if all(type(v) is str for v in values) else None


def not_counted(keys: Keys, topology: str = "") -> EvalError:
    by = f" per {topology!r}" if topology else ""
    return EvalError(f"counts: pods are not counted by labels {list(keys)}{by} (the selector's keys must be literal in the policy)")


class CountIndex:
    """The counts of one cluster (see the module docstring), for one ``CountSpecs``."""

    def __init__(self, specs: CountSpecs = NO_SPECS) -> None:
        self.specs = specs
        self._key_sets = tuple(specs.key_sets)
        self._namespaced = any(NAMESPACE in keys for keys in self._key_sets)  # worked out once, not per pod event
        self._topologies = {keys: tuple(t for k, t in specs.domains if k == keys) for keys in self._key_sets}
        self._cluster: dict[Keys, Counter[Values]] = {keys: Counter() for keys in self._key_sets}
        self._domains: dict[tuple[Keys, str], dict[Values, Counter[str]]] = {spec: {} for spec in specs.domains}
        self._node_labels: dict[str, dict[str, str]] = {}  # node -> the topology labels it carries
        self._pods: dict[str, str] = {}  # pod key -> its node
        # The pods on each node, with what each counts as: a (node, counted) tuple a pod took
        # 1.2 MiB for 20,000 pods, which the node's own dict holds for the price of its value.
        self._on_node: dict[str, dict[str, Counted]] = {}
        # What pods count as, one tuple per distinct value with the number of pods holding it:
        # an app's replicas count alike, and 20,000 pods held 4.6 MiB of equal tuples.
        self._kinds: dict[Counted, list[Any]] = {}
        self._labels_version = 0  # moves when a node's topology labels change
        self._labels_seen = 0
        self._domains_of: dict[frozenset[str], tuple[Mapping[str, str], ...]] = {}

    @classmethod
    def build(cls, specs: CountSpecs, nodes: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]]) -> CountIndex:
        """An index of ``pods`` (those active and bound) over ``nodes``, from scratch."""
        index = cls(specs)
        for node in nodes:
            index.set_node(str((node.get("metadata") or {}).get("name") or ""), node)
        for pod in pods:
            index.set_pod(pod_key(pod), pod)
        return index

    # --- written from the watch ------------------------------------------------------------

    def set_node(self, name: str, node: Mapping[str, Any] | None) -> None:
        """A node added, changed (``node``) or deleted (None): its pods move to its domains now."""
        if not self.specs.domains:
            return
        labels = _labels(node) if node is not None else {}
        wanted = {t: v for t in self.specs.topology_keys if type(v := labels.get(t)) is str}
        if wanted == self._node_labels.get(name, {}):
            return
        held = list(self._on_node.get(name, {}).items())
        for key, _ in held:
            self._remove(key)
        self._labels_version += 1
        if wanted:
            self._node_labels[name] = wanted
        else:
            self._node_labels.pop(name, None)
        for key, counted in held:
            self._add(key, name, counted)

    def set_pod(self, key: str, pod: Mapping[str, Any] | None) -> None:
        """A pod seen (``pod``) or gone (None): it counts while it is active and bound."""
        self._remove(key)
        if pod is None or not self._key_sets or not is_active(pod):
            return
        node = (pod.get("spec") or {}).get("nodeName")
        if not isinstance(node, str) or not node:
            return
        labels = _pod_labels(pod, self._namespaced)
        counted = tuple((keys, values) for keys in self._key_sets if (values := _values(labels, keys)) is not None)
        if counted:
            self._add(key, node, counted)

    def _add(self, key: str, node: str, counted: Counted) -> None:
        kind = self._kinds.get(counted)
        if kind is None:
            self._kinds[counted] = kind = [counted, 0]
        kind[1] += 1
        counted = kind[0]
        self._pods[key] = node
        self._on_node.setdefault(node, {})[key] = counted
        domains = self._node_labels.get(node, {})
        for keys, values in counted:
            self._cluster[keys][values] += 1
            for topology in self._topologies[keys]:
                domain = domains.get(topology)
                if domain is not None:
                    self._domains[keys, topology].setdefault(values, Counter())[domain] += 1

    def _remove(self, key: str) -> None:
        node = self._pods.pop(key, None)
        if node is None:
            return
        on = self._on_node[node]
        counted = on.pop(key)
        if not on:
            del self._on_node[node]
        kind = self._kinds[counted]
        kind[1] -= 1
        if not kind[1]:
            del self._kinds[counted]
        domains = self._node_labels.get(node, {})
        for keys, values in counted:
            _decrement(self._cluster[keys], values)
            for topology in self._topologies[keys]:
                domain = domains.get(topology)
                if domain is not None:
                    table = self._domains[keys, topology]
                    per = table[values]
                    _decrement(per, domain)
                    if not per:
                        del table[values]

    # --- read by decisions (engine.cel.types.counts.CountSource) -------------------------------

    def per_domain(self, topology: str, selector: Selector) -> Mapping[str, int]:
        """The matching pods per domain of ``topology`` (domains without one left out)."""
        table = self._domains.get((selector[0], topology))
        if table is None:
            raise not_counted(selector[0], topology)
        return table.get(selector[1]) or {}

    def domain_of(self, node: Mapping[str, Any], topology: str) -> str | None:
        value = _labels(node).get(topology)
        return value if type(value) is str else None

    def in_domain(self, node: Mapping[str, Any], key: str, selector: Selector) -> int:
        table = self._domains.get((selector[0], key))
        if table is None:
            raise not_counted(selector[0], key)
        per = table.get(selector[1])
        if not per:
            return 0
        domain = _labels(node).get(key)
        return per.get(domain, 0) if type(domain) is str else 0

    def domains(self, key: str, selector: Selector) -> int:
        return len(self.per_domain(key, selector))

    def cluster(self, selector: Selector) -> int:
        table = self._cluster.get(selector[0])
        if table is None:
            raise not_counted(selector[0])
        return table.get(selector[1], 0)

    def labels_of(self, node: str) -> Mapping[str, str]:
        """The topology labels of a node, as counted."""
        return self._node_labels.get(node, {})

    def domains_of(self, nodes: frozenset[str]) -> tuple[Mapping[str, str], ...]:
        """The distinct topology labels of ``nodes``: what a pod in flight passed on them may
        count in. Remembered per set while no node's labels change (the pods of a burst share
        one set of thousands of names)."""
        if self._labels_seen != self._labels_version:
            self._domains_of.clear()
            self._labels_seen = self._labels_version
        found = self._domains_of.get(nodes)
        if found is None:
            # Each node's own labels (never changed in place, only replaced), not copies: 64
            # sets of hundreds of nodes would otherwise hold tens of thousands of small dicts.
            distinct: dict[tuple[tuple[str, str], ...], Mapping[str, str]] = {}
            for name in nodes:
                if labels := self._node_labels.get(name):
                    distinct.setdefault(tuple(sorted(labels.items())), labels)
            found = tuple(distinct.values())
            if len(self._domains_of) > 64:
                self._domains_of.clear()
            self._domains_of[nodes] = found
        return found


def _decrement(counter: Counter[Any], item: Any) -> None:
    left = counter[item] - 1
    if left > 0:
        counter[item] = left
    else:
        del counter[item]


class Adjusted:
    """A ``CountIndex``'s counts with ``removed`` pods taken out (each with the topology
    labels of its node) and ``added`` pods counted in every domain of the nodes they may be
    on (each with those nodes' topology labels): the upper bound of a domain's count
    whichever of its nodes a pod in flight lands on. ``domains`` counts a pod in flight as a
    new domain when one of its nodes' is not yet taken (the most domains there can be)."""

    def __init__(
        self,
        base: CountIndex,
        *,
        removed: Sequence[tuple[Mapping[str, Any], Mapping[str, str]]] = (),
        added: Sequence[tuple[Mapping[str, Any], Sequence[Mapping[str, str]]]] = (),
    ) -> None:
        self.base = base
        self.removed = removed
        self.added = added
        self._per_domain: dict[tuple[str, Selector], tuple[dict[str, int], int]] = {}

    def _matching(self, pod: Mapping[str, Any], selector: Selector) -> bool:
        return _values(_pod_labels(pod, NAMESPACE in selector[0]), selector[0]) == selector[1]

    def _tables(self, topology: str, selector: Selector) -> tuple[dict[str, int], int]:
        """(matching pods per domain, how many domains can hold one)."""
        found = self._per_domain.get((topology, selector))
        if found is not None:
            return found
        per = dict(self.base.per_domain(topology, selector))
        for pod, domains in self.removed:
            domain = domains.get(topology)
            if domain is not None and domain in per and self._matching(pod, selector):
                per[domain] -= 1
                if per[domain] <= 0:
                    del per[domain]
        taken = set(per)
        for pod, nodes in self.added:
            if not self._matching(pod, selector):
                continue
            candidates = {d for labels in nodes if (d := labels.get(topology)) is not None}
            for domain in candidates:
                per[domain] = per.get(domain, 0) + 1
            free = candidates - taken
            if free:
                taken.add(min(free))  # it takes one domain at most, wherever it lands
        found = self._per_domain[topology, selector] = (per, len(taken))
        return found

    def in_domain(self, node: Mapping[str, Any], key: str, selector: Selector) -> int:
        domain = self.base.domain_of(node, key)
        return self._tables(key, selector)[0].get(domain, 0) if domain is not None else 0

    def domains(self, key: str, selector: Selector) -> int:
        return self._tables(key, selector)[1]

    def cluster(self, selector: Selector) -> int:
        n = self.base.cluster(selector)
        n -= sum(1 for pod, _ in self.removed if self._matching(pod, selector))
        n += sum(1 for pod, _ in self.added if self._matching(pod, selector))
        return n


def counts_of(specs: CountSpecs, nodes: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]]) -> Counts:
    """``counts`` over ``nodes`` and the active ``pods`` bound to them, from scratch (``kpe test``,
    ``kpe explain``)."""
    return Counts(CountIndex.build(specs, nodes, pods))
