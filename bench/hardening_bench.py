"""What one request can cost kpe: peak memory per body, and health checks during a slow request.

    python bench/hardening_bench.py [--body-mb 20] [--probes 200]

1. Peak RSS (the kernel's VmHWM) of a fresh ``kpe serve`` process after one request
   each: nothing (the baseline), a real whole-node filter request, the worst body kpe
   still parses (tiny integers, the densest values under its expansion limit), and a
   body of tiny objects, which kpe refuses before parsing.
2. The latency of ``/healthz`` while an expensive policy keeps the evaluation worker busy
   (filter requests back to back, each cut by the request deadline), beside the same
   probes against an idle kpe.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import orjson

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "bench" / "data"
SLOW = """apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: slow}
spec:
  params: {xs: %s}
  filters:
  - {name: busy, expression: "params.xs.all(x, params.xs.all(y, x + y >= size(node.metadata.name) - 100))", message: never}
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Kpe:
    def __init__(self, policies: Path, *extra: str) -> None:
        self.port = free_port()
        kpe = Path(sys.executable).parent / "kpe"
        self.process = subprocess.Popen([str(kpe), "serve", "--cluster", "off", "--policies", str(policies), "--port", str(self.port), "--log-level", "error", *extra],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(self.url + "/readyz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("kpe did not start")
            time.sleep(0.05)

    def peak_rss_mb(self) -> float:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)


def bodies(size: int) -> dict[str, bytes]:
    node, pod = json.loads((DATA / "node.json").read_text()), json.loads((DATA / "pod.json").read_text())
    per_node = len(orjson.dumps(node)) + 1
    real = orjson.dumps({"Pod": pod, "Nodes": {"items": [dict(node, metadata=dict(node["metadata"], name=f"n{i}")) for i in range(size // per_node)]}})
    ints = b'{"Pod":{},"NodeNames":[' + b"1," * (size // 2) + b"1]}"
    tiny = b'{"Pod":{},"Nodes":{"items":[' + b"{}," * (size // 3) + b"{}]}}"
    return {"whole nodes (real)": real, "tiny integers (worst parsed)": ints, "tiny objects (refused)": tiny}


def memory(body_mb: float) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        policies = Path(tmp) / "p.yaml"
        policies.write_text("apiVersion: kpe.dev/v1alpha1\nkind: SchedulingPolicy\nmetadata: {name: any}\nspec:\n  filters:\n  - {name: any, expression: 'true'}\n")
        print(f"{'request':32s} {'body':>9s} {'status':>6s} {'peak RSS':>9s} {'over baseline':>13s} {'x body':>7s}")
        kpe = Kpe(policies)
        baseline = kpe.peak_rss_mb()
        kpe.stop()
        print(f"{'none (baseline)':32s} {'':>9s} {'':>6s} {baseline:7.0f}MB {'':>13s} {'':>7s}")
        for name, body in bodies(int(body_mb * 2**20)).items():
            kpe = Kpe(policies)
            answer = httpx.post(kpe.url + "/scheduler/filter", content=body, headers={"Content-Type": "application/json"}, timeout=120)
            peak = kpe.peak_rss_mb()
            kpe.stop()
            grown = peak - baseline
            print(f"{name:32s} {len(body) / 2**20:7.1f}MB {answer.status_code:6d} {peak:7.0f}MB {grown:11.0f}MB {grown * 2**20 / len(body):6.1f}x")


def health(probes: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        policies = Path(tmp) / "slow.yaml"
        policies.write_text(SLOW % list(range(250)))
        kpe = Kpe(policies, "--request-deadline-s", "2")
        request = {"Pod": {"metadata": {"name": "p", "namespace": "d"}}, "Nodes": {"items": [{"metadata": {"name": f"n{i}"}} for i in range(2000)]}}

        def sample() -> list[float]:
            out = []
            with httpx.Client(base_url=kpe.url, timeout=30) as client:
                for _ in range(probes):
                    start = time.perf_counter()
                    client.get("/healthz")
                    out.append((time.perf_counter() - start) * 1000)
                    time.sleep(0.01)
            return out

        idle = sample()
        busy_flag = threading.Event()
        overdue = [0]

        def load() -> None:
            with httpx.Client(base_url=kpe.url, timeout=60) as client:
                while not busy_flag.is_set():
                    answer = client.post("/scheduler/filter", json=request).json()
                    overdue[0] += sum("(deadline)" in r for r in answer["FailedNodes"].values())

        loader = threading.Thread(target=load)
        loader.start()
        time.sleep(0.5)
        busy = sample()
        busy_flag.set()
        loader.join()
        kpe.stop()
        print(f"\n/healthz latency, {probes} probes each   {'p50':>8s} {'p99':>8s} {'max':>8s}")
        for name, values in (("idle kpe (baseline)", idle), ("during slow filter requests", busy)):
            q = statistics.quantiles(values, n=100)
            print(f"{name:38s} {q[49]:6.1f}ms {q[98]:6.1f}ms {max(values):6.1f}ms")
        print(f"(the slow requests answered {overdue[0]:,} nodes unevaluated past their 2 s deadline)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--body-mb", type=float, default=20.0, help="size of each body (default 20 MB)")
    parser.add_argument("--probes", type=int, default=200, help="health probes per sample (default 200)")
    args = parser.parse_args()
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    memory(args.body_mb)
    health(args.probes)


if __name__ == "__main__":
    main()
