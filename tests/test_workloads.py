"""Workloads as well as pods (engine/cluster/workloads.py): each kind stands for the pod
its controller would create, in ``kpe explain --pod`` and in PolicyTest fixtures, and
anything else is refused with an error naming it."""

from __future__ import annotations

import io
import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from engine.cluster.workloads import WorkloadError, pod_for
from engine.reports.policytest import run_test_files
from server.cli.main import main

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "docs" / "examples"
CASES = yaml.safe_load((ROOT / "tests" / "cases" / "workloads.yaml").read_text())
ACCEPTED = "(accepted: Pod, Deployment, ReplicaSet, StatefulSet, DaemonSet, Job, CronJob)"


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), out=out)
    return code, out.getvalue()


def explain(pod: Path, *extra: str) -> tuple[int, str]:
    return run("explain", *extra, "--policies", str(ROOT / "policies"), "--pod", str(pod), "--nodes", str(EXAMPLES / "nodes.yaml"))


# -- the expansion ------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES["cases"], ids=[c["name"] for c in CASES["cases"]])
def test_each_kind_expands_to_the_pod_its_controller_would_create(case: dict[str, Any]) -> None:
    assert pod_for(case["object"]) == case["pod"]


@pytest.mark.parametrize("case", CASES["refused"], ids=[c["name"] for c in CASES["refused"]])
def test_anything_but_a_pod_or_a_workload_is_refused_with_an_error_naming_it(case: dict[str, Any]) -> None:
    with pytest.raises(WorkloadError) as info:
        pod_for(case["object"])
    assert str(info.value) == case["error"]


def test_the_same_workload_always_makes_the_same_pod_and_the_input_is_left_alone() -> None:
    deployment = yaml.safe_load((EXAMPLES / "deployment-gpu-training.yaml").read_text())
    before = json.dumps(deployment, sort_keys=True)
    assert pod_for(deployment) == pod_for(deployment)
    assert json.dumps(deployment, sort_keys=True) == before


def test_a_changed_template_changes_the_pod_template_hash() -> None:
    deployment = yaml.safe_load((EXAMPLES / "deployment-gpu-training.yaml").read_text())
    first = pod_for(deployment)["metadata"]["labels"]["pod-template-hash"]
    deployment["spec"]["template"]["spec"]["containers"][0]["image"] += "-new"
    assert pod_for(deployment)["metadata"]["labels"]["pod-template-hash"] != first


def test_a_long_name_is_cut_as_the_api_server_cuts_a_generate_name() -> None:
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j" * 63}, "spec": {"template": {"spec": {"containers": []}}}}
    pod = pod_for(job)
    assert pod["metadata"]["generateName"] == "j" * 63 + "-"
    assert pod["metadata"]["name"] == "j" * 58 + "00000"


# -- kpe explain --pod -----------------------------------------------------------------


def test_explain_on_a_deployment_decides_as_for_the_same_template_written_as_a_pod() -> None:
    code, as_pod = explain(EXAMPLES / "pod-gpu-training.yaml", "--output", "json")
    assert code == 0
    code, as_deployment = explain(EXAMPLES / "deployment-gpu-training.yaml", "--output", "json")
    assert code == 0
    pod, deployment = json.loads(as_pod), json.loads(as_deployment)
    assert deployment["matchedPolicies"] == pod["matchedPolicies"]
    assert "gpu-placement" in deployment["matchedPolicies"]
    assert [(n["node"], n["verdict"], n["reason"]) for n in deployment["nodes"]] == [(n["node"], n["verdict"], n["reason"]) for n in pod["nodes"]]
    assert {n["node"]: n["verdict"] for n in deployment["nodes"]}["cpu-a1"] == "unresolvable"
    assert deployment["admission"]["gates"] == pod["admission"]["gates"]
    hash_ = pod_for(yaml.safe_load((EXAMPLES / "deployment-gpu-training.yaml").read_text()))["metadata"]["labels"]["pod-template-hash"]
    assert deployment["pod"] == f"ml-train/resnet-train-{hash_}-00000"
    assert deployment["workload"] == "Deployment ml-train/resnet-train"
    assert "workload" not in pod


def test_explain_on_a_deployment_names_the_pod_and_the_deployment_it_comes_from() -> None:
    code, out = explain(EXAMPLES / "deployment-gpu-training.yaml")
    assert code == 0
    hash_ = pod_for(yaml.safe_load((EXAMPLES / "deployment-gpu-training.yaml").read_text()))["metadata"]["labels"]["pod-template-hash"]
    assert out.splitlines()[0].startswith(f"pod ml-train/resnet-train-{hash_}-00000 from Deployment ml-train/resnet-train  (policy generation ")
    assert "matching policies: arm64-readiness, bin-packing, gpu-placement, gpu-quota, maintenance-drain, protect-critical, team-node-pools, zone-affinity" in out
    rows = {line.split()[0]: line.split()[1] for line in out.splitlines() if line.startswith(("gpu-", "cpu-"))}
    assert rows == {"gpu-a1": "PASS", "gpu-b1": "PASS", "gpu-a2-maintenance": "UNRESOLVABLE", "cpu-a1": "UNRESOLVABLE"}


