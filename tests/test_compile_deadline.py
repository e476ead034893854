"""The policy webhook answers within the API server's timeout whatever it is sent: a check
gives up at its deadline (engine.policy.compiler.CompileDeadline, an injected clock here)
and refuses with KPE309; the timeout is read from the ``timeout`` the API server adds."""

from __future__ import annotations

import pytest

from engine.policy.compiler import CompileDeadline
from engine.policy.objects import check_object
from server.admission.webhook import DEFAULT_TIMEOUT_S, api_server_timeout


class Ticking:
    """A clock that moves one second each time it is read."""

    def __init__(self) -> None:
        self.now = 0.0
        self.reads = 0

    def __call__(self) -> float:
        self.now += 1.0
        self.reads += 1
        return self.now


def many_filters(n: int) -> dict[str, object]:
    return {"apiVersion": "kpe.dev/v1alpha1", "kind": "SchedulingPolicy", "metadata": {"name": "big"},
            "spec": {"filters": [{"name": f"f{i}", "expression": f"node.metadata.name != 'n{i}'"} for i in range(n)]}}


def test_a_check_past_its_deadline_stops_and_refuses_the_object() -> None:
    clock = Ticking()
    deadline = CompileDeadline.after(5.0, clock=clock)  # at 6.0: the clock passes it at its 6th reading
    checked = check_object(many_filters(20), deadline=deadline)
    assert [(e.code, e.path) for e in checked.errors] == [("KPE309", "spec")]
    assert clock.reads == 7, "it stops at the first expression past the deadline, not after all 20"


def test_a_check_within_its_deadline_is_the_check_without_one() -> None:
    clock = Ticking()
    assert check_object(many_filters(20), deadline=CompileDeadline.after(100.0, clock=clock)) == check_object(many_filters(20))
    assert clock.reads == 21


@pytest.mark.parametrize(("text", "seconds"), [
    ("5s", 5.0), ("10s", 10.0), ("30s", 30.0), ("1m0s", 60.0), ("1m30s", 90.0), ("1.5s", 1.5), ("500ms", 0.5),
    (None, DEFAULT_TIMEOUT_S), ("", DEFAULT_TIMEOUT_S), ("soon", DEFAULT_TIMEOUT_S), ("0s", DEFAULT_TIMEOUT_S),
])
def test_the_api_server_s_timeout_is_read_as_a_go_duration(text: str | None, seconds: float) -> None:
    assert api_server_timeout(text) == seconds
