"""A vetoed preemption made visible: an Event on the pending pod naming kpe's rule.

kube-scheduler's preemption result has no field for why an extender removed a node,
so when kpe's preempt verb keeps a node out (a filter would still reject the pod there
once the victims are gone, a ``preemption`` rule or a reservation forbids the
evictions) the pod's condition only says ``preemption: no candidate node for
preemption``. The user sees a full node and a preemption that "found nothing". The
verb therefore posts one Event on the pod, ``reason: PreemptionVetoed``, naming the
policy and rule (``engine.decisions.preemption.veto``), for example::

    kpe kept node n1 out of preemption: accel-only/accelerated: node is not accelerated

- At most one per pod per ``EVERY_S``: kube-scheduler retries a pending pod's
  preemption on every attempt, and an Event per attempt would flood the pod's
  events with the same sentence.
- Only with cluster access and when kpe may write to the cluster (``--controllers``
  not empty: with none, kpe never writes), and never in the answer's way: the
  Event is posted by a task of its own and a failure is a logged warning.
- Only ``server.cluster`` talks to the API: the Event goes through the client's
  ``create_event``, shaped as the gate controller's Events are.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from engine.decisions.preemption import veto

if TYPE_CHECKING:
    from server.cluster.kube import KubeClient

log = logging.getLogger("kpe.extender")

REASON = "PreemptionVetoed"
EVERY_S = 60.0  # at most one Event per pod this often
SHOWN = 3  # nodes named in one Event's message; the rest are counted
MAX_PODS = 10_000  # pods whose last Event is remembered (the oldest go first)
MAX_MESSAGE = 1024  # what kube-scheduler's own event recorder keeps of a message
ANNOTATION = "kpe.dev/preemption-vetoes"  # {"nodes": how many, "vetoed": {node: "policy/rule: message"}} on the Event
ANNOTATED = 20  # nodes the annotation names at most


def vetoes(rejected: Mapping[str, str]) -> dict[str, str]:
    """The nodes a policy's rule kept out of preemption, with the ``policy/rule: message``,
    by node name."""
    out: dict[str, str] = {}
    for node in sorted(rejected):
        why = veto(rejected[node])
        if why is not None:
            out[node] = why
    return out


def message(vetoed: Mapping[str, str]) -> str:
    """The Event's message: one node with its rule, or the first few with theirs and how many more."""
    nodes = list(vetoed)
    if len(nodes) == 1:
        text = f"kpe kept node {nodes[0]} out of preemption: {vetoed[nodes[0]]}"
    else:
        shown = "; ".join(f"{n}: {vetoed[n]}" for n in nodes[:SHOWN])
        more = f"; and {len(nodes) - SHOWN} more" if len(nodes) > SHOWN else ""
        text = f"kpe kept {len(nodes)} nodes out of preemption: {shown}{more}"
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 3] + "..."


class VetoEvents:
    """When each pod last got an Event, oldest first (a pod told again moves to the end),
    so both bounds drop from the front; and the tasks posting Events, kept referenced
    until they finish."""

    def __init__(self, *, every_s: float = EVERY_S, max_pods: int = MAX_PODS, clock: Callable[[], float] = time.monotonic) -> None:
        self.every_s = every_s
        self.max_pods = max(1, max_pods)
        self.clock = clock
        self._last: dict[str, float] = {}
        self._posting: set[asyncio.Task[None]] = set()

    def due(self, pod: str) -> bool:
        """Whether ``pod`` may get an Event now; if so, it counts as told."""
        now = self.clock()
        last = self._last
        while last and (len(last) >= self.max_pods or now - next(iter(last.values())) >= self.every_s):
            del last[next(iter(last))]
        if pod in last:
            return False
        last[pod] = now
        return True

    def notice(self, client: KubeClient | None, may_write: bool, pod: Mapping[str, Any], rejected: Mapping[str, str]) -> None:
        """Post the Event for the nodes a rule kept out of ``pod``'s preemption, in the
        background, if there are any and the pod was not told within ``every_s``."""
        if client is None or not may_write:
            return
        vetoed = vetoes(rejected)
        if not vetoed:
            return
        meta = pod.get("metadata") or {}
        namespace, name = str(meta.get("namespace") or "default"), str(meta.get("name") or "")
        if not name or not self.due(f"{namespace}/{name}"):
            return
        task = asyncio.get_running_loop().create_task(_post(client, event(pod, vetoed)))
        self._posting.add(task)
        task.add_done_callback(self._posting.discard)

    @property
    def pending(self) -> int:
        """Events being posted now."""
        return len(self._posting)

    async def drain(self) -> None:
        """Wait for the Events being posted (tests)."""
        while self._posting:
            await asyncio.gather(*list(self._posting), return_exceptions=True)


def event(pod: Mapping[str, Any], vetoed: Mapping[str, str]) -> dict[str, Any]:
    """A core/v1 Event on ``pod``, as the gate controller's (``server.admission.gates``), for
    the nodes ``vetoed`` (node -> ``policy/rule: message``), also as JSON in an annotation."""
    meta = pod.get("metadata") or {}
    namespace = meta.get("namespace") or "default"
    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "generateName": f"{meta.get('name')}.kpe-",
            "namespace": namespace,
            # The same vetoes for tools: ``kpe explain pod`` prints them as the decision log has them.
            "annotations": {ANNOTATION: json.dumps({"nodes": len(vetoed), "vetoed": dict(list(vetoed.items())[:ANNOTATED])}, separators=(",", ":"))},
        },
        "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": meta.get("name"), "namespace": namespace, "uid": meta.get("uid")},
        "reason": REASON,
        "message": message(vetoed),
        "type": "Normal",
        "source": {"component": "kpe"},
        "reportingComponent": "kpe",
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }


async def _post(client: KubeClient, body: dict[str, Any]) -> None:
    target = f"{body['involvedObject']['namespace']}/{body['involvedObject']['name']}"
    try:
        await client.create_event(str(body["metadata"]["namespace"]), body)
    except Exception as exc:  # noqa: BLE001 - an Event is never worth more than a warning
        log.warning("could not record the %s event for %s: %s", REASON, target, exc)


__all__ = ["ANNOTATION", "EVERY_S", "REASON", "SHOWN", "VetoEvents", "event", "message", "vetoes"]
