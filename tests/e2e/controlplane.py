"""A real Kubernetes control plane on loopback: etcd, kube-apiserver, and per scenario
kube-scheduler and kpe, each a process of its own, stopped by PID even when a test fails.

The binaries of each Kubernetes version on this machine are found by
``find_binaries()``: the folders ``$KPE_K8S_BIN`` names (several, separated by
``:``), or else ``~/.cache/kpe-k8s/bin`` and every ``~/.cache/kpe-k8s/*/bin``; one
folder per minor version, read from ``kube-apiserver --version``. How to build them
is in ``docs/real-cluster.md``. There is no kubelet and
no controller manager: nodes are API objects the tests create, bound pods stay
Pending, and a deleted bound pod keeps its ``deletionTimestamp`` until it is
deleted again with ``gracePeriodSeconds: 0`` (which is how evictions are counted).
"""

from __future__ import annotations

import base64
import contextlib
import functools
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

CACHE = Path.home() / ".cache" / "kpe-k8s"
BINARIES = ("etcd", "kube-apiserver", "kube-scheduler")


@dataclass(frozen=True)
class Binaries:
    """The control-plane binaries of one Kubernetes version: ``version`` is its minor (``1.37``)."""

    folder: Path
    version: str

    def __truediv__(self, name: str) -> Path:
        return self.folder / name


def _folders() -> list[Path]:
    named = os.environ.get("KPE_K8S_BIN")
    if named:
        return [Path(p).expanduser() for p in named.split(os.pathsep) if p]
    return [CACHE / "bin", *sorted(CACHE.glob("*/bin"))]


def _present(folder: Path) -> bool:
    return all((folder / name).is_file() and os.access(folder / name, os.X_OK) for name in BINARIES)


