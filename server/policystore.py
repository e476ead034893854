"""The served policy set: one reference, swapped whole, and a watcher that reloads it.

A reload compiles the new set on the side; only a clean load replaces the
reference, so a request that started on one generation finishes on it and a
broken change leaves the last good set serving. The outcome of the last load
(errors included) is kept for ``/apis/v1/policies`` and metrics.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

from engine.errors import PolicyError, PolicyLoadError
from engine.loader import load
from engine.policy import PolicySet

log = logging.getLogger("kpe.policies")


@dataclass(frozen=True)
class LoadOutcome:
    ok: bool
    generation: str  # of the set serving after this load
    errors: tuple[PolicyError, ...] = ()
    at: float = field(default_factory=time.time)


class PolicyStore:
    def __init__(self, path: str) -> None:
        self.path = path
        self._current: PolicySet | None = None
        self.last: LoadOutcome | None = None
        self.reloads = {"success": 0, "failure": 0, "unchanged": 0}
        self._listeners: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []

    @property
    def current(self) -> PolicySet:
        """The set every new request uses; read it once per request."""
        if self._current is None:
            raise RuntimeError("no policy set loaded yet")
        return self._current

    @property
    def ready(self) -> bool:
        return self._current is not None

    def load_initial(self) -> PolicySet:
        """The first load: errors here stop start-up (there is nothing to fall back to)."""
        policy_set = load([self.path])
        self._current = policy_set
        self.last = LoadOutcome(True, policy_set.generation)
        log.info("policies loaded", extra={"generation": policy_set.generation, "policies": len(policy_set), "path": self.path})
        return policy_set

    def reload(self) -> LoadOutcome:
        """Compile the files as they are now and swap if they are clean and different."""
        previous = self._current
        try:
            candidate = load([self.path])
        except PolicyLoadError as exc:
            self.reloads["failure"] += 1
            generation = previous.generation if previous else ""
            self.last = LoadOutcome(False, generation, tuple(exc.errors))
            for error in exc.errors:
                log.error("policy reload failed; still serving generation %s: %s", generation, error.render(), extra={"error": error.to_dict()})
            return self.last
        if previous is not None and candidate.generation == previous.generation:
            self.reloads["unchanged"] += 1
            self.last = LoadOutcome(True, previous.generation)
            return self.last
        self._current = candidate  # the swap: one reference, never mutated in place
        self.reloads["success"] += 1
        self.last = LoadOutcome(True, candidate.generation)
        log.info(
            "policies reloaded",
            extra={"generation": candidate.generation, "previous": previous.generation if previous else None, "policies": len(candidate)},
        )
        for loop, event in self._listeners:
            loop.call_soon_threadsafe(event.set)  # reloads run in a worker thread
        return self.last

    def subscribe(self) -> asyncio.Event:
        """An event set after every successful swap (the gate controller re-evaluates on it)."""
        event = asyncio.Event()
        self._listeners.append((asyncio.get_running_loop(), event))
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
