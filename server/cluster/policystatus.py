"""The status kpe writes on its SchedulingPolicy and Reservation objects (``--policy-source
cluster`` with ``--controllers ...,status``): whether each is served, and why not.

Per object: ``observedGeneration`` (the ``metadata.generation`` judged), the condition
``Ready`` (True: served in the set kpe serves; False with reason ``Invalid`` when the object
itself is refused, naming each error's field path, or ``SetNotServed`` when another object broke
the set and this version of it is not served), ``servedGeneration`` (the generation of the set
kpe serves), ``decisions`` and ``warnings``. While Ready is False, the condition ``Stalled`` is
True with the same reason and message: kstatus (Flux's health checks, ``kubectl wait``-style
tools) reads observedGeneration and the abnormal-true conditions ``Reconciling`` and ``Stalled``
of any object, and reports a stalled one as failed instead of waiting out its timeout. Argo CD
reads Ready through deploy/argocd/health.lua.

Only the Lease's leader writes, through the status subresource (a write never touches the
spec users and GitOps tools own), and only when the status it works out differs from the
object's: ``lastTransitionTime`` moves only when Ready's status does, so a pass over an
unchanged cluster writes nothing. An object whose newest generation the store has not
judged yet keeps its status until it has (no "pending" write a moment before the real one).
A write carries the resourceVersion it was worked out from: on a conflict (409) the watch
brings the newer object and the next pass tries again; a 403 (RBAC without the status
permission) is logged and retried only at the next resync.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from engine.errors import PolicyError
from engine.policy.model import POLICY_PREFIX, PolicySet
from engine.policy.objects import ObjectKey, PolicyObject

from server.cluster.kube import ApiError, KubeClient
from server.cluster.leader import run_passes
from server.cluster.policyobjects import PLURALS, PolicyObjects, collection

if TYPE_CHECKING:
    from server.reload.store import LoadOutcome, PolicyStore

log = logging.getLogger("kpe.policies")

Obj = dict[str, Any]
READY = "Ready"
STALLED = "Stalled"  # kstatus' abnormal-true condition: True while kpe does not serve the object's generation
SERVED, INVALID, SET_NOT_SERVED = "Served", "Invalid", "SetNotServed"
MESSAGE_LIMIT = 4000  # a condition's message is read in `kubectl describe`; the errors are all in kpe's log
RESYNC_S = 60.0
DECISIONS = (("filter", "filters"), ("score", "scores"), ("admission", "admission"), ("preemption", "preemption"))


def rfc3339(at: float) -> str:
    return datetime.fromtimestamp(at, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def describe_error(error: PolicyError) -> str:
    """One error as a condition's message says it: the field path, what is wrong, the code."""
    where = f"{error.path}: " if error.path else ""
    return f"{where}{error.message} ({error.code})"


def _limited(text: str) -> str:
    return text if len(text) <= MESSAGE_LIMIT else text[: MESSAGE_LIMIT - 1] + "…"


def decisions(obj: PolicyObject) -> str:
    """The decisions the object takes part in, as ``kpe check``'s DECISIONS column says them."""
    spec = obj.data.get("spec")
    if not isinstance(spec, Mapping):
        return ""
    if obj.key.kind == "Reservation":
        return "score" if spec.get("mode") == "Preferred" else "filter"
    return ",".join(name for name, field in DECISIONS if spec.get(field))


def warnings(obj: PolicyObject, serving: PolicySet) -> list[str]:
    """What kpe warns about for an object it serves: what ``kpe check`` warns of (KPE600), and
    a ``paramsFrom`` ConfigMap it could not use."""
    name = POLICY_PREFIX + obj.key.name if obj.key.kind == "Reservation" else obj.key.name
    policy = serving.get(name)
    if policy is None:
        return []
    found = [_limited(describe_error(w)) for w in policy.warnings]
    if policy.params_problem:
        action = "Deny" if policy.params_error else "UseDefaults"
        found.append(f"spec.paramsFrom: {policy.params_problem} (parameterNotFoundAction {action})")
    return found


