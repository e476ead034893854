"""`kpe check`, `kpe test` and `kpe explain` as a user runs them."""

from __future__ import annotations

import importlib.metadata
import io
import json
import subprocess
import sys
import tomllib
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
    assert "12 policies OK (generation " in out
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
    code, _ = run("explain", "--policies", str(ROOT / "policies"), "--pod", "missing.yaml", "--nodes", str(EXAMPLES / "nodes.yaml"))
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
    code, out = run("explain", "--policies", str(ROOT / "policies"), "--pod", str(EXAMPLES / "pod-gpu-training.yaml"), "--nodes", str(EXAMPLES / "nodes.yaml"))
    assert code == 0
    lines = {line.split()[0]: line for line in out.splitlines() if line.startswith(("gpu-", "cpu-"))}
    assert "UNRESOLVABLE" in lines["gpu-a2-maintenance"] and "maintenance-drain/not-in-maintenance" in lines["gpu-a2-maintenance"]
    assert "UNRESOLVABLE" in lines["cpu-a1"] and "gpu-placement/gpu-node: node has no GPUs" in lines["cpu-a1"]
    assert "PASS" in lines["gpu-a1"]
    code, out = run("explain", "--output", "json", "--policies", str(ROOT / "policies"), "--pod", str(EXAMPLES / "pod-gpu-training.yaml"), "--nodes", str(EXAMPLES / "nodes.yaml"))
    report = json.loads(out)
    assert {n["node"]: n["verdict"] for n in report["nodes"]}["gpu-b1"] == "pass"
    # A final score for the nodes that pass (spread over them, as kube-scheduler scores only those), none for the others.
    assert {n["node"]: n["score"] for n in report["nodes"]} == {"gpu-a1": 10, "gpu-b1": 0, "gpu-a2-maintenance": None, "cpu-a1": None}


def test_explain_names_each_input_a_policy_reads_that_files_did_not_give() -> None:
    argv = ["explain", "--output", "json", "--policies", str(ROOT / "policies" / "keep-general-off-gpu.yaml"),
            "--pod", str(EXAMPLES / "pod-gpu-benchmark.yaml"), "--nodes", str(EXAMPLES / "nodes.yaml")]
    code, out = run(*argv)
    assert code == 0
    assert json.loads(out)["lacking"] == [
        {"policy": "keep-general-off-gpu", "input": "dra", "note": "dra has no DRA objects: none can be given from files"},
        {"policy": "keep-general-off-gpu", "input": "namespaceObject", "note": "namespaceObject is null: no --namespaces given"},
    ]
    # Given, it is not named; the verdict it changed changes with it (docs/guides/namespaces-and-params.md).
    code, out = run(*argv, "--namespaces", str(EXAMPLES / "namespaces.yaml"))
    assert [lack["input"] for lack in json.loads(out)["lacking"]] == ["dra"]


def test_the_installed_command_runs_as_a_process() -> None:
    done = subprocess.run([sys.executable, "-m", "server.cli", "check", "policies"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "policies OK" in done.stdout


def test_check_of_a_path_that_does_not_exist_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nonexistent"
    code, out = run("check", str(missing))
    assert (code, out) == (2, "")
    assert capsys.readouterr().err == f"kpe check: {missing}: error[KPE100] no such file or directory\n"


def test_test_of_a_path_that_does_not_exist_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nonexistent"
    code, out = run("test", str(ROOT / "policies" / "tests"), str(missing))
    assert (code, out) == (2, "")
    assert capsys.readouterr().err == f"kpe test: {missing}: no such file or directory\n"


def declared_version() -> str:
    return str(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"])


def test_version_prints_kpe_and_the_installed_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.startswith(f"kpe {importlib.metadata.version('kube-policy-extender')} (commit ")


def test_version_of_a_checkout_never_installed_is_the_one_pyproject_declares(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def not_installed(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", not_installed)
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.startswith(f"kpe {declared_version()} (commit ")


def test_serve_refuses_a_log_level_it_does_not_know_and_names_the_ones_it_does(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    code, _ = run("serve", "--policies", str(ROOT / "policies"), "--log-level", "verbose")
    assert code == 2
    assert capsys.readouterr().err == "kpe serve: --log-level must be debug, info, warning or error, not 'verbose'\n"
    monkeypatch.setenv("KPE_LOG_LEVEL", "verbose")
    code, _ = run("serve", "--policies", str(ROOT / "policies"))
    assert code == 2
    assert capsys.readouterr().err == "kpe serve: --log-level must be debug, info, warning or error, not 'verbose'\n"


def serve_help(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> str:
    monkeypatch.setenv("COLUMNS", "100")
    with pytest.raises(SystemExit) as info:
        main(["serve", "--help"])
    assert info.value.code == 0
    return capsys.readouterr().out


def test_serve_help_groups_the_settings_under_headings(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    text = serve_help(monkeypatch, capsys)
    assert text.startswith(
        "usage: kpe serve [options]\n\nkpe serve: run the extender under uvicorn, over HTTP or HTTPS. Every option is also a KPE_*\n"
        "environment variable: a flag wins over the variable, the variable over the default.\n\noptions:\n"
    )
    options, _ = text.split("\n\nExit codes: ")  # the exit codes end it, in wrapped prose
    headings = [line for line in options.splitlines() if line.endswith(":") and not line.startswith(" ")]
    assert headings == [
        "options:",
        "policies:",
        "listening and TLS:",
        "cluster access and cache:",
        "admission and gates:",
        "reservations:",
        "policy reports:",
        "limits and timeouts:",
        "logging and introspection:",
    ]
    assert "\nlistening and TLS:\n  --host HOST " in text and "\nlogging and introspection:\n  --decision-log-size " in text
    assert "``" not in text


def test_serve_help_shows_each_default_and_the_allowed_values(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    words = " ".join(serve_help(monkeypatch, capsys).split())  # as read, whatever the terminal's width
    for shown in (
        "--port PORT port to listen on (default: 8888) [env KPE_PORT]",
        "--tls-key TLS_KEY PEM private key file (default: none) [env KPE_TLS_KEY]",
        "--bind, --no-bind serve the bind verb (kube-scheduler's bindVerb); off, /<prefix>/bind is not served (default: off) [env KPE_BIND]",
        "--log-level {debug,info,warning,error} the least severe level logged (default: info) [env KPE_LOG_LEVEL]",
        "--webhook-on-error {allow,deny} when kpe itself fails in the admission webhook: allow (pod created without kpe's gates) or deny (default: allow) [env KPE_WEBHOOK_ON_ERROR]",
        "--cluster {auto,on,off} cluster access: auto (use credentials if found), on (require them), off (serve whole-node requests only) (default: auto) [env KPE_CLUSTER]",
        # Its help says the default in words, so it is not said twice.
        "--identity IDENTITY this replica's identity in the Lease (default: hostname, pid and a random suffix) [env KPE_IDENTITY]",
    ):
        assert shown in words
