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

from engine.policy.model import SYSTEM_NAMESPACES

from server.app import POLICY_WEBHOOK_PATH, WEBHOOK_PATH
from server.cluster.lastgood import NAME as LAST_GOOD
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
    ("", "namespaces", "list"), ("", "namespaces", "watch"),
    *((("resource.k8s.io", kind, verb) for kind in ("resourceslices", "resourceclaims", "resourceclaimtemplates", "deviceclasses")
       for verb in ("list", "watch"))),
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
        ["Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Role", "RoleBinding", "Role", "RoleBinding", "PriorityClass", "Deployment", "Service", "PodDisruptionBudget", "ConfigMap", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration", "NetworkPolicy"]
    )
    namespaced = [o for o in objects if o["kind"] not in ("Namespace", "ClusterRole", "ClusterRoleBinding", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration", "PriorityClass")]
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
    # kube-scheduler's every connection to one replica, which counts all its pods in flight (tests/e2e/test_replica_bursts.py).
    assert service["spec"]["sessionAffinity"] == "ClientIP"
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


def test_the_policy_webhook_checks_kpe_s_kinds_on_the_webhook_listener_and_lets_them_be_written_when_kpe_is_down(objects: list[Obj]) -> None:
    pods = one(objects, "MutatingWebhookConfiguration")["webhooks"][0]["clientConfig"]["service"]
    config = one(objects, "ValidatingWebhookConfiguration", "kpe")
    assert config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == "kpe-system/kpe-tls"
    (webhook,) = config["webhooks"]
    ref = webhook["clientConfig"]["service"]
    assert {**ref, "path": ""} == {**pods, "path": ""}, "the same Service and port as the pod webhook"
    assert ref["path"] == POLICY_WEBHOOK_PATH == "/admission/policies"
    assert "caBundle" in webhook["clientConfig"]
    assert webhook["rules"] == [
        {"apiGroups": ["kpe.dev"], "apiVersions": ["v1alpha1"], "operations": ["CREATE", "UPDATE"], "resources": ["schedulingpolicies", "reservations"], "scope": "*"}
    ]
    # kpe down must never keep the policy that repairs it from being written (docs/guides/audit-and-admission.md).
    assert webhook["failurePolicy"] == "Ignore"
    assert (webhook["sideEffects"], webhook["timeoutSeconds"], webhook["admissionReviewVersions"]) == ("None", 5, ["v1"])


def test_webhook_skips_kpe_the_control_plane_and_opted_out_namespaces_but_no_pod_can_opt_itself_out(objects: list[Obj]) -> None:
    (webhook,) = one(objects, "MutatingWebhookConfiguration")["webhooks"]
    by_key = {e["key"]: e for e in webhook["namespaceSelector"]["matchExpressions"]}
    names = by_key["kubernetes.io/metadata.name"]
    # The namespaces no policy matches (kpe's --excluded-namespaces): pods there never wait for kpe.
    assert names["operator"] == "NotIn" and set(names["values"]) == Settings().excluded_namespace_set == set(SYSTEM_NAMESPACES)
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
    # The deployment is where kpe acts on the cluster; a kpe started by hand does not.
    assert settings.controller_set == {"gates", "reservations", "requeue"} and Settings(policies="p").controller_set == set()
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


def test_the_policy_reports_component_adds_the_setting_and_exactly_the_writer_s_rbac(tmp_path: Path, objects: list[Obj]) -> None:
    assert "KPE_POLICY_REPORTS" not in literal_env(container(objects)), "off unless the deployment asks for it"
    shutil.copytree(DEPLOY, tmp_path / "deploy")
    (tmp_path / "overlay").mkdir()
    (tmp_path / "overlay" / "kustomization.yaml").write_text("resources: [../deploy]\ncomponents: [../deploy/policy-reports]\n")
    with_reports = kustomize(tmp_path / "overlay")
    assert literal_env(container(with_reports))["KPE_POLICY_REPORTS"] == "true"
    # server/cluster/policyreports.py: list kpe's reports, create, replace (update) and delete them; nothing else.
    assert rules(one(with_reports, "ClusterRole", "kpe-policy-reports")) == {
        ("wgpolicyk8s.io", "policyreports", "list"), ("wgpolicyk8s.io", "policyreports", "create"),
        ("wgpolicyk8s.io", "policyreports", "update"), ("wgpolicyk8s.io", "policyreports", "delete"),
    }
    binding = one(with_reports, "ClusterRoleBinding", "kpe-policy-reports")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "kpe", "namespace": "kpe-system"}]