def test_explain_on_a_file_of_several_workloads_explains_each_in_order(tmp_path: Path) -> None:
    deployment = (EXAMPLES / "deployment-gpu-training.yaml").read_text()
    job = textwrap.dedent("""\
        apiVersion: batch/v1
        kind: Job
        metadata: {name: lint, namespace: ci}
        spec:
          template:
            metadata: {labels: {app: lint}}
            spec: {restartPolicy: Never, containers: [{name: lint, image: busybox:1.37}]}
        """)
    path = tmp_path / "manifests.yaml"
    path.write_text(deployment + "---\n" + job)
    code, out = explain(path)
    assert code == 0
    heads = [line for line in out.splitlines() if line.startswith("pod ")]
    assert [h.split("  (")[0] for h in heads][1] == "pod ci/lint-00000 from Job ci/lint"
    assert heads[0].startswith("pod ml-train/resnet-train-") and len(heads) == 2
    code, out = explain(path, "--output", "json")
    reports = json.loads(out)
    assert [r["workload"] for r in reports] == ["Deployment ml-train/resnet-train", "Job ci/lint"]
    assert "gpu-placement" not in reports[1]["matchedPolicies"]


def test_explain_refuses_a_service_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "service.yaml"
    path.write_text("apiVersion: v1\nkind: Service\nmetadata: {name: api, namespace: shop}\nspec: {ports: [{port: 80}]}\n")
    code, out = explain(path)
    assert code == 2 and out == ""
    assert capsys.readouterr().err == f"kpe explain: {path}: Service shop/api is not a pod or a workload kpe can expand {ACCEPTED}\n"


def test_explain_refuses_a_manifest_mixing_a_workload_and_a_service(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "app.yaml"
    path.write_text((EXAMPLES / "deployment-gpu-training.yaml").read_text() + "---\napiVersion: v1\nkind: Service\nmetadata: {name: resnet, namespace: ml-train}\n")
    code, out = explain(path)
    assert code == 2 and out == ""
    assert f"Service ml-train/resnet is not a pod or a workload kpe can expand {ACCEPTED}" in capsys.readouterr().err


def test_explain_refuses_a_file_with_nothing_in_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "empty.yaml"
    path.write_text("# nothing\n")
    code, _ = explain(path)
    assert code == 2
    assert capsys.readouterr().err == f"kpe explain: {path} holds no pod or workload\n"


# -- PolicyTest fixtures -----------------------------------------------------------------


POLICY = """\
apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: web-on-web-nodes}
spec:
  match: {namespaces: [shop], podSelector: {matchLabels: {app: web}}}
  filters:
  - {name: web-node, expression: "node.metadata.?labels[?'role'].orValue('') == 'web'", message: not a web node}
"""

TEST = """\
apiVersion: kpe.dev/v1alpha1
kind: PolicyTest
metadata: {name: web}
spec:
  policies: [policy.yaml]
  fixtures:
    nodes:
      web-1: {metadata: {labels: {role: web}}}
      db-1: {metadata: {labels: {role: db}}}
    pods:
      web-deployment:
        apiVersion: apps/v1
        kind: Deployment
        metadata: {name: web, namespace: shop, labels: {app: not-web}}
        spec:
          selector: {matchLabels: {app: web}}
          template:
            metadata: {labels: {app: web}}
            spec: {containers: [{name: web, image: nginx:1.27}]}
      web-service: {apiVersion: v1, kind: Service, metadata: {name: web, namespace: shop}}
  cases:
"""


def write(tmp_path: Path, cases: str) -> Path:
    (tmp_path / "policy.yaml").write_text(POLICY)
    path = tmp_path / "test.yaml"
    path.write_text(TEST + textwrap.indent(textwrap.dedent(cases), "  "))
    return path


def test_a_policytest_case_with_a_deployment_fixture_judges_the_deployments_pod(tmp_path: Path) -> None:
    [result] = run_test_files([write(tmp_path, """\
        - name: the deployment's pod is a web pod in shop
          pod: web-deployment
          expect:
            matched: [web-on-web-nodes]
            filter: {pass: [web-1], unresolvable: {db-1: "web-on-web-nodes/web-node: not a web node"}}
        """)])
    assert result.passed, result.render()


def test_an_inline_workload_in_a_case_is_expanded_too(tmp_path: Path) -> None:
    [result] = run_test_files([write(tmp_path, """\
        - name: an inline StatefulSet
          pod:
            apiVersion: apps/v1
            kind: StatefulSet
            metadata: {name: web, namespace: shop}
            spec: {template: {metadata: {labels: {app: web}}, spec: {containers: [{name: web, image: nginx:1.27}]}}}
          expect: {matched: [web-on-web-nodes]}
        """)])
    assert result.passed, result.render()


def test_a_policytest_fixture_of_another_kind_is_refused_naming_it(tmp_path: Path) -> None:
    [result] = run_test_files([write(tmp_path, """\
        - name: a service is no pod
          pod: web-service
          expect: {matched: []}
        """)])
    assert result.error is not None and not result.failures
    assert f"error[KPE500] web: spec.fixtures.pods.web-service: case 'a service is no pod': pod fixture 'web-service': Service shop/web-service is not a pod or a workload kpe can expand {ACCEPTED}" in result.error


def test_the_shipped_workload_tests_pass() -> None:
    results = run_test_files([ROOT / "policies" / "tests" / "workloads.yaml"])
    assert len(results) == 3
    assert all(r.passed for r in results), "\n".join(r.render() for r in results if not r.passed)
