"""Policy expressions are type-checked against the Kubernetes schemas when they load
(engine/cel/checker/types.py): the decision table in cases/typed_check.yaml, and the
exact text `kpe check` prints for the examples of issue 27."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from engine.cel.checker import schema
from engine.cel.checker.typemodel import ObjectType, Type
from engine.errors import CODES, PolicyLoadError
from engine.policy.loader import load
from server.cli.main import main

ROOT = Path(__file__).resolve().parent.parent
TABLE: dict[str, list[dict[str, Any]]] = yaml.safe_load((Path(__file__).parent / "cases" / "typed_check.yaml").read_text())


def policy(case: dict[str, Any]) -> dict[str, Any]:
    """A policy with the case's expression where its kind goes."""
    kind = case.get("kind", "filter")
    expression = case["expression"]
    spec: dict[str, Any] = {}
    if "params" in case:
        spec["params"] = case["params"]
    variables = list(case.get("variables", []))
    if kind == "variable":
        variables.append({"name": "checked", "expression": expression})
    if variables:
        spec["variables"] = variables
    if kind == "filter":
        spec["filters"] = [{"name": "f", "expression": expression}]
    elif kind == "message":
        spec["filters"] = [{"name": "f", "expression": "false", "messageExpression": expression}]
    elif kind == "score":
        spec["scores"] = [{"name": "s", "expression": expression}]
    elif kind == "admission":
        spec["admission"] = {"expression": expression}
    elif kind == "victim":
        spec["preemption"] = {"victim": expression}
    elif kind == "preemption-node":
        spec["preemption"] = {"node": expression}
    else:
        spec["filters"] = [{"name": "f", "expression": "true"}]
        if kind == "match":
            spec["match"] = {"expression": expression}
    return {"apiVersion": "kpe.dev/v1alpha1", "kind": "SchedulingPolicy", "metadata": {"name": "typed"}, "spec": spec}


def load_case(case: dict[str, Any], tmp_path: Path) -> list[str]:
    """The errors (code and message) of loading the case's policy; empty when it loads."""
    file = tmp_path / "p.yaml"
    file.write_text(yaml.safe_dump(policy(case), sort_keys=False))
    try:
        load([file])
    except PolicyLoadError as exc:
        return [f"{e.code} {e.message}" for e in exc.errors]
    return []


@pytest.mark.parametrize("case", TABLE["passes"], ids=[c["expression"][:70] for c in TABLE["passes"]])
def test_expressions_that_work_on_valid_objects_still_load(case: dict[str, Any], tmp_path: Path) -> None:
    assert load_case(case, tmp_path) == []


@pytest.mark.parametrize("case", TABLE["fails"], ids=[c["expression"][:70] for c in TABLE["fails"]])
def test_type_errors_are_load_errors_with_their_message(case: dict[str, Any], tmp_path: Path) -> None:
    assert load_case(case, tmp_path) == case["errors"]


# -- `kpe check`, as a user runs it ------------------------------------------------------------------

HEAD = "apiVersion: kpe.dev/v1alpha1\nkind: SchedulingPolicy\nmetadata: {name: gpus}\nspec:\n"


def check(tmp_path: Path, body: str, *options: str) -> tuple[int, str]:
    (tmp_path / "p.yaml").write_text(HEAD + body)
    out = io.StringIO()
    code = main(["check", *options, str(tmp_path / "p.yaml")], out=out)
    return code, out.getvalue().replace(str(tmp_path) + "/", "")


def test_kpe_check_refuses_a_filter_that_gives_a_string(tmp_path: Path) -> None:
    code, out = check(tmp_path, "  filters:\n  - name: named\n    expression: \"node.metadata.name\"\n")
    assert code == 1
    assert out == (
        "p.yaml:7:17: error[KPE303] gpus: spec.filters[0].expression: a filter expression must give bool, but it gives string\n"
        "\n"
        "1 error found.\n"
    )


def test_kpe_check_refuses_arithmetic_on_a_label_value_which_is_a_string(tmp_path: Path) -> None:
    code, out = check(tmp_path, "  scores:\n  - name: more-gpus\n    expression: \"pod.metadata.labels['gpus'] * 10\"\n")
    assert code == 1
    assert out == (
        "p.yaml:7:46: error[KPE302] gpus: spec.scores[0].expression: found no matching overload for '_*_' applied to "
        "'(string, int)'; a string is not a number: convert it with int(), double() or quantity()\n"
        "    pod.metadata.labels['gpus'] * 10\n"
        "                                ^\n"
        "\n"
        "1 error found.\n"
    )


