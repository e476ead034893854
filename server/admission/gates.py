"""The gate controller: lifts kpe's scheduling gates when the policies admit the pod.

Only the leader (see ``leader``) runs it. It re-evaluates the pods holding
kpe gates when pods or nodes change (debounced), when the policies are
reloaded, and every ``resync`` seconds. A gate is removed with a
conflict-safe JSONPatch: ``test`` the pod's uid and the gates as read, then
``replace`` the gates without the lifted ones, so a concurrent change (or a
new pod under the same name) makes the patch fail (422) and the pod is
re-read and decided again. Only gates kpe's webhook added (recorded in the
``kpe.dev/gates`` annotation) are ever removed, never another controller's
or a user's, even one that bears a kpe policy's gate name; each removal
records an Event on the pod naming the policy and how long the pod waited.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from engine.decisions.admission import admit, gate_names, held_by_kpe, is_admitted, kpe_gates
from engine.cluster.nodeinfo import pod_key
from engine.policy.model import PolicySet

from server.cluster.kube import ApiError
from server.cluster.leader import micro_time, run_passes
from server.state import ServerState

log = logging.getLogger("kpe.gates")
MAX_ATTEMPTS = 4


@dataclass
class HeldPod:
    """A pod kpe is holding, for /apis/v1/gated."""

    namespace: str
    name: str
    gates: dict[str, str] = field(default_factory=dict)  # gate -> current message
    since: float = 0.0


def created_at(pod: dict[str, Any]) -> float:
    text = (pod.get("metadata") or {}).get("creationTimestamp")
    if not text:
        return time.time()
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp()
    except ValueError:
        return time.time()


class GateController:
    def __init__(self, state: ServerState, *, resync_s: float, debounce_s: float) -> None:
        self.state = state
        self.resync = resync_s
        self.debounce = debounce_s
        self.held: dict[str, HeldPod] = {}
        self.released = 0
        # Pods this controller released (as the API answered the patch) until the
        # cache shows the release: without them, the next pass would not count them
        # as admitted and could release past a quota.
        self.unseen_releases: dict[str, dict[str, Any]] = {}

    # -- decisions -------------------------------------------------------------
    def plan(self, policy_set: PolicySet, pod: dict[str, Any], view: ClusterView) -> tuple[list[str], dict[str, str]]:
        """(kpe gates to lift now, messages of the kpe gates that stay)."""
        present = [g for g in gate_names(pod) if g in kpe_gates(pod)]
        if not present:
            return [], {}
        decisions = {d.gate: d for d in admit(policy_set, pod, nodes=view.nodes, pods=view.pods, admitted=view.admitted, namespaces=self.state.namespaces(), dra=self.state.dra()).decisions if not d.audit}
        lift, keep = [], {}
        for gate in present:
            decision = decisions.get(gate)
            self.state.metrics.admission_evaluations.labels(
                policy_set.gates[gate].name if gate in policy_set.gates else "(removed)",
                "error" if decision is not None and decision.error else "evaluated",
            ).inc()
            # A gate whose policy no longer applies to the pod holds nothing back.
            if decision is None or decision.satisfied:
                lift.append(gate)
            else:
                keep[gate] = decision.message
        return lift, keep

    def view(self) -> ClusterView:
        """The cache's pods with this controller's releases the cache has not shown yet."""
        cache = self.state.cache
        assert cache is not None
        pods = cache.pods()
        if self.unseen_releases:
            overlay = self.unseen_releases
            current = {pod_key(p): p for p in pods}
            for key in [k for k in overlay if k not in current or _caught_up(current[k], overlay[k])]:
                del overlay[key]  # deleted, or the cache has heard of the release (or something newer)
            pods = [overlay.get(pod_key(p), p) for p in pods]
        return ClusterView(cache.nodes(), pods, [p for p in pods if is_admitted(p)])

    async def reconcile(self) -> int:
        """One pass over the gated pods, oldest first; returns how many gates were lifted.
        Each decision sees the pods released before it in this pass, so a burst of
        pods judged together cannot all fit into the same free quota."""
        policy_set = self.state.store.current
        cache = self.state.cache
        assert cache is not None
        if not cache.gated and not self.held and not self.unseen_releases:
            return 0  # nobody waits at a gate: no pass over every pod
        view = self.view()
        lifted = 0
        seen: set[str] = set()
        gated = sorted((p for p in view.pods if not (p.get("spec") or {}).get("nodeName") and held_by_kpe(p)), key=admission_order)
        for pod in gated:
            meta = pod.get("metadata") or {}
            key = f"{meta.get('namespace', 'default')}/{meta.get('name')}"
            seen.add(key)
            lift, keep = await self.state.worker.run(self.plan, policy_set, pod, view)
            if lift:
                count, after = await self.lift(policy_set, pod, lift, view)
                lifted += count
                if after is not None:
                    self._released(view, after)
            if keep:
                held = self.held.setdefault(key, HeldPod(meta.get("namespace", "default"), str(meta.get("name")), since=created_at(pod)))
                held.gates = keep
            else:
                self.held.pop(key, None)
        for key in set(self.held) - seen:
            del self.held[key]
        self._export_gauges(policy_set)
        return lifted

    def _released(self, view: ClusterView, pod: dict[str, Any]) -> None:
        """Count a pod the API just answered for as released in this pass and later ones."""
        key = pod_key(pod)
        self.unseen_releases[key] = pod
        view.pods = [pod if pod_key(p) == key else p for p in view.pods]
        view.admitted = [p for p in view.admitted if pod_key(p) != key]
        if is_admitted(pod):
            view.admitted.append(pod)

    async def lift(self, policy_set: PolicySet, pod: dict[str, Any], gates: list[str], view: ClusterView) -> tuple[int, dict[str, Any] | None]:
        """Remove ``gates`` (re-reading and re-deciding on conflicts): how many were
        lifted, and the pod as the API answered the patch."""
        client = self.state.client
        assert client is not None
        meta = pod.get("metadata") or {}
        namespace, name = meta.get("namespace", "default"), str(meta.get("name"))
        for _attempt in range(MAX_ATTEMPTS):
            current = (pod.get("spec") or {}).get("schedulingGates") or []
            remaining = [g for g in current if g.get("name") not in gates]
            uid = (pod.get("metadata") or {}).get("uid")
            # The gates alone could match a pod recreated under the same name (a
            # StatefulSet's), which was never decided: the uid must match too.
            patch = [{"op": "test", "path": "/metadata/uid", "value": uid}] if uid else []
            patch += [
                {"op": "test", "path": "/spec/schedulingGates", "value": current},
                {"op": "replace", "path": "/spec/schedulingGates", "value": remaining},
            ]
            try:
                after = await client.patch_pod(namespace, name, patch)
            except ApiError as exc:
                if exc.status == 404:
                    return 0, None
                if exc.status not in (409, 422):
                    log.warning("could not lift gates of %s/%s: %s", namespace, name, exc)
                    return 0, None
                try:
                    pod = await client.get_pod(namespace, name)
                except ApiError as read_error:
                    if read_error.status == 404:
                        return 0, None
                    raise
                gates, _ = self.plan(policy_set, pod, view)
                if not gates:
                    return 0, None
                continue
            waited = max(0.0, time.time() - created_at(pod))
            for gate in gates:
                policy = policy_set.gates.get(gate)
                self.state.metrics.gate_wait.labels(policy.name if policy else "unknown").observe(waited)
                await self._event(pod, gate, policy.name if policy else "(removed policy)", waited)
            self.released += len(gates)
            return len(gates), after if isinstance(after, dict) and after.get("metadata") else None
        return 0, None

    async def _event(self, pod: dict[str, Any], gate: str, policy: str, waited: float) -> None:
        client = self.state.client
        assert client is not None
        meta = pod.get("metadata") or {}
        namespace = meta.get("namespace", "default")
        now = micro_time()
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta.get('name')}.kpe-", "namespace": namespace},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": meta.get("name"), "namespace": namespace, "uid": meta.get("uid")},
            "reason": "SchedulingGateLifted",
            "message": f"kpe policy {policy} lifted scheduling gate {gate} after {waited:.1f}s",
            "type": "Normal",
            "source": {"component": "kpe"},
            "reportingComponent": "kpe",
            "firstTimestamp": now[:19] + "Z",
            "lastTimestamp": now[:19] + "Z",
            "count": 1,
        }
        try:
            await client.create_event(namespace, event)
        except ApiError as exc:
            log.warning("could not record event for %s/%s: %s", namespace, meta.get("name"), exc)

    def _export_gauges(self, policy_set: PolicySet) -> None:
        counts: dict[str, int] = {p.name: 0 for p in policy_set.policies if p.admission is not None}
        for held in self.held.values():
            for gate in held.gates:
                owner = policy_set.gates.get(gate)
                if owner is not None:
                    counts[owner.name] = counts.get(owner.name, 0) + 1
        for name, n in counts.items():
            self.state.metrics.gated_pods.labels(name).set(n)

    # -- loop ------------------------------------------------------------------
    async def run(self, stop: asyncio.Event, leading: asyncio.Event) -> None:
        cache = self.state.cache
        assert cache is not None

        def follow() -> None:
            if self.held:
                # A follower holds nothing: the leader reports the gated pods.
                self.held = {}
                self._export_gauges(self.state.store.current)

        await run_passes(
            stop, leading, synced=cache.synced, changed=cache.subscribe(), reloaded=self.state.store.subscribe(),
            reconcile=self.reconcile, follow=follow, name="gate controller",
            wait_s=self.resync, settle_s=self.debounce,  # let a burst of changes settle
        )


@dataclass
class ClusterView:
    """What one reconcile pass decides against: nodes, pods and the admitted pods."""

    nodes: list[dict[str, Any]]
    pods: list[dict[str, Any]]
    admitted: list[Any]


def admission_order(pod: dict[str, Any]) -> tuple[str, str, str]:
    """Oldest first (creationTimestamp is RFC 3339 in UTC, so it sorts as text), then by name."""
    meta = pod.get("metadata") or {}
    return (str(meta.get("creationTimestamp") or ""), str(meta.get("namespace") or ""), str(meta.get("name") or ""))


def _caught_up(cached: dict[str, Any], released: dict[str, Any]) -> bool:
    """Whether the cache's copy is at least as new as the one the patch returned. A released pod
    the cache shows bound has no resourceVersion there (bound pods are projected without one)
    and no gate: it has caught up."""
    have = str((cached.get("metadata") or {}).get("resourceVersion") or "")
    mine = str((released.get("metadata") or {}).get("resourceVersion") or "")
    if have.isdigit() and mine.isdigit():
        return int(have) >= int(mine)
    return have == mine or not held_by_kpe(cached)

