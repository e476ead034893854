"""`kpe check`, `kpe test` and `kpe explain` as a user runs them."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from server.cli.main import main

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "docs" / "examples"
GOOD = """apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: only-workers}
spec:
  filters:
  - {name: worker, expression: "node.metadata.name.startsWith('w')", message: not a worker node}
"""


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), out=out)
    return code, out.getvalue()


def test_check_lists_the_policies_and_exits_0_when_clean() -> None:
    code, out = run("check", str(ROOT / "policies"))
    assert code == 0
    assert "9 policies OK (generation " in out
    assert "gpu-placement" in out and "Audit" in out


def test_check_prints_every_error_and_exits_1(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text(GOOD.replace("startsWith('w')", "startsWith('w'") + "  bogus: 1\n")
    code, out = run("check", str(tmp_path))
    assert code == 1
    assert "error[KPE200] only-workers: spec.bogus: unknown field 'bogus'" in out
    assert "error[KPE300] only-workers: spec.filters[0].expression" in out
    assert out.rstrip().endswith("2 errors found.")


def test_check_json_output_is_machine_readable(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text(GOOD.replace("node.metadata", "nod.metadata"))
    code, out = run("check", "--output", "json", str(tmp_path))
    report = json.loads(out)
    assert code == 1 and report["ok"] is False
    [error] = report["errors"]
    assert (error["code"], error["policy"], error["path"], error["line"]) == ("KPE301", "only-workers", "spec.filters[0].expression", 6)


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["check"])
    assert info.value.code == 2
    code, _ = run("explain", "--pod", "missing.yaml", "--nodes", str(EXAMPLES / "nodes.yaml"))
    assert code == 2
    assert "cannot read missing.yaml" in capsys.readouterr().err


def test_test_command_shows_a_diff_for_a_failing_case_and_writes_junit(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text(GOOD)
    (tmp_path / "t.yaml").write_text(
        """apiVersion: kpe.dev/v1alpha1
kind: PolicyTest
metadata: {name: workers}
spec:
  policies: [p.yaml]
  fixtures:
    nodes:
      w1: {metadata: {name: w1}}
      m1: {metadata: {name: m1}}
    pods:
      web: {metadata: {name: web}}
  cases:
  - name: workers pass
    pod: web
    expect: {filter: {pass: [w1], unresolvable: {m1: "only-workers/worker: not a worker node"}}}
  - name: wrong expectation
    pod: web
    expect: {filter: {pass: [w1, m1]}}
"""
    )
    junit = tmp_path / "junit.xml"
    code, out = run("test", str(tmp_path / "t.yaml"), "--junit", str(junit))
    assert code == 1
    assert "PASS    workers  workers pass" in out
    assert "FAIL workers / wrong expectation" in out
    assert 'filter.pass:\n    expected: ["m1", "w1"]\n    actual:   ["w1"]' in out
    assert out.rstrip().endswith("1 passed, 1 failed")
    assert "<testsuite" in junit.read_text() and 'failures="1"' in junit.read_text()


def test_explain_shows_each_node_with_verdict_reason_and_score() -> None:
    code, out = run("explain", "--pod", str(EXAMPLES / "pod-gpu-training.yaml"), "--nodes", str(EXAMPLES / "nodes.yaml"))
    assert code == 0
    lines = {line.split()[0]: line for line in out.splitlines() if line.startswith(("gpu-", "cpu-"))}
    assert "UNRESOLVABLE" in lines["gpu-a2-maintenance"] and "maintenance-drain/not-in-maintenance" in lines["gpu-a2-maintenance"]
    assert "UNRESOLVABLE" in lines["cpu-a1"] and "gpu-placement/gpu-node: node has no GPUs" in lines["cpu-a1"]
    assert "PASS" in lines["gpu-a1"]
    code, out = run("explain", "--output", "json", "--pod", str(EXAMPLES / "pod-gpu-training.yaml"), "--nodes", str(EXAMPLES / "nodes.yaml"))
    report = json.loads(out)
    assert {n["node"]: n["verdict"] for n in report["nodes"]}["gpu-b1"] == "pass"
    assert all(isinstance(n["score"], int) for n in report["nodes"])


def test_the_installed_command_runs_as_a_process() -> None:
    done = subprocess.run([sys.executable, "-m", "server.cli", "check", "policies"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "policies OK" in done.stdout
