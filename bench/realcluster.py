"""Helpers for the benchmarks that run a real control plane (etcd, kube-apiserver,
kube-scheduler from ``tests/e2e/controlplane.py``'s binaries) with kpe served as a
user runs it: ``kpe serve`` over plain HTTP on one port with ``--cluster on`` and
kpe's own kubeconfig (bound to ``deploy/rbac.yaml``'s roles), and kube-scheduler
configured by ``kpe scheduler-config``."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import httpx
import orjson
import yaml

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import heterogeneous  # noqa: E402 - bench/ is on the path of every script that imports this
from tests.e2e.controlplane import (  # noqa: E402
    ADMIN_TOKEN,
    BIN,
    KPE_TOKEN,
    HOW_TO_GET,
    ControlPlane,
    Process,
    binaries_present,
    control_plane,
    free_port,
    kpe_executable,
    start,
    wait_until,
)

__all__ = [
    "ADMIN_TOKEN", "BIN", "KPE_TOKEN", "HOW_TO_GET", "ControlPlane", "Process", "binaries_present", "control_plane", "free_port",
    "kpe_executable", "start", "wait_until", "ROOT", "POLICIES", "ZONES", "TEAMS", "SHAPES", "create_nodes", "run_many",
    "start_kpe", "start_scheduler", "scheduler_config", "rss", "metrics", "delete_pods", "now",
]

POLICIES = ROOT / "policies"
ZONES = ["us-east-1a", "us-east-1b", "us-east-1c"]
TEAMS = ["ml-training", "vision", "search", "ads"]


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def skip_without_binaries() -> None:
    if not binaries_present():
        print(f"skipped: {HOW_TO_GET}")
        sys.exit(0)


# -- many API calls at once ----------------------------------------------------
def run_many(plane: ControlPlane, calls: Iterable[tuple[str, str, Any]], concurrency: int = 16,
             content_type: str = "application/json") -> float:
    """Send (method, path, body) calls with ``concurrency`` connections; returns the seconds taken."""

    async def go() -> None:
        limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
        async with httpx.AsyncClient(base_url=plane.url, headers=headers, verify=False, timeout=120, limits=limits) as client:
            queue: asyncio.Queue[tuple[str, str, Any] | None] = asyncio.Queue()
            for call in calls:
                queue.put_nowait(call)
            for _ in range(concurrency):
                queue.put_nowait(None)

            async def worker() -> None:
                while (call := await queue.get()) is not None:
                    method, path, body = call
                    ctype = content_type if method != "PATCH" else "application/merge-patch+json"
                    for attempt in range(5):
                        r = await client.request(method, path, content=orjson.dumps(body) if body is not None else None,
                                                 headers={"Content-Type": ctype})
                        if r.status_code < 300 or r.status_code == 404 and method == "DELETE":
                            break
                        if r.status_code in (429, 500, 503, 504) and attempt < 4:
                            await asyncio.sleep(0.2 * (attempt + 1))
                            continue
                        raise RuntimeError(f"{method} {path}: {r.status_code} {r.text[:300]}")

            await asyncio.gather(*(worker() for _ in range(concurrency)))

    t0 = time.monotonic()
    asyncio.run(go())
    return time.monotonic() - t0


SHAPES = ("default", "tainted-gpu", "many-teams", "heterogeneous")
"""Cluster shapes (``scheduler_bench.py --shape``): ``default``, the nodes below; ``tainted-gpu``,
a quarter of them GPU nodes with the GPU taint; ``many-teams``, the default nodes with many small
team namespaces (the pods differ, ``scheduler_bench.py`` says how); ``heterogeneous``, nodes and
pods generated from a seed as a real cluster's differ (``heterogeneous.py``)."""


