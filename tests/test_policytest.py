"""The PolicyTest runner itself (engine/reports/policytest.py): comparisons, errors, reports."""

from __future__ import annotations

import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from engine.reports.policytest import CaseResult, Mismatch, junit_xml, run_test_files

POLICY = """\
apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: ssd-only}
spec:
  match: {namespaces: [db]}
  filters:
  - name: ssd
    expression: "node.metadata.?labels[?'disk'].orValue('') == 'ssd'"
    messageExpression: "'node %s has no SSD'.format([node.metadata.name])"
  - {name: not-cordoned, expression: "!node.?spec.?unschedulable.orValue(false)", message: cordoned, unresolvable: true}
  scores:
  - {name: big, expression: "node.metadata.?labels[?'size'].orValue('') == 'big' ? 100 : 20"}
  admission:
    expression: "pods.size() < 2"
    message: too many pods
  preemption:
    victim: "victim.metadata.?labels[?'keep'].orValue('') != 'yes'"
"""

HEAD = """\
apiVersion: kpe.dev/v1alpha1
kind: PolicyTest
metadata: {name: ssd}
spec:
  policies: [ssd-only.yaml]
  fixtures:
    nodes:
      fast: {metadata: {labels: {disk: ssd, size: big}}}
      slow: {metadata: {labels: {disk: hdd}}}
      cordoned: {metadata: {labels: {disk: ssd}}, spec: {unschedulable: true}}
    pods:
      db: {metadata: {namespace: db}}
  cases:
"""


def write_test(tmp_path: Path, cases: str, *, head: str = HEAD, name: str = "ssd.test.yaml") -> Path:
    (tmp_path / "ssd-only.yaml").write_text(POLICY)
    path = tmp_path / name
    path.write_text(head + textwrap.indent(textwrap.dedent(cases), "  "))
    return path


def run_one(path: Path) -> CaseResult:
    [result] = run_test_files([path])
    return result


def test_met_expectations_pass(tmp_path: Path) -> None:
    path = write_test(tmp_path, """\
        - name: ssd nodes pass
          pod: db
          expect:
            matched: [ssd-only]
            filter:
              pass: [fast]
              fail: {}
              unresolvable: {slow: "ssd-only/ssd: node slow has no SSD", cordoned: {contains: cordoned}}
            score: {order: [fast, slow], values: {fast: 10, slow: 0}}
            admission: {admitted: true, gates: [kpe.dev/ssd-only], pending: []}
        """)
    result = run_one(path)
    assert result.passed, result.render()
    assert (result.file, result.test, result.case) == (str(path), "ssd", "ssd nodes pass")


def test_a_wrong_reason_yields_a_mismatch_with_expected_and_actual(tmp_path: Path) -> None:
    result = run_one(write_test(tmp_path, """\
        - name: wrong reason
          pod: db
          nodes: [slow]
          expect:
            filter: {unresolvable: {slow: "ssd-only/ssd: no SSD"}}
        """))
    assert not result.passed and result.error is None
    assert result.failures == [Mismatch("filter.unresolvable[slow]", "ssd-only/ssd: no SSD", "ssd-only/ssd: node slow has no SSD")]
    assert "expected 'ssd-only/ssd: no SSD', got 'ssd-only/ssd: node slow has no SSD'" in result.render()


def test_a_node_failing_unexpectedly_or_passing_unexpectedly_is_a_mismatch(tmp_path: Path) -> None:
    result = run_one(write_test(tmp_path, """\
        - name: swapped
          pod: db
          nodes: [fast, slow]
          expect:
            filter: {pass: [slow], unresolvable: {fast: {contains: SSD}}}
        """))
    assert sorted(result.failures, key=lambda m: m.what) == [
        Mismatch("filter.pass", ["slow"], ["fast"]),
        Mismatch("filter.unresolvable[fast]", {"contains": "SSD"}, "passed"),
        Mismatch("filter.unresolvable[slow]", None, "ssd-only/ssd: node slow has no SSD"),
    ]
    assert "expected a reason containing 'SSD', got 'passed'" in result.render()


