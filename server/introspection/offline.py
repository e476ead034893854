"""The web view's documents from a ``kpe snapshot`` file: ``kpe view --snapshot FILE``
shows the same pages with no cluster and no running kpe, for sharing in an incident
(an anonymised snapshot included).

What a snapshot holds decides what the pages can say:

- nodes, pods and namespaces: the pending pods and every pod's explanation, decided
  with the policies given (``--policies``) as ``kpe explain`` decides a pod from files;
- with ``--server`` when it was taken, what that kpe reported: the pods its gates held,
  its recent decisions and its reservations' slots (an anonymised snapshot keeps the
  gates and slots with hashed names, and no decision: their messages name nodes and pods).

A pending pod with no decision recorded is filtered once (every node, the set given), so
its group says what kpe would decide on the snapshot: in a thread that starts at the
first pending page, longest-waiting pod first; on a large snapshot that page says how
many are decided so far (the rest show as not tried yet) and a reload shows more. Waits
are counted to the moment the snapshot was taken.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from engine.cluster.counts import counts_of
from engine.cluster.nodeinfo import node_info_map, pod_name
from engine.cluster.projection import namespaces_by_name
from engine.cluster.snapshot import Snapshot
from engine.decisions.filtering import filter_nodes
from engine.policy.model import PolicySet
from engine.reports.diagnosis.diagnose import diagnose
from engine.reports.diagnosis.view import render_text

from server.introspection.documents import Answer, created_at, latest_filters, pending_document, policy_entries


def _taken(snapshot: Snapshot) -> float:
    try:
        return datetime.fromisoformat(snapshot.taken_at.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


class SnapshotSource:
    """The documents of a snapshot, decided with ``policy_set``."""

    def __init__(self, snapshot: Snapshot, policy_set: PolicySet, *, path: str, first_wait: float | None = None) -> None:
        self.snapshot = snapshot
        self.policy_set = policy_set
        self.path = path
        self.kpe: Mapping[str, Any] = snapshot.kpe or {}
        self.namespaces = namespaces_by_name(snapshot.namespaces) if snapshot.namespaces else None
        self.node_info = node_info_map(snapshot.nodes, snapshot.pods)
        # Filter decisions made here for pending pods the snapshot recorded none for (see pending).
        self.first_wait = first_wait  # seconds the pending page waits for them (None: until all are made)
        self._made: dict[str, Mapping[str, Any]] = {}
        self._wanted = 0
        self._decider: threading.Thread | None = None
        self._done = threading.Event()
        self._final: Answer | None = None

    @property
    def label(self) -> str:
        anonymised = ", anonymised" if self.snapshot.anonymised else ""
        return f"snapshot {self.path}, taken {self.snapshot.taken_at or '?'}{anonymised}"

    def now(self) -> float:
        return _taken(self.snapshot)

    async def policies(self) -> Answer:
        return 200, {
            "generation": self.policy_set.generation,
            "path": " ".join(self.policy_set.files),
            "files": list(self.policy_set.files),
            "lastLoad": {"ok": True, "at": None, "servingGeneration": self.policy_set.generation, "errors": []},
            "fallback": None,
            "reloads": {},
            "history": [],
            "policies": policy_entries(self.policy_set),
            "servedWhenTaken": self.kpe.get("generation"),
        }

    def _held(self) -> dict[str, list[dict[str, Any]]]:
        return {
            f"{h.get('namespace')}/{h.get('name')}": [{"gate": g.get("gate"), "policy": g.get("policy"), "message": g.get("message", "")}
                                                    for g in h.get("gates") or []]
            for h in self.kpe.get("gated") or [] if isinstance(h, Mapping)
        }

    def _decide(self, wanted: list[Mapping[str, Any]]) -> None:
        """A filter decision for each pod of ``wanted``, made now, longest waiting first; each
        one is kept as it is made, so a page shows the decisions so far."""
        counts = counts_of(self.policy_set.counts, self.snapshot.nodes, self.snapshot.pods)
        for pod in wanted:
            result = filter_nodes(self.policy_set, pod, self.snapshot.nodes, node_info=self.node_info, namespaces=self.namespaces, counts=counts)
            decided = {"verb": "filter", "passed": len(result.passed), "rejections": result.rejections,
                       "generation": self.policy_set.generation, "seq": None, "time": None}
            self._made[pod_name(pod)] = decided  # one key set: safe to read meanwhile
        self._done.set()

    async def pending(self) -> Answer:
        if self._final is not None:
            return self._final
        recorded = latest_filters(self.kpe.get("decisions") or [])
        if self._decider is None:
            # Every node for every pod with no recorded decision: minutes for thousands of pods on
            # thousands of nodes. Made in a thread of its own, so the first page does not wait for
            # all of them: it waits ``first_wait`` at most, then shows what is decided so far.
            document = pending_document(self.snapshot.pods, held={}, filters={}, now=self.now())
            waiting = {f"{p['namespace']}/{p['name']}" for p in document["pods"]} - recorded.keys()
            wanted = sorted((p for p in self.snapshot.pods if pod_name(p) in waiting), key=lambda p: created_at(p) or 0.0)
            self._wanted = len(wanted)
            self._decider = threading.Thread(target=self._decide, args=(wanted,), name="kpe-view-decide", daemon=True)
            self._decider.start()
        await asyncio.to_thread(self._done.wait, self.first_wait)
        done = self._done.is_set()  # read before the decisions: what is copied then holds all of them
        made = dict(self._made)
        document = pending_document(self.snapshot.pods, held=self._held(), filters={**recorded, **made}, now=self.now())
        if not done:
            document["deciding"] = {"decided": len(made), "of": self._wanted}
            return 200, document
        self._final = 200, document  # every decision made: the snapshot's pending pods change no more
        return self._final

    async def pod(self, namespace: str, name: str, *, text: bool = True) -> Answer:
        pod = next((p for p in self.snapshot.pods if (p.get("metadata") or {}).get("namespace") == namespace
                    and (p.get("metadata") or {}).get("name") == name), None)
        if pod is None:
            return 404, {"error": f"pod {namespace}/{name} is not in the snapshot"}
        def explained() -> dict[str, Any]:
            return diagnose(self.policy_set, pod, self.snapshot.nodes, cluster_pods=self.snapshot.pods, node_info=self.node_info,
                            namespaces=self.namespaces).to_dict()

        data = await asyncio.to_thread(explained)
        data["source"] = self.label
        if text:
            data["text"] = render_text(data, limit=0)
        return 200, data

    async def reservations(self) -> Answer:
        recorded = self.kpe.get("reservations")
        if not isinstance(recorded, Mapping):
            listed = [{"name": r.name, "policy": r.policy, "file": r.file, "mode": r.mode, "returnSlots": r.return_slots, "slots": r.slots}
                      for r in self.policy_set.reservations]
            return 200, {"error": "the snapshot holds no slots (taken without --server): the reservations as the policies declare them",
                         "reservations": listed}
        return 200, dict(recorded)

    async def decisions(self, *, verb: str | None, pod: str | None, limit: int) -> Answer:
        entries = [e for e in self.kpe.get("decisions") or [] if isinstance(e, Mapping)
                   and (verb is None or e.get("verb") == verb) and (pod is None or e.get("pod") == pod)]
        document: dict[str, Any] = {"decisions": entries[:limit]}
        if "decisions" not in self.kpe:
            document["error"] = "the snapshot holds no decisions (taken without --server, or anonymised)"
        return 200, document
