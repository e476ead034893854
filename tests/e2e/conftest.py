"""Fixtures for the end-to-end tests: one control plane (etcd + kube-apiserver) per
session, and per test kpe served as a user runs it (``kpe serve`` over HTTPS with
the shipped RBAC) and kube-scheduler configured by ``kpe scheduler-config``."""

from __future__ import annotations

import base64
import os
import ssl
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from .controlplane import (
    HOW_TO_GET,
    REPO,
    Api,
    Binaries,
    ControlPlane,
    Process,
    binaries_present,
    control_plane,
    find_binaries,
    free_port,
    free_ports,
    kpe_executable,
    start,
    wait_until,
)

def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test here is marked e2e (``-m "not e2e"`` leaves them out) and skipped, saying
    how to get the binaries, when no control plane is on this machine. The tests of one
    Kubernetes version share a worker when the suite runs in parallel (one control plane each)."""
    present = binaries_present()
    for item in items:
        if "tests/e2e/" in str(item.fspath).replace(os.sep, "/"):
            item.add_marker(pytest.mark.e2e)
            if not present:
                item.add_marker(pytest.mark.skip(reason=HOW_TO_GET))
            callspec = getattr(item, "callspec", None)
            version = callspec.params.get("binaries") if callspec is not None else None
            if version is not None:
                item.add_marker(pytest.mark.xdist_group(f"kubernetes-{version.version}"))


# Every end-to-end test runs once per Kubernetes version on this machine, named with it.
VERSIONS = find_binaries()


@pytest.fixture(scope="session", params=VERSIONS or [None], ids=lambda b: f"k8s-{b.version}" if b else "no-k8s")
def binaries(request: pytest.FixtureRequest) -> Binaries:
    if request.param is None:
        pytest.skip(HOW_TO_GET)
    return request.param  # type: ignore[no-any-return]


@pytest.fixture(scope="session")
def plane(binaries: Binaries, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    with control_plane(tmp_path_factory.mktemp(f"control-plane-{binaries.version}"), binaries) as p:
        p.api.priority_class("e2e-low", 10)
        p.api.priority_class("e2e-high", 1000)
        yield p


@pytest.fixture(scope="session")
def ca(tmp_path_factory: pytest.TempPathFactory) -> Any:
    import trustme

    return trustme.CA()


def shipped_webhook(kind: str) -> dict[str, Any]:
    """deploy/webhook.yaml's configuration of ``kind`` (the pod webhook's or the policy webhook's)."""
    [doc] = [d for d in yaml.safe_load_all((REPO / "deploy" / "webhook.yaml").read_text()) if d and d["kind"] == kind]
    return dict(doc)


class Kpe:
    """One ``kpe serve`` process, with a listener per surface as deploy/ runs it: ``url`` is
    the extender verbs' (``scheduler`` is a client with kube-scheduler's certificate),
    ``http`` a client of the introspection listener, ``health`` of the probes and metrics."""

    def __init__(self, process: Process, ports: dict[str, int], ca_file: Path, scheduler_client: tuple[Path, Path]) -> None:
        self.process = process
        self.ports = dict(ports)
        self.url = f"https://127.0.0.1:{ports['scheduler']}"
        self.webhook_url = f"https://127.0.0.1:{ports['webhook']}"
        self.ca_file = ca_file
        trust = ssl.create_default_context(cafile=str(ca_file))
        self.http = httpx.Client(base_url=f"https://127.0.0.1:{ports['introspection']}", verify=trust, timeout=15.0)
        self.health = httpx.Client(base_url=f"http://127.0.0.1:{ports['health']}", timeout=15.0)
        as_scheduler = ssl.create_default_context(cafile=str(ca_file))
        as_scheduler.load_cert_chain(*map(str, scheduler_client))
        self.scheduler = httpx.Client(base_url=self.url, verify=as_scheduler, timeout=15.0)

    def close(self) -> None:
        for client in (self.http, self.health, self.scheduler):
            client.close()

    def metric(self, name: str, **labels: str) -> float:
        """The sum of the /metrics samples of ``name`` that carry ``labels`` (0 when there are none)."""
        total = 0.0
        for line in self.health.get("/metrics").text.splitlines():
            sample, _, value = line.rpartition(" ")
            metric, _, rest = sample.partition("{")
            if metric == name and all(f'{k}="{v}"' in rest for k, v in labels.items()):
                total += float(value)
        return total

    def generation(self) -> str:
        return str(self.http.get("/apis/v1/policies").json()["generation"])