def test_score_order_and_values_are_checked(tmp_path: Path) -> None:
    result = run_one(write_test(tmp_path, """\
        - name: reversed
          pod: db
          nodes: [fast, slow]
          expect:
            score: {order: [slow, fast], values: {fast: 9}}
        """))
    assert Mismatch("score.values[fast]", 9, 10) in result.failures
    assert Mismatch("score.order", ["slow", "fast"], {"fast": 10, "slow": 0}) in result.failures


def test_admission_and_preemption_expectations_are_checked(tmp_path: Path) -> None:
    result = run_one(write_test(tmp_path, """\
        - name: gated and one node refused
          pod: db
          nodes: [fast, slow]
          clusterPods:
          - {metadata: {name: a, namespace: db}, spec: {nodeName: fast}}
          - {metadata: {name: b, namespace: db, labels: {keep: "yes"}}, spec: {nodeName: slow}}
          expect:
            admission: {admitted: true, messages: {kpe.dev/ssd-only: "ssd-only: too few pods"}}
            preemption:
              victims: {fast: [a], slow: [b]}
              candidates: [fast, slow]
              rejected: []
        """))
    assert Mismatch("admission.admitted", True, False) in result.failures
    assert Mismatch("admission.messages[kpe.dev/ssd-only]", "ssd-only: too few pods", "ssd-only: too many pods") in result.failures
    assert Mismatch("preemption.candidates", ["fast", "slow"], ["fast"]) in result.failures
    assert Mismatch("preemption.rejected", [], ["slow"]) in result.failures


def test_an_unknown_fixture_name_is_an_error_naming_file_line_and_case(tmp_path: Path) -> None:
    path = write_test(tmp_path, """\
        - name: typo
          pod: db
          nodes: [fast, fsat]
          expect: {filter: {pass: [fast]}}
        """)
    result = run_one(path)
    assert not result.passed and result.failures == []
    assert result.error is not None
    assert result.error.startswith(f"{path}:16:")
    assert "spec.cases[0].nodes[1]" in result.error
    assert "case 'typo': unknown node fixture 'fsat' (known: fast, slow, cordoned)" in result.error


def test_an_unknown_victim_is_an_error_and_cluster_pods_are_found_by_name(tmp_path: Path) -> None:
    result = run_one(write_test(tmp_path, """\
        - name: victims
          pod: db
          clusterPods: [{metadata: {name: placed}, spec: {nodeName: fast}}]
          expect:
            preemption: {victims: {fast: [placed, ghost]}}
        """))
    assert result.error is not None and "unknown pod fixture 'ghost' (known: placed, db)" in result.error


def test_a_schema_violation_is_reported_with_file_position_and_path(tmp_path: Path) -> None:
    path = write_test(tmp_path, """\
        - name: misspelt
          pod: db
          expect: {filter: {passes: [fast]}}
        """)
    result = run_one(path)
    assert result.error is not None
    assert f"{path}:16:23:" in result.error
    assert "spec.cases[0].expect.filter.passes: unknown field 'passes'" in result.error


def test_policies_that_do_not_load_fail_every_case_with_the_load_errors(tmp_path: Path) -> None:
    path = write_test(tmp_path, """\
        - {name: first, pod: db, expect: {matched: []}}
        - {name: second, pod: db, expect: {matched: []}}
        """)
    (tmp_path / "ssd-only.yaml").write_text(POLICY.replace("node.metadata.?labels", "nod.metadata.?labels"))
    results = run_test_files([path])
    assert [r.case for r in results] == ["first", "second"]
    for r in results:
        assert r.error is not None
        assert f"{path}" in r.error and f"case {r.case!r}: policies failed to load" in r.error
        assert "undeclared reference to 'nod'" in r.error


