"""Shared test set-up: pass counts of the CEL conformance suite, per file, at the end of the run."""

from __future__ import annotations

from collections import Counter
from typing import Any

_conformance: dict[str, Counter[str]] = {}


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