def test_rbac_is_exactly_least_privilege(objects: list[Obj]) -> None:
    assert rules(one(objects, "ClusterRole")) == CLUSTER_RULES
    role = one(objects, "Role", "kpe-leader-election")
    assert role["metadata"]["namespace"] == "kpe-system"
    assert rules(role) == LEASE_RULES
    placeholders = one(objects, "Role", "kpe-placeholders")
    assert placeholders["metadata"]["namespace"] == "kpe-system"
    assert rules(placeholders) == PLACEHOLDER_RULES
    params = one(objects, "Role", "kpe-params")
    assert params["metadata"]["namespace"] == "kpe-system"
    assert rules(params) == {("", "configmaps", "get"), ("", "configmaps", "list"), ("", "configmaps", "watch")}  # paramsFrom, kpe's namespace only


CLUSTER_POLICY_RULES = {
    ("kpe.dev", "schedulingpolicies", "list"), ("kpe.dev", "schedulingpolicies", "watch"),
    ("kpe.dev", "reservations", "list"), ("kpe.dev", "reservations", "watch"),
    ("kpe.dev", "schedulingpolicies/status", "patch"), ("kpe.dev", "reservations/status", "patch"),
}  # fmt: skip  # server/cluster/policyobjects.py reads, server/cluster/policystatus.py writes status only


def test_the_cluster_policies_component_adds_the_crds_their_least_rbac_and_the_cluster_source(tmp_path: Path, objects: list[Obj]) -> None:
    with_source = with_components(tmp_path, "cluster-policies")
    crds = sorted((o for o in with_source if o["kind"] == "CustomResourceDefinition"), key=lambda o: str(o["metadata"]["name"]))
    shipped = [yaml.safe_load((DEPLOY / "crds" / name).read_text()) for name in ("reservations.yaml", "schedulingpolicies.yaml")]
    # As generated, but for the base's part-of label.
    assert [{**c, "metadata": {"name": c["metadata"]["name"]}} for c in crds] == shipped
    assert rules(one(with_source, "ClusterRole", "kpe-cluster-policies")) == CLUSTER_POLICY_RULES
    assert one(with_source, "ClusterRoleBinding", "kpe-cluster-policies")["subjects"] == [{"kind": "ServiceAccount", "name": "kpe", "namespace": "kpe-system"}]
    assert rules(one(with_source, "ClusterRole", "kpe")) == CLUSTER_RULES, "the base's role is unchanged"
    c = container(with_source)
    env = literal_env(c)
    for e in c["env"]:
        if "valueFrom" in e:
            env[e["name"]] = "from-the-pod"
    settings = load_settings(environ=env)
    assert settings.validate() == []
    assert settings.policy_source == "cluster" and settings.controller_set == {"gates", "reservations", "requeue", "status"}
    assert settings.allow_empty_policies, "a fresh install has no objects yet"
    # The last good set (server/cluster/lastgood.py): one ConfigMap of kpe's namespace, by name but for create.
    last_good = one(with_source, "Role", "kpe-last-good-policies")["rules"]
    assert last_good == [{"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [LAST_GOOD], "verbs": ["get", "update"]},
                         {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]}]
    assert one(with_source, "RoleBinding", "kpe-last-good-policies")["metadata"]["namespace"] == "kpe-system"
    # Nothing else of the base changes.
    changed = [o for o in with_source if o["kind"] not in ("CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding", "Deployment")
               and o["metadata"]["name"] != "kpe-last-good-policies"]
    assert changed == [o for o in objects if o["kind"] not in ("ClusterRole", "ClusterRoleBinding", "Deployment")]
    assert load_settings(environ={**literal_env(container(objects))}).policy_source == "files", "the base keeps reading files"


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