def test_directories_are_searched_and_policy_documents_skipped(tmp_path: Path) -> None:
    write_test(tmp_path, "- {name: one, pod: db, expect: {matched: [ssd-only]}}\n")
    (tmp_path / "sub").mkdir()
    write_test(tmp_path / "sub", "- {name: two, pod: {metadata: {namespace: web}}, expect: {matched: []}}\n")
    results = run_test_files([tmp_path])
    assert sorted(r.case for r in results) == ["one", "two"]
    assert all(r.passed for r in results), [r.render() for r in results]


def test_a_named_file_without_a_policy_test_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "ssd-only.yaml").write_text(POLICY)
    [result] = run_test_files([tmp_path / "ssd-only.yaml"])
    assert result.error == f"{tmp_path / 'ssd-only.yaml'}: no PolicyTest document in this file"


def test_fixture_files_are_read_relative_to_the_test_and_named_by_their_key(tmp_path: Path) -> None:
    (tmp_path / "node.json").write_text('{"metadata": {"name": "from-file", "labels": {"disk": "ssd"}}}')
    head = HEAD.replace("      fast: {metadata: {labels: {disk: ssd, size: big}}}", "      fast: {file: node.json}")
    result = run_one(write_test(tmp_path, "- {name: file, pod: db, nodes: [fast], expect: {filter: {pass: [fast]}}}\n", head=head))
    assert result.passed, result.render()


def test_now_is_passed_to_the_policies(tmp_path: Path) -> None:
    (tmp_path / "ssd-only.yaml").write_text(POLICY)
    (tmp_path / "late.yaml").write_text(
        "apiVersion: kpe.dev/v1alpha1\nkind: SchedulingPolicy\nmetadata: {name: late}\nspec:\n"
        "  filters: [{name: after, expression: \"now > timestamp('2030-01-01T00:00:00Z')\", message: too early}]\n"
    )
    head = HEAD.replace("policies: [ssd-only.yaml]", "policies: [late.yaml]\n  now: \"2031-01-01T00:00:00Z\"")
    results = run_test_files([write_test(tmp_path, """\
        - {name: spec now, pod: db, nodes: [fast], expect: {filter: {pass: [fast]}}}
        - {name: case now, pod: db, nodes: [fast], now: "2029-01-01T00:00:00Z", expect: {filter: {unresolvable: {fast: "late/after: too early"}}}}
        """, head=head)])
    assert all(r.passed for r in results), [r.render() for r in results]


def test_junit_output_parses_and_counts_failures_and_errors(tmp_path: Path) -> None:
    results = run_test_files([write_test(tmp_path, """\
        - {name: good, pod: db, nodes: [fast], expect: {filter: {pass: [fast]}}}
        - {name: bad, pod: db, nodes: [fast], expect: {filter: {pass: []}}}
        - {name: broken, pod: nobody, expect: {matched: []}}
        """)])
    root = ET.fromstring(junit_xml(results))
    assert (root.tag, root.get("tests"), root.get("failures"), root.get("errors")) == ("testsuites", "3", "1", "1")
    [suite] = root.findall("testsuite")
    assert (suite.get("name"), suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("ssd", "3", "1", "1")
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    assert list(cases) == ["good", "bad", "broken"]
    assert list(cases["good"]) == []
    [failure] = list(cases["bad"])
    assert failure.tag == "failure" and "filter.pass: expected [], got ['fast']" in (failure.text or "")
    [error] = list(cases["broken"])
    assert error.tag == "error" and "unknown pod fixture 'nobody'" in (error.get("message") or "")


@pytest.mark.parametrize("reason,ok", [("ssd-only/ssd: node slow has no SSD", True), ({"contains": "no SSD"}, True), ({"contains": "HDD"}, False)])
def test_a_reason_matches_exactly_or_by_containing_text(tmp_path: Path, reason: object, ok: bool) -> None:
    import json

    result = run_one(write_test(tmp_path, f"- {{name: r, pod: db, nodes: [slow], expect: {{filter: {{unresolvable: {{slow: {json.dumps(reason)}}}}}}}}}\n"))
    assert result.passed is ok