@functools.lru_cache(maxsize=None)
def _minor_version(folder: Path) -> str | None:
    try:
        out = subprocess.run([str(folder / "kube-apiserver"), "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    found = re.search(r"v(\d+)\.(\d+)\.", out)
    return f"{found.group(1)}.{found.group(2)}" if found else None


@functools.lru_cache(maxsize=1)
def find_binaries() -> tuple[Binaries, ...]:
    """Every Kubernetes version whose binaries are on this machine, oldest first; a version
    found in two folders is taken from the first."""
    found: dict[str, Binaries] = {}
    for folder in _folders():
        version = _minor_version(folder) if _present(folder) else None
        if version is not None and version not in found:
            found[version] = Binaries(folder, version)
    return tuple(sorted(found.values(), key=lambda b: tuple(int(x) for x in b.version.split("."))))


# The folder the benches use (bench/realcluster.py) and the default control plane's:
# the first folder that has the binaries ($KPE_K8S_BIN's first, or ~/.cache/kpe-k8s/bin).
BIN = next((f for f in _folders() if _present(f)), CACHE / "bin")


def default_binaries() -> Binaries:
    return Binaries(BIN, _minor_version(BIN) or "unknown")
HOW_TO_GET = (
    f"no control-plane binaries ({', '.join(BINARIES)}) in {', '.join(str(f) for f in _folders())}: build them with "
    "tests/e2e/build-control-plane.sh 1.32 and 1.37 (see docs/real-cluster.md), or point KPE_K8S_BIN "
    "at the folders it prints"
)
REPO = Path(__file__).resolve().parents[2]
ADMIN_TOKEN = "kpe-e2e-admin-token"
KPE_TOKEN = "kpe-e2e-kpe-token"  # a user bound only to deploy/rbac.yaml's roles, as kpe's ServiceAccount is
# kpe's own kube-scheduler, bound only to deploy/scheduler/rbac.yaml's roles when a scenario runs it.
SCHEDULER_TOKEN = "kpe-e2e-scheduler-token"


def binaries_present() -> bool:
    return bool(find_binaries())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_ports(count: int) -> list[int]:
    """``count`` different free ports: each socket stays bound until all are chosen (a port
    closed and asked for again may come back, and kpe refuses two surfaces on one port)."""
    with contextlib.ExitStack() as held:
        sockets = [held.enter_context(socket.socket()) for _ in range(count)]
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in sockets]


def wait_until(check: Callable[[], Any], timeout: float, what: str, interval: float = 0.05) -> Any:
    """Poll ``check`` until it returns something truthy; fail the test with ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


@dataclass
class Process:
    """One started binary, its log file, and a stop by PID that always happens."""

    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def alive(self) -> bool:
        return self.popen.poll() is None

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, grace: float = 5.0) -> None:
        if self.popen.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.popen.pid, signal.SIGTERM)
        try:
            self.popen.wait(grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.popen.pid, signal.SIGKILL)
            self.popen.wait(5)


def start(name: str, argv: list[str], workdir: Path, env: dict[str, str] | None = None) -> Process:
    log = workdir / f"{name}.log"
    handle = open(log, "ab")  # noqa: SIM115 - the child owns it; closed when the process is reaped
    try:
        popen = subprocess.Popen(argv, stdout=handle, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=workdir, env=env)
    finally:
        handle.close()
    return Process(name, popen, log)


class Api:
    """A small synchronous client for the tests' own calls (admin token)."""

    def __init__(self, url: str, token: str) -> None:
        self.url = url
        self.http = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, verify=False, timeout=15.0)

    def close(self) -> None:
        self.http.close()

    def call(self, method: str, path: str, body: Any = None, *, ok: tuple[int, ...] = (200, 201, 202), content_type: str = "application/json", params: dict[str, Any] | None = None) -> Any:
        response = self.http.request(method, path, json=body if content_type == "application/json" else None,
                                     content=None if content_type == "application/json" or body is None else body,
                                     headers={"Content-Type": content_type}, params=params)
        if response.status_code not in ok:
            raise AssertionError(f"{method} {path}: {response.status_code} {response.text[:500]}")
        return response.json() if response.content else None

    def get(self, path: str, **kw: Any) -> Any:
        return self.call("GET", path, **kw)

    def create(self, path: str, obj: dict[str, Any], **kw: Any) -> Any:
        return self.call("POST", path, obj, **kw)

    def apply(self, path: str, obj: dict[str, Any]) -> Any:
        """Create, or replace when it exists (for cluster-scoped fixtures shared by scenarios)."""
        name = obj["metadata"]["name"]
        current = self.http.get(f"{path}/{name}")
        if current.status_code == 404:
            return self.create(path, obj)
        obj = {**obj, "metadata": {**obj["metadata"], "resourceVersion": current.json()["metadata"]["resourceVersion"]}}
        return self.call("PUT", f"{path}/{name}", obj)

    def patch(self, path: str, patch: Any, *, kind: str = "merge") -> Any:
        types = {"merge": "application/merge-patch+json", "json": "application/json-patch+json"}
        import json

        return self.call("PATCH", path, json.dumps(patch).encode(), content_type=types[kind])

    def delete(self, path: str, *, grace: int | None = None, ok: tuple[int, ...] = (200, 202, 404)) -> Any:
        params = {"gracePeriodSeconds": grace} if grace is not None else None
        return self.call("DELETE", path, ok=ok, params=params)

    # -- shapes the scenarios use ------------------------------------------------
    def node(self, name: str, *, cpu: str = "4", memory: str = "16Gi", pods: str = "110", labels: dict[str, str] | None = None,
             extra: dict[str, str] | None = None, taints: list[dict[str, str]] | None = None) -> dict[str, Any]:
        allocatable = {"cpu": cpu, "memory": memory, "pods": pods, **(extra or {})}
        node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
                "spec": {"taints": taints} if taints else {}}
        created = self.create("/api/v1/nodes", node)
        status = {"capacity": allocatable, "allocatable": allocatable,
                  "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "e2e",
                                  "lastHeartbeatTime": _now(), "lastTransitionTime": _now()}]}
        self.patch(f"/api/v1/nodes/{name}/status", {"status": status})
        return dict(created)

    def pod(self, namespace: str, name: str, *, cpu: str = "100m", labels: dict[str, str] | None = None, priority_class: str = "",
            limits: dict[str, str] | None = None, node: str = "", extra: dict[str, Any] | None = None) -> dict[str, Any]:
        resources: dict[str, Any] = {"requests": {"cpu": cpu, **(limits or {})}}
        if limits:
            resources["limits"] = dict(limits)
        spec: dict[str, Any] = {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10", "resources": resources}],
                                "terminationGracePeriodSeconds": 30}
        if priority_class:
            spec["priorityClassName"] = priority_class
        if node:
            spec["nodeName"] = node
        spec.update(extra or {})
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace, "labels": labels or {}}, "spec": spec}
        return dict(self.create(f"/api/v1/namespaces/{namespace}/pods", pod))

    def pods(self, namespace: str) -> list[dict[str, Any]]:
        return list(self.get(f"/api/v1/namespaces/{namespace}/pods")["items"])

    def get_pod(self, namespace: str, name: str) -> dict[str, Any]:
        return dict(self.get(f"/api/v1/namespaces/{namespace}/pods/{name}"))

    def namespace(self, name: str) -> None:
        self.apply("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})

    def priority_class(self, name: str, value: int) -> None:
        self.apply("/apis/scheduling.k8s.io/v1/priorityclasses",
                   {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}, "value": value})


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


