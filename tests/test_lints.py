"""Reads that fail on ordinary objects, in rules whose failure blocks pods, are warned of
when policies load (engine/policy/lints.py, KPE600): the decision table in
cases/lints.yaml, the exact text `kpe check` prints, `--strict`, JSON, and none for the
policies kpe ships or its docs show."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from engine.policy.loader import load
from server.cli.main import main

ROOT = Path(__file__).resolve().parent.parent
CASES: list[dict[str, Any]] = yaml.safe_load((Path(__file__).parent / "cases" / "lints.yaml").read_text())["cases"]
SLOPPY = """\
apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: web-only}
spec:
  filters:
  - name: app
    expression: "pod.metadata.labels.app == 'web'"
"""


def warned(spec: dict[str, Any], tmp_path: Path) -> list[str]:
    """``field.path: read (what may be absent)`` for each warning of the policy with ``spec``."""
    file = tmp_path / "p.yaml"
    file.write_text(yaml.safe_dump({"apiVersion": "kpe.dev/v1alpha1", "kind": "SchedulingPolicy", "metadata": {"name": "p"}, "spec": spec}))
    (policy,) = load([str(file)]).policies
    out = []
    for w in policy.warnings:
        assert w.code == "KPE600" and w.severity == "warning"
        found = re.match(r"(.*) fails on .* without (.*) \(under failurePolicy Fail", w.message)
        assert found, w.message
        out.append(f"{w.path}: {found[1]} ({found[2]})")
    return out


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_each_case_warns_of_exactly_the_reads_it_lists(case: dict[str, Any], tmp_path: Path) -> None:
    assert warned(case["spec"], tmp_path) == case["warns"]


def test_kpe_check_prints_the_warning_with_its_place_and_the_guarded_form(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A short relative path: the table wraps a FILE cell past 72 characters, which the
    # absolute path of tmp_path under pytest-xdist's popen-gwN/ folder is.
    monkeypatch.chdir(tmp_path)
    file = Path("web.yaml")
    file.write_text(SLOPPY)
    out = io.StringIO()
    assert main(["check", str(file)], out=out) == 0
    assert out.getvalue() == (
        f"{file}:7:31: warning[KPE600] web-only: spec.filters[0].expression: pod.metadata.labels['app'] fails on a pod without "
        "the field 'labels' or the label 'app' (under failurePolicy Fail, the node is rejected); read it as "
        "pod.metadata.?labels[?'app'].orValue(''), or test has(pod.metadata.labels) && 'app' in pod.metadata.labels first\n"
        "    pod.metadata.labels.app == 'web'\n"
        "                 ^\n"
        "\n"
        "POLICY    MODE     FAILURE  DECISIONS  FILE\n"
        f"web-only  Enforce  Fail     filter     {file}\n"
        "1 policy OK (generation " + load([str(file)]).generation + "), with 1 warning (--strict fails on them).\n"
    )


def test_strict_fails_on_warnings_and_json_lists_them(tmp_path: Path) -> None:
    file = tmp_path / "web.yaml"
    file.write_text(SLOPPY)
    out = io.StringIO()
    assert main(["check", "--strict", str(file)], out=out) == 1
    assert out.getvalue().endswith("1 policy load (generation " + load([str(file)]).generation + "), with 1 warning: refused by --strict.\n")
    out = io.StringIO()
    assert main(["check", "--strict", "--output", "json", str(file)], out=out) == 1
    report = json.loads(out.getvalue())
    assert report["ok"] is False
    assert [(w["code"], w["line"], w["column"], w["policy"], w["path"]) for w in report["warnings"]] == [
        ("KPE600", 7, 31, "web-only", "spec.filters[0].expression")
    ]
    out = io.StringIO()
    assert main(["check", "--output", "json", str(file)], out=out) == 0
    assert json.loads(out.getvalue())["ok"] is True


def test_the_shipped_policies_and_the_docs_examples_raise_no_warning() -> None:
    examples = sorted(
        p for p in (ROOT / "docs" / "examples").rglob("*.yaml")
        if ("kind: SchedulingPolicy" in p.read_text() or "kind: Reservation" in p.read_text()) and p.parent.name != "lints"  # lints/: what a warning looks like
    )
    paths = [ROOT / "policies", *examples]
    loaded = [p for path in paths for p in load([str(path)], allow_empty=True).policies]
    assert len(loaded) > 15
    assert [w.render() for p in loaded for w in p.warnings] == []


def test_the_guides_policies_raise_no_warning(tmp_path: Path) -> None:
    blocks = [
        block
        for page in sorted((ROOT / "docs").rglob("*.md"))
        for block in re.findall(r"^```ya?ml\n(.*?)^```", page.read_text(), re.S | re.M)
        if "kind: SchedulingPolicy" in block
    ]
    assert len(blocks) >= 6
    found = []
    for i, block in enumerate(blocks):
        file = tmp_path / f"{i}.yaml"
        file.write_text(block)
        try:
            policies = load([str(file)], allow_empty=True).policies
        except Exception:  # fragments and deliberately broken examples are the docs tests' business
            continue
        found += [w.render() for p in policies for w in p.warnings]
    assert found == []
