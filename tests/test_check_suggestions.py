"""What `kpe check` prints for the messages of issue 27 (points 1 and 6): "did you mean"
for unknown functions, names and variables, every error of an expression, a true scope
message for `match`, and what Kubernetes' CEL rejects when it compiles (cel-go's literal
validators, homogeneous list literals, the list functions' element types).

More cases, one line each, are in cases/typed_check.yaml (tests/test_typed_check.py)."""

from __future__ import annotations

import io
from pathlib import Path

from server.cli.main import main

HEAD = "apiVersion: kpe.dev/v1alpha1\nkind: SchedulingPolicy\nmetadata: {name: gpus}\nspec:\n"


def check(tmp_path: Path, body: str) -> tuple[int, str]:
    (tmp_path / "p.yaml").write_text(HEAD + body)
    out = io.StringIO()
    code = main(["check", str(tmp_path / "p.yaml")], out=out)
    return code, out.getvalue().replace(str(tmp_path) + "/", "")


def test_a_misspelt_namespaced_function_is_named_with_the_function_it_meant(tmp_path: Path) -> None:
    body = "  filters:\n  - name: fits\n    expression: \"kube.podRequest(pod, 'cpu').isLessThan(kube.nodeFree(node, nodeInfo, 'cpu'))\"\n"
    assert check(tmp_path, body) == (
        1,
        "p.yaml:7:18: error[KPE301] gpus: spec.filters[0].expression: undeclared reference to function 'kube.podRequest'; "
        "did you mean 'kube.podRequests'?\n"
        "    kube.podRequest(pod, 'cpu').isLessThan(kube.nodeFree(node, nodeInfo, 'cpu'))\n"
        "    ^\n"
        "\n"
        "1 error found.\n",
    )


def test_a_method_in_the_wrong_case_is_named_with_its_right_spelling(tmp_path: Path) -> None:
    body = "  filters:\n  - name: gpu-nodes\n    expression: \"node.metadata.name.startswith('gpu-')\"\n"
    assert check(tmp_path, body) == (
        1,
        "p.yaml:7:37: error[KPE301] gpus: spec.filters[0].expression: undeclared reference to function 'startswith'; "
        "did you mean 'startsWith'?\n"
        "    node.metadata.name.startswith('gpu-')\n"
        "                       ^\n"
        "\n"
        "1 error found.\n",
    )


def test_match_says_it_cannot_read_variables_which_are_evaluated_after_it(tmp_path: Path) -> None:
    body = (
        "  match:\n    expression: \"variables.team == 'ml'\"\n"
        "  variables:\n  - name: team\n    expression: \"pod.metadata.labels[?'team'].orValue('')\"\n"
        "  filters:\n  - name: ml\n    expression: \"variables.team == 'ml'\"\n"
    )
    assert check(tmp_path, body) == (
        1,
        "p.yaml:6:17: error[KPE305] gpus: spec.match.expression: 'variables' is not available in match expression "
        "(it can read: pod, namespaceObject, params, now, dra)\n"
        "\n"
        "1 error found.\n",
    )


def test_every_error_of_one_expression_is_reported_unknown_names_and_functions_included(tmp_path: Path) -> None:
    expression = "nodee.metadata.name != '' && pod.spec.prioritty > 1 && kube.podRequest(pod, 'cpu') == quantity('1')"
    code, out = check(tmp_path, f"  filters:\n  - name: typos\n    expression: \"{expression}\"\n")
    assert code == 1
    assert out == (
        "p.yaml:7:18: error[KPE301] gpus: spec.filters[0].expression: undeclared reference to 'nodee'; did you mean 'node'? "
        "(this expression can read: node, nodeInfo, pod, namespaceObject, params, now, dra, counts, variables)\n"
        f"    {expression}\n"
        "    ^\n"
        "p.yaml:7:56: error[KPE307] gpus: spec.filters[0].expression: pod.spec (PodSpec) has no field 'prioritty'; did you mean 'priority'?\n"
        f"    {expression}\n"
        "                                          ^\n"
        "p.yaml:7:73: error[KPE301] gpus: spec.filters[0].expression: undeclared reference to function 'kube.podRequest'; "
        "did you mean 'kube.podRequests'?\n"
        f"    {expression}\n"
        "                                                           ^\n"
        "\n"
        "3 errors found.\n"
    )


def test_bad_duration_and_regex_literals_are_refused_at_check_as_kubernetes_refuses_them(tmp_path: Path) -> None:
    expression = "now - timestamp(node.metadata.creationTimestamp) > duration('1d') && node.metadata.name.matches('gpu-(')"
    code, out = check(tmp_path, f"  filters:\n  - name: old\n    expression: \"{expression}\"\n")
    assert code == 1
    assert out == (
        "p.yaml:7:78: error[KPE302] gpus: spec.filters[0].expression: invalid duration argument: invalid duration \"1d\": unknown unit \"d\"\n"
        f"    {expression}\n"
        "                                                                ^\n"
        "p.yaml:7:114: error[KPE302] gpus: spec.filters[0].expression: invalid matches argument: error parsing regexp: "
        "missing closing ): `gpu-(`\n"
        f"    {expression}\n"
        "                                                                                                    ^\n"
        "\n"
        "2 errors found.\n"
    )


def test_mixed_list_literals_and_the_sum_of_strings_are_refused_at_check_as_kubernetes_refuses_them(tmp_path: Path) -> None:
    expression = "[1, 'a', false].exists(x, string(x) == node.metadata.name) || ['a', 'b'].sum() == 'ab'"
    code, out = check(tmp_path, f"  filters:\n  - name: mixed\n    expression: \"{expression}\"\n")
    assert code == 1
    assert out == (
        "p.yaml:7:22: error[KPE302] gpus: spec.filters[0].expression: expected type 'int' but found 'string'\n"
        f"    {expression}\n"
        "        ^\n"
        "p.yaml:7:90: error[KPE302] gpus: spec.filters[0].expression: found no matching overload for 'sum' applied to 'list(string).()'\n"
        f"    {expression}\n"
        "                                                                            ^\n"
        "\n"
        "2 errors found.\n"
    )


def test_format_takes_a_mixed_list_and_valid_literals_load(tmp_path: Path) -> None:
    body = (
        "  filters:\n  - name: fine\n"
        "    expression: \"duration('1h30m') > duration('0s') && node.metadata.name.matches('^gpu-[0-9]+$') && [1, 2].sum() == 3\"\n"
        "    messageExpression: \"'%s has %d pods'.format([node.metadata.name, nodeInfo.podCount])\"\n"
    )
    code, out = check(tmp_path, body)
    assert code == 0, out
