"""deploy/ renders with plain ``kubectl kustomize``, every reference in it resolves,
its settings are kpe's, its RBAC is exactly what kpe calls, and the generated
pieces (policy copy, example scheduler config) are current. Also the Dockerfile's
final stage: non-root, no build tools."""

from __future__ import annotations

import io
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest
import yaml

from server.app import WEBHOOK_PATH
from server.cli.main import EXIT_OK, main
from server.settings import Settings, env_name, load_settings

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
KUBECTL = shutil.which("kubectl")

Obj = dict[str, Any]

# (apiGroup, resource, verb) — exactly what server/cluster/kube.py and the gate controller call.
CLUSTER_RULES = {
    ("", "nodes", "get"), ("", "nodes", "list"), ("", "nodes", "watch"),
    ("", "pods", "get"), ("", "pods", "list"), ("", "pods", "watch"), ("", "pods", "patch"),
    ("", "events", "create"), ("events.k8s.io", "events", "create"),
}  # fmt: skip
LEASE_RULES = {("coordination.k8s.io", "leases", "get"), ("coordination.k8s.io", "leases", "create"), ("coordination.k8s.io", "leases", "update")}
PLACEHOLDER_RULES = {("", "pods", "create"), ("", "pods", "delete")}  # reservations' placeholders, in kpe's namespace only


def kustomize(directory: Path) -> list[Obj]:
    if KUBECTL is None:
        pytest.skip("kubectl (with its built-in kustomize) is not installed; cannot render deploy/")
    result = subprocess.run([KUBECTL, "kustomize", str(directory)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d]


@pytest.fixture(scope="module")
def objects() -> list[Obj]:
    return kustomize(DEPLOY)


def one(objects: list[Obj], kind: str, name: str | None = None, namespace: str | None = None) -> Obj:
    found = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name) and (namespace is None or o["metadata"].get("namespace") == namespace)]
    assert len(found) == 1, f"expected one {kind} {namespace}/{name}, found {len(found)}"
    return found[0]


def exists(objects: list[Obj], kind: str, name: str, namespace: str | None = None) -> bool:
    return any(o["kind"] == kind and o["metadata"]["name"] == name and o["metadata"].get("namespace") == namespace for o in objects)


def deployment(objects: list[Obj]) -> Obj:
    return one(objects, "Deployment", "kpe")


def pod_spec(objects: list[Obj]) -> Obj:
    spec: Obj = deployment(objects)["spec"]["template"]["spec"]
    return spec


def container(objects: list[Obj]) -> Obj:
    containers = pod_spec(objects)["containers"]
    assert len(containers) == 1
    c: Obj = containers[0]
    return c


