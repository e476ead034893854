"""p50/p99 latency of filter and prioritize as kube-scheduler calls them, kpe
with the shipped policies side by side with a do-nothing Starlette endpoint.

    python bench/server_bench.py                 # 1,000 and 5,000 nodes, whole nodes and node names
    python bench/server_bench.py --quick         # fewer requests

Each server runs in its own process under uvicorn on a loopback port; this
process is the client, sending filter then prioritize for the same pod, one
request at a time, as the scheduler does. For node names (nodeCacheCapable)
kpe fills its node and pod cache from an in-process fake API server first.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(Path(__file__).parent)]

import cluster  # noqa: E402

FLOOR_APP = '''
import orjson
from starlette.applications import Starlette
from starlette.responses import Response
from starlette.routing import Route

async def filter_(request):
    body = orjson.loads(await request.body())
    if body.get("NodeNames") is not None:
        answer = {"NodeNames": body["NodeNames"], "FailedNodes": {}, "Error": ""}
    else:
        answer = {"Nodes": body["Nodes"], "NodeNames": None, "FailedNodes": {}, "Error": ""}
    return Response(orjson.dumps(answer), media_type="application/json")

async def prioritize(request):
    body = orjson.loads(await request.body())
    names = body.get("NodeNames") or [n["metadata"]["name"] for n in body["Nodes"]["items"]]
    return Response(orjson.dumps([{"Host": n, "Score": 0} for n in names]), media_type="application/json")

async def health(request):
    return Response(b"ok")

app = Starlette(routes=[Route("/scheduler/filter", filter_, methods=["POST"]),
                        Route("/scheduler/prioritize", prioritize, methods=["POST"]),
                        Route("/healthz", health)])
'''


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(url: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"{url} not ready")


@contextmanager
def process(args: list[str], ready_url: str, env: dict[str, str] | None = None) -> Iterator[None]:
    proc = subprocess.Popen(args, cwd=ROOT, env={**os.environ, **(env or {})}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_ready(ready_url)
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


@contextmanager
def floor_server() -> Iterator[str]:
    """The do-nothing extender: parse the body with orjson, answer that every node passes (uvicorn on h11, the
    floor issue 13 was measured against; kpe itself parses with httptools)."""
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "floor_app.py").write_text(FLOOR_APP)
        args = [sys.executable, "-m", "uvicorn", "floor_app:app", "--port", str(port), "--http", "h11", "--log-level", "warning", "--no-access-log", "--app-dir", tmp]
        with _floor(args, port):
            yield f"http://127.0.0.1:{port}"


@contextmanager
def _floor(args: list[str], port: int) -> Iterator[None]:
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.post(f"http://127.0.0.1:{port}/scheduler/prioritize", content=b'{"NodeNames": []}', timeout=2)
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        yield
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@contextmanager
def kpe_server(api: Any, flags: list[str]) -> Iterator[str]:
    port = free_port()
    kubeconfig = api.kubeconfig if api is not None else None
    args = [sys.executable, "-m", "server.cli", "serve", "--port", str(port), "--policies", str(ROOT / "policies"), "--log-level", "warning"]
    args += ["--kubeconfig", kubeconfig, "--cluster", "on"] if kubeconfig else ["--cluster", "off"]
    with process(args + flags, f"http://127.0.0.1:{port}/readyz"):
        yield f"http://127.0.0.1:{port}"


Bodies = list[tuple[bytes, bytes]]


def measure(client: httpx.Client, url: str, requests: list[tuple[bytes, bytes]], after: Callable[[int, httpx.Response], None] | None = None) -> dict[str, list[float]]:
    """Time each filter and prioritize pair; ``after`` runs between pairs, untimed (the scheduler binding the pod)."""
    times: dict[str, list[float]] = {"filter": [], "prioritize": [], "both": []}
    for i, (filter_body, prioritize_body) in enumerate(requests):
        start = time.perf_counter()
        r = client.post(url + "/scheduler/filter", content=filter_body, headers={"Content-Type": "application/json"})
        middle = time.perf_counter()
        r.raise_for_status()
        p = client.post(url + "/scheduler/prioritize", content=prioritize_body, headers={"Content-Type": "application/json"})
        end = time.perf_counter()
        p.raise_for_status()
        if i >= WARM_UP:
            times["filter"].append((middle - start) * 1000)
            times["prioritize"].append((end - middle) * 1000)
            times["both"].append((end - start) * 1000)
        if after is not None:
            after(i, p)
    return times


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


WARM_UP = 3


def replicas(template: dict[str, Any], count: int) -> list[dict[str, Any]]:
    """Pods of one ReplicaSet: the same template, each with its own name and uid."""
    pods = []
    for i in range(count):
        pod = orjson.loads(orjson.dumps(template))
        pod["metadata"]["name"] = f"{template['metadata']['name']}-{i:05d}"
        pod["metadata"]["uid"] = f"00000000-0000-4000-8000-{i:012d}"
        pods.append(pod)
    return pods


def bodies(pod: dict[str, Any], nodes: list[dict[str, Any]], names: bool) -> bytes:
    if names:
        return orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": [n["metadata"]["name"] for n in nodes]})
    return orjson.dumps({"Pod": pod, "Nodes": {"metadata": {}, "items": nodes}, "NodeNames": None})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", default="1000,5000")
    parser.add_argument("--modes", default="names,nodes", help="names (nodeCacheCapable) and/or nodes (whole nodes)")
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--workload", choices=("replicas", "same"), default="replicas",
        help="replicas: a new pod of one template per pair, bound before the next (a Deployment rolling out); same: one pod over and over",
    )
    args = parser.parse_args()
    requests = 10 if args.quick else args.requests
    pod = cluster.scheduling_pod(gpus=1)
    notes: list[str] = []
    print(f"{'nodes':>6} {'mode':>6} | {'server':>12} | {'filter p50':>10} {'p99':>8} | {'prio p50':>9} {'p99':>8} | {'both p50':>9} {'p99':>8} | kpe/floor (both p50)")
    print("-" * 112)
    for count in (int(c) for c in args.nodes.split(",")):
        nodes = cluster.nodes(count)
        pods = cluster.pods_on(nodes)
        # The scheduler sends prioritize only the nodes that passed filter: find them once.
        from engine.decisions.filtering import filter_nodes
        from engine.policy.loader import load
        from engine.cluster.nodeinfo import node_info_map

        passed = set(filter_nodes(load([ROOT / "policies"]), pod, nodes, node_info=node_info_map(nodes, pods)).passed)
        feasible = [n for n in nodes if n["metadata"]["name"] in passed]
        print(f"{count} nodes: {len(feasible)} pass the shipped filters and go to prioritize")
        for mode in args.modes.split(","):
            names = mode == "names"
            pods_sent = [pod] * (requests + WARM_UP) if args.workload == "same" else replicas(pod, requests + WARM_UP)
            pairs = [(bodies(p, nodes, names), bodies(p, feasible, names)) for p in pods_sent]
            results: dict[str, dict[str, list[float]]] = {}
            with floor_server() as floor, httpx.Client(timeout=60) as client:
                results["floor"] = measure(client, floor, pairs)
            runs = [("kpe, eq. off", ["--equivalence-classes", "0"]), ("kpe", [])] if names else [("kpe", [])]
            for label, flags in runs:
                with cluster_for(nodes, pods, names) as api, kpe_server(api, flags) as kpe, httpx.Client(timeout=60) as client:
                    results[label] = measure(client, kpe, pairs, binder(api, pods_sent) if api is not None and args.workload == "replicas" else None)
                    if api is not None:
                        stats = equivalence_stats(client.get(kpe + "/metrics").text)
                        if stats:
                            notes.append(f"{count} nodes, {label}: equivalence cache {stats}")
            for server, t in results.items():
                ratio = pct(t["both"], 0.5) / pct(results["floor"]["both"], 0.5)
                print(
                    f"{count:>6} {mode:>6} | {server:>12} | {pct(t['filter'], .5):>8.1f}ms {pct(t['filter'], .99):>6.1f}ms | "
                    f"{pct(t['prioritize'], .5):>7.1f}ms {pct(t['prioritize'], .99):>6.1f}ms | {pct(t['both'], .5):>7.1f}ms {pct(t['both'], .99):>6.1f}ms | "
                    + (f"{ratio:.2f}x" if server != "floor" else "")
                )
    print(f"\n{requests} filter+prioritize pairs per row, after {WARM_UP} warm-up pairs; one request at a time, as the scheduler sends them")
    if args.workload == "replicas":
        print("each pair is a new replica of one pod template; with node names, the fake API server binds it to the best-scored node before the next pair")
    for note in notes:
        print(note)
    return 0


@contextmanager
def cluster_for(nodes: list[dict[str, Any]], pods: list[dict[str, Any]], names: bool) -> Iterator[Any]:
    """A fake API server holding the cluster, with a kubeconfig for it at ``.kubeconfig`` (node names only)."""
    if not names:
        yield None
        return
    from tests.fakeapi import FakeApiServer  # the tests' fake API server: kpe's own cache is real

    with FakeApiServer(bookmark_interval=5.0) as api, tempfile.TemporaryDirectory() as tmp:
        for node in nodes:
            api.state.add_node(node)
        for pod in pods:
            api.state.add_pod(pod)
        api.kubeconfig = api.write_kubeconfig(Path(tmp) / "kubeconfig")
        yield api


def binder(api: Any, pods: list[dict[str, Any]]) -> Callable[[int, httpx.Response], None]:
    """Bind pod ``i`` to the node prioritize scored best, as the scheduler would; kpe's cache sees it through its watch."""

    def bind(i: int, answer: httpx.Response) -> None:
        ranked = answer.json()
        best = max(ranked, key=lambda h: h["Score"])["Host"] if ranked else None
        if best is not None:
            api.state.add_pod({**pods[i], "spec": {**pods[i]["spec"], "nodeName": best}, "status": {"phase": "Running"}})

    return bind


def equivalence_stats(metrics: str) -> str:
    counts: dict[str, float] = {}
    for line in metrics.splitlines():
        if line.startswith("kpe_equivalence_cache_nodes_total{"):
            labels, _, value = line.partition("} ")
            result = "hit" if 'result="hit"' in labels else "miss"
            counts[result] = counts.get(result, 0.0) + float(value)
    total = sum(counts.values())
    if not total:
        return ""
    return f"{counts.get('hit', 0):,.0f} node results reused, {counts.get('miss', 0):,.0f} evaluated ({counts.get('hit', 0) / total:.1%} reused)"


if __name__ == "__main__":
    sys.exit(main())
