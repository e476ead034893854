"""Shared test set-up: a fixed clock for every test, and pass counts of the CEL
conformance suite, per file, at the end of the run."""

from __future__ import annotations

import sys
from collections import Counter
from typing import Any

import pytest

from engine.decisions import evaluation
from engine.cel.ext.timestamps import Timestamp, parse_timestamp

_conformance: dict[str, Counter[str]] = {}

# `now` for every rule a test evaluates without choosing it: the engine's default
# (engine.decisions.evaluation.current_time, which the server uses on every request) reads
# the wall clock, and CI runs at any hour. A test that depends on the hour passes
# `now=` itself; `@pytest.mark.any_hour` runs a test with the default clock at each
# of ANY_HOUR, so one that forgets to fails at whatever hour the suite runs.
DEFAULT_NOW = "2026-11-21T12:00:00Z"
ANY_HOUR = ("00:30", "03:00", "12:00", "23:59")
_WALL_CLOCK = evaluation.current_time


class Clock:
    """The clock the engine reads in a test; set ``clock.now`` to move it."""

    def __init__(self, at: str) -> None:
        self.now: Timestamp = parse_timestamp(at)

    def __call__(self) -> Timestamp:
        return self.now


def pytest_configure(config: Any) -> None:
    config.addinivalue_line("markers", f"any_hour: run the test with the default clock at each of {', '.join(ANY_HOUR)} UTC")


def pytest_generate_tests(metafunc: Any) -> None:
    if metafunc.definition.get_closest_marker("any_hour"):
        metafunc.parametrize("clock", [f"2026-11-21T{h}:00Z" for h in ANY_HOUR], indirect=True, ids=[f"clock-{h}" for h in ANY_HOUR])


@pytest.fixture(autouse=True)
def clock(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Clock:
    """Replace the wall clock wherever engine or server code reads it by name."""
    fixed = Clock(getattr(request, "param", DEFAULT_NOW))
    for name, module in list(sys.modules.items()):
        if name.partition(".")[0] in ("engine", "server") and vars(module).get("current_time") is _WALL_CLOCK:
            monkeypatch.setattr(module, "current_time", fixed)
    return fixed


def pytest_runtest_logreport(report: Any) -> None:
    if report.when != "call" or "test_conformance_case" not in report.nodeid:
        return
    case_id = report.nodeid.split("[", 1)[1].rstrip("]")
    file = case_id.split("/", 1)[0]
    outcome = "passed" if report.passed and not hasattr(report, "wasxfail") else "failed"
    _conformance.setdefault(file, Counter())[outcome] += 1


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _conformance:
        return
    terminalreporter.section("CEL conformance")
    total_pass = total = 0
    for file in sorted(_conformance):
        c = _conformance[file]
        n = c["passed"] + c["failed"]
        total_pass += c["passed"]
        total += n
        terminalreporter.write_line(f"{file:14} {c['passed']:5d} / {n:5d}")
    terminalreporter.write_line(f"{'all':14} {total_pass:5d} / {total:5d}  ({100 * total_pass / max(total, 1):.1f}%)")
