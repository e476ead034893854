"""The Helm chart (deploy/helm/kpe) makes the objects of the kustomize tree (deploy/) for the
same choices: both are rendered, with the real helm and kubectl, and compared kind by kind,
name by name, field by field, with only the differences listed here allowed. So the two
cannot drift; and one version is the chart's, the image's and kpe's."""

from __future__ import annotations

import copy
import subprocess
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helm import CHART, ROOT, template
from tests.test_deploy import with_components

Obj = dict[str, Any]

# Each kustomize component, and the chart's values that make the same objects.
CHOICES: dict[str, tuple[tuple[str, ...], dict[str, Any]]] = {
    "the base": ((), {}),
    "examples": (("examples",), {"policies.examples": True}),
    "bind": (("bind",), {"bind": True}),
    "policy-reports": (("policy-reports",), {"policyReports": True}),
    "cluster-policies": (("cluster-policies",), {"policies.source": "cluster"}),
    "cert-manager": (("cert-manager",), {"certificates.source": "cert-manager"}),
    "scheduler": (("scheduler",), {"scheduler.enabled": True}),
    "monitoring": (("monitoring",), {"monitoring.enabled": True}),
}
HASHED = re.compile(r"^(kpe-policies|kpe-scheduler-config)-[a-z0-9]{10}$")
# What the chart may add to what kustomize renders: Helm's own labels, and the checksums that
# roll the pods when their ConfigMap changes (kustomize puts a hash in the ConfigMap's name).
KEPT_ANNOTATIONS = {"cert-manager.io/inject-ca-from"}
KEPT_LABELS = {"grafana_dashboard", "app.kubernetes.io/name", "app.kubernetes.io/component"}


def unhashed(name: str) -> str:
    found = HASHED.match(name)
    return found[1] if found else name


def normal(obj: Obj) -> Obj:
    """The fields that matter: no Helm or kustomize bookkeeping, env by name."""
    out = copy.deepcopy(obj)
    meta = out.setdefault("metadata", {})
    meta["name"] = unhashed(meta["name"])
    meta["labels"] = {k: v for k, v in (meta.get("labels") or {}).items() if k in KEPT_LABELS}
    meta["annotations"] = {k: v for k, v in (meta.get("annotations") or {}).items() if k in KEPT_ANNOTATIONS}
    template_meta = out.get("spec", {}).get("template", {}).get("metadata")
    if template_meta is not None:
        template_meta.pop("annotations", None)
    for container in out.get("spec", {}).get("template", {}).get("spec", {}).get("containers", []):
        container["env"] = sorted(container.get("env", []), key=lambda e: e["name"])
    for volume in out.get("spec", {}).get("template", {}).get("spec", {}).get("volumes", []):
        if "configMap" in volume:
            volume["configMap"]["name"] = unhashed(volume["configMap"]["name"])
    return out


def by_key(objects: list[Obj]) -> dict[tuple[str, str, str], Obj]:
    return {(o["kind"], o["metadata"].get("namespace", ""), unhashed(o["metadata"]["name"])): normal(o) for o in objects}


@pytest.mark.parametrize("choice", list(CHOICES))
def test_the_chart_makes_the_objects_of_the_kustomize_tree_for_the_same_choice(choice: str, tmp_path: Path) -> None:
    components, values = CHOICES[choice]
    kustomized = by_key(with_components(tmp_path, *components))
    # The base makes the Namespace; Helm's way is `helm install -n kpe-system --create-namespace`.
    kustomized.pop(("Namespace", "", "kpe-system"))
    if choice != "cert-manager":
        # The base annotates the webhooks for cert-manager whether it runs or not (inert without
        # it); the chart annotates them only when cert-manager makes the certificates.
        for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            kustomized[(kind, "", "kpe")]["metadata"]["annotations"].pop("cert-manager.io/inject-ca-from")
    charted = by_key(template(values, crds=choice == "cluster-policies"))
    assert sorted(charted) == sorted(kustomized), "the same kinds, namespaces and names"
    for key, obj in kustomized.items():
        assert charted[key] == obj, f"{key} differs"


