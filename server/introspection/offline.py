"""The web view's documents from a ``kpe snapshot`` file: ``kpe view --snapshot FILE``
shows the same pages with no cluster and no running kpe, for sharing in an incident
(an anonymised snapshot included).

What a snapshot holds decides what the pages can say:

- nodes, pods and namespaces: the pending pods and every pod's explanation, decided
  with the policies given (``--policies``) as ``kpe explain`` decides a pod from files;
- with ``--server`` when it was taken, what that kpe reported: the pods its gates held,
  its recent decisions and its reservations' slots (an anonymised snapshot keeps the
  gates and slots with hashed names, and no decision: their messages name nodes and pods).

A pending pod with no decision recorded is filtered once, when the view starts (every
node, the set given), so its group says what kpe would decide on the snapshot. Waits
are counted to the moment the snapshot was taken.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from engine.cluster.counts import counts_of
from engine.cluster.nodeinfo import node_info_map
from engine.cluster.projection import namespaces_by_name
from engine.cluster.snapshot import Snapshot
from engine.decisions.filtering import filter_nodes
from engine.policy.model import PolicySet
from engine.reports.diagnosis.diagnose import diagnose
from engine.reports.diagnosis.view import render_text

from server.introspection.documents import Answer, latest_filters, pending_document, policy_entries


def _taken(snapshot: Snapshot) -> float:
    try:
        return datetime.fromisoformat(snapshot.taken_at.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


class SnapshotSource:
    """The documents of a snapshot, decided with ``policy_set``."""

    def __init__(self, snapshot: Snapshot, policy_set: PolicySet, *, path: str) -> None:
        self.snapshot = snapshot
        self.policy_set = policy_set
        self.path = path
        self.kpe: Mapping[str, Any] = snapshot.kpe or {}
        self.namespaces = namespaces_by_name(snapshot.namespaces) if snapshot.namespaces else None
        self.node_info = node_info_map(snapshot.nodes, snapshot.pods)
        self._pending: Answer | None = None

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
            "policies": policy_entries(self.policy_set),
            "servedWhenTaken": self.kpe.get("generation"),
        }

    def _held(self) -> dict[str, list[dict[str, Any]]]:
        return {
            f"{h.get('namespace')}/{h.get('name')}": [{"gate": g.get("gate"), "policy": g.get("policy"), "message": g.get("message", "")}
                                                    for g in h.get("gates") or []]
            for h in self.kpe.get("gated") or [] if isinstance(h, Mapping)
        }

    def _decided(self, recorded: Mapping[str, Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
        """A filter decision for each pending pod the snapshot recorded none for, made now."""
        out = dict(recorded)
        document = pending_document(self.snapshot.pods, held={}, filters={}, now=self.now())
        wanted = {(p["namespace"], p["name"]) for p in document["pods"]} - {tuple(k.split("/", 1)) for k in recorded}
        counts = counts_of(self.policy_set.counts, self.snapshot.nodes, self.snapshot.pods)
        for pod in self.snapshot.pods:
            meta = pod.get("metadata") or {}
            key = (meta.get("namespace", "default"), meta.get("name", "?"))
            if key not in wanted:
                continue
            result = filter_nodes(self.policy_set, pod, self.snapshot.nodes, node_info=self.node_info, namespaces=self.namespaces,
                                  counts=counts)
            out[f"{key[0]}/{key[1]}"] = {"verb": "filter", "passed": len(result.passed), "rejections": result.rejections,
                                         "generation": self.policy_set.generation, "seq": None, "time": None}
        return out

    async def pending(self) -> Answer:
        if self._pending is None:
            recorded = latest_filters(self.kpe.get("decisions") or [])
            filters = await asyncio.to_thread(self._decided, recorded)
            self._pending = 200, pending_document(self.snapshot.pods, held=self._held(), filters=filters, now=self.now())
        return self._pending

    async def pod(self, namespace: str, name: str) -> Answer:
        pod = next((p for p in self.snapshot.pods if (p.get("metadata") or {}).get("namespace") == namespace
                    and (p.get("metadata") or {}).get("name") == name), None)
        if pod is None:
            return 404, {"error": f"pod {namespace}/{name} is not in the snapshot"}
        diagnosis = await asyncio.to_thread(
            diagnose, self.policy_set, pod, self.snapshot.nodes, cluster_pods=self.snapshot.pods, node_info=self.node_info,
            namespaces=self.namespaces,
        )
        data = diagnosis.to_dict()
        data["source"] = self.label
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