class Cluster:
    """What one scenario runs against: the shared control plane, its own namespace and
    nodes, kpe processes and a kube-scheduler; everything it made is removed afterwards."""

    def __init__(self, plane: ControlPlane, workdir: Path, ca: Any, namespace: str) -> None:
        self.plane = plane
        self.api: Api = plane.api
        self.workdir = workdir
        self.ca = ca
        self.namespace = namespace
        self.policies = workdir / "policies"
        self.policies.mkdir()
        self.nodes: list[str] = []
        self.kpes: list[Kpe] = []
        self.scheduler: Process | None = None
        self.own_schedulers: list[tuple[Process, str]] = []  # kpe's own kube-schedulers and the API paths of their Leases
        self.webhook = False
        self.ca_file = workdir / "ca.pem"
        ca.cert_pem.write_to_path(str(self.ca_file))
        self.api.namespace(namespace)

    # -- setup ---------------------------------------------------------------
    def write_policy(self, name: str, text: str) -> None:
        """Write a policy file atomically (what a ConfigMap update or `mv` does)."""
        tmp = self.policies / f".{name}.tmp"
        tmp.write_text(text)
        os.replace(tmp, self.policies / name)

    def copy_shipped(self, *names: str) -> None:
        for name in names:
            self.write_policy(name, (REPO / "policies" / name).read_text())

    def node(self, name: str, **kw: Any) -> dict[str, Any]:
        self.nodes.append(name)
        return self.api.node(name, **kw)

    def start_kpe(self, *, identity: str = "kpe-a", extra: tuple[str, ...] = (), ports: dict[str, int] | None = None) -> Kpe:
        """``ports``: a stopped kpe's, so that its callers (a scheduler's configuration) reach the new one."""
        surfaces = ("scheduler", "webhook", "introspection", "health")
        ports = dict(ports) if ports else dict(zip(surfaces, free_ports(len(surfaces))))
        cert = self.ca.issue_cert("127.0.0.1", "localhost")
        cert_file, key_file = self.workdir / f"{identity}.crt", self.workdir / f"{identity}.key"
        cert.cert_chain_pems[0].write_to_path(str(cert_file))
        cert.private_key_pem.write_to_path(str(key_file))
        argv = [kpe_executable(), "serve", "--policies", str(self.policies), "--kubeconfig", str(self.plane.kpe_kubeconfig),
                "--cluster", "on", "--host", "127.0.0.1", "--tls-cert", str(cert_file), "--tls-key", str(key_file),
                "--port", str(ports["scheduler"]), "--tls-client-ca", str(self.plane.clients_ca_file),
                "--webhook-port", str(ports["webhook"]), "--webhook-client-ca", str(self.plane.clients_ca_file),
                "--introspection-port", str(ports["introspection"]), "--health-port", str(ports["health"]),
                "--identity", identity, "--reload-debounce-ms", "100", "--controllers", "gates,reservations,requeue", *extra]
        process = start(f"kpe-{identity}", argv, self.workdir, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        kpe = Kpe(process, ports, self.ca_file, self.plane.scheduler_client)
        self.kpes.append(kpe)

        def ready() -> bool:
            if not process.alive():
                raise AssertionError("kpe exited:\n" + process.tail())
            try:
                return kpe.health.get("/readyz").status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(ready, 30, "kpe /readyz")
        return kpe

    def start_scheduler(
        self, kpe: Kpe | None, *, node_cache_capable: bool = True, bind: bool = False, flags: tuple[str, ...] = ()
    ) -> Process:
        """kube-scheduler with exactly the configuration ``kpe scheduler-config`` prints for these
        policies; with ``kpe=None``, a plain one (policies that only admit need no extender).
        ``flags``: more command-line flags of kube-scheduler."""
        import subprocess

        if kpe is None:
            config: dict[str, Any] = {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
                                      "clientConnection": {"kubeconfig": str(self.plane.kubeconfig)}}
        else:
            argv = [kpe_executable(), "scheduler-config", "--policies", str(self.policies), "--url", kpe.url + "/scheduler",
                    "--ca-file", str(self.ca_file), "--kubeconfig", str(self.plane.kubeconfig),
                    "--cert-file", str(self.plane.scheduler_client[0]), "--key-file", str(self.plane.scheduler_client[1])]
            argv += ["--node-cache-capable" if node_cache_capable else "--no-node-cache-capable"] + (["--bind"] if bind else [])
            out = subprocess.run(argv, check=True, capture_output=True, text=True)
            config = yaml.safe_load(out.stdout)
        config["leaderElection"] = {"leaderElect": False}  # a restarted scheduler would wait up to 15 s for its Lease
        path = self.workdir / "scheduler.yaml"
        path.write_text(yaml.safe_dump(config))
        self.scheduler_config = config
        self.scheduler = start("kube-scheduler", [str(self.plane.binaries / "kube-scheduler"), "--config", str(path), "--secure-port", "0", "-v", "2", *flags], self.workdir)
        time.sleep(0.5)
        assert self.scheduler.alive(), self.scheduler.tail()
        return self.scheduler

    def start_own_scheduler(self, kpe: Kpe, name: str = "kpe-scheduler") -> Process:
        """kpe's own kube-scheduler (deploy/scheduler/) beside whatever ``start_scheduler`` runs: exactly
        the configuration ``kpe scheduler-config --scheduler-name`` prints, Lease included, run as a user
        holding only the component's RBAC, with its secure port on loopback where the Deployment's probes
        call it. Returns once /healthz answers and it holds its Lease, so it schedules pods named for it."""
        import subprocess

        self.plane.apply_rbac(REPO / "deploy" / "scheduler" / "rbac.yaml", user="kpe-scheduler")
        # In its pod it has the ServiceAccount's credentials (no kubeconfig); here the user bound the same way.
        kubeconfig = str(self.plane.scheduler_kubeconfig)
        argv = [kpe_executable(), "scheduler-config", "--policies", str(self.policies), "--scheduler-name", name,
                "--url", kpe.url + "/scheduler", "--ca-file", str(self.ca_file), "--kubeconfig", kubeconfig,
                "--cert-file", str(self.plane.scheduler_client[0]), "--key-file", str(self.plane.scheduler_client[1])]
        path = self.workdir / f"{name}.yaml"
        path.write_text(subprocess.run(argv, check=True, capture_output=True, text=True).stdout)
        port = free_port()
        process = start(name, [str(self.plane.binaries / "kube-scheduler"), "--config", str(path), "--bind-address", "127.0.0.1", "--secure-port", str(port),
                               "--authentication-kubeconfig", kubeconfig, "--authorization-kubeconfig", kubeconfig, "-v", "2"], self.workdir)
        election = yaml.safe_load(path.read_text())["leaderElection"]
        lease = f"/apis/coordination.k8s.io/v1/namespaces/{election['resourceNamespace']}/leases/{election['resourceName']}"
        self.own_schedulers.append((process, lease))

        def healthy_and_leading() -> bool:
            if not process.alive():
                raise AssertionError(f"{name} exited:\n" + process.tail())
            try:
                healthy = httpx.get(f"https://127.0.0.1:{port}/healthz", verify=False, timeout=2).status_code == 200
            except httpx.HTTPError:
                return False
            held = self.api.http.get(lease)
            return healthy and held.status_code == 200 and bool(held.json()["spec"].get("holderIdentity"))

        wait_until(healthy_and_leading, 30, f"{name}'s /healthz and its Lease", interval=0.2)
        return process

    def register_webhook(self, kpe: Kpe) -> None:
        """deploy/webhook.yaml as shipped, pointed at this kpe with this CA and limited to this namespace."""
        doc = shipped_webhook("MutatingWebhookConfiguration")
        hook = doc["webhooks"][0]
        hook["clientConfig"] = {"url": kpe.webhook_url + "/admission/pods", "caBundle": base64.b64encode(self.ca.cert_pem.bytes()).decode()}
        hook["namespaceSelector"]["matchExpressions"].append({"key": "kubernetes.io/metadata.name", "operator": "In", "values": [self.namespace]})
        doc["metadata"] = {"name": "kpe-e2e"}
        self.api.apply("/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations", doc)
        self.webhook = True
        # The API server picks a new configuration up a moment later: until it calls kpe, pods
        # would be created without gates. A dry run calls mutating webhooks and stores nothing.
        probe = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "webhook-probe"},
                 "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}
        before = kpe.metric("kpe_admission_reviews_total")

        def called() -> bool:
            self.api.create(f"/api/v1/namespaces/{self.namespace}/pods", probe, params={"dryRun": "All"})
            return kpe.metric("kpe_admission_reviews_total") > before

        wait_until(called, 15, "the API server to call kpe's webhook", interval=0.2)

    # -- observing -----------------------------------------------------------
    def bound(self) -> dict[str, str]:
        """Pod name -> node, for the namespace's pods that are bound and not being deleted."""
        return {p["metadata"]["name"]: p["spec"]["nodeName"] for p in self.api.pods(self.namespace)
                if p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp")}

    def evicted(self) -> list[str]:
        """Pods the scheduler's preemption deleted (no kubelet finishes them: they keep a deletionTimestamp)."""
        return sorted(p["metadata"]["name"] for p in self.api.pods(self.namespace) if p["metadata"].get("deletionTimestamp"))

    def wait_bound(self, names: list[str], timeout: float = 30) -> dict[str, str]:
        return dict(wait_until(lambda: (b := self.bound()) and all(n in b for n in names) and b, timeout, f"pods {names} to be bound"))

    def scheduler_log(self) -> str:
        return self.scheduler.tail(200) if self.scheduler else ""

    # -- teardown ------------------------------------------------------------
    def close(self) -> None:
        if self.scheduler is not None:
            self.scheduler.stop()
        for process, lease in self.own_schedulers:
            process.stop()
            # A later scenario's scheduler would otherwise wait out this one's lease.
            self.api.delete(lease)
        for kpe in self.kpes:
            kpe.close()
            kpe.process.stop()
        if self.webhook:
            self.api.delete("/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/kpe-e2e")
        for pod in self.api.pods(self.namespace):
            self.api.delete(f"/api/v1/namespaces/{self.namespace}/pods/{pod['metadata']['name']}", grace=0)
        for name in self.nodes:
            self.api.delete(f"/api/v1/nodes/{name}")


@pytest.fixture
def cluster(plane: ControlPlane, ca: Any, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    import hashlib

    slug = "".join(c if c.isalnum() else "-" for c in request.node.originalname.lower().removeprefix("test_"))[:24].strip("-")
    namespace = f"e2e-{slug}-{hashlib.sha256(request.node.nodeid.encode()).hexdigest()[:6]}"
    c = Cluster(plane, tmp_path, ca, namespace)
    try:
        yield c
    except BaseException:
        raise
    finally:
        if request.node.rep_call.failed if hasattr(request.node, "rep_call") else False:
            print("\n--- kube-scheduler log ---\n" + c.scheduler_log())
            for process, _ in c.own_schedulers:
                print(f"\n--- {process.name} log ---\n" + process.tail(120))
            for kpe in c.kpes:
                print(f"\n--- {kpe.process.name} log ---\n" + kpe.process.tail(80))
        c.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    setattr(item, "rep_" + report.when, report)