def test_another_namespace_moves_every_namespaced_object_and_what_points_at_them() -> None:
    objects = template({"scheduler.enabled": True, "certificates.source": "helm"}, namespace="platform-kpe")
    namespaced = [o for o in objects if o["kind"] not in ("ClusterRole", "ClusterRoleBinding", "PriorityClass", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")]
    assert {o["metadata"]["namespace"] for o in namespaced} == {"platform-kpe", "kube-system"}, "kube-system: the scheduler's authentication reader"
    text = yaml.safe_dump_all(objects)
    assert "kpe-system" not in text
    [deployment] = [o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "kpe"]
    env = {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert (env["KPE_EXCLUDED_NAMESPACES"], env["KPE_RESERVATION_NAMESPACE"]) == ("kube-system,kube-public,kube-node-lease,platform-kpe", "platform-kpe")
    [hook] = [o for o in objects if o["kind"] == "MutatingWebhookConfiguration"]
    assert hook["webhooks"][0]["clientConfig"]["service"]["namespace"] == "platform-kpe"
    assert hook["webhooks"][0]["namespaceSelector"]["matchExpressions"][0]["values"] == ["kube-system", "kube-public", "kube-node-lease", "platform-kpe"]


def test_certificates_the_chart_makes_are_one_ca_that_the_webhooks_trust_and_that_signs_kpe_s_certificate() -> None:
    from cryptography import x509

    objects = template({"certificates.source": "helm"})
    secrets = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Secret"}
    assert sorted(secrets) == ["kpe-apiserver-client", "kpe-ca", "kpe-scheduler-client", "kpe-tls"]
    import base64

    def cert(name: str, key: str = "tls.crt") -> x509.Certificate:
        return x509.load_pem_x509_certificate(base64.b64decode(secrets[name]["data"][key]))

    ca = cert("kpe-ca")
    for hook in (o for o in objects if o["kind"].endswith("WebhookConfiguration")):
        assert x509.load_pem_x509_certificate(base64.b64decode(hook["webhooks"][0]["clientConfig"]["caBundle"])) == ca
    serving = cert("kpe-tls")
    assert serving.issuer == ca.subject
    assert serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName) == [
        "kpe.kpe-system.svc", "kpe.kpe-system.svc.cluster.local"]
    assert all(cert(name).issuer == ca.subject and cert(name, "ca.crt") == ca for name in ("kpe-scheduler-client", "kpe-apiserver-client", "kpe-tls"))


def test_webhook_failure_policies_and_timeouts_are_values_and_kpe_s_own_error_handling_follows_the_pod_webhook() -> None:
    objects = template({"webhooks.pods.failurePolicy": "Fail", "webhooks.policies.timeoutSeconds": 10})
    hooks = {o["kind"]: o["webhooks"][0] for o in objects if o["kind"].endswith("WebhookConfiguration")}
    assert (hooks["MutatingWebhookConfiguration"]["failurePolicy"], hooks["ValidatingWebhookConfiguration"]["timeoutSeconds"]) == ("Fail", 10)
    [deployment] = [o for o in objects if o["kind"] == "Deployment"]
    env = {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["KPE_WEBHOOK_ON_ERROR"] == "deny"


def test_inline_policy_files_are_served_and_an_existing_config_map_is_mounted_instead() -> None:
    policy = "apiVersion: kpe.dev/v1alpha1\nkind: SchedulingPolicy\nmetadata: {name: p}\nspec:\n  filters: [{name: f, expression: 'true'}]\n"
    [config_map] = [o for o in template({"policies.files": {"p.yaml": policy}}) if o["kind"] == "ConfigMap"]
    assert config_map["data"] == {"p.yaml": policy}
    objects = template({"policies.existingConfigMap": "my-policies"})
    assert not [o for o in objects if o["kind"] == "ConfigMap"]
    [deployment] = [o for o in objects if o["kind"] == "Deployment"]
    assert deployment["spec"]["template"]["spec"]["volumes"][0]["configMap"]["name"] == "my-policies"


def test_one_version_for_the_chart_the_image_and_kpe() -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert (chart["version"], chart["appVersion"]) == (version, version)
    kustomization = yaml.safe_load((ROOT / "deploy" / "kustomization.yaml").read_text())
    assert kustomization["images"] == [{"name": "kpe", "newName": "kpe", "newTag": version}]
    [deployment] = [o for o in template() if o["kind"] == "Deployment"]
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == f"kpe:{version}"


def test_the_chart_s_copies_of_the_policies_crds_and_files_are_those_of_the_repository() -> None:
    pairs = [(CHART / "files" / "examples" / p.name, p) for p in sorted((ROOT / "policies").glob("*.yaml"))]
    pairs += [(CHART / "crds" / name, ROOT / "deploy" / "crds" / name) for name in ("schedulingpolicies.yaml", "reservations.yaml")]
    pairs += [(CHART / "files" / "scheduler-config.yaml", ROOT / "deploy" / "scheduler" / "scheduler-config.yaml")]
    pairs += [(CHART / "files" / name, ROOT / "deploy" / "monitoring" / name) for name in ("prometheusrule.yaml", "dashboard.json")]
    assert sorted(p.name for p in (CHART / "files" / "examples").iterdir()) == sorted(p.name for p in (ROOT / "policies").glob("*.yaml"))
    stale = [str(copy.relative_to(ROOT)) for copy, source in pairs if copy.read_text() != source.read_text()]
    assert stale == [], "run python deploy/sync_policies.py"


def test_the_chart_lints_clean_and_refuses_a_value_that_fits_no_choice() -> None:
    from tests.helm import need_helm

    helm = need_helm()
    linted = subprocess.run([helm, "lint", "--strict", str(CHART)], capture_output=True, text=True, timeout=60)
    assert linted.returncode == 0, linted.stdout + linted.stderr
    typo = subprocess.run([helm, "template", "kpe", str(CHART), "--set", "policies.source=clusters"], capture_output=True, text=True, timeout=60)
    assert typo.returncode == 1
    assert "at '/policies/source': value must be one of 'files', 'cluster'" in typo.stderr
    unknown = subprocess.run([helm, "template", "kpe", str(CHART), "--set", "replica=3"], capture_output=True, text=True, timeout=60)
    assert unknown.returncode == 1 and "additional properties 'replica' not allowed" in unknown.stderr


def test_the_chart_accepts_exactly_the_kubernetes_versions_kpe_supports() -> None:
    from server.cli.release import SUPPORTED_KUBERNETES

    oldest, newest = SUPPORTED_KUBERNETES
    major, minor = newest.split(".")
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["kubeVersion"] == f">={oldest}.0-0 <{major}.{int(minor) + 1}.0-0"