def ready_condition(obj: PolicyObject, outcome: LoadOutcome, served: Mapping[ObjectKey, int], serving: PolicySet) -> tuple[str, str, str]:
    """Ready's status, reason and message for ``obj`` after ``outcome`` (the store's last load)."""
    generation = serving.generation
    if outcome.ok:
        return "True", SERVED, f"served in policy set generation {generation}"
    own = [e for e in outcome.errors if e.location.file == obj.key.file]
    if own:
        listed = "; ".join(describe_error(e) for e in own)
        return "False", INVALID, f"refused: {listed}; kpe keeps serving policy set generation {generation}"
    others = "; ".join(f"{e.location.file or 'the set'}: {describe_error(e)}" for e in outcome.errors)
    if served.get(obj.key) == obj.generation:
        return "True", SERVED, f"served in policy set generation {generation}; the newest set is refused: {others}"
    return "False", SET_NOT_SERVED, f"not served: the policy set with it is refused: {others}; kpe keeps serving policy set generation {generation}"


def desired_status(obj: PolicyObject, current: Obj | None, *, outcome: LoadOutcome, served: Mapping[ObjectKey, int], serving: PolicySet, now: float) -> Obj | None:
    """The status ``obj`` should have (``current``: the one it has); None while the store has not
    judged its newest generation yet."""
    if (obj.key, obj.generation) not in outcome.objects:
        return None
    status, reason, message = ready_condition(obj, outcome, served, serving)
    had = {c.get("type"): c for c in (current or {}).get("conditions") or [] if isinstance(c, dict)}

    def condition(kind: str, value: str) -> Obj:
        previous = had.get(kind)
        since = previous.get("lastTransitionTime") if previous is not None and previous.get("status") == value else None
        return {"type": kind, "status": value, "observedGeneration": obj.generation, "lastTransitionTime": since or rfc3339(now),
                "reason": reason, "message": _limited(message)}

    conditions = [condition(READY, status)] + ([condition(STALLED, "True")] if status == "False" else [])
    out: Obj = {"observedGeneration": obj.generation, "servedGeneration": serving.generation, "decisions": decisions(obj), "conditions": conditions}
    found = warnings(obj, serving) if status == "True" else []
    if found:
        out["warnings"] = found
    return out


class StatusWriter:
    """Writes ``desired_status`` on every object while ``leading``, after every reload and
    every change the watches see, and every ``resync_s``."""

    def __init__(self, client: KubeClient, objects: PolicyObjects, store: PolicyStore, *, resync_s: float = RESYNC_S,
                 clock: Callable[[], float] = time.time) -> None:
        self.client = client
        self.objects = objects
        self.store = store
        self.resync_s = resync_s
        self.clock = clock
        self.writes = {"written": 0, "conflict": 0, "forbidden": 0, "failed": 0}

    async def run(self, stop: asyncio.Event, leading: asyncio.Event) -> None:
        await run_passes(stop, leading, synced=None, changed=self.objects.observed, reloaded=self.store.subscribe_outcomes(),
                         reconcile=self.write_pass, follow=lambda: None, name="status", wait_s=self.resync_s, settle_s=0)

    async def write_pass(self) -> int:
        """Write every status that differs from the object's; how many were written."""
        outcome, store = self.store.last, self.store
        if outcome is None or not store.ready:
            return 0
        serving, served = store.current, dict(store.served_objects)
        written = 0
        for key, obj in list(self.objects.objects.items()):
            raw = self.objects.raw.get(key) or {}
            current = raw.get("status")
            desired = desired_status(obj, current, outcome=outcome, served=served, serving=serving, now=self.clock())
            if desired is None or desired == current:
                continue
            written += await self._write(key, raw, desired)
        return written

    async def _write(self, key: ObjectKey, raw: Obj, status: Obj) -> int:
        version = str((raw.get("metadata") or {}).get("resourceVersion") or "")
        patch = {"metadata": {"resourceVersion": version}, "status": status}
        try:
            answer = await self.client.merge_patch(f"{collection(key.kind)}/{key.name}/status", patch)
        except ApiError as exc:
            if exc.status == 409:
                self.writes["conflict"] += 1  # the watch brings the newer object; the next pass works from it
                log.debug("status of %s: conflict, written again from the newer object", key.file)
            elif exc.status == 404:
                pass  # deleted meanwhile: the watch says so
            elif exc.status in (401, 403):
                self.writes["forbidden"] += 1
                log.error("kpe may not write the status of %s (%s %s): grant patch on %s.kpe.dev/status (deploy/cluster-policies/rbac.yaml)",
                          key.file, exc.status, exc.reason, PLURALS[key.kind])
            else:
                self.writes["failed"] += 1
                log.warning("status of %s not written: %s", key.file, exc)
            return 0
        self.writes["written"] += 1
        self.objects.record(answer)
        return 1
