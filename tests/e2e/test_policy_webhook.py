"""kpe's validating webhook for its own kinds through the real API server: a SchedulingPolicy
that `kpe check` refuses is refused at the write with kpe's message naming the field, and
with kpe stopped the kinds can still be written and deleted (failurePolicy Ignore, the rule
deploy/webhook.yaml documents)."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest

from .conftest import Cluster, Kpe, shipped_webhook
from .controlplane import wait_until
from .crds import POLICIES, install_crds

CONFIGS = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"
TYPE_ERROR = (
    "spec.filters[0].expression: KPE302 found no matching overload for '_+_' applied to '(string, int)'; "
    "a string is not a number: convert it with int(), double() or quantity()"
)

SERVED = """apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: served}
spec:
  filters: [{name: any, expression: "true"}]
"""


def policy(name: str, expression: str) -> dict[str, Any]:
    return {"apiVersion": "kpe.dev/v1alpha1", "kind": "SchedulingPolicy", "metadata": {"name": name},
            "spec": {"mode": "Audit", "filters": [{"name": "gpu", "expression": expression}]}}


@pytest.fixture
def names(cluster: Cluster) -> Iterator[list[str]]:
    """Policies are cluster-scoped and the control plane is shared: each scenario's are deleted after it."""
    made: list[str] = []
    yield made
    for name in made:
        cluster.api.delete(f"{POLICIES}/{name}")


def register(cluster: Cluster, kpe: Kpe) -> str:
    """deploy/webhook.yaml's policy webhook as shipped, pointed at this kpe with this CA."""
    doc = shipped_webhook("ValidatingWebhookConfiguration")
    hook = doc["webhooks"][0]
    hook["clientConfig"] = {"url": kpe.webhook_url + "/admission/policies", "caBundle": base64.b64encode(cluster.ca.cert_pem.bytes()).decode()}
    name = f"kpe-e2e-{cluster.namespace}"
    doc["metadata"] = {"name": name}
    cluster.api.apply(CONFIGS, doc)
    return name


def write(cluster: Cluster, method: str, path: str, body: Any = None) -> Any:
    return cluster.api.http.request(method, path, json=body)


def test_a_broken_policy_is_refused_at_the_write_and_kpe_stopped_never_blocks_a_write(cluster: Cluster, names: list[str]) -> None:
    install_crds(cluster.plane)
    suffix = cluster.namespace.rsplit("-", 1)[1]
    broken, good, written_while_down = f"broken-{suffix}", f"good-{suffix}", f"unchecked-{suffix}"
    names += [broken, good, written_while_down]
    cluster.write_policy("served.yaml", SERVED)
    kpe = cluster.start_kpe()
    config = register(cluster, kpe)
    try:
        # The API server takes up a new configuration a moment later; a dry run stores nothing.
        refused = wait_until(
            lambda: (r := write(cluster, "POST", POLICIES + "?dryRun=All", policy(broken, "node.metadata.name + 1 == 2"))).status_code == 422 and r,
            15, "the API server to call kpe's policy webhook", interval=0.2,
        )
        status = refused.json()
        print(f"\n[e2e policy webhook] {cluster.plane.binaries.version}: the API server's answer:\n{refused.text}")
        assert status["reason"] == "Invalid" and status["code"] == 422
        assert status["message"] == f'admission webhook "policies.kpe.dev" denied the request: {TYPE_ERROR}'
        assert status["details"]["causes"] == [{"reason": "FieldValueInvalid", "message": TYPE_ERROR.split(": ", 1)[1], "field": "spec.filters[0].expression"}]
        kubectl = shutil.which("kubectl", path=str(cluster.plane.binaries.folder)) or shutil.which("kubectl")
        if kubectl is not None:
            manifest = cluster.workdir / "broken.yaml"
            manifest.write_text(f"""apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {{name: {broken}}}
spec:
  filters:
  - name: gpu
    expression: "node.metadata.name + 1 == 2"
""")
            out = subprocess.run([kubectl, "--kubeconfig", str(cluster.plane.kubeconfig), "apply", "-f", str(manifest)], capture_output=True, text=True)
            print(f"[e2e policy webhook] kubectl apply -f broken.yaml (exit {out.returncode}):\n{out.stderr.strip()}")
            # kubectl shows the causes, each a field path and kpe's coded message, as for the API server's own validation.
            assert (out.returncode, out.stderr) == (1, f'The SchedulingPolicy "{broken}" is invalid: {TYPE_ERROR}\n')
        assert write(cluster, "GET", f"{POLICIES}/{broken}").status_code == 404, "nothing was stored"
        # A rule that fails on ordinary pods is admitted with kpe's lint as the API server's warning.
        sloppy = {**policy(f"sloppy-{suffix}", "pod.metadata.labels.app == 'web'"), "spec": {"filters": [{"name": "web", "expression": "pod.metadata.labels.app == 'web'"}]}}
        warned = write(cluster, "POST", POLICIES + "?dryRun=All", sloppy)
        print(f"[e2e policy webhook] a rule that fails on pods without the label: {warned.status_code}, Warning: {warned.headers.get('warning', '')}")
        assert warned.status_code == 201
        # An object too slow to check within the API server's timeout (1.5 MB of expressions: half a
        # minute to compile) is refused in time, not let through unchecked when the API server gives up.
        huge = policy(f"huge-{suffix}", "true")
        huge["spec"]["filters"] = [{"name": f"f{i}", "expression": "pod.metadata.?labels[?'a'].orValue('') == 'x' || " * 195 + "true"} for i in range(150)]
        started = time.monotonic()
        slow = write(cluster, "POST", POLICIES + "?dryRun=All", huge)
        print(f"[e2e policy webhook] a {len(json.dumps(huge)):,}-byte policy: {slow.status_code} in {time.monotonic() - started:.1f} s: {slow.json().get('message', '')[:160]}")
        assert slow.status_code == 422 and "KPE309" in slow.json()["message"], slow.text[:500]
        assert warned.headers.get("warning", "").startswith('299 - "spec.filters[0].expression: KPE600 pod.metadata.labels[\'app\'] fails on a pod without')
        assert write(cluster, "POST", POLICIES, policy(good, "node.metadata.name != ''")).status_code == 201
        reviews = kpe.metric("kpe_policy_reviews_total", result="allowed")
        assert reviews >= 1 and kpe.metric("kpe_policy_reviews_total", result="refused") >= 1

        # kpe stopped: every write of the kinds gets through unchecked (failurePolicy Ignore).
        kpe.process.stop()
        breaking = cluster.api.http.patch(
            f"{POLICIES}/{good}", content=b'{"spec": {"filters": [{"name": "gpu", "expression": "1 + 1"}]}}',
            headers={"Content-Type": "application/merge-patch+json"},
        )
        assert breaking.status_code == 200, breaking.text
        print(f"[e2e policy webhook] kpe stopped: PATCH {good} -> {breaking.status_code}, warnings: {breaking.headers.get('warning', '')}")
        created = write(cluster, "POST", POLICIES, policy(written_while_down, "'x' + 1"))
        assert created.status_code == 201, created.text
        for name in (good, written_while_down):
            assert write(cluster, "DELETE", f"{POLICIES}/{name}").status_code == 200
        wait_until(lambda: all(write(cluster, "GET", f"{POLICIES}/{n}").status_code == 404 for n in (good, written_while_down)), 10, "the deletes")
    finally:
        cluster.api.delete(f"{CONFIGS}/{config}")
