"""``nodeInfo``: what a node already carries, as policies see it.

    {"pods": [pod, ...], "podCount": 3, "requested": {"cpu": "1500m", "nvidia.com/gpu": "2", ...}}

``requested`` sums the pods' effective requests as kube-scheduler does
(``kube.podRequests``: regular containers and sidecars, or the largest need of
an init container where that is more, pod-level requests, plus pod overhead;
what an in-place resize holds, from the pod's status),
as canonical quantity strings for ``quantity()``; each pod's request is
rounded up as the scheduler holds it before it is added (cpu to milli-units,
everything else to whole units: NodeInfo.update adds framework.Resource's
``MilliValue()``/``Value()``, pkg/scheduler/framework/types.go), so a 1Gi node
running a 0.3Gi pod has 751619276 bytes free, not 751619276.8. The server's
cache keeps this incrementally; ``node_info_map`` builds it from scratch for
``kpe explain`` and ``kpe test``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from engine.cel.ext import kuberesources as _kuberesources
from engine.cel.ext import quantity as _q
from engine.cel.errors import EvalError
from engine.cel.ext.quantity import Quantity


def _plus(a: Quantity, b: Quantity) -> Quantity:
    return _q._add(a, b)


def _minus(a: Quantity, b: Quantity) -> Quantity:
    return _q._add(a, _q._negated(b))

TERMINAL_PHASES = frozenset(("Succeeded", "Failed"))


def pod_requests(pod: Mapping[str, Any]) -> dict[str, Quantity]:
    """The effective requests of one pod, per resource, as kube-scheduler counts them
    (``kube.podRequests``: sidecars, init containers, pod-level resources, overhead),
    each rounded up to the scheduler's unit (``kuberesources.scheduler_quantity``).
    A malformed quantity of a pod already running is the API server's problem, not a
    reason to fail a node: it is left out."""
    try:
        exact = _kuberesources.pod_requests(pod, strict=False)
    except EvalError:  # a spec that is no map at all
        return {}
    try:
        return {name: _kuberesources.scheduler_quantity(name, q) for name, q in exact.items()}
    except EvalError:  # a quantity too large to count in whole units
        return exact


def is_active(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") not in TERMINAL_PHASES


class NodeInfoAccumulator:
    """Incremental per-node view: add and remove pods as they come and go."""

    def __init__(self) -> None:
        self.pods: dict[str, Mapping[str, Any]] = {}
        self.requested: dict[str, Quantity] = {}

    def add(self, key: str, pod: Mapping[str, Any]) -> None:
        if key in self.pods:
            self.remove(key)
        self.pods[key] = pod
        for name, q in pod_requests(pod).items():
            self.requested[name] = _plus(self.requested[name], q) if name in self.requested else q

    def remove(self, key: str) -> None:
        pod = self.pods.pop(key, None)
        if pod is None:
            return
        for name, q in pod_requests(pod).items():
            if name in self.requested:
                left = _minus(self.requested[name], q)
                if left.sign() <= 0 and not any(name in pod_requests(p) for p in self.pods.values()):
                    del self.requested[name]
                else:
                    self.requested[name] = left

    def view(self) -> dict[str, Any]:
        return {
            "pods": list(self.pods.values()),
            "podCount": len(self.pods),
            "requested": {name: q.cel_string() for name, q in sorted(self.requested.items())},
        }


class NodeState:
    """One node with its ``nodeInfo`` at one moment: whoever keeps nodes (kpe's cluster cache)
    makes a new one whenever the node or its pods change, so a node's state is always the pair
    its nodeInfo entry was made for (see ``NodesByName``)."""

    __slots__ = ("name", "node", "info")

    def __init__(self, name: str, node: Mapping[str, Any], info: Mapping[str, Any]) -> None:
        self.name = name
        self.node = node
        self.info = info

    def __repr__(self) -> str:
        return f"NodeState({self.name!r})"


@dataclass(frozen=True, slots=True)
class NodesByName:
    """A request's nodes as kube-scheduler sends them with nodeCacheCapable: names, with
    the current ``NodeState`` of every node the caller knows. The equivalence cache answers
    most names without looking at their nodes; ``resolve`` gives the nodes for the rest."""

    names: list[str]
    states: Mapping[str, NodeState]

    def __len__(self) -> int:
        return len(self.names)

    def resolve(self) -> tuple[list[Mapping[str, Any]], list[str]]:
        """The known nodes, in order, and the names not known."""
        found = list(map(self.states.get, self.names))
        if None not in found:
            return [s.node for s in found if s is not None], []
        return [s.node for s in found if s is not None], [name for name, s in zip(self.names, found) if s is None]


def node_name(node: Mapping[str, Any]) -> str:
    """A node object's name ("" when it has none)."""
    meta = node.get("metadata") if type(node) is dict or isinstance(node, Mapping) else None
    if type(meta) is dict or isinstance(meta, Mapping):
        name = meta.get("name", "")
        return name if type(name) is str else str(name)
    return ""


def node_names(nodes: Iterable[Mapping[str, Any]]) -> list[str]:
    """The names of ``nodes``, in order: a list comprehension for well-formed nodes, the checks only when one is not."""
    try:
        return [node["metadata"]["name"] for node in nodes]
    except (KeyError, TypeError):
        return [node_name(node) for node in nodes]


def pod_key(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return str(meta.get("uid") or f"{meta.get('namespace', 'default')}/{meta.get('name', '')}")


def pod_name(pod: Mapping[str, Any]) -> str:
    """``namespace/name``, as people and the decision log name a pod."""
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', 'default')}/{meta.get('name', '?')}"


def node_info_map(nodes: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """``nodeInfo`` for every node, from the active pods bound to it."""
    acc: dict[str, NodeInfoAccumulator] = {}
    for node in nodes:
        name = (node.get("metadata") or {}).get("name")
        if name:
            acc[str(name)] = NodeInfoAccumulator()
    for pod in pods:
        node_name = (pod.get("spec") or {}).get("nodeName")
        if node_name in acc and is_active(pod):
            acc[node_name].add(pod_key(pod), pod)
    return {name: a.view() for name, a in acc.items()}