def node_object(i: int, *, shape: str = "default") -> tuple[dict[str, Any], dict[str, Any]]:
    """Node i and its status: 4 % GPU nodes (8 GPUs, no taint), 10 % arm64, 30 % in a team pool,
    2 % in maintenance, spread over three zones; all Ready, no taints. ``tainted-gpu``: a quarter
    are GPU nodes, tainted ``nvidia.com/gpu=present:NoSchedule`` as GPU node pools are.
    ``heterogeneous``: ``heterogeneous.node_object``."""
    if shape == "heterogeneous":
        return heterogeneous.node_object(i, now=now())
    zone = ZONES[i % len(ZONES)]
    gpu = i % 4 == 0 if shape == "tainted-gpu" else i % 25 == 0
    arm = i % 10 == 3
    name = f"{'gpu' if gpu else 'cpu'}-{zone}-{i:05d}"
    labels = {
        "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "arm64" if arm else "amd64",
        "topology.kubernetes.io/zone": zone, "topology.kubernetes.io/region": "us-east-1",
        "node.kubernetes.io/instance-type": "p5.48xlarge" if gpu else ("m7g.4xlarge" if arm else "m6i.4xlarge"),
    }
    if i % 10 in (1, 4, 7):  # 30 %: a team's dedicated pool
        labels["node.kpe.dev/team"] = TEAMS[(i // 10) % len(TEAMS)]
    if i % 50 == 17:
        labels["kpe.dev/maintenance"] = "draining"
    allocatable = {"cpu": "16", "memory": "64Gi", "pods": "110", "ephemeral-storage": "100Gi"}
    if gpu:
        allocatable["nvidia.com/gpu"] = "8"
    spec: dict[str, Any] = {}
    if gpu and shape == "tainted-gpu":
        spec["taints"] = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}, "spec": spec}
    status = {"status": {
        "capacity": allocatable, "allocatable": allocatable,
        "conditions": [
            {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status",
             "lastHeartbeatTime": now(), "lastTransitionTime": now()},
            {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory", "message": "",
             "lastHeartbeatTime": now(), "lastTransitionTime": now()},
        ],
        "addresses": [{"type": "InternalIP", "address": f"10.{i // 65536 % 256}.{i // 256 % 256}.{i % 256}"}, {"type": "Hostname", "address": name}],
        "nodeInfo": {"architecture": "arm64" if arm else "amd64", "operatingSystem": "linux", "kubeletVersion": "v1.32.0",
                     "containerRuntimeVersion": "containerd://1.7.22", "kernelVersion": "6.1.0", "osImage": "Bottlerocket OS 1.20",
                     "kubeProxyVersion": "", "machineID": f"m{i}", "systemUUID": f"s{i}", "bootID": f"b{i}"},
    }}
    return node, status


def create_nodes(plane: ControlPlane, count: int, concurrency: int = 16, *, shape: str = "default") -> tuple[list[str], float]:
    objects = [node_object(i, shape=shape) for i in range(count)]
    t = run_many(plane, [("POST", "/api/v1/nodes", node) for node, _ in objects], concurrency)
    t += run_many(plane, [("PATCH", f"/api/v1/nodes/{node['metadata']['name']}/status", status) for node, status in objects], concurrency)
    return [node["metadata"]["name"] for node, _ in objects], t


def delete_pods(plane: ControlPlane, namespace: str, timeout: float = 300) -> float:
    """Delete every pod of the namespace with gracePeriodSeconds 0 and wait until they are gone."""
    t0 = time.monotonic()
    plane.api.call("DELETE", f"/api/v1/namespaces/{namespace}/pods", params={"gracePeriodSeconds": 0})
    wait_until(lambda: not plane.api.get(f"/api/v1/namespaces/{namespace}/pods", params={"limit": 1})["items"], timeout,
               f"the pods of {namespace} to be deleted", interval=0.2)
    return time.monotonic() - t0


# -- kpe and kube-scheduler ------------------------------------------------------
class Kpe:
    def __init__(self, process: Process, port: int, *, profiled: bool = False) -> None:
        self.process = process
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.profiled = profiled

    def stop(self) -> None:
        if self.profiled and self.process.popen.poll() is None:
            # uvicorn raises the signal again once it has shut down: SIGTERM would then end the
            # process before cProfile writes its file, SIGINT unwinds through cProfile's own finally.
            os.kill(self.process.popen.pid, signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.popen.wait(120)
        self.process.stop()


def runtime_python() -> str:
    """A Python with kpe's runtime dependencies and nothing else, as kpe's image installs them
    (``pyproject.toml``'s ``dependencies``, at the versions this Python has), made once and kept
    under ~/.cache/kpe-bench. Memory is measured there: the test extras bring packages that
    kpe's dependencies import whenever they are installed (httpcore imports trio; httpx's
    command line, pygments and with it html.entities), 3 to 4 MiB no deployed kpe holds."""
    import hashlib
    import importlib.metadata
    import re
    import tomllib

    wanted = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    pinned = []
    for requirement in wanted:
        name = re.match(r"[A-Za-z0-9_.-]+", requirement)
        assert name is not None, requirement
        pinned.append(f"{name.group(0)}=={importlib.metadata.version(name.group(0))}")
    venv = Path.home() / ".cache" / "kpe-bench" / ("runtime-" + hashlib.sha256(" ".join(sorted(pinned)).encode()).hexdigest()[:12])
    python = venv / "bin" / "python"
    if not (venv / "complete").exists():
        print(f"a Python with kpe's runtime dependencies only: {venv}", flush=True)
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *pinned], check=True)
        (venv / "complete").touch()
    return str(python)