def test_the_base_enforces_no_policy_until_it_is_given_some(objects: list[Obj]) -> None:
    assert one(objects, "ConfigMap").get("data", {}) == {}
    env = {e["name"]: e.get("value") for e in container(objects)["env"]}
    assert env["KPE_ALLOW_EMPTY_POLICIES"] == "true"


def test_the_examples_component_serves_exactly_the_shipped_policies(tmp_path: Path) -> None:
    from engine.policy.loader import load

    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        f"resources: [{os.path.relpath(DEPLOY, overlay)}]\ncomponents: [{os.path.relpath(DEPLOY / 'examples', overlay)}]\n"
    )
    data = one(kustomize(overlay), "ConfigMap")["data"]
    shipped = {p.name: p.read_text() for p in (ROOT / "policies").glob("*.yaml")}
    assert data == shipped
    served = tmp_path / "served"
    served.mkdir()
    for name, text in data.items():
        (served / name).write_text(text)
    assert len(load([served])) == len(load([ROOT / "policies"]))


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


# -- deploy/scheduler: a kube-scheduler of kpe's own --------------------------------------------

SCHEDULER = DEPLOY / "scheduler"


def with_components(tmp_path: Path, *components: str) -> list[Obj]:
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump({"resources": [os.path.relpath(DEPLOY, overlay)], "components": [os.path.relpath(DEPLOY / c, overlay) for c in components]})
    )
    return kustomize(overlay)


@pytest.fixture(scope="module")
def own_scheduler(tmp_path_factory: pytest.TempPathFactory) -> list[Obj]:
    return with_components(tmp_path_factory.mktemp("own-scheduler"), "scheduler")


def scheduler_pod(objects: list[Obj]) -> Obj:
    spec: Obj = one(objects, "Deployment", "kpe-scheduler", "kpe-system")["spec"]["template"]["spec"]
    return spec


def scheduler_container(objects: list[Obj]) -> Obj:
    (c,) = scheduler_pod(objects)["containers"]
    found: Obj = c
    return found


def scheduler_config(objects: list[Obj]) -> Obj:
    """The KubeSchedulerConfiguration the scheduler's --config names, read from the ConfigMap mounted there."""
    c = scheduler_container(objects)
    [path] = [a.removeprefix("--config=") for a in c["command"] if a.startswith("--config=")]
    mount = next(m for m in c["volumeMounts"] if path.startswith(m["mountPath"] + "/"))
    volume = next(v for v in scheduler_pod(objects)["volumes"] if v["name"] == mount["name"])
    config_map = one(objects, "ConfigMap", volume["configMap"]["name"], "kpe-system")
    config: Obj = yaml.safe_load(config_map["data"][path.removeprefix(mount["mountPath"] + "/")])
    return config


def test_the_scheduler_component_s_configuration_is_what_kpe_scheduler_config_prints(monkeypatch: pytest.MonkeyPatch) -> None:
    path = SCHEDULER / "scheduler-config.yaml"
    text = path.read_text()
    first = text.splitlines()[0]
    prefix = "# Generated by: kpe scheduler-config"
    assert first.startswith(prefix) and "--scheduler-name kpe-scheduler" in first
    monkeypatch.chdir(ROOT)  # the command names paths relative to the repository
    out = io.StringIO()
    assert main(["scheduler-config", *shlex.split(first.removeprefix(prefix))], out=out) == EXIT_OK
    assert out.getvalue() == text, f"regenerate: {first.removeprefix('# Generated by: ')} > deploy/scheduler/scheduler-config.yaml"


