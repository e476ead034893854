"""Whether kpe's request limits hold, side by side with another tree of kpe in the same run.

    python bench/limits_bench.py [--also-source DIR] [--body-mb 63] [--heads 30]

DIR is an unpacked tree of kpe (``git archive REV | tar -x -C DIR``), run as
``python -m server.cli`` from it; without it only this tree runs. For each tree:

1. Peak RSS (the kernel's VmHWM) of a fresh ``kpe serve`` process, over its baseline,
   after a body of ``[1,1,...]`` just under ``--max-body-bytes``, alone and two at once
   (the densest shape kpe used to parse), and after two ~15 MiB whole-node filter requests
   sent together behind a slow policy.
2. How every listener answers a 64 KiB request head sent in one write.
3. How long a TLS connection that never sends its ClientHello stays open
   (``--header-timeout-s 2``; given up on after 20 s).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import httpx
import orjson
from hardening_bench import SLOW, free_port  # the same slow policy and port picking as the hardening bench

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "bench" / "data"
MiB = 1 << 20


class Kpe:
    """``kpe serve`` from ``source``, every listener on a port of its own."""

    def __init__(self, source: Path, policies: Path, *extra: str) -> None:
        self.ports = {name: free_port() for name in ("scheduler", "webhook", "introspection", "health")}
        command = [sys.executable, "-m", "server.cli", "serve", "--cluster", "off", "--policies", str(policies), "--log-level", "error",
                   "--port", str(self.ports["scheduler"]), "--webhook-port", str(self.ports["webhook"]),
                   "--introspection-port", str(self.ports["introspection"]), "--health-port", str(self.ports["health"]), *extra]
        env = dict(os.environ, PYTHONPATH=str(source))
        self.process = subprocess.Popen(command, cwd=source, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        scheme = "https" if "--tls-cert" in extra else "http"
        self.url = f"{scheme}://127.0.0.1:{self.ports['scheduler']}"
        health = f"http://127.0.0.1:{self.ports['health']}/readyz"
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(health, timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise RuntimeError(f"kpe from {source} did not start")
            time.sleep(0.05)
        self.baseline = self.peak_rss()

    def peak_rss(self) -> int:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
        return 0

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)


def whole_nodes(size: int) -> bytes:
    node, pod = json.loads((DATA / "node.json").read_text()), json.loads((DATA / "pod.json").read_text())
    per_node = len(orjson.dumps(node)) + 1
    return orjson.dumps({"Pod": pod, "Nodes": {"items": [dict(node, metadata=dict(node["metadata"], name=f"n{i}")) for i in range(size // per_node)]}})


def post_at_once(url: str, bodies: list[bytes], gap: float) -> list[int]:
    statuses: list[int] = [0] * len(bodies)

    def post(i: int) -> None:
        try:
            statuses[i] = httpx.post(url + "/scheduler/filter", content=bodies[i], headers={"Content-Type": "application/json"}, timeout=120).status_code
        except httpx.HTTPError:
            statuses[i] = -1

    threads = [threading.Thread(target=post, args=(i,)) for i in range(len(bodies))]
    for thread in threads:
        thread.start()
        time.sleep(gap)
    for thread in threads:
        thread.join()
    return statuses


def memory(source: Path, body_mb: float, tmp: Path) -> list[str]:
    anything = tmp / "any.yaml"
    anything.write_text("apiVersion: kpe.dev/v1alpha1\nkind: SchedulingPolicy\nmetadata: {name: any}\nspec:\n  filters:\n  - {name: any, expression: 'true'}\n")
    slow = tmp / "slow.yaml"
    slow.write_text(SLOW % list(range(250)))
    ints = b'{"Pod":{},"NodeNames":[' + b"1," * (int(body_mb * MiB) // 2 - 16) + b"1]}"
    nodes = whole_nodes(15 * MiB)
    rows = []
    for name, policies, bodies, gap in (
        (f"one {len(ints) / MiB:.0f} MiB [1,1,...]", anything, [ints], 0.0),
        (f"two {len(ints) / MiB:.0f} MiB [1,1,...] at once", anything, [ints, ints], 0.0),
        (f"one {len(nodes) / MiB:.0f} MiB whole-node filter", slow, [nodes], 0.0),
        (f"two {len(nodes) / MiB:.0f} MiB whole-node filters", slow, [nodes, nodes], 0.8),
    ):
        kpe = Kpe(source, policies, "--request-deadline-s", "3")
        try:
            statuses = post_at_once(kpe.url, bodies, gap)
            grown = (kpe.peak_rss() - kpe.baseline) / MiB
        finally:
            kpe.stop()
        rows.append(f"  {name:40s} {','.join(map(str, statuses)):>9s} {grown:9.0f} MiB over baseline")
    return rows


def heads(source: Path, count: int, tmp: Path) -> list[str]:
    anything = tmp / "any.yaml"
    kpe = Kpe(source, anything)
    paths = {"scheduler": "/scheduler/filter", "webhook": "/admission/pods", "introspection": "/apis/v1/policies", "health": "/healthz"}
    rows = []
    try:
        for surface, path in paths.items():
            seen: Counter[str] = Counter()
            for _ in range(count):
                with socket.create_connection(("127.0.0.1", kpe.ports[surface]), timeout=5) as sock:
                    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: kpe\r\nX-Padding: ".encode() + b"a" * 64 * 1024 + b"\r\n\r\n")
                    try:
                        first = sock.recv(64).split(b"\r\n", 1)[0].decode()
                    except OSError as exc:
                        first = type(exc).__name__
                seen[first.removeprefix("HTTP/1.1 ")[:3] or "closed"] += 1
            rows.append(f"  64 KiB head in one write, {surface:13s} " + ", ".join(f"{status}: {n}" for status, n in sorted(seen.items())))
    finally:
        kpe.stop()
    return rows


def handshake(source: Path, tmp: Path) -> list[str]:
    import trustme

    ca = trustme.CA()
    served = ca.issue_cert("127.0.0.1", "localhost")
    cert, key = tmp / "tls.crt", tmp / "tls.key"
    served.cert_chain_pems[0].write_to_path(str(cert))
    served.private_key_pem.write_to_path(str(key))
    kpe = Kpe(source, tmp / "any.yaml", "--tls-cert", str(cert), "--tls-key", str(key), "--header-timeout-s", "2")
    try:
        with socket.create_connection(("127.0.0.1", kpe.ports["scheduler"]), timeout=20) as sock:
            start = time.monotonic()
            try:
                closed = sock.recv(1) == b""
            except TimeoutError:
                closed = False
            took = time.monotonic() - start
    finally:
        kpe.stop()
    return [f"  silent TLS connection (--header-timeout-s 2)   " + (f"closed after {took:.1f} s" if closed else f"still open after {took:.0f} s")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--also-source", type=Path, help="an unpacked tree of kpe to run beside this one")
    parser.add_argument("--body-mb", type=float, default=63.0, help="size of the [1,1,...] bodies (default 63, under --max-body-bytes)")
    parser.add_argument("--heads", type=int, default=30, help="64 KiB heads sent to each listener (default 30)")
    args = parser.parse_args()
    sources = {"this tree": ROOT} | ({f"{args.also_source}": args.also_source.resolve()} if args.also_source else {})
    for label, source in sources.items():
        with tempfile.TemporaryDirectory() as tmp:
            print(f"{label} ({source})", flush=True)
            print(f"  {'request':40s} {'statuses':>9s} {'peak RSS':>9s}")
            for row in memory(source, args.body_mb, Path(tmp)) + heads(source, args.heads, Path(tmp)) + handshake(source, Path(tmp)):
                print(row, flush=True)


if __name__ == "__main__":
    main()
