"""The served policy set: one reference, swapped whole, and a watcher that reloads it.

A reload compiles the new set on the side; only a clean load replaces the
reference, so a request that started on one generation finishes on it and a
broken change leaves the last good set serving. The outcome of the last load
(errors included) is kept for ``/apis/v1/policies`` and metrics.

Swap guards (``add_swap_guard``) run in the reload thread between the compile
and the swap, and may hold the new set back: the node and pod cache relists
pods there when the new set reads pod fields it dropped (``server.cluster.cache``).

Policies with ``paramsFrom`` are compiled with the ConfigMaps' values (``params``, a
``ParamsSource``: ``server.cluster.configmaps`` with a cluster, none found without one);
a set that names a ConfigMap not watched yet is compiled again once it is listed, and a
ConfigMap's change is a reload like a file's. Reloads run one at a time.

With ``--policy-source cluster`` the set comes from SchedulingPolicy and Reservation objects
(``objects``, an ``ObjectSource``: ``server.cluster.policyobjects`` keeps them as the watch
delivers them) instead of files, under the same rule: the whole set compiles or the last good
set keeps serving. Each outcome says which objects, at which ``metadata.generation``, it
judged, and the store remembers those of the set serving, for the status kpe writes on them
(``server.cluster.policystatus``), and the objects themselves, for the leader to keep in the
cluster (``server.cluster.lastgood``).

A first load of the cluster's objects that is refused does not stop kpe (``fall_back``): the
webhook that checks objects is ``failurePolicy: Ignore``, so a broken object can be stored while
kpe is down, and a replica that then refused to start would fail every pod kube-scheduler sends
it. It serves the last good set the leader kept instead, or, with none, the objects that compile
without the refused ones, and says so (``degraded``) until a reload takes the whole current set.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from engine.policy.compiler import CostLimits
from engine.errors import PolicyError, PolicyLoadError
from engine.policy.loader import discover, load
from engine.policy.model import SYSTEM_NAMESPACES, PolicySet
from engine.policy.objects import ObjectKey, PolicyObject, load_objects
from engine.policy.params import ClusterParams, Ref, Unreadable

log = logging.getLogger("kpe.policies")


@dataclass(frozen=True)
class LoadOutcome:
    ok: bool
    generation: str  # of the set serving after this load
    errors: tuple[PolicyError, ...] = ()
    at: float = field(default_factory=time.time)
    # The cluster source's objects this load judged, with their metadata.generation.
    objects: tuple[tuple[ObjectKey, int], ...] = ()


Snapshot = tuple[tuple[str, str, int, int], ...]
HISTORY = 10  # reloads kept in PolicyStore.history


def changes(before: PolicySet, after: PolicySet) -> dict[str, list[str]]:
    """The policies ``after`` adds, removes and changes (its spec as written, params from a
    ConfigMap included) against ``before``, by name."""

    def specs(policy_set: PolicySet) -> dict[str, str]:
        return {p.name: json.dumps([p.source, p.params, p.enforce, p.fail_closed], sort_keys=True, default=str) for p in policy_set.policies}

    old, new = specs(before), specs(after)
    return {"added": sorted(new.keys() - old.keys()), "removed": sorted(old.keys() - new.keys()),
            "changed": sorted(name for name in new.keys() & old.keys() if new[name] != old[name])}


class ParamsSource(Protocol):
    """The ConfigMaps ``paramsFrom`` names (``engine.policy.params``)."""

    def values(self) -> Mapping[Ref, Mapping[str, str] | Unreadable | None]: ...

    def covers(self, refs: frozenset[Ref]) -> bool: ...

    def ensure(self, refs: frozenset[Ref]) -> None: ...


class ObjectSource(Protocol):
    """The SchedulingPolicy and Reservation objects in the cluster, as they are now."""

    def snapshot(self) -> tuple[PolicyObject, ...]: ...


class NoConfigMaps:
    """A server without a cluster: no ConfigMap is ever found."""

    def values(self) -> Mapping[Ref, Mapping[str, str] | Unreadable | None]:
        return {}

    def covers(self, refs: frozenset[Ref]) -> bool:
        return True

    def ensure(self, refs: frozenset[Ref]) -> None:
        return None


class PolicyStore:
    """``allow_empty``: whether a path with no policies may serve (``--allow-empty-policies``);
    otherwise the first load and every reload refuse an empty set (KPE402).

    Before a reload the files must hold still: ``stable_checks`` looks at their sizes and
    modification times, ``stable_interval_s`` apart, until two looks agree (``sleep`` is
    injectable for tests)."""

    def __init__(
        self,
        path: str,
        *,
        allow_empty: bool = False,
        cost_limits: CostLimits | None = None,
        excluded_namespaces: Iterable[str] = SYSTEM_NAMESPACES,
        stable_interval_s: float = 0.1,
        stable_checks: int = 20,
        sleep: Callable[[float], None] = time.sleep,
        objects: ObjectSource | None = None,
    ) -> None:
        self.path = path
        # The cluster source (--policy-source cluster); None: the files under ``path``.
        self.objects = objects
        # The objects of the set serving now (what the leader keeps as the last good set) and of
        # the last load tried; ``served_objects`` and ``_tried`` are worked out from them.
        self.served_specs: tuple[PolicyObject, ...] = ()
        self._tried_specs: tuple[PolicyObject, ...] = ()
        # Why the set serving is not the cluster's current one, when a first load fell back
        # (``fall_back``); None once a load takes the current set whole.
        self.degraded: str | None = None
        self._outcome_listeners: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []
        self.allow_empty = allow_empty
        self.cost_limits = cost_limits
        self.excluded_namespaces = frozenset(excluded_namespaces)
        self.stable_interval_s = stable_interval_s
        self.stable_checks = stable_checks
        self.sleep = sleep
        self._current: PolicySet | None = None
        self.last: LoadOutcome | None = None
        self.reloads = {"success": 0, "failure": 0, "unchanged": 0}
        # The last reloads that swapped the set or were refused, newest last, for the web view's
        # policies page: what changed, not only that something did (``changes``).
        self.history: deque[dict[str, Any]] = deque(maxlen=HISTORY)
        self._listeners: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []
        self._guards: list[Callable[[PolicySet], None]] = []
        # Where paramsFrom's ConfigMaps come from; None: policies use their declared params.
        self.params: ParamsSource | None = None
        self._reloading = threading.Lock()

    @property
    def current(self) -> PolicySet:
        """The set every new request uses; read it once per request."""
        if self._current is None:
            raise RuntimeError("no policy set loaded yet")
        return self._current

    @property
    def served_objects(self) -> dict[ObjectKey, int]:
        """The objects of the set serving, with the ``metadata.generation`` served."""
        return {o.key: o.generation for o in self.served_specs}

    @property
    def _tried(self) -> tuple[tuple[ObjectKey, int], ...]:
        """The objects the last load tried, with their generations, in order (a LoadOutcome's)."""
        return tuple(sorted((o.key, o.generation) for o in self._tried_specs))

    @property
    def ready(self) -> bool:
        return self._current is not None

    def load_initial(self) -> PolicySet:
        """The first load: errors here stop start-up (there is nothing to fall back to)."""
        policy_set = self._load()
        self._current = policy_set
        self.served_specs = self._tried_specs
        self.last = LoadOutcome(True, policy_set.generation, objects=self._tried)
        log.info("policies loaded", extra={"generation": policy_set.generation, "policies": len(policy_set), "path": self.source})
        return policy_set

    @property
    def source(self) -> str:
        """Where the policies come from, for logs: the path, or ``cluster``."""
        return "cluster" if self.objects is not None else self.path

    def snapshot(self) -> Snapshot | None:
        """What the policy files look like now (name, target, size, mtime); None while they are moving under us."""
        files, _ = discover([self.path])
        out = []
        try:
            for file in files:
                info = os.stat(file)
                out.append((str(file), os.path.realpath(file), info.st_size, info.st_mtime_ns))
        except OSError:
            return None
        return tuple(out)

    def wait_until_stable(self) -> bool:
        """Wait until two looks at the files, ``stable_interval_s`` apart, agree (an editor
        writing in place, or a copy in progress, changes size or mtime in between); False if
        they were still changing after ``stable_checks`` looks."""
        before = self.snapshot()
        for _ in range(self.stable_checks):
            self.sleep(self.stable_interval_s)
            now = self.snapshot()
            if now is not None and now == before:
                return True
            before = now
        return False

    def _load(self) -> PolicySet:
        if self.objects is not None:
            return self._load_objects(self.objects.snapshot())
        params = self.params
        policy_set = load([self.path], allow_empty=self.allow_empty, cost_limits=self.cost_limits, excluded_namespaces=self.excluded_namespaces,
                          cluster_params=params.values() if params is not None else None)
        refs = frozenset(p.params_from for p in policy_set.policies if p.params_from is not None)
        if params is not None and not params.covers(refs):
            params.ensure(refs)  # a ConfigMap not watched yet: its values, then the set again
            policy_set = load([self.path], allow_empty=self.allow_empty, cost_limits=self.cost_limits,
                              excluded_namespaces=self.excluded_namespaces, cluster_params=params.values())
        return policy_set

    def _load_objects(self, objects: tuple[PolicyObject, ...]) -> PolicySet:
        self._tried_specs = objects
        return self._compile_objects(objects, allow_empty=self.allow_empty)

    def _compile_objects(self, objects: tuple[PolicyObject, ...], *, allow_empty: bool) -> PolicySet:
        params = self.params

        def compiled(values: ClusterParams | None) -> PolicySet:
            return load_objects(objects, allow_empty=allow_empty, cost_limits=self.cost_limits,
                                excluded_namespaces=self.excluded_namespaces, cluster_params=values)

        policy_set = compiled(params.values() if params is not None else None)
        refs = frozenset(p.params_from for p in policy_set.policies if p.params_from is not None)
        if params is not None and not params.covers(refs):
            params.ensure(refs)  # as for files: a ConfigMap not watched yet, then the set again
            policy_set = compiled(params.values())
        return policy_set

    def reload(self) -> LoadOutcome:
        """Compile the files as they are now, once they hold still, and swap if they are clean and different."""
        with self._reloading:
            outcome = self._reload()
        for loop, event in self._outcome_listeners:
            loop.call_soon_threadsafe(event.set)
        return outcome

    def _reload(self) -> LoadOutcome:
        previous = self._current
        # Objects come whole from the API server: no file is half-written.
        if self.objects is None and not self.wait_until_stable():
            log.warning("policy files still changing after %d checks; loading them as they are", self.stable_checks, extra={"path": self.path})
        try:
            candidate = self._load()
        except PolicyLoadError as exc:
            self.reloads["failure"] += 1
            generation = previous.generation if previous is not None else ""
            self.last = LoadOutcome(False, generation, tuple(exc.errors), objects=self._tried)
            for error in exc.errors:
                log.error("policy reload failed; still serving generation %s: %s", generation, error.render(), extra={"error": error.to_dict()})
            self.history.append({"at": self.last.at, "ok": False, "generation": generation, "errors": len(exc.errors),
                                 "policies": sorted({e.policy for e in exc.errors if e.policy})})
            return self.last
        if previous is not None and candidate.generation == previous.generation:
            self.reloads["unchanged"] += 1
            # The same content, maybe at other generations (an edit undone), or the current set
            # that a start fell back from, now whole and equal to the fallback.
            self.served_specs = self._tried_specs
            self.last = LoadOutcome(True, previous.generation, objects=self._tried)
            self._recovered()
            return self.last
        for guard in list(self._guards):
            try:
                guard(candidate)  # may wait: the old set serves meanwhile
            except Exception:  # noqa: BLE001 - a guard's failure must not stop reloads
                log.exception("policy swap guard failed", extra={"generation": candidate.generation})
        # Logged before the swap: whoever sees the new set serving can read why its params are what they are.
        for policy in candidate.policies:
            if policy.params_problem:
                log.warning("policy %s: %s (parameterNotFoundAction %s)", policy.name, policy.params_problem,
                            "Deny" if policy.params_error else "UseDefaults", extra={"generation": candidate.generation, "policy": policy.name})
        self._current = candidate  # the swap: one reference, never mutated in place
        self.served_specs = self._tried_specs
        self.reloads["success"] += 1
        self.last = LoadOutcome(True, candidate.generation, objects=self._tried)
        self.history.append({"at": self.last.at, "ok": True, "generation": candidate.generation,
                             "previous": previous.generation if previous is not None else None,
                             **(changes(previous, candidate) if previous is not None else {})})
        self._recovered()
        log.info(
            "policies reloaded",
            extra={"generation": candidate.generation, "previous": previous.generation if previous is not None else None, "policies": len(candidate)},
        )
        for loop, event in self._listeners:
            loop.call_soon_threadsafe(event.set)  # reloads run in a worker thread
        return self.last

    def fall_back(self, refused: PolicyLoadError, kept: tuple[PolicyObject, ...] | None) -> PolicySet:
        """The first load of the cluster's objects was ``refused``: serve something safe rather
        than nothing. ``kept``: the last good set the leader kept in the cluster (None: none was
        found). That set if it compiles (an object it has keeps its protection at the version
        that was served); otherwise the current objects without the refused ones (an object
        never served protected nothing yet), dropping objects named by errors until the rest
        compiles, down to the empty set. The refusal stays the store's last outcome, so status,
        metrics and ``/readyz``'s detail report it until a reload takes the whole current set."""
        assert self.objects is not None, "files have no last good set: a refused first load of files stops start-up"
        policy_set: PolicySet | None = None
        serving: tuple[PolicyObject, ...] = ()
        if kept is not None:
            try:
                policy_set, serving = self._compile_objects(kept, allow_empty=True), kept
                how = f"the last good set kept in the cluster ({len(kept)} objects)"
            except PolicyLoadError as exc:
                log.error("the last good set kept in the cluster does not compile either (%s); serving the objects that do",
                          exc.errors[0].render() if exc.errors else "no error")
        if policy_set is None:
            serving, errors = self._tried_specs, list(refused.errors)
            while policy_set is None:
                named = {e.location.file for e in errors}
                left = tuple(o for o in serving if o.key.file not in named)
                # An error that names no object (a clash across the set) leaves nothing to single out.
                serving = left if len(left) < len(serving) else ()
                try:
                    policy_set = self._compile_objects(serving, allow_empty=True)
                except PolicyLoadError as exc:
                    errors = list(exc.errors)
            how = (f"the {len(serving)} objects of the cluster that compile without the refused ones"
                   if kept is None else f"the {len(serving)} objects of the cluster that compile (the last good set kept did not)")
        self._current = policy_set
        self.served_specs = serving
        # The refused load's objects stay the ones judged (``_compile_objects`` does not move them).
        self.last = LoadOutcome(False, policy_set.generation, tuple(refused.errors), objects=self._tried)
        refused_names = sorted({e.location.file or "the set" for e in refused.errors})
        self.degraded = f"the policies in the cluster are refused ({', '.join(refused_names)}); serving {how}"
        for error in refused.errors:
            log.error("policies refused at start; serving a fallback set, generation %s: %s", policy_set.generation, error.render(),
                      extra={"error": error.to_dict()})
        log.error("kpe serves %s, generation %s, until the cluster's policies compile: fix or delete %s",
                  how, policy_set.generation, ", ".join(refused_names), extra={"generation": policy_set.generation})
        return policy_set

    def _recovered(self) -> None:
        if self.degraded is not None:
            log.info("the cluster's policies compile again: serving them", extra={"generation": self.current.generation})
        self.degraded = None

    def add_swap_guard(self, guard: Callable[[PolicySet], None]) -> None:
        """Call ``guard(new_set)`` before every swap, in the reload thread; the swap waits for it."""
        self._guards.append(guard)

    def remove_swap_guard(self, guard: Callable[[PolicySet], None]) -> None:
        if guard in self._guards:
            self._guards.remove(guard)

    def subscribe(self) -> asyncio.Event:
        """An event set after every successful swap (the gate controller re-evaluates on it)."""
        event = asyncio.Event()
        self._listeners.append((asyncio.get_running_loop(), event))
        return event

    def subscribe_outcomes(self) -> asyncio.Event:
        """An event set after every reload, whatever its outcome (status reports refusals too)."""
        event = asyncio.Event()
        self._outcome_listeners.append((asyncio.get_running_loop(), event))
        return event

    async def watch(self, *, debounce_ms: int, stop: asyncio.Event) -> None:
        """Reload when anything under the policy path changes.

        The directory itself is watched (not the files), so a ConfigMap update
        that swaps the ``..data`` symlink is seen like any other change.
        """
        from watchfiles import awatch

        target = Path(self.path)
        watch_path = target if target.is_dir() else target.parent
        async for _changes in awatch(watch_path, stop_event=stop, debounce=debounce_ms, recursive=True, force_polling=False):
            await asyncio.to_thread(self.reload)
