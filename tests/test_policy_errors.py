"""The exact text a policy author sees for broken files (cases in cases/load_errors.yaml)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from engine.errors import PolicyLoadError
from engine.policy.loader import load

CASES: list[dict[str, Any]] = yaml.safe_load((Path(__file__).parent / "cases" / "load_errors.yaml").read_text())


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_broken_policy_files_report_every_error_with_location(case: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, content in case["files"].items():
        (tmp_path / name).write_text(content)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(PolicyLoadError) as info:
        load(sorted(case["files"]))
    assert info.value.render() == case["errors"]


def test_errors_are_sorted_by_file_line_and_column(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for name in ("b.yaml", "a.yaml"):
        Path(name).write_text("apiVersion: kpe.dev/v1alpha1\nkind: SchedulingPolicy\nmetadata: {name: p}\nspec: {bogus: 1}\n")
    with pytest.raises(PolicyLoadError) as info:
        load(["b.yaml", "a.yaml"])
    assert [(e.location.file, e.location.line) for e in info.value.errors] == sorted((e.location.file, e.location.line) for e in info.value.errors)
    assert info.value.errors[0].location.file == "a.yaml"


def test_a_missing_path_is_an_error_not_an_empty_set(tmp_path: Path) -> None:
    with pytest.raises(PolicyLoadError) as info:
        load([tmp_path / "nope"])
    assert info.value.errors[0].code == "KPE100"
    assert "no such file or directory" in info.value.render()


def test_an_expression_nested_too_deeply_is_a_located_load_error_not_a_crash(tmp_path: Path) -> None:
    deep = "(" * 400 + "true" + ")" * 400
    (tmp_path / "deep.yaml").write_text(f'apiVersion: kpe.dev/v1alpha1\nkind: SchedulingPolicy\nmetadata: {{name: deep}}\nspec:\n  filters:\n  - name: nested\n    expression: "{deep}"\n')
    with pytest.raises(PolicyLoadError) as info:
        load([tmp_path])
    [error] = info.value.errors
    assert (error.code, error.policy, error.path, error.location.line) == ("KPE300", "deep", "spec.filters[0].expression", 7)
    assert error.message == (
        "expression is nested too deeply to compile (parentheses, lists, maps, calls or operators "
        "inside each other a few hundred levels deep); split it into variables"
    )


def test_the_documents_of_one_file_share_its_lines_so_memory_grows_with_the_file_not_its_square() -> None:
    from engine.policy.documents import load_documents

    text = "---\n".join(f"apiVersion: kpe.dev/v1alpha1\nkind: SchedulingPolicy\nmetadata: {{name: p{i}}}\n" for i in range(50))
    docs, errors = load_documents(text, "all.yaml")
    assert errors == [] and len(docs) == 50
    # A caret's line is read from the file's one list: before, each document held a copy of every
    # line (2,000 policies in one file peaked at 3.5 GB in `kpe check`, 108 MB after).
    assert len({id(d.lines) for d in docs}) == 1 and docs[49].lines[docs[49].positions[()].line - 1] == "apiVersion: kpe.dev/v1alpha1"


def test_an_expression_over_its_length_limit_is_refused_in_a_short_message_and_not_compiled(tmp_path: Path) -> None:
    # Not valid CEL either: compiled, it would add a KPE3xx error (and a 7 MB one took 92 s to compile).
    expression = "node.metadata.name == " * 1000 + "'x'"
    (tmp_path / "p.yaml").write_text(f"""apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {{name: huge}}
spec:
  filters:
  - name: big
    expression: "{expression}"
""")
    with pytest.raises(PolicyLoadError) as caught:
        load([tmp_path])
    [error] = caught.value.errors
    assert error.render().splitlines()[0] == (
        f"{tmp_path / 'p.yaml'}:7:17: error[KPE200] huge: spec.filters[0].expression: \"node.metadata.name == node.metadata.name == "
        "node.metadata.name == node.metadata… (22,005 characters) is 22,003 characters long, more than the 10,000 allowed"
    )


def test_libyaml_and_python_give_the_same_documents_and_positions(monkeypatch: pytest.MonkeyPatch) -> None:
    from engine.policy import documents

    if documents._FAST is None:
        pytest.skip("PyYAML without libyaml: only the Python parser runs")
    root = Path(__file__).resolve().parent.parent / "policies"
    texts = {path.name: path.read_text() for path in sorted(root.glob("*.yaml"))}
    fast = {name: documents.load_documents(text, name) for name, text in texts.items()}
    monkeypatch.setattr(documents, "_FAST", None)
    slow = {name: documents.load_documents(text, name) for name, text in texts.items()}
    assert len(fast) >= 10
    for name in texts:
        (fast_docs, fast_errors), (slow_docs, slow_errors) = fast[name], slow[name]
        assert fast_errors == slow_errors == []
        assert [(d.data, d.positions, d.key_positions) for d in fast_docs] == [(d.data, d.positions, d.key_positions) for d in slow_docs], name


def test_a_document_over_the_size_limit_is_refused_unparsed_and_the_others_keep_their_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from engine.policy import documents

    monkeypatch.setattr(documents, "DOCUMENT_LIMIT", 4096)  # the same rule as at 1.5 MiB, on a small file
    first = "apiVersion: kpe.dev/v1alpha1\nkind: SchedulingPolicy\nmetadata: {name: ok}\nspec:\n  filters: [{name: f, expression: 'true'}]\n"
    # Broken YAML too: parsed, it would be a KPE101 instead.
    big = "---\napiVersion: kpe.dev/v1alpha1\nkind: SchedulingPolicy\nmetadata: {name: big}\nspec:\n  params:\n" + "".join(f"    k{i}: [{'x' * 60}\n" for i in range(100))
    last = "---\napiVersion: kpe.dev/v1alpha1\nkind: SchedulingPolicy\nmetadata: {name: last}\nspec:\n  filters: [{name: f, expression: 'nodee'}]\n"
    (tmp_path / "p.yaml").write_text(first + big + last)
    with pytest.raises(PolicyLoadError) as caught:
        load([tmp_path])
    assert [e.render().splitlines()[0] for e in caught.value.errors] == [
        f"{tmp_path / 'p.yaml'}:6:1: error[KPE104] document of 7 KiB, over the 4 KiB one object may be (etcd's limit): not parsed; split it into several policies",
        f"{tmp_path / 'p.yaml'}:117:36: error[KPE301] last: spec.filters[0].expression: undeclared reference to 'nodee'; did you mean 'node'? "
        "(this expression can read: node, nodeInfo, pod, namespaceObject, params, now, dra, counts, variables)",
    ]
