"""The nodes kube-scheduler sent in whole-node mode, kept for the preempt verb.

Without cluster access (``kpe serve --cluster off``, the scheduler configured with
``nodeCacheCapable: false``) kpe has no node cache, and kube-scheduler's preempt
request carries victims per node *name*, never the nodes. To check that a node's
filters pass once its victims are gone, the preempt verb needs the node object: the
filter and prioritize requests just before carried it, so kpe keeps what they sent.

- Each node is kept as JSON, encoded once per resourceVersion, and decoded only for the
  preempt verb's candidates: the decoded object a request brought takes five to six
  times its text, and kept it would hold a whole request's nodes beside the next request
  being parsed, past what ``--body-memory-bytes`` bounds (tests/test_body_memory.py saw
  a second 16 MiB request of whole nodes add 78 MiB). A request whose nodes kpe has at
  the same resourceVersion costs a dict lookup per node.
- The latest request's copy replaces an older one: kube-scheduler sends its current
  snapshot, so the newest request is the newest state kpe has seen of the node.
- Bounded by count (``MAX_NODES``, the least recently sent go first) and by age: a node
  not sent for ``FORGET_AFTER_S`` is forgotten (deleted, or no longer a candidate for
  anything), so a stale label never decides a preemption. A node the preempt verb
  does not find is one kpe cannot evaluate: each matching policy's failurePolicy
  decides (``engine.decisions.preemption``).

Filter, prioritize and preempt all run on the event loop, so no lock is needed.
With cluster access the node cache is the truth and this is not created
(``ServerState.whole_nodes`` is None).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import orjson

from engine.cluster.keptjson import dumps_kept

MAX_NODES = 10_000  # node objects kept at most (a whole node is 5 to 20 KB as decoded)
FORGET_AFTER_S = 600.0  # a node not sent for this long is forgotten


class WholeNodes:
    """Node objects by name, each with when it was last sent, oldest first (a dict keeps
    insertion order, and a node sent again is moved to the end), so both bounds drop
    from the front."""

    def __init__(self, *, max_nodes: int = MAX_NODES, forget_after_s: float = FORGET_AFTER_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_nodes = max(1, max_nodes)
        self.forget_after_s = forget_after_s
        self.clock = clock
        self._nodes: dict[str, tuple[bytes, float, str]] = {}  # name -> (the node as JSON, when last sent, its resourceVersion)

    def __len__(self) -> int:
        return len(self._nodes)

    def remember(self, nodes: Iterable[dict[str, Any]]) -> None:
        """Keep ``nodes`` (already checked to have ``metadata.name``) as the latest copies."""
        now = self.clock()
        kept = self._nodes
        for node in nodes:
            meta = node["metadata"]
            name, version = meta["name"], meta.get("resourceVersion") or ""
            old = kept.pop(name, None)  # to the end: the most recently sent
            encoded = old[0] if old is not None and version and old[2] == version else dumps_kept(node)
            kept[name] = (encoded, now, version)
        self._forget(now)

    def get(self, name: str) -> dict[str, Any] | None:
        """The latest copy of node ``name`` sent within ``forget_after_s``, or None."""
        found = self._nodes.get(name)
        if found is None or self.clock() - found[1] > self.forget_after_s:
            return None
        node: dict[str, Any] = orjson.loads(found[0])
        return node

    def nodes(self, names: Iterable[str]) -> dict[str, Mapping[str, Any]]:
        """The known nodes among ``names``, by name (the others are left out)."""
        self._forget(self.clock())
        out: dict[str, Mapping[str, Any]] = {}
        for name in names:
            node = self.get(name)
            if node is not None:
                out[name] = node
        return out

    def _forget(self, now: float) -> None:
        kept = self._nodes
        while len(kept) > self.max_nodes:
            del kept[next(iter(kept))]
        while kept:
            oldest = next(iter(kept))
            if now - kept[oldest][1] <= self.forget_after_s:
                break
            del kept[oldest]


def remember_nodes(memory: WholeNodes | None, nodes: list[dict[str, Any]] | None) -> None:
    """What the filter and prioritize verbs call with the nodes they were sent: kept only
    in whole-node mode without a node cache (``memory`` is None otherwise)."""
    if memory is None or nodes is None:
        return
    memory.remember(nodes)


__all__ = ["FORGET_AFTER_S", "MAX_NODES", "WholeNodes", "remember_nodes"]