def test_kpe_check_names_the_field_a_typo_meant(tmp_path: Path) -> None:
    code, out = check(tmp_path, "  filters:\n  - name: zone\n    expression: \"node.metadata.lables['zone'] == 'a'\"\n")
    assert code == 1
    assert out == (
        "p.yaml:7:32: error[KPE307] gpus: spec.filters[0].expression: node.metadata (ObjectMeta) has no field 'lables'; "
        "did you mean 'labels'?\n"
        "    node.metadata.lables['zone'] == 'a'\n"
        "                  ^\n"
        "\n"
        "1 error found.\n"
    )


def test_kpe_check_reports_every_type_error_of_a_load_as_json_too(tmp_path: Path) -> None:
    body = (
        "  filters:\n"
        "  - {name: named, expression: \"node.metadata.name\"}\n"
        "  - {name: zone, expression: \"node.metadata.lables['zone'] == 'a'\"}\n"
        "  scores:\n"
        "  - {name: more-gpus, expression: \"pod.metadata.labels['gpus'] * 10\"}\n"
    )
    code, out = check(tmp_path, body, "--output", "json")
    report = json.loads(out)
    assert code == 1 and report["ok"] is False
    assert [(e["code"], e["path"], e["line"], e["column"]) for e in report["errors"]] == [
        ("KPE303", "spec.filters[0].expression", 6, 31),
        ("KPE307", "spec.filters[1].expression", 7, 45),
        ("KPE302", "spec.scores[0].expression", 9, 64),
    ]


def test_the_shipped_policies_and_the_documented_examples_type_check() -> None:
    out = io.StringIO()
    assert main(["check", str(ROOT / "policies")], out=out) == 0, out.getvalue()
    examples = [p for p in sorted((ROOT / "docs" / "examples").rglob("*.yaml")) if "kind: SchedulingPolicy" in p.read_text()]
    assert len(examples) >= 5
    for file in examples:
        out = io.StringIO()
        assert main(["check", str(file)], out=out) == 0, out.getvalue()


# -- the schemas ------------------------------------------------------------------------------------


def test_the_kubernetes_schemas_are_small_data_that_names_its_source() -> None:
    file = schema.SCHEMA_DIR / schema.SCHEMA_FILE
    data = json.loads(file.read_text())
    assert file.stat().st_size < 200_000
    assert data["kubernetes"].startswith(schema.KUBERNETES_VERSION + ".")
    assert "api__v1_openapi.json" in data["source"] and "Apache-2.0" in data["license"]
    assert set(data["roots"]) == {"Pod", "Node", "Namespace"}
    assert not any("description" in json.dumps(d) for d in data["definitions"].values())
    assert (schema.SCHEMA_DIR / "README.md").exists() and (schema.SCHEMA_DIR / "extract.py").exists()


def test_labels_annotations_and_quantities_are_maps_with_free_keys_and_the_objects_are_typed() -> None:
    types = schema.kubernetes_types()
    pod, node = types["pod"], types["node"]
    assert isinstance(pod, ObjectType) and isinstance(node, ObjectType)
    metadata = pod.fields["metadata"]
    assert isinstance(metadata, ObjectType)
    assert str(metadata.fields["labels"]) == str(metadata.fields["annotations"]) == "map(string, string)"
    status = node.fields["status"]
    assert isinstance(status, ObjectType) and str(status.fields["allocatable"]) == "map(string, string)"
    assert str(types["nodeInfo"]) == "nodeInfo" and str(types["victims"]) == "list(Pod)"
    assert types["now"] == Type("timestamp")
    assert str(schema.value_type({"max": 3}).fields["max"]) == "int"  # type: ignore[attr-defined]


def test_the_new_code_is_documented_wherever_codes_are() -> None:
    assert "KPE307" in CODES
    text = (ROOT / "docs" / "policy-format.md").read_text()
    assert "| KPE307 |" in text


def test_every_function_of_the_library_has_a_signature() -> None:
    from engine.cel import default_library
    from engine.cel.checker.signatures import overloads

    library, table = default_library(), overloads()
    assert sorted(f for f in library.functions if (f, False) not in table) == ["dyn"]  # dyn() is the checker's own
    assert sorted(m for m in library.methods if (m, True) not in table) == []


def test_a_type_error_inside_a_block_scalar_points_at_its_line_and_column(tmp_path: Path) -> None:
    body = (
        "  filters:\n"
        "  - name: spread\n"
        "    expression: |\n"
        "      nodeInfo.pods.exists(p,\n"
        "        p.metadata.labels.app == pod.metadata.labels.app &&\n"
        "        p.spec.nodname != '')\n"
    )
    code, out = check(tmp_path, body)
    assert code == 1
    assert out.splitlines()[:3] == [
        "p.yaml:10:16: error[KPE307] gpus: spec.filters[0].expression: p.spec (PodSpec) has no field 'nodname'; did you mean 'nodeName'?",
        "      p.spec.nodname != '')",
        "             ^",
    ]
