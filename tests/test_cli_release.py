"""What a release of kpe says about itself: ``kpe --version`` (version, commit, supported
Kubernetes versions), each command's exit codes at the end of its ``--help``, and help
that sends users only to pages that exist."""

from __future__ import annotations

import argparse
import importlib.metadata
import io
import json
import os
import re
import subprocess
import sys
import tomllib
from dataclasses import fields
from pathlib import Path

import pytest

from engine.cel.checker.schema import KUBERNETES_VERSION, SCHEMA_DIR, SCHEMA_FILE
from server.cli import release
from server.cli.main import build_parser, main
from server.settings import NO_POLICIES, Settings

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "docs" / "examples"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def kpe_version(capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    return capsys.readouterr().out


# -- kpe --version ------------------------------------------------------------------------


def test_kpe_version_names_the_commit_and_the_supported_kubernetes_versions(capsys: pytest.CaptureFixture[str]) -> None:
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    installed = importlib.metadata.version("kube-policy-extender")
    assert kpe_version(capsys) == f"kpe {installed} (commit {head}, Kubernetes 1.32 to 1.37)\n"


def test_the_commit_is_the_one_the_image_build_wrote_down(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    info = tmp_path / "buildinfo.json"
    info.write_text(json.dumps({"commit": "4d8ed63"}))
    monkeypatch.setattr(release, "BUILD_INFO", info)
    assert kpe_version(capsys) == f"kpe {release.version()} (commit 4d8ed63, Kubernetes 1.32 to 1.37)\n"


def test_an_install_outside_a_checkout_without_build_info_says_the_commit_is_unknown(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # A virtualenv inside another project's repository: git would answer with that project's commit.
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run(["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "other"], check=True)
    site = tmp_path / ".venv" / "lib" / "python3.11"
    site.mkdir(parents=True)
    monkeypatch.setattr(release, "BUILD_INFO", site / "server" / "buildinfo.json")
    monkeypatch.setattr(release, "CHECKOUT", site)
    assert release.commit() == "unknown"
    (site / "server").mkdir()
    (site / "server" / "buildinfo.json").write_text(json.dumps({"commit": ""}))  # built without KPE_COMMIT
    assert release.commit() == "unknown"


def test_the_image_build_writes_the_commit_of_its_build_argument_where_kpe_reads_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The builder stage's own command, run as Docker runs it (in the copied tree, KPE_COMMIT in
    the environment), and the wheel's package data carrying the file into the image."""
    text = re.sub(r"\\\n", " ", (ROOT / "Dockerfile").read_text())
    builder = text.split("\nFROM ", 2)[1]
    assert re.search(r"^ARG KPE_COMMIT\b", builder, re.M), "the builder stage takes the commit as a build argument"
    [run] = [line for line in builder.splitlines() if line.startswith("RUN ") and "buildinfo.json" in line]
    command = run.removeprefix("RUN ").split(" && pip wheel")[0]
    (tmp_path / "server").mkdir()
    subprocess.run(["bash", "-c", command], cwd=tmp_path, env={"KPE_COMMIT": "4d8ed63", "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}, check=True)
    monkeypatch.setattr(release, "BUILD_INFO", tmp_path / "server" / "buildinfo.json")
    assert release.commit() == "4d8ed63"
    assert release.BUILD_INFO.name.endswith(".json") and "*.json" in PYPROJECT["tool"]["setuptools"]["package-data"]["*"]
    assert "server/buildinfo.json" in (ROOT / ".gitignore").read_text().splitlines(), "only the image build writes it"


def test_the_version_number_is_read_from_the_package_in_one_place() -> None:
    assert release.version() == PYPROJECT["project"]["version"] == importlib.metadata.version("kube-policy-extender")
    sources = [p for p in (ROOT / "server").rglob("*.py") if "importlib.metadata" in p.read_text()]
    assert sources == [ROOT / "server" / "cli" / "release.py"]


# -- the supported Kubernetes versions: one constant ----------------------------------------


def minor(version: str) -> tuple[int, int]:
    major, minor_ = version.split(".")
    return int(major), int(minor_)


def test_the_supported_kubernetes_versions_are_the_ones_the_end_to_end_tests_run_and_the_schemas_are_of() -> None:
    oldest, newest = release.SUPPORTED_KUBERNETES
    built = re.findall(r"^\s*(\d+\.\d+)\) k8s=", (ROOT / "tests" / "e2e" / "build-control-plane.sh").read_text(), re.M)
    assert built and (min(built, key=minor), max(built, key=minor)) == (oldest, newest)
    assert newest == KUBERNETES_VERSION and (SCHEMA_DIR / SCHEMA_FILE).exists()


def test_every_page_that_names_the_supported_kubernetes_versions_names_the_same_ones() -> None:
    oldest, newest = release.SUPPORTED_KUBERNETES
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    named = {str(p.relative_to(ROOT)): re.findall(r"Kubernetes\s+(\d+\.\d+)\s+to\s+(\d+\.\d+)", p.read_text()) for p in pages}
    assert {page: found for page, found in named.items() if any(pair != (oldest, newest) for pair in found)} == {}
    assert {page for page, found in named.items() if found} >= {"README.md", "docs/README.md"}
    assert f"the Kubernetes versions it supports ({oldest} to {newest})" in (ROOT / "docs" / "reference" / "cli.md").read_text()


def test_the_docs_show_kpe_version_as_it_prints() -> None:
    text = (ROOT / "docs" / "README.md").read_text()
    shown = re.search(r"```text\n\$ kpe --version\n(.*)\n```", text)
    assert shown, "docs/README.md shows kpe --version and what it prints"
    line = release.version_line()
    pattern = re.escape(line.split(" (commit ")[0] + " (commit ") + r"[0-9a-f]{7,40}" + re.escape(", " + line.split(", ", 1)[1])
    assert re.fullmatch(pattern, shown.group(1)), f"kpe --version prints {line!r}"


# -- exit codes at the end of every command's --help -----------------------------------------


EXIT_CODES = {
    "check": "Exit codes: 0 the policies load (with --strict: without warnings); 1 policy errors (with --strict: warnings too); "
    "2 usage errors and paths that cannot be read.",
    "test": "Exit codes: 0 every case passed; 1 a case failed, or a test file or the policies it names do not load; "
    "2 usage errors: a path that does not exist, or no PolicyTest in the paths given.",
    "explain": "Exit codes: 0 explained; 1 the policies do not load; 2 usage errors, files that cannot be read, a cluster or a "
    "running kpe that cannot be reached, a pod that does not exist.",
    "scheduler-config": "Exit codes: 0 printed; 1 the policies do not load, or none has filters, scores or preemption (nothing for "
    "kube-scheduler to call kpe for) and --bind is not given; 2 usage errors: no --policies, options that do not go together.",
    "snapshot": "Exit codes: 0 written; 2 usage errors, a file that cannot be written, a cluster or a running kpe that cannot be reached.",
    "diff": "Exit codes: 0 no change (or none that --fail-on counts); 1 changes (with --fail-on unschedulable: a pod would become "
    "unschedulable); 2 errors: usage, a policy set that does not load, an unreadable snapshot, an unreachable cluster.",
    "serve": "Exit codes: 0 stopped by a signal (SIGTERM, Ctrl-C); 1 the policies do not load at start-up (files, or the cluster's "
    "objects), or kpe could not start (a port in use); 2 usage errors: settings that are invalid or do not go together, no "
    "policies given, the cluster cannot be the policy source (no CRDs, no access).",
    "completion": "Exit codes: 0 the script was printed; 2 usage errors (a shell other than bash or zsh).",
    "view": "Exit codes: 0 stopped by a signal (SIGTERM, Ctrl-C); 2 usage errors, an unreadable snapshot, a policy set that does "
    "not load, a port in use.",
}


def help_of(argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> str:
    monkeypatch.setenv("COLUMNS", "100")
    with pytest.raises(SystemExit) as info:
        main([*argv, "--help"])
    assert info.value.code == 0
    return capsys.readouterr().out


def commands() -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


@pytest.mark.parametrize("command", EXIT_CODES)
def test_every_commands_help_ends_with_what_its_exit_codes_mean(command: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    last = help_of([command], monkeypatch, capsys).rstrip("\n").rsplit("\n\n", 1)[1]  # the last paragraph
    assert " ".join(last.split()) == EXIT_CODES[command]


def test_no_command_goes_without_exit_codes() -> None:
    assert sorted(commands()) == sorted(EXIT_CODES)


def test_kpe_help_says_where_the_exit_codes_and_the_completion_are(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    words = " ".join(help_of([], monkeypatch, capsys).split())
    assert words.endswith("Each command's --help ends with what its exit codes mean. Shell completion: kpe completion bash (or zsh).")


def test_the_exit_codes_said_are_the_ones_the_commands_exit_with(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A sample of each kind, so the words stay true: check 1 on errors, scheduler-config 1
    when no policy needs the scheduler, 2 for a missing path."""
    out = io.StringIO()
    admission_only = ROOT / "policies" / "gpu-quota.yaml"
    assert main(["scheduler-config", "--policies", str(admission_only)], out=out) == 1
    assert "nothing to call kpe for" in capsys.readouterr().err
    assert main(["check", str(tmp_path / "missing")], out=out) == 2
    (tmp_path / "broken.yaml").write_text("apiVersion: kpe.dev/v1alpha1\nkind: SchedulingPolicy\nmetadata: {name: b}\nspec: {bogus: 1}\n")
    assert main(["check", str(tmp_path / "broken.yaml")], out=out) == 1


# -- --policies has no default -----------------------------------------------------------------


def every_help_text() -> list[str]:
    parsers = [build_parser(), *commands().values()]
    texts = [str(p.description or "") + " " + str(p.epilog or "") for p in parsers]
    texts += [str(a.help or "") for p in parsers for a in p._actions]
    return texts + [str(f.metadata.get("help", "")) for f in fields(Settings)]


def test_no_help_offers_a_default_set_of_policies() -> None:
    assert [t for t in every_help_text() if "shipped" in t] == []


def test_explain_and_scheduler_config_help_say_policies_are_required(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    explain = " ".join(help_of(["explain"], monkeypatch, capsys).split())
    assert "--policies PATH [PATH ...] policy files or directories; required, except with --server (which explains with the policies that kpe serves)" in explain
    scheduler = " ".join(help_of(["scheduler-config"], monkeypatch, capsys).split())
    assert scheduler.startswith("usage: kpe scheduler-config [-h] --policies PATH [PATH ...] [--url URL]")
    assert "--policies PATH [PATH ...] policy files or directories (required: kpe uses no policy it was not given)" in scheduler


def test_scheduler_config_without_policies_is_refused_by_the_parser(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["scheduler-config", "--entry-only"])
    assert info.value.code == 2
    assert capsys.readouterr().err.endswith("kpe scheduler-config: error: the following arguments are required: --policies\n")


def test_explain_without_policies_says_so_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    out = io.StringIO()
    assert main(["explain", "--pod", str(EXAMPLES / "pod-gpu-training.yaml"), "--nodes", str(EXAMPLES / "nodes.yaml")], out=out) == 2
    assert capsys.readouterr().err == f"kpe explain: {NO_POLICIES}\n"


# -- pages the help and the code name ------------------------------------------------------------


DOC_PATH = re.compile(r"docs/[\w./-]+?\.md")


def test_every_docs_page_the_cli_and_settings_help_names_exists() -> None:
    named = {path for text in every_help_text() for path in DOC_PATH.findall(text)}
    assert "docs/policy-format.md" in named  # --in-flight-s's
    assert sorted(p for p in named if not (ROOT / p).exists()) == []


def test_every_docs_page_a_docstring_or_comment_of_kpe_names_exists() -> None:
    named = {(str(p.relative_to(ROOT)), path) for package in ("engine", "server") for p in (ROOT / package).rglob("*.py") for path in DOC_PATH.findall(p.read_text())}
    assert named
    assert sorted((source, path) for source, path in named if not (ROOT / path).exists()) == []
