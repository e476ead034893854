"""Impact previews: the table of policy changes in tests/cases/impact.yaml decided by
engine/reports/impact/compare.py, and ``kpe diff`` against the fake API server (live and through a
snapshot, anonymised or not): outputs, the sample of running pods, exit codes."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from engine.reports.impact.compare import preview, subjects
from engine.policy.loader import load_text
from engine.cluster.snapshot import Snapshot, write
from server.cli.main import main

from .livecluster import POLICIES, Live, cluster, live_cluster

CASES: list[dict[str, Any]] = yaml.safe_load((Path(__file__).parent / "cases" / "impact.yaml").read_text())


def policies(edits: dict[str, Any]) -> str:
    text = POLICIES.read_text()
    for old, new in edits.get("replace") or []:
        assert old in text, old
        text = text.replace(old, new)
    if edits.get("add"):
        text += "\n---\n" + edits["add"]
    return text


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_a_policy_change_has_the_impact_the_table_says(case: dict[str, Any]) -> None:
    data = cluster()
    old, new = load_text(policies(case["from"]), file="from.yaml"), load_text(policies(case["to"]), file="to.yaml")
    impact = preview(old, new, data["nodes"], data["pods"])
    found: dict[str, list[str]] = {}
    said: dict[str, list[str]] = {}
    for change in impact.changes:
        found.setdefault(change.pod, []).append(change.kind)
        said.setdefault(change.pod, []).append(change.summary)
    assert found == case["changes"], [c.to_dict() for c in impact.changes]
    for pod, parts in (case.get("says") or {}).items():
        for part, summary in zip(parts, said[pod], strict=True):
            assert part in summary, (pod, summary)


def test_the_sample_of_running_pods_is_the_same_every_run_and_pending_pods_are_all_decided() -> None:
    pods = [{"metadata": {"name": f"run-{i}", "namespace": "ns"}, "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}} for i in range(50)]
    pods += [{"metadata": {"name": f"wait-{i}", "namespace": "ns"}, "spec": {}} for i in range(5)]
    pods += [{"metadata": {"name": "done", "namespace": "ns"}, "spec": {"nodeName": "n1"}, "status": {"phase": "Succeeded"}}]
    pending, sampled, running = subjects(pods, 10)
    assert len(pending) == 5 and running == 50 and len(sampled) == 10
    again = subjects(list(reversed(pods)), 10)[1]
    assert [p["metadata"]["name"] for p in again] == [p["metadata"]["name"] for p in sampled]
    assert subjects(pods, 0)[1] == []


# -- kpe diff ----------------------------------------------------------------------------------


RETIRE = CASES[1]["to"]["add"]


@pytest.fixture
def live(tmp_path: Path) -> Iterator[Live]:
    with live_cluster(tmp_path) as found:
        yield found


@pytest.fixture
def proposed(tmp_path: Path) -> str:
    """The live policies and a filter that retires gpu-1, in a directory as in a pull request."""
    directory = tmp_path / "proposed"
    directory.mkdir()
    (directory / "policies.yaml").write_text(POLICIES.read_text())
    (directory / "retire.yaml").write_text(RETIRE)
    return str(directory)


def test_kpe_diff_on_the_live_cluster_lists_each_change_and_exits_1(live: Live, proposed: str) -> None:
    code, out = live.kpe("diff", "--from", str(POLICIES), "--to", proposed, "--kubeconfig", live.kubeconfig)
    assert code == 1
    lines = out.splitlines()
    assert lines[0].startswith("kpe diff ") and lines[0].endswith(f"on the cluster (kubeconfig {live.kubeconfig})")
    assert lines[1] == "3 pods change, of the 4 pending pods and 2 of 2 running pods on 4 nodes: 1 would become unschedulable, 1 lose nodes, 1 preemption changes"
    assert lines[3].split() == ["POD", "CHANGE", "DETAIL"]
    assert lines[4].startswith("ml/big (on gpu-1)  unschedulable  no node can take it any more")


def test_kpe_diff_fails_on_unschedulable_only_when_asked_and_never_with_never(live: Live, proposed: str, tmp_path: Path) -> None:
    argv = ["diff", "--kubeconfig", live.kubeconfig, "--output", "json"]
    assert live.kpe(*argv, "--from", str(POLICIES), "--to", proposed, "--fail-on", "unschedulable")[0] == 1
    assert live.kpe(*argv, "--from", str(POLICIES), "--to", proposed, "--fail-on", "never")[0] == 0
    # Undoing the retirement changes things, but makes nothing unschedulable.
    assert live.kpe(*argv, "--from", proposed, "--to", str(POLICIES))[0] == 1
    assert live.kpe(*argv, "--from", proposed, "--to", str(POLICIES), "--fail-on", "unschedulable")[0] == 0
    code, out = live.kpe(*argv, "--from", str(POLICIES), "--to", str(POLICIES))
    assert code == 0 and json.loads(out)["changes"] == []


def test_kpe_diff_through_a_snapshot_decides_as_on_the_live_cluster_anonymised_or_not(live: Live, proposed: str, tmp_path: Path) -> None:
    argv = ["diff", "--from", str(POLICIES), "--to", proposed, "--output", "json"]
    _, direct = live.kpe(*argv, "--kubeconfig", live.kubeconfig)
    assert live.kpe("snapshot", "-o", str(tmp_path / "snap.json.gz"), "--kubeconfig", live.kubeconfig)[0] == 0
    assert live.kpe("snapshot", "-o", str(tmp_path / "anon.json"), "--kubeconfig", live.kubeconfig, "--anonymise",
                    "--keep-names-from", proposed)[0] == 0
    code, through = live.kpe(*argv, "--snapshot", str(tmp_path / "snap.json.gz"))
    assert code == 1
    expected, got = json.loads(direct), json.loads(through)
    assert got["source"].startswith(f"snapshot {tmp_path / 'snap.json.gz'}, taken ")
    assert {k: v for k, v in got.items() if k != "source"} == {k: v for k, v in expected.items() if k != "source"}
    # The policies name gpu-1 and namespace ml: kept; the rest is hashed, the decisions the same.
    code, anonymised = live.kpe(*argv, "--snapshot", str(tmp_path / "anon.json"))
    hidden = json.loads(anonymised)
    assert code == 1 and hidden["counts"] == expected["counts"]
    assert [c["kind"] for c in hidden["changes"]] == [c["kind"] for c in expected["changes"]]
    assert all(c["pod"].startswith("ml/pod-") for c in hidden["changes"])


def test_the_markdown_fits_a_pull_request_comment(live: Live, proposed: str) -> None:
    code, out = live.kpe("diff", "--from", str(POLICIES), "--to", proposed, "--kubeconfig", live.kubeconfig, "--output", "markdown", "--max-rows", "1")
    assert code == 1
    lines = out.splitlines()
    assert lines[0] == f"### :x: kpe diff `{load_text(POLICIES.read_text()).generation}` → `{lines[0].split('`')[3]}`"
    assert "| pod | change | detail |" in lines
    assert sum(1 for line in lines if line.startswith("| ml/")) == 1
    assert lines[-1] == "_... and 2 more: 1 nodes-lost, 1 preemption; `kpe diff --output json` lists them all._"
    _, unchanged = live.kpe("diff", "--from", str(POLICIES), "--to", str(POLICIES), "--kubeconfig", live.kubeconfig, "--output", "markdown")
    assert unchanged.startswith("### :white_check_mark: kpe diff ")


def test_a_snapshot_taken_with_a_running_kpe_warns_when_from_is_not_what_it_served(tmp_path: Path, proposed: str) -> None:
    data = cluster()
    write(Snapshot(nodes=data["nodes"], pods=data["pods"], kpe={"generation": "000000000000"}), tmp_path / "snap.json")
    out = io.StringIO()
    assert main(["diff", "--from", str(POLICIES), "--to", proposed, "--snapshot", str(tmp_path / "snap.json")], out=out) == 1
    assert "note: kpe served generation 000000000000 when the snapshot was taken, not --from's " in out.getvalue()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--snapshot", "{tmp}/missing.json"], "cannot read {tmp}/missing.json"),
        (["--snapshot", "{tmp}/snap.json", "--kubeconfig", "x"], "give one source of pods and nodes"),
        (["--snapshot", "{tmp}/snap.json", "--sample", "-1"], "--sample must be 0 or more"),
        (["--kubeconfig", "{tmp}/missing"], "kubeconfig {tmp}/missing does not exist"),
    ],
)
def test_errors_exit_2_and_say_why(tmp_path: Path, proposed: str, capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    (tmp_path / "snap.json").write_text("{}")
    assert main(["diff", "--from", str(POLICIES), "--to", proposed, *[a.replace("{tmp}", str(tmp_path)) for a in argv]]) == 2
    assert message.replace("{tmp}", str(tmp_path)) in capsys.readouterr().err


def test_policies_that_do_not_load_exit_2_with_their_errors(tmp_path: Path, proposed: str) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text(RETIRE.replace("node.metadata.name != 'gpu-1'", "node.metadata.name !="))
    out = io.StringIO()
    assert main(["diff", "--from", str(POLICIES), "--to", str(broken), "--snapshot", "x"], out=out) == 2
    assert out.getvalue().startswith("kpe diff: the --to policies do not load:\n")
    assert "retire: spec.filters[0].expression" in out.getvalue()
