"""The prioritize that follows a filter, worked out before kube-scheduler asks for it.

kube-scheduler places one pod at a time. For each, it calls kpe's filter, runs its own
score plugins over the nodes that passed, then calls kpe's prioritize with the same pod and
those nodes in the filter's order (when no other extender filters after kpe; with a single
feasible node it does not prioritize at all). Whatever kpe spends on that prioritize is on
every pod's path; spent while the scheduler runs its score plugins, it is not.

After a filter with node names, ``Lookahead.expect`` keeps the body of the prioritize that
would follow, byte for byte, with the pod as the filter decoded and checked it, and the
filter's answer schedules the scoring to run once that answer is written. A prioritize
whose body is exactly that is answered without decoding it: from the answer worked out
ahead when nothing it depends on has changed since (the serving policy set, kpe's node
cache), else scored then. Any other body goes the usual way.

Why equal bytes are enough: a filter body is used only when it decoded to an object with
exactly the keys ``Pod``, ``Nodes`` (null) and ``NodeNames``, and ends in
``,"Nodes":null,"NodeNames":X}`` where ``X`` is orjson's encoding of the names it decoded
(kube-scheduler's Go encoding is the same for node names). The expected prioritize body is
that filter body with ``X`` the passing names. Its members before ``"Nodes"`` are the
filter's, byte for byte, so they decode to the same pod; the members after them are the
last in the object, and a later member wins over an earlier one of the same key (orjson, as
Go), so ``Nodes`` is null and ``NodeNames`` the passing names, whatever came before.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from engine.equivalence.classes import EquivalenceCache
from engine.policy.model import PolicySet

_POD = b'{"Pod":'
_TAIL = b',"Nodes":null,"NodeNames":'
_KEYS = frozenset(("Pod", "Nodes", "NodeNames"))
# Expectations in a row that no prioritize took (kube-scheduler configured without
# prioritizeVerb, or another extender filtering after kpe): from then on nothing is worked out
# ahead, until a prioritize takes one again.
IDLE_AFTER = 8


@dataclass(slots=True, eq=False)
class Expected:
    """The prioritize body expected after one filter, and what answers it."""

    body: bytes
    pod: dict[str, Any]  # decoded and checked by the filter
    names: list[str]  # the nodes the filter passed, in its order: the prioritize's NodeNames
    policy_set: PolicySet
    answer: bytes | None = None  # the encoded answer, once worked out ahead
    version: int = -1  # the node cache's count of changes when ``answer`` was worked out
    matched: list[str] | None = None  # the policies that answer came from (for the decision log)


class Lookahead:
    """The one prioritize body expected next (kube-scheduler sends one pod's requests at a
    time) and whether working out answers ahead is paying off. Used on the event loop only."""

    def __init__(self, *, count: Callable[[str], None] = lambda outcome: None) -> None:
        self._expected: Expected | None = None
        self._untaken = 0
        self._count = count  # one call per expectation: "answered", "rescored" or "unasked"
        self._worth: tuple[PolicySet | None, bool] = (None, False)

    def worth_working(self, policy_set: PolicySet, reads: EquivalenceCache) -> bool:
        """Whether to work out the expected answer ahead: prioritizes have been taking them
        lately, the equivalence cache is on, some policy scores, and no scoring policy's match
        expression or score rule reads ``now`` (the answer would then be of the filter's time,
        not the prioritize's)."""
        if self._untaken >= IDLE_AFTER or reads.classes <= 0:
            return False  # without the equivalence cache an answer is not kept in encoded form
        known, worth = self._worth
        if known is not policy_set:
            scoring = [p for p in policy_set.policies if p.scores]
            worth = bool(scoring) and not any(reads.reads(p).timed(p.match.expression, *(rule.expression for rule in p.scores)) for p in scoring)
            self._worth = (policy_set, worth)
        return worth

    def count(self, outcome: str) -> None:
        self._count(outcome)

    def expect(self, raw: bytes, body: Any, pod: dict[str, Any], passed: list[str], policy_set: PolicySet) -> Expected | None:
        """Remember the prioritize that would follow the filter of body ``raw`` (decoded:
        ``body``, its pod checked: ``pod``) that passed ``passed``; None when the filter's body
        is not in the form the module docstring describes (nothing is expected then)."""
        self._drop()
        if len(passed) < 2 or not isinstance(body, dict) or body.keys() != _KEYS or body["Nodes"] is not None:
            return None
        names = body["NodeNames"]
        cut = raw.rfind(_TAIL)
        if cut < 0 or not raw.startswith(_POD) or raw[-1:] != b"}" or raw[cut + len(_TAIL) : -1] != orjson.dumps(names):
            return None
        expected = Expected(b"".join((raw[: cut + len(_TAIL)], orjson.dumps(passed), b"}")), pod, passed, policy_set)
        self._expected = expected
        return expected

    def take(self, raw: bytes) -> Expected | None:
        """The expectation whose body is exactly ``raw`` (used once), or None."""
        expected = self._expected
        if expected is None or len(raw) != len(expected.body) or raw != expected.body:
            return None
        self._expected = None
        self._untaken = 0
        return expected

    def _drop(self) -> None:
        """Forget the expectation, which no prioritize took (one that did is gone already)."""
        if self._expected is not None:
            self._expected = None
            self._untaken += 1
            self._count("unasked")