def test_the_scheduler_component_runs_its_configuration_with_its_own_profile_lease_and_credentials(own_scheduler: list[Obj]) -> None:
    config = scheduler_config(own_scheduler)
    assert config == yaml.safe_load((SCHEDULER / "scheduler-config.yaml").read_text()), "the ConfigMap holds the file as generated"
    assert config["profiles"] == [{"schedulerName": "kpe-scheduler"}]
    election = config["leaderElection"]
    assert election == {"leaderElect": True, "resourceName": "kpe-scheduler", "resourceNamespace": "kpe-system"}
    # Its Role grants exactly that Lease, where the Deployment runs.
    role = one(own_scheduler, "Role", "kpe-scheduler-leader-election", election["resourceNamespace"])
    assert role["rules"] == [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": [election["resourceName"]], "verbs": ["get", "update"]}]
    assert "clientConnection" not in config, "in-cluster credentials: its ServiceAccount"
    assert scheduler_pod(own_scheduler)["serviceAccountName"] == "kpe-scheduler"
    assert exists(own_scheduler, "ServiceAccount", "kpe-scheduler", "kpe-system")


def test_the_scheduler_component_calls_kpe_s_service_trusting_its_ca_with_a_client_certificate(own_scheduler: list[Obj]) -> None:
    (entry,) = scheduler_config(own_scheduler)["extenders"]
    service = one(own_scheduler, "Service", "kpe", "kpe-system")
    port = next(p for p in service["spec"]["ports"] if p["name"] == "scheduler")
    assert entry["urlPrefix"] == f"https://{service['metadata']['name']}.{service['metadata']['namespace']}.svc:{port['port']}{Settings().prefix}"
    # kpe requires a client certificate on its verbs (KPE_TLS_CLIENT_CA): the scheduler presents one
    # and checks kpe's certificate against a CA, all three files from one mounted Secret.
    assert literal_env(container(own_scheduler))["KPE_TLS_CLIENT_CA"]
    tls = entry["tlsConfig"]
    assert set(tls) == {"caFile", "certFile", "keyFile"}
    c = scheduler_container(own_scheduler)
    volumes = {v["name"]: v for v in scheduler_pod(own_scheduler)["volumes"]}
    for key, path in tls.items():
        mount = next(m for m in c["volumeMounts"] if path.startswith(m["mountPath"] + "/"))
        assert mount["readOnly"] is True
        assert volumes[mount["name"]]["secret"]["secretName"] == "kpe-scheduler-client", key
    assert sorted(Path(p).name for p in tls.values()) == ["ca.crt", "tls.crt", "tls.key"], "the keys of a kubernetes.io/tls Secret with its CA"
    assert not any(o["kind"] == "Secret" for o in own_scheduler)
    readme = (DEPLOY / "README.md").read_text()
    assert "kubectl -n kpe-system create secret generic kpe-scheduler-client" in readme


def test_with_cert_manager_the_scheduler_s_secret_is_issued_by_the_ca_that_signs_kpe_s_certificate(tmp_path: Path) -> None:
    objects = with_components(tmp_path, "cert-manager", "scheduler")
    secret = next(v for v in scheduler_pod(objects)["volumes"] if "secret" in v)["secret"]["secretName"]
    client = next(o for o in objects if o["kind"] == "Certificate" and o["spec"]["secretName"] == secret)
    assert client["spec"]["usages"] == ["client auth"]
    # cert-manager writes the issuing CA as ca.crt: the CA that signed kpe-tls, which kpe's client CA is too.
    assert client["spec"]["issuerRef"] == one(objects, "Certificate", "kpe-tls", "kpe-system")["spec"]["issuerRef"]


def test_the_scheduler_component_runs_the_upstream_kube_scheduler_hardened_on_two_nodes(own_scheduler: list[Obj]) -> None:
    dep = one(own_scheduler, "Deployment", "kpe-scheduler", "kpe-system")
    assert dep["spec"]["replicas"] == 2
    labels = dep["spec"]["template"]["metadata"]["labels"]
    assert selected(dep["spec"]["selector"]["matchLabels"], labels)
    pdb = one(own_scheduler, "PodDisruptionBudget", "kpe-scheduler", "kpe-system")
    assert selected(pdb["spec"]["selector"]["matchLabels"], labels) and pdb["spec"]["minAvailable"] == 1
    spec = scheduler_pod(own_scheduler)
    # Placed by the default scheduler: a scheduler cannot wait for itself.
    assert "schedulerName" not in spec
    [term] = spec["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert selected(term["podAffinityTerm"]["labelSelector"]["matchLabels"], labels)
    c = scheduler_container(own_scheduler)
    assert re.fullmatch(r"registry\.k8s\.io/kube-scheduler:v1\.32\.\d+", c["image"])
    assert "minor version must match" in (SCHEDULER / "deployment.yaml").read_text()
    assert c["command"][0] == "kube-scheduler"
    [secure_port] = [int(a.removeprefix("--secure-port=")) for a in c["command"] if a.startswith("--secure-port=")]
    for probe in ("livenessProbe", "readinessProbe"):
        get = c[probe]["httpGet"]
        assert (get["path"], get["scheme"]) == ("/healthz", "HTTPS")
        assert next(p for p in c["ports"] if p["name"] == get["port"])["containerPort"] == secure_port
    assert spec["securityContext"]["runAsNonRoot"] is True and spec["securityContext"]["runAsUser"] != 0
    sc = c["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False and sc["capabilities"]["drop"] == ["ALL"]
    for section in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(c["resources"][section])


def test_the_scheduler_component_s_rbac_is_the_built_in_scheduler_roles_and_its_lease(own_scheduler: list[Obj], objects: list[Obj]) -> None:
    base = {(o["kind"], o["metadata"]["name"]) for o in objects}
    added = [o for o in own_scheduler if (o["kind"], o["metadata"]["name"]) not in base]
    bindings = {(o["kind"], o["metadata"].get("namespace"), o["roleRef"]["kind"], o["roleRef"]["name"]) for o in added if o["kind"].endswith("Binding")}
    assert bindings == {
        ("ClusterRoleBinding", None, "ClusterRole", "system:kube-scheduler"),
        ("ClusterRoleBinding", None, "ClusterRole", "system:volume-scheduler"),
        ("RoleBinding", "kube-system", "Role", "extension-apiserver-authentication-reader"),
        ("RoleBinding", "kpe-system", "Role", "kpe-scheduler-leader-election"),
    }
    for binding in (o for o in added if o["kind"].endswith("Binding")):
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "kpe-scheduler", "namespace": "kpe-system"}]
    # No role of its own but the one Lease: the rest is Kubernetes' own, kept current by the API server.
    assert [o["kind"] for o in added if o["kind"] in ("Role", "ClusterRole")] == ["Role"]
    # The default scheduler and kpe's own objects are untouched.
    assert [o for o in own_scheduler if (o["kind"], o["metadata"]["name"]) in base] == [
        o for o in objects if o["kind"] != "ConfigMap" or o["metadata"]["name"].startswith("kpe-policies")
    ]


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
    assert "KPE_POLICIES" not in body and "COPY policies" not in body, "no policy is baked into the image"
    entrypoint = next(i for i in final if i.upper().startswith("ENTRYPOINT "))
    assert yaml.safe_load(entrypoint.split(None, 1)[1]) == ["kpe", "serve", "--host", "0.0.0.0"]
    exposed = [int(p) for i in final if i.upper().startswith("EXPOSE ") for p in i.split()[1:]]
    assert exposed == [p["containerPort"] for p in container(objects)["ports"]]


def test_the_image_builds_every_package_the_project_ships_with_its_data() -> None:
    """The builder stage copies each top-level package pyproject.toml ships (a package left out
    is missing from the wheel: without schemas/ no policy could load in the image), and the wheel's
    package data covers every data file under schemas/."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    shipped = [name.rstrip("*") for name in project["tool"]["setuptools"]["packages"]["find"]["include"]]
    copies = [i.split()[1].rstrip("/") for i in dockerfile_stages()[0] if i.upper().startswith("COPY ")]
    assert sorted(p for p in shipped if p not in copies) == []
    patterns = project["tool"]["setuptools"]["package-data"]["schemas"]
    data = sorted(str(p.relative_to(ROOT / "schemas")) for p in (ROOT / "schemas").rglob("*.json"))
    assert data and [f for f in data if not any(Path(f).match(pattern) and f.count("/") == pattern.count("/") for pattern in patterns)] == []