# API server flags per Kubernetes version, for what only that version has. 1.37: the Workload API's
# PodGroup (scheduling.k8s.io/v1beta1, off by default as beta APIs are) and the pods' spec.schedulingGroup
# (GenericWorkload, beta and off by default): only tests/e2e/test_gangs.py uses them, and it starts its
# kube-scheduler with GenericWorkload too; without pod groups, the API server behaves as before.
APISERVER_FLAGS: dict[str, tuple[str, ...]] = {
    "1.37": ("--feature-gates=GenericWorkload=true", "--runtime-config=scheduling.k8s.io/v1beta1=true"),
}


@dataclass
class ControlPlane:
    """etcd and kube-apiserver; ``api`` is an admin client, ``kubeconfig`` the admin's, ``kpe_kubeconfig`` kpe's,
    ``scheduler_kubeconfig`` that of kpe's own kube-scheduler (user ``kpe-scheduler``)."""

    workdir: Path
    binaries: Binaries = field(default_factory=lambda: default_binaries())
    processes: list[Process] = field(default_factory=list)
    etcd_url: str = ""
    url: str = ""
    api: Api = field(init=False)
    kubeconfig: Path = field(init=False)
    kpe_kubeconfig: Path = field(init=False)
    scheduler_kubeconfig: Path = field(init=False)

    def start(self, *, extra_apiserver_flags: tuple[str, ...] = ()) -> ControlPlane:
        w = self.workdir
        client, peer = free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{client}"
        self.processes.append(start("etcd", [
            str(self.binaries / "etcd"), "--data-dir", str(w / "etcd"), "--name", "default",
            "--listen-client-urls", self.etcd_url, "--advertise-client-urls", self.etcd_url,
            "--listen-peer-urls", f"http://127.0.0.1:{peer}", "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-cluster", f"default=http://127.0.0.1:{peer}",
        ], w))
        wait_until(lambda: _ok(self.etcd_url + "/health"), 30, "etcd to be healthy")
        self._keys()
        (w / "tokens.csv").write_text(f'{ADMIN_TOKEN},admin,admin,"system:masters"\n{KPE_TOKEN},kpe,kpe,""\n{SCHEDULER_TOKEN},kpe-scheduler,kpe-scheduler,""\n')
        self._client_certificates()
        self.apiserver_port = free_port()
        self.url = f"https://127.0.0.1:{self.apiserver_port}"
        self._apiserver_argv = [
            str(self.binaries / "kube-apiserver"), f"--etcd-servers={self.etcd_url}", "--bind-address=127.0.0.1",
            f"--secure-port={self.apiserver_port}", "--advertise-address=127.0.0.1", f"--cert-dir={w / 'certs'}",
            f"--token-auth-file={w / 'tokens.csv'}", "--authorization-mode=RBAC",
            "--service-account-issuer=https://kubernetes.default.svc", f"--service-account-key-file={w / 'sa.pub'}",
            f"--service-account-signing-key-file={w / 'sa.key'}", "--service-cluster-ip-range=10.0.0.0/24",
            "--endpoint-reconciler-type=none", "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
            f"--admission-control-config-file={w / 'admission.yaml'}",
            *APISERVER_FLAGS.get(self.binaries.version, ()),
            *extra_apiserver_flags,
        ]
        self.start_apiserver()
        self.kubeconfig = self._write_kubeconfig("admin", ADMIN_TOKEN)
        self.kpe_kubeconfig = self._write_kubeconfig("kpe", KPE_TOKEN)
        self.scheduler_kubeconfig = self._write_kubeconfig("kpe-scheduler", SCHEDULER_TOKEN)
        self.api = Api(self.url, ADMIN_TOKEN)
        self._kpe_rbac()
        return self

    def start_apiserver(self) -> None:
        """Start kube-apiserver (again, on the same port over the same etcd) and return once its
        /readyz answers 200; ``apiserver_started_at`` is when its process was launched."""
        self.apiserver_started_at = time.monotonic()
        process = start("kube-apiserver", self._apiserver_argv, self.workdir)
        self.processes.append(process)
        wait_until(lambda: _ok(self.url + "/readyz", token=ADMIN_TOKEN) or not process.alive(), 60, "kube-apiserver /readyz")
        if not process.alive():
            raise RuntimeError("kube-apiserver exited:\n" + process.tail())

    def stop_apiserver(self) -> None:
        """Stop kube-apiserver as a rollout does (SIGTERM, its graceful shutdown); etcd keeps running."""
        for p in [p for p in self.processes if p.name == "kube-apiserver"]:
            p.stop()
            self.processes.remove(p)

    def restart_apiserver(self) -> None:
        self.stop_apiserver()
        self.start_apiserver()

    def compact(self) -> int:
        """Compact etcd's history at its current revision (what ``etcdctl compact`` does),
        so watches from older resourceVersions get 410 Gone. Returns the revision."""
        head = httpx.post(self.etcd_url + "/v3/kv/range", json={"key": base64.b64encode(b"/").decode()}, timeout=10).json()
        revision = int(head["header"]["revision"])
        answer = httpx.post(self.etcd_url + "/v3/kv/compaction", json={"revision": revision, "physical": True}, timeout=30)
        assert answer.status_code == 200, answer.text
        return revision

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self.api.close()
        for process in reversed(self.processes):
            process.stop()

    def _keys(self) -> None:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import rsa

        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        (self.workdir / "sa.key").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()))
        (self.workdir / "sa.pub").write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))

    def _client_certificates(self) -> None:
        """A CA for kpe's callers, as deploy/README.md sets them up: kube-scheduler's client
        certificate, and the API server's, which it presents to every webhook (user "*")."""
        import trustme

        w = self.workdir
        self.clients_ca = trustme.CA()
        self.clients_ca_file = w / "clients-ca.pem"
        self.clients_ca.cert_pem.write_to_path(str(self.clients_ca_file))
        for who in ("kube-scheduler", "kube-apiserver"):
            cert = self.clients_ca.issue_cert(f"{who}-to-kpe")
            cert.cert_chain_pems[0].write_to_path(str(w / f"{who}-client.crt"))
            cert.private_key_pem.write_to_path(str(w / f"{who}-client.key"))
        self.scheduler_client = (w / "kube-scheduler-client.crt", w / "kube-scheduler-client.key")
        (w / "webhook-kubeconfig.yaml").write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config",
            "users": [{"name": "*", "user": {"client-certificate": str(w / "kube-apiserver-client.crt"), "client-key": str(w / "kube-apiserver-client.key")}}],
        }))
        (w / "admission.yaml").write_text(yaml.safe_dump({
            "apiVersion": "apiserver.config.k8s.io/v1", "kind": "AdmissionConfiguration",
            # Both plugins: kpe's pod webhook is mutating, its policy webhook validating, one listener.
            "plugins": [{"name": plugin, "configuration": {
                "apiVersion": "apiserver.config.k8s.io/v1", "kind": "WebhookAdmissionConfiguration",
                "kubeConfigFile": str(w / "webhook-kubeconfig.yaml")}} for plugin in ("MutatingAdmissionWebhook", "ValidatingAdmissionWebhook")],
        }))

    def _write_kubeconfig(self, user: str, token: str) -> Path:
        path = self.workdir / f"{user}.kubeconfig"
        path.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "e2e",
            "clusters": [{"name": "e2e", "cluster": {"server": self.url, "insecure-skip-tls-verify": True}}],
            "users": [{"name": user, "user": {"token": token}}],
            "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": user}}],
        }))
        return path

    def _kpe_rbac(self) -> None:
        self.api.namespace("kpe-system")
        self.apply_rbac(REPO / "deploy" / "rbac.yaml")

    def apply_rbac(self, path: Path, user: str = "kpe") -> None:
        """RBAC from deploy/ as shipped, bound to the user that runs as its ServiceAccount here (kpe, or kpe-scheduler)."""
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc:
                continue
            kind = doc["kind"]
            if kind.endswith("Binding"):
                doc["subjects"] = [{"kind": "User", "name": user, "apiGroup": "rbac.authorization.k8s.io"}]
            namespace = doc["metadata"].get("namespace", "kpe-system")
            plural = {"ClusterRole": "clusterroles", "ClusterRoleBinding": "clusterrolebindings", "Role": "roles", "RoleBinding": "rolebindings"}[kind]
            collection = f"/apis/rbac.authorization.k8s.io/v1/{plural}" if kind.startswith("Cluster") else f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/{plural}"
            self.api.apply(collection, doc)


def _ok(url: str, token: str = "") -> bool:
    try:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.get(url, headers=headers, verify=False, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@contextlib.contextmanager
def control_plane(workdir: Path, binaries: Binaries | None = None, **options: Any) -> Iterator[ControlPlane]:
    plane = ControlPlane(workdir, binaries or default_binaries())
    try:
        yield plane.start(**options)
    finally:
        plane.stop()
        if os.environ.get("KPE_E2E_KEEP") != "1":
            shutil.rmtree(workdir / "etcd", ignore_errors=True)


def kpe_executable() -> str:
    script = Path(sys.executable).parent / "kpe"
    return str(script) if script.exists() else "kpe"