def selected(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


# -- the objects and their references -------------------------------------------------


def test_renders_the_expected_objects(objects: list[Obj]) -> None:
    kinds = sorted(o["kind"] for o in objects)
    assert kinds == sorted(
        ["Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Role", "RoleBinding", "PriorityClass", "Deployment", "Service", "PodDisruptionBudget", "ConfigMap", "MutatingWebhookConfiguration", "NetworkPolicy"]
    )
    namespaced = [o for o in objects if o["kind"] not in ("Namespace", "ClusterRole", "ClusterRoleBinding", "MutatingWebhookConfiguration", "PriorityClass")]
    assert {o["metadata"].get("namespace") for o in namespaced} == {"kpe-system"}
    assert exists(objects, "Namespace", "kpe-system")


def test_service_account_exists(objects: list[Obj]) -> None:
    dep = deployment(objects)
    assert exists(objects, "ServiceAccount", pod_spec(objects)["serviceAccountName"], dep["metadata"]["namespace"])


@pytest.mark.parametrize("kind", ["ClusterRoleBinding", "RoleBinding"])
def test_bindings_resolve(objects: list[Obj], kind: str) -> None:
    bindings = [o for o in objects if o["kind"] == kind]
    assert bindings
    for binding in bindings:
        ref = binding["roleRef"]
        assert ref["apiGroup"] == "rbac.authorization.k8s.io"
        role_namespace = None if ref["kind"] == "ClusterRole" else binding["metadata"]["namespace"]
        assert exists(objects, ref["kind"], ref["name"], role_namespace), ref
        for subject in binding["subjects"]:
            assert subject["kind"] == "ServiceAccount"
            assert exists(objects, "ServiceAccount", subject["name"], subject["namespace"]), subject
            assert subject["name"] == pod_spec(objects)["serviceAccountName"]


def test_volumes_resolve(objects: list[Obj]) -> None:
    spec = pod_spec(objects)
    volumes = {v["name"]: v for v in spec["volumes"]}
    for mount in container(objects)["volumeMounts"]:
        assert mount["name"] in volumes, mount
    config_maps = [v for v in volumes.values() if "configMap" in v]
    assert len(config_maps) == 1
    name = config_maps[0]["configMap"]["name"]
    assert re.fullmatch(r"kpe-policies-[a-z0-9]{10}", name), "the ConfigMap keeps kustomize's content hash"
    assert exists(objects, "ConfigMap", name, "kpe-system")
    secrets = [v for v in volumes.values() if "secret" in v]
    assert [s["secret"]["secretName"] for s in secrets] == ["kpe-tls", "kpe-client-ca"]
    # The Secret is made outside the base (so re-applying never replaces the key), as documented.
    assert not any(o["kind"] == "Secret" for o in objects)
    readme = (DEPLOY / "README.md").read_text()
    assert "kubectl -n kpe-system create secret tls kpe-tls" in readme
    assert "kubectl -n kpe-system create secret generic kpe-client-ca" in readme


def test_cert_manager_component_makes_the_secret(tmp_path: Path) -> None:
    # kustomize refuses absolute paths to bases; an overlay outside the repo refers to it relatively.
    (tmp_path / "kustomization.yaml").write_text(
        yaml.safe_dump({"resources": [os.path.relpath(DEPLOY, tmp_path)], "components": [os.path.relpath(DEPLOY / "cert-manager", tmp_path)]})
    )
    objects = kustomize(tmp_path)
    certificate = one(objects, "Certificate", "kpe-tls", "kpe-system")
    assert certificate["spec"]["secretName"] == "kpe-tls"
    assert "kpe.kpe-system.svc" in certificate["spec"]["dnsNames"]
    issuer = certificate["spec"]["issuerRef"]
    assert exists(objects, issuer["kind"], issuer["name"], "kpe-system")
    webhook = one(objects, "MutatingWebhookConfiguration", "kpe")
    assert webhook["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == "kpe-system/kpe-tls"
    # Both callers' client certificates come from the same CA, which kpe reads from kpe-tls's ca.crt.
    for name in ("kpe-scheduler-client", "kpe-apiserver-client"):
        client = one(objects, "Certificate", name, "kpe-system")
        assert client["spec"]["usages"] == ["client auth"] and client["spec"]["issuerRef"] == issuer
    volumes = {v["name"]: v for v in pod_spec(objects)["volumes"]}
    assert volumes["client-ca"]["secret"]["secretName"] == "kpe-tls"


def test_service_selects_the_pods_and_targets_a_container_port(objects: list[Obj]) -> None:
    service = one(objects, "Service", "kpe", "kpe-system")
    dep = deployment(objects)
    pod_labels = dep["spec"]["template"]["metadata"]["labels"]
    assert selected(service["spec"]["selector"], pod_labels)
    assert selected(dep["spec"]["selector"]["matchLabels"], pod_labels)
    pdb = one(objects, "PodDisruptionBudget", "kpe", "kpe-system")
    assert selected(pdb["spec"]["selector"]["matchLabels"], pod_labels)
    ports = container(objects)["ports"]
    by_name = {p["name"]: p for p in service["spec"]["ports"]}
    assert {name: p["port"] for name, p in by_name.items()} == {"scheduler": 443, "webhook": 9443, "metrics": 8080}
    for port in by_name.values():
        target = port["targetPort"]
        assert any(p.get("name") == target or p["containerPort"] == target for p in ports), target


def test_webhook_calls_the_service(objects: list[Obj]) -> None:
    service = one(objects, "Service", "kpe", "kpe-system")
    config = one(objects, "MutatingWebhookConfiguration")
    (webhook,) = config["webhooks"]
    ref = webhook["clientConfig"]["service"]
    assert (ref["name"], ref["namespace"]) == (service["metadata"]["name"], service["metadata"]["namespace"])
    [port] = [p for p in service["spec"]["ports"] if p["port"] == ref["port"]]
    target = next(p for p in container(objects)["ports"] if p["name"] == port["targetPort"])
    assert target["containerPort"] == int(literal_env(container(objects))["KPE_WEBHOOK_PORT"]), "the webhook's own listener"
    assert ref["path"] == WEBHOOK_PATH == "/admission/pods"
    assert "caBundle" in webhook["clientConfig"], "the caBundle placeholder is part of the base"
    assert webhook["rules"] == [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"], "scope": "Namespaced"}]
    assert webhook["failurePolicy"] == "Ignore"
    assert webhook["sideEffects"] == "None"
    assert webhook["timeoutSeconds"] == 5
    assert webhook["admissionReviewVersions"] == ["v1"]
    assert webhook["name"].count(".") >= 2, "webhook names must be fully qualified"


def test_webhook_skips_kpe_the_control_plane_and_opted_out_namespaces_but_no_pod_can_opt_itself_out(objects: list[Obj]) -> None:
    (webhook,) = one(objects, "MutatingWebhookConfiguration")["webhooks"]
    by_key = {e["key"]: e for e in webhook["namespaceSelector"]["matchExpressions"]}
    names = by_key["kubernetes.io/metadata.name"]
    assert names["operator"] == "NotIn" and set(names["values"]) == {"kpe-system", "kube-system"}
    assert by_key["kpe.dev/admission"] == {"key": "kpe.dev/admission", "operator": "NotIn", "values": ["disabled"]}
    # A pod label would let any pod's author skip every admission policy.
    assert "objectSelector" not in webhook
    assert one(objects, "Namespace", "kpe-system")["metadata"]["labels"]["kpe.dev/admission"] == "disabled"


# -- the pod ------------------------------------------------------------------------------


def test_probes(objects: list[Obj]) -> None:
    c = container(objects)
    port_names = {p["name"] for p in c["ports"]}
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        get = c[probe]["httpGet"]
        assert get["path"] == path
        assert get["port"] in port_names
        # The health listener (KPE_HEALTH_PORT) is plain HTTP: probes need no client certificate.
        assert get["scheme"] == "HTTP"
        port = next(p for p in c["ports"] if p["name"] == get["port"])
        assert port["containerPort"] == int(literal_env(c)["KPE_HEALTH_PORT"])


def literal_env(c: Obj) -> dict[str, str]:
    return {e["name"]: e["value"] for e in c["env"] if "value" in e}


def test_env_names_are_kpe_settings(objects: list[Obj]) -> None:
    allowed = {env_name(f.name) for f in fields(Settings)}
    names = [e["name"] for e in container(objects)["env"]]
    assert names and len(names) == len(set(names))
    assert set(names) <= allowed, set(names) - allowed


def test_env_values_make_valid_settings_that_match_the_pod(objects: list[Obj]) -> None:
    c = container(objects)
    env = literal_env(c)
    for e in c["env"]:
        if "valueFrom" in e:
            env[e["name"]] = "from-the-pod"
    settings = load_settings(environ=env)
    assert settings.validate() == []
    assert settings.tls and settings.cluster == "on"
    container_ports = [p["containerPort"] for p in c["ports"]]
    assert settings.port in container_ports and settings.webhook_port in container_ports and settings.health_port in container_ports
    # Safe by default: client certificates on the scheduler's and the API server's listeners,
    # introspection (it lists pods) on loopback only, and no bind verb.
    assert settings.tls_client_ca and settings.webhook_client_ca
    assert settings.introspection_port not in container_ports and settings.introspection_host == "127.0.0.1"
    assert settings.bind is False
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    assert settings.policies == mounts["policies"]
    assert Path(settings.tls_cert).parent == Path(settings.tls_key).parent == Path(mounts["tls"])
    # The Lease namespace follows the pod's namespace, where the Role grants Leases.
    lease = next(e for e in c["env"] if e["name"] == "KPE_LEASE_NAMESPACE")
    assert lease["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    assert exists(objects, "Role", "kpe-leader-election", deployment(objects)["metadata"]["namespace"])


def test_pod_hardening_and_resources(objects: list[Obj]) -> None:
    dep = deployment(objects)
    assert dep["spec"]["replicas"] == 2
    spec = pod_spec(objects)
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["runAsUser"] != 0
    c = container(objects)
    sc = c["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    for section in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(c["resources"][section])


# -- RBAC -------------------------------------------------------------------------------------


def rules(role: Obj) -> set[tuple[str, str, str]]:
    out: set[tuple[str, str, str]] = set()
    for rule in role["rules"]:
        assert "resourceNames" not in rule and "nonResourceURLs" not in rule
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    assert "*" not in (group, resource, verb), rule
                    out.add((group, resource, verb))
    return out


def test_network_policy_admits_only_the_served_ports(objects: list[Obj]) -> None:
    policy = one(objects, "NetworkPolicy", "kpe", "kpe-system")
    assert selected(policy["spec"]["podSelector"]["matchLabels"], deployment(objects)["spec"]["template"]["metadata"]["labels"])
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    admitted = sorted(port["port"] for rule in policy["spec"]["ingress"] for port in rule["ports"])
    assert admitted == ["health", "scheduler", "webhook"]
    [metrics] = [rule for rule in policy["spec"]["ingress"] if rule["ports"][0]["port"] == "health"]
    assert metrics["from"] == [{"namespaceSelector": {"matchLabels": {"kpe.dev/scrape-metrics": "true"}}}]


def test_the_bind_component_adds_the_setting_and_exactly_its_rbac(tmp_path: Path) -> None:
    shutil.copytree(DEPLOY, tmp_path / "deploy")
    (tmp_path / "overlay").mkdir()
    (tmp_path / "overlay" / "kustomization.yaml").write_text("resources: [../deploy]\ncomponents: [../deploy/bind]\n")
    with_bind = kustomize(tmp_path / "overlay")
    assert literal_env(container(with_bind))["KPE_BIND"] == "true"
    assert rules(one(with_bind, "ClusterRole", "kpe-bind")) == {("", "pods/binding", "create")}
    binding = one(with_bind, "ClusterRoleBinding", "kpe-bind")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "kpe", "namespace": "kpe-system"}]


def test_rbac_is_exactly_least_privilege(objects: list[Obj]) -> None:
    assert rules(one(objects, "ClusterRole")) == CLUSTER_RULES
    role = one(objects, "Role", "kpe-leader-election")
    assert role["metadata"]["namespace"] == "kpe-system"
    assert rules(role) == LEASE_RULES
    placeholders = one(objects, "Role", "kpe-placeholders")
    assert placeholders["metadata"]["namespace"] == "kpe-system"
    assert rules(placeholders) == PLACEHOLDER_RULES


def test_the_placeholder_priority_class_is_below_default_pods_and_never_preempts(objects: list[Obj]) -> None:
    priority = one(objects, "PriorityClass", "kpe-placeholder")
    assert priority["value"] < 0 and priority["preemptionPolicy"] == "Never" and not priority["globalDefault"]
    assert priority["metadata"]["name"] == Settings().placeholder_priority_class


# -- generated content is current ---------------------------------------------------------------


def test_policy_copy_matches_policies() -> None:
    sys.path.insert(0, str(DEPLOY))
    try:
        import sync_policies
    finally:
        sys.path.remove(str(DEPLOY))
    assert sync_policies.differences() == [], "run: python deploy/sync_policies.py"


def test_configmap_holds_exactly_the_shipped_policies(objects: list[Obj], tmp_path: Path) -> None:
    from engine.policy.loader import load

    data = one(objects, "ConfigMap")["data"]
    shipped = {p.name: p.read_text() for p in (ROOT / "policies").glob("*.yaml")}
    assert data == shipped
    for name, text in data.items():
        (tmp_path / name).write_text(text)
    assert len(load([tmp_path])) == len(load([ROOT / "policies"]))


def test_example_scheduler_config_is_current(monkeypatch: pytest.MonkeyPatch) -> None:
    path = DEPLOY / "scheduler-config.yaml"
    text = path.read_text()
    first = text.splitlines()[0]
    prefix = "# Generated by: kpe scheduler-config"
    assert first.startswith(prefix)
    monkeypatch.chdir(ROOT)  # the command names paths relative to the repository
    out = io.StringIO()
    assert main(["scheduler-config", *shlex.split(first.removeprefix(prefix))], out=out) == EXIT_OK
    assert out.getvalue() == text, f"regenerate: {first.removeprefix('# Generated by: ')} > deploy/scheduler-config.yaml"
    config = yaml.safe_load(text)
    assert config["kind"] == "KubeSchedulerConfiguration"
    (entry,) = config["extenders"]
    assert entry["urlPrefix"].startswith("https://kpe.kpe-system.svc:443/")
    assert entry["tlsConfig"]["caFile"]


# -- Dockerfile ---------------------------------------------------------------------------------


def dockerfile_stages() -> list[list[str]]:
    """Instructions per stage, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", (ROOT / "Dockerfile").read_text())
    stages: list[list[str]] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.upper().startswith("FROM "):
            stages.append([])
        if stages:
            stages[-1].append(line)
    return stages


def test_dockerfile_final_stage_is_non_root_and_has_no_build_tools(objects: list[Obj]) -> None:
    stages = dockerfile_stages()
    assert len(stages) >= 2, "multi-stage: build the wheel apart from the final image"
    assert stages[0][0].startswith("FROM ${PYTHON_IMAGE} AS builder") and any("pip wheel" in i for i in stages[0])
    final = stages[-1]
    body = "\n".join(final)
    assert "python:3.11-slim" in (ROOT / "Dockerfile").read_text()
    for tool in ("gcc", "build-essential", "make ", "g++", "apt-get install", "COPY . "):
        assert tool not in body, tool
    users = [i.split()[1] for i in final if i.upper().startswith("USER ")]
    assert users and users[-1].split(":")[0] not in ("root", "0")
    assert int(users[-1].split(":")[0]) == pod_spec(objects)["securityContext"]["runAsUser"]
    assert "KPE_POLICIES=/etc/kpe/policies" in body and "/etc/kpe/policies/" in body
    entrypoint = next(i for i in final if i.upper().startswith("ENTRYPOINT "))
    assert yaml.safe_load(entrypoint.split(None, 1)[1]) == ["kpe", "serve", "--host", "0.0.0.0"]
    exposed = [int(p) for i in final if i.upper().startswith("EXPOSE ") for p in i.split()[1:]]
    assert exposed == [p["containerPort"] for p in container(objects)["ports"]]