def start_kpe(plane: ControlPlane, workdir: Path, *, policies: Path = POLICIES, name: str = "kpe",
              extra: tuple[str, ...] = (), timeout: float = 600, source: Path | None = None,
              profile: Path | None = None, runtime: bool = False) -> tuple[Kpe, float]:
    """``kpe serve`` on one plain-HTTP port with cluster access; returns it and the seconds from start to /readyz.
    ``source``: run the kpe of another source tree instead (``python -m server.cli.main`` there), e.g. an older commit
    unpacked with ``git archive``. ``profile``: run it under cProfile, which writes that file when kpe exits (the event
    loop's thread only: what the worker thread evaluates is not in it). ``runtime``: run it on ``runtime_python()``,
    without the test extras."""
    port = free_port()
    # The controllers a deployment runs; an environment variable, which a tree from before
    # --controllers existed ignores (it ran them all by default).
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "KPE_CONTROLLERS": "gates,reservations,requeue"}
    command = [kpe_executable()]
    if source is not None or runtime:
        command = [runtime_python() if runtime else sys.executable, "-m", "server.cli"]
        env["PYTHONPATH"] = str(source or ROOT)
    if profile is not None:
        command = [sys.executable, "-m", "cProfile", "-o", str(profile), "-m", "server.cli"]
    argv = [*command, "serve", "--policies", str(policies), "--host", "127.0.0.1", "--port", str(port),
            "--cluster", "on", "--kubeconfig", str(plane.kpe_kubeconfig), "--log-level", "warning", *extra]
    t0 = time.monotonic()
    process = start(name, argv, workdir, env=env)
    kpe = Kpe(process, port, profiled=profile is not None)

    def ready() -> bool:
        if not process.alive():
            raise RuntimeError("kpe exited:\n" + process.tail())
        try:
            return httpx.get(kpe.url + "/readyz", timeout=5).status_code == 200
        except httpx.HTTPError:
            return False

    wait_until(ready, timeout, "kpe /readyz", interval=0.05)
    return kpe, time.monotonic() - t0


def scheduler_config(plane: ControlPlane, url: str | None, *, node_cache_capable: bool = True, drop_preempt: bool = False,
                     policies: Path = POLICIES, scheduler_name: str = "") -> dict[str, Any]:
    """kube-scheduler's configuration: ``kpe scheduler-config`` for an extender at ``url`` (None: no extender),
    with leader election off; with ``scheduler_name``, kpe's own scheduler (``--scheduler-name``, deploy/scheduler/)."""
    if url is None:
        config: dict[str, Any] = {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
                                  "clientConnection": {"kubeconfig": str(plane.kubeconfig)}}
    else:
        argv = [kpe_executable(), "scheduler-config", "--policies", str(policies), "--url", url, "--kubeconfig", str(plane.kubeconfig),
                "--node-cache-capable" if node_cache_capable else "--no-node-cache-capable"]
        argv += ["--scheduler-name", scheduler_name] if scheduler_name else []
        config = yaml.safe_load(subprocess.run(argv, check=True, capture_output=True, text=True).stdout)
        if drop_preempt:
            for extender in config["extenders"]:
                extender.pop("preemptVerb", None)
    config["leaderElection"] = {"leaderElect": False}
    return config


def start_scheduler(config: dict[str, Any], workdir: Path, *, name: str = "kube-scheduler", timeout: float = 120) -> Process:
    """kube-scheduler with ``config``; returns once its /readyz answers 200 (informers synced)."""
    path = workdir / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    port = free_port()
    process = start(name, [str(BIN / "kube-scheduler"), "--config", str(path), "--secure-port", str(port),
                           "--bind-address", "127.0.0.1", "-v", "1"], workdir)

    def ready() -> bool:
        if not process.alive():
            raise RuntimeError("kube-scheduler exited:\n" + process.tail())
        try:
            return httpx.get(f"https://127.0.0.1:{port}/readyz", verify=False, timeout=5).status_code == 200
        except httpx.HTTPError:
            return False

    wait_until(ready, timeout, "kube-scheduler /readyz", interval=0.05)
    return process


def rss(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of a process, in bytes."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0]) * 1024
    return out


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time a process has used so far, in seconds (threads included)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def metrics(url: str) -> Callable[..., float]:
    """A reader of one /metrics scrape: ``m(name, **labels)`` is the sum of the matching samples."""
    text = httpx.get(url + "/metrics", timeout=15).text
    samples = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        sample, _, value = line.rpartition(" ")
        name, _, rest = sample.partition("{")
        samples.append((name, rest, float(value)))

    def m(name: str, **labels: str) -> float:
        return sum(v for n, rest, v in samples if n == name and all(f'{k}="{val}"' in rest for k, val in labels.items()))

    return m
