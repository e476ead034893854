"""A request's deadline: the decisions stop evaluating nodes when it has passed.

kube-scheduler gives an extender call ``httpTimeout`` (5 s by default) and then
fails the pod's attempt. A policy that is slow on some nodes must not make kpe
miss that: past the deadline, the nodes not yet evaluated are answered as if
their rules had failed to evaluate, each policy's ``failurePolicy`` deciding
(Fail: the node is rejected; Ignore: it is not held against the node).
"""

from __future__ import annotations

import time
from dataclasses import dataclass


class Overdue(Exception):
    """Raised inside a per-node computation once the deadline has passed (the caller
    answers the nodes left; nothing computed after the deadline is remembered)."""


@dataclass(frozen=True, slots=True)
class Deadline:
    at: float  # time.perf_counter() value
    budget: float  # seconds, for messages

    @classmethod
    def after(cls, seconds: float, *, start: float | None = None) -> Deadline:
        begin = time.perf_counter() if start is None else start
        return cls(begin + seconds, seconds)

    def passed(self) -> bool:
        return time.perf_counter() > self.at

    def check(self) -> None:
        if time.perf_counter() > self.at:
            raise Overdue()

    @property
    def message(self) -> str:
        return f"kpe's deadline of {self.budget:g} s for this request passed before this node was evaluated (--request-deadline-s)"
