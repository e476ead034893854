"""The introspection API's documents, built once for both of their readers: the JSON
endpoints (``server.introspection.endpoints``) and the web view
(``server.introspection.web``), which shows the same documents as pages. A page's JSON
(``Accept: application/json``) is therefore the API's own, and what a person sees is
never computed a second way.

``LiveSource`` reads a running kpe's state; ``server.introspection.offline`` reads a
``kpe snapshot`` file with the same methods, so the view works offline too.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any, Protocol

from engine.cluster.kubefilters import priority
from engine.cluster.nodeinfo import TERMINAL_PHASES, node_name, pod_key, pod_name
from engine.decisions.admission import gate_names
from engine.policy.model import PolicySet
from engine.reports.diagnosis.diagnose import diagnose, preemption_vetoes, scheduled_condition
from engine.reports.diagnosis.view import render_text

from server.cluster.cache import is_projected
from server.state import ServerState

Document = dict[str, Any]
Answer = tuple[int, Document]  # an HTTP status and the document (with "error" when it is not 200)


class Source(Protocol):
    """Where the documents come from: a running kpe or a snapshot file."""

    @property
    def label(self) -> str: ...

    def now(self) -> float: ...

    async def policies(self) -> Answer: ...

    async def pending(self) -> Answer: ...

    async def pod(self, namespace: str, name: str, *, text: bool = True) -> Answer:
        """``kpe explain pod``'s document; with ``text`` its ``text`` as the command prints it with
        ``--limit 0`` (a line a node: megabytes at 5,000 nodes, so a page that shows less asks without)."""
        ...

    async def reservations(self) -> Answer: ...

    async def decisions(self, *, verb: str | None, pod: str | None, limit: int) -> Answer: ...


def policy_entries(policy_set: PolicySet) -> list[Document]:
    """Each policy of the set as ``/apis/v1/policies`` lists it."""
    return [
        {
            "name": p.name,
            "file": p.file,
            "mode": p.mode,
            "failurePolicy": p.failure_policy,
            "filters": [r.name for r in p.filters],
            "scores": [{"name": r.name, "weight": r.weight} for r in p.scores],
            "admissionGate": p.admission.gate if p.admission else None,
            "preemption": bool(p.preemption),
            # paramsFrom: the ConfigMap, and what is wrong with it ("" when its values serve).
            **({"paramsFrom": {"configMap": "/".join(p.params_from), "problem": p.params_problem}} if p.params_from else {}),
            # Served all the same: what its compile warned of (KPE600 and the like), as kpe check prints it.
            **({"warnings": [w.render() for w in p.warnings]} if p.warnings else {}),
        }
        for p in policy_set.policies
    ]


def created_at(pod: Mapping[str, Any]) -> float | None:
    """The pod's creationTimestamp as seconds since the epoch (None without one)."""
    stamp = (pod.get("metadata") or {}).get("creationTimestamp")
    if not isinstance(stamp, str):
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def latest_filters(entries: Iterable[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """The latest filter decision of each pod among decision log ``entries`` (newest first)."""
    latest: dict[str, Mapping[str, Any]] = {}
    for entry in entries:
        if entry.get("verb") == "filter":
            latest.setdefault(str(entry.get("pod")), entry)
    return latest


def _rejections(entry: Mapping[str, Any]) -> dict[str, int]:
    """Nodes rejected per ``policy/rule`` in a logged filter decision: its own count when it has
    one, else counted from the nodes it names (cut when the entry was too large to keep whole)."""
    counted = entry.get("rejections")
    if isinstance(counted, Mapping):
        return {str(k): int(v) for k, v in counted.items()}
    out: dict[str, int] = {}
    for reasons in (entry.get("failed"), entry.get("unresolvable")):
        for reason in (reasons or {}).values() if isinstance(reasons, Mapping) else ():
            label = str(reason).partition(":")[0]
            out[label] = out.get(label, 0) + 1
    return out


def pending_document(
    pods: Iterable[Mapping[str, Any]], *, held: Mapping[str, Sequence[Mapping[str, Any]]], filters: Mapping[str, Mapping[str, Any]], now: float,
) -> Document:
    """Every pod not bound, finished or being deleted, with what is known of why it waits: the
    gates kpe holds it at (``held``, by ``namespace/name``), kpe's last filter of it (``filters``)
    and kube-scheduler's PodScheduled condition, and how long it has waited at ``now``."""
    out: list[Document] = []
    for pod in pods:
        meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
        if spec.get("nodeName") or status.get("phase") in TERMINAL_PHASES or meta.get("deletionTimestamp"):
            continue
        key = pod_name(pod)
        created = created_at(pod)
        last = filters.get(key)
        out.append({
            "namespace": meta.get("namespace", "default"),
            "name": meta.get("name", "?"),
            "schedulerName": spec.get("schedulerName") or "default-scheduler",
            "createdAt": meta.get("creationTimestamp"),
            "waitingSeconds": round(max(0.0, now - created), 1) if created is not None else None,
            "gates": gate_names(pod),
            "heldBy": list(held.get(key, ())),
            "podScheduled": scheduled_condition(pod),
            "lastFilter": None if last is None else {
                "seq": last.get("seq"), "time": last.get("time"), "generation": last.get("generation"),
                "passed": last.get("passed"), "rejections": _rejections(last),
            },
        })
    out.sort(key=lambda p: (p["namespace"], p["name"]))
    return {"pods": out}


class LiveSource:
    """The documents of this running kpe."""

    def __init__(self, state: ServerState, *, clock: Callable[[], float] = time.time) -> None:
        self.state = state
        self.clock = clock

    @property
    def label(self) -> str:
        return f"kpe, serving generation {self.state.store.current.generation}"

    def now(self) -> float:
        return self.clock()

    async def policies(self) -> Answer:
        state = self.state
        current, last = state.store.current, state.store.last
        return 200, {
            "generation": current.generation,
            "path": state.store.path,
            "files": list(current.files),
            "lastLoad": {
                "ok": last.ok if last else True,
                "at": last.at if last else None,
                "servingGeneration": last.generation if last else current.generation,
                "errors": [e.to_dict() | {"text": e.render()} for e in (last.errors if last else ())],
            },
            # Why the set serving is not the cluster's own (a start whose first load was refused); null otherwise.
            "fallback": state.store.degraded,
            "reloads": dict(state.store.reloads),
            # The last reloads that swapped the set or were refused, newest first: what each changed.
            "history": list(reversed(state.store.history)),
            "policies": policy_entries(current),
            # Since this replica started, per policy: nodes rejected, rule errors, Audit's would-rejects.
            "counted": state.metrics.per_policy(),
        }

    def held(self) -> dict[str, list[Document]]:
        """The gates kpe holds each pod at, by ``namespace/name``, with the policy and its message."""
        gates = self.state.gates
        if gates is None:
            return {}
        policy_set = self.state.store.current
        return {
            f"{h.namespace}/{h.name}": [{"gate": g, "policy": policy_set.gates[g].name if g in policy_set.gates else None, "message": m}
                                         for g, m in sorted(h.gates.items())]
            for h in gates.held.values()
        }

    async def pending(self) -> Answer:
        cache = self.state.cache
        if cache is None or not cache.synced.is_set():
            return 503, {"error": "pending pods are known only with cluster access, once kpe's cache has synced", "pods": []}
        pods, held, log, now = cache.pods(), self.held(), self.state.decisions, self.now()

        def build() -> Document:
            return pending_document(pods, held=held, filters=latest_filters(log.recent(verb="filter", limit=log.size)), now=now)

        # Every pod in the cache and the decision log's filters are read (tens of ms at 20,000 pods):
        # in a thread, so the verbs' requests on the event loop are not held up behind it.
        return 200, await asyncio.to_thread(build)

    async def pod(self, namespace: str, name: str, *, text: bool = True) -> Answer:
        """``kpe explain pod`` for a pod in kpe's cache, as the extender verbs see it."""
        state = self.state
        wanted = f"{namespace}/{name}"
        if not namespace or not name or "/" in name:
            return 400, {"error": f"pod must be NAMESPACE/NAME, not {wanted!r}"}
        if state.cache is None:
            return 503, {"error": "kpe runs without cluster access: it has no pod cache to find the pod in; use kpe explain pod with --kubeconfig"}
        if not state.cache.synced.is_set():
            return 503, {"error": "kpe's node and pod cache is not synced yet"}
        cache = state.cache
        policy_set = state.store.current
        pods = cache.pods()
        pod = next((p for p in pods if (p.get("metadata") or {}).get("namespace") == namespace and (p.get("metadata") or {}).get("name") == name), None)
        if pod is None:
            return 404, {"error": f"pod {wanted} is not in kpe's cache (deleted, or not seen yet)"}
        nodes = cache.nodes()
        # The pods in flight before nodeInfo, as the filter reads them (server.verbs.inflight.counted):
        # a pod seen bound in between then counts in flight, rather than nowhere.
        in_flight = cache.in_flight.on([node_name(n) for n in nodes], besides=pod_key(pod), priority=priority(pod))  # as the preempt verb counts them
        # nodeInfo is rebuilt only in the evaluation worker (see server.http.worker); its views are
        # replaced, never changed, so a copy of the map stays right. The explanation itself (seconds
        # on a large cluster) runs in a thread of its own, not in the worker the verbs queue on.
        info = await state.worker.run(lambda: dict(cache.node_info))
        # The reservations' slots as this replica's controller last saw them (what its filter uses).
        latest = state.reservations.latest() if state.reservations is not None else None
        namespaces, dra = state.namespaces(), state.dra()

        def explained() -> Document:  # the document too (a tenth of a second at 5,000 nodes) is built off the event loop
            return diagnose(
                policy_set, pod, nodes, cluster_pods=pods, node_info=info,
                slots=latest.slots if latest is not None else None, homes=latest.homes if latest is not None else None,
                placeholder_namespace=state.settings.reservation_namespace, namespaces=namespaces, dra=dra, in_flight=in_flight,
            ).to_dict()

        data = await asyncio.to_thread(explained)
        # What this replica's preempt verb last did for the pod, from its decision log (as kpe explain pod --server adds it).
        preempted = state.decisions.recent(verb="preempt", pod=wanted, limit=1)
        if preempted:
            entry = preempted[0]
            at = datetime.fromtimestamp(float(entry.get("time") or 0), timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
            data["preemption"] = preemption_vetoes(entry.get("rejected") or {}, unchecked=entry.get("unchecked"), source=f"kpe's decision log, preempt at {at}")
        if is_projected(pod):
            data["status"]["notes"].append("kpe's cache keeps only the fields its policies read of a bound pod: rules reading others see them missing.")
        data["source"] = "kpe's cache"
        if text:
            data["text"] = await asyncio.to_thread(render_text, data, limit=0)
        return 200, data

    async def reservations(self) -> Answer:
        state = self.state
        policy_set = state.store.current
        leader = state.elector.is_leader if state.elector is not None else False
        if state.reservations is None or state.cache is None or not state.cache.synced.is_set():
            listed = [{"name": r.name, "policy": r.policy, "file": r.file, "mode": r.mode, "returnSlots": r.return_slots, "slots": r.slots}
                      for r in policy_set.reservations]
            return 503, {"leader": leader, "generation": policy_set.generation,
                         "error": "slots are known only with cluster access, once the cache has synced", "reservations": listed}
        return 200, {"leader": leader, "generation": policy_set.generation, "namespace": state.settings.reservation_namespace,
                     **state.reservations.status()}

    async def decisions(self, *, verb: str | None, pod: str | None, limit: int) -> Answer:
        return 200, {"decisions": self.state.decisions.recent(verb=verb, pod=pod, limit=limit)}
