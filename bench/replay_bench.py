"""kpe's CPU per scheduled pod with this script in kube-scheduler's place: over a real
kube-apiserver (no kube-scheduler), one pod at a time, create it, send kpe a filter with a
window of node names (420 of 1,000 by default, each pod's window starting where the last one
stopped, as kube-scheduler's do), a prioritize with the names that passed, and bind the pod to
the best-scored node. kpe hears both changes of each pod on its watch, as under the scheduler.

    python bench/replay_bench.py                                # kpe and the floor, 3 alternating rounds
    python bench/replay_bench.py --also-source /tmp/kpe-old    # a tree before a change, in the same run
    python bench/replay_bench.py --shape many-teams --profile /tmp/replay   # cProfile files of each kpe
    python bench/replay_bench.py --fake-api --shape heterogeneous          # no binaries: the tests' fake API server

Why beside ``scheduler_bench.py``: there every process shares two cores with kube-scheduler,
and kpe's CPU per pod moves with what the others do; here nothing runs while kpe answers but
the API server's side of its watch, and each pod's requests come one after another, so the
rounds tell kpe's own cost per pod (and a profile of a round shows where it goes). It does not
tell pods/s: the script waits for each answer. Each round is a fresh kpe (``--cluster on``,
the shipped policies); ``--floor`` is ``scheduler_bench.py``'s do-nothing extender on uvicorn's
httptools parser. Prints, per round: the extender's CPU ms per measured pod, the API server's and
etcd's, and the mean round trip of filter and prioritize as this script saw them.

``--fake-api`` replays over the tests' in-process fake API server instead (``tests/fakeapi``:
lists, watches and bindings as the real one answers them): no Kubernetes binaries needed, and
kpe's CPU a pod comparable within the run (the API server's own CPU is this script's then).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))

import realcluster as rc  # noqa: E402
import scheduler_bench as sb  # noqa: E402 - the shapes, their pods and the floor

JSON = {"Content-Type": "application/json"}


class FakePlane:
    """The tests' fake API server where ``play`` expects a control plane: kpe's kubeconfig, pods
    created and bound through its state (what a client's POST does), no processes of its own."""

    def __init__(self, api: Any, workdir: Path) -> None:
        self.api = api
        self.kpe_kubeconfig = Path(api.write_kubeconfig(workdir / "kubeconfig"))
        self.processes: list[Any] = []

    def create(self, body: dict[str, Any]) -> dict[str, Any]:
        created: dict[str, Any] = self.api.state.add_pod(body)
        return created

    def bind(self, namespace: str, name: str, node: str) -> None:
        self.api.state.bind(namespace, name, node)

    def delete_pods(self) -> None:
        for pod in self.api.state.objects("pods"):
            self.api.state.delete("pods", pod["metadata"]["name"], pod["metadata"]["namespace"], grace_seconds=0)


def play(plane: Any, url: str, pid: int, round_: int, names: list[str], args: argparse.Namespace) -> dict[str, float]:
    """``args.warm`` pods unmeasured (the classes' first windows), then ``args.pods`` measured."""
    fake = isinstance(plane, FakePlane)
    api = None if fake else httpx.Client(base_url=plane.url, headers={"Authorization": f"Bearer {rc.ADMIN_TOKEN}"}, verify=False, timeout=30)
    extender = httpx.Client(timeout=30)
    offset, waited = 0, {"filter": 0.0, "prioritize": 0.0}
    before: dict[str, tuple[int, float]] = {}
    scraped: dict[tuple[str, str], float] = {}
    for i in range(args.warm + args.pods):
        if i == args.warm:
            time.sleep(1.0)  # the warm-up's filling ahead done
            before = {p.name: (p.popen.pid, rc.cpu_seconds(p.popen.pid)) for p in plane.processes if p.alive()}
            before["extender"] = (pid, rc.cpu_seconds(pid))
            scraped = samples(url)
        body = sb.pod(i, round_, shape=args.shape)
        namespace = body["metadata"]["namespace"]
        if api is None:
            pod = plane.create(body)
        else:
            created = api.post(f"/api/v1/namespaces/{namespace}/pods", content=orjson.dumps(body), headers=JSON)
            created.raise_for_status()
            pod = created.json()
        window = [names[(offset + k) % len(names)] for k in range(min(args.window, len(names)))]
        offset = (offset + len(window)) % len(names)
        t0 = time.perf_counter()
        filtered = extender.post(url + "/scheduler/filter", content=orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": window}), headers=JSON)
        filtered.raise_for_status()
        passed = filtered.json().get("NodeNames") or []
        t1 = time.perf_counter()
        scored = extender.post(url + "/scheduler/prioritize", content=orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": passed}), headers=JSON)
        scored.raise_for_status()
        t2 = time.perf_counter()
        if i >= args.warm:
            waited["filter"] += t1 - t0
            waited["prioritize"] += t2 - t1
        ranked = scored.json()
        best = max(ranked, key=lambda h: h["Score"])["Host"] if ranked else (passed[0] if passed else None)
        if best is not None and api is None:
            plane.bind(namespace, pod["metadata"]["name"], best)
        elif best is not None and api is not None:
            binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": pod["metadata"]["name"]},
                       "target": {"apiVersion": "v1", "kind": "Node", "name": best}}
            api.post(f"/api/v1/namespaces/{namespace}/pods/{pod['metadata']['name']}/binding", content=orjson.dumps(binding), headers=JSON).raise_for_status()
    time.sleep(1.0)  # the last binding heard
    out = {who: 1000 * (rc.cpu_seconds(p) - cpu) / args.pods for who, (p, cpu) in before.items()}
    out |= {f"{verb} ms": 1000 * s / args.pods for verb, s in waited.items()}
    out["extender RSS MiB"] = rc.rss(pid)["VmRSS"] / 2**20  # what it keeps after the round (its caches of classes included)
    if scraped:  # kpe: what its equivalence cache answered and which policies' rules it evaluated
        after = samples(url)
        delta = {key: value - scraped.get(key, 0.0) for key, value in after.items()}
        for verb in ("filter", "prioritize"):
            hit, miss = (sum(v for (name, labels), v in delta.items() if name == "kpe_equivalence_cache_nodes_total"
                             and f'verb="{verb}"' in labels and f'result="{result}"' in labels) for result in ("hit", "miss"))
            out[f"{verb} hits %"] = 100 * hit / (hit + miss) if hit + miss else 0.0
        out["warmed nodes/pod"] = sum(v for (name, _), v in delta.items() if name == "kpe_equivalence_warmed_nodes_total") / args.pods
        for (name, labels), v in sorted(delta.items()):
            if name == "kpe_rule_evaluations_total" and v:
                policy = labels.split('policy="', 1)[1].split('"', 1)[0]
                kind = labels.split('kind="', 1)[1].split('"', 1)[0]
                out[f"evaluations/pod {policy} {kind}"] = out.get(f"evaluations/pod {policy} {kind}", 0.0) + v / args.pods
    return out


def samples(url: str) -> dict[tuple[str, str], float]:
    """kpe's /metrics as (name, labels) -> value; empty for an extender without them (the floor)."""
    try:
        answer = httpx.get(url + "/metrics", timeout=15)
    except httpx.HTTPError:
        return {}
    if answer.status_code != 200:
        return {}
    found: dict[tuple[str, str], float] = {}
    for line in answer.text.splitlines():
        if line and not line.startswith("#"):
            sample, _, value = line.rpartition(" ")
            name, _, labels = sample.partition("{")
            found[(name, labels)] = float(value)
    return found


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--shape", choices=rc.SHAPES, default="default")
    ap.add_argument("--pods", type=int, default=300, help="pods measured per round (default 300)")
    ap.add_argument("--warm", type=int, default=100, help="pods before them, not measured (default 100)")
    ap.add_argument("--window", type=int, default=420, help="node names per filter (default 420: kube-scheduler's at 1,000 nodes)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of each setup, alternating (default 3)")
    ap.add_argument("--no-floor", dest="floor", action="store_false", help="kpe (and --also-source) only")
    ap.add_argument("--also-source", action="append", default=[], metavar="DIR", help="the kpe of another source tree too (git archive COMMIT)")
    ap.add_argument("--profile", type=Path, help="a directory: each kpe runs under cProfile and writes kpe-ROUND.prof there")
    ap.add_argument("--fake-api", action="store_true", help="over the tests' fake API server instead of a real control plane (no binaries)")
    args = ap.parse_args()
    if not args.fake_api:
        rc.skip_without_binaries()
    setups: list[tuple[str, Path | None]] = [("kpe", None)] + [(f"kpe ({Path(d).name})", Path(d).resolve()) for d in args.also_source]
    if args.floor:
        setups.insert(0, ("floor", None))
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    rows: dict[str, list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="kpe-replay-bench-") as tmp, contextlib.ExitStack() as stack:
        workdir = Path(tmp)
        plane: Any
        if args.fake_api:
            from tests.fakeapi import FakeApiServer  # the tests' fake API server: kpe's own cache is real

            plane = FakePlane(stack.enter_context(FakeApiServer(bookmark_interval=5.0)), workdir)
            objects = [rc.node_object(i, shape=args.shape) for i in range(args.nodes)]
            for node, status in objects:
                plane.api.state.add_node({**node, **status})
            names = [node["metadata"]["name"] for node, _ in objects]
        else:
            plane = stack.enter_context(rc.control_plane(workdir))
            for namespace in sb.namespaces(args.shape):
                plane.api.namespace(namespace)
            names, _ = rc.create_nodes(plane, args.nodes, shape=args.shape)
        round_ = 0
        for _ in range(args.rounds):
            for label, source in setups:
                round_ += 1
                if label == "floor":
                    floor, port = sb.start_floor(workdir, "floor-httptools")
                    try:
                        row = play(plane, f"http://127.0.0.1:{port}", floor.popen.pid, round_, names, args)
                    finally:
                        floor.stop()
                else:
                    profile = args.profile / f"kpe-{round_}.prof" if args.profile else None
                    kpe, _ = rc.start_kpe(plane, workdir, name=f"kpe-{round_}", source=source, profile=profile)
                    try:
                        row = play(plane, kpe.url, kpe.process.popen.pid, round_, names, args)
                    finally:
                        kpe.stop()
                rows.setdefault(label, []).append(row)
                print(f"  round {round_} {label}: " + ", ".join(f"{k} {v:.2f}" for k, v in row.items() if not k.startswith("evaluations/")), flush=True)
                evaluated = {k.split(" ", 1)[1]: v for k, v in row.items() if k.startswith("evaluations/")}
                if evaluated:
                    print("    rule evaluations per pod: " + ", ".join(f"{k} {v:.1f}" for k, v in evaluated.items()), flush=True)
                if isinstance(plane, FakePlane):
                    plane.delete_pods()
                    continue
                for namespace in sb.namespaces(args.shape):
                    rc.delete_pods(plane, namespace)
        server = "the tests' fake API server" if isinstance(plane, FakePlane) else f"a real kube-apiserver ({plane.binaries.version})"
    print()
    print(f"kube-scheduler's calls replayed over {server}, {args.nodes} nodes ({args.shape} shape), "
          f"windows of {args.window} names, {args.pods} pods measured per round after {args.warm}; CPU ms per measured pod (from /proc/PID/stat) and the extender's RSS after the round")
    print()
    columns = list(dict.fromkeys(c for runs in rows.values() for r in runs for c in r if c != "extender" and not c.startswith("evaluations/")))
    print("| setup | extender CPU ms/pod (rounds) | median | " + " | ".join(columns) + " |")
    print("| --- | --- | --- | " + " | ".join("---" for _ in columns) + " |")
    for label, runs in rows.items():
        each = ", ".join(f"{r['extender']:.2f}" for r in runs)
        rest = " | ".join(f"{statistics.median(r[c] for r in runs):.2f}" if all(c in r for r in runs) else "" for c in columns)
        print(f"| {label} | {each} | {statistics.median(r['extender'] for r in runs):.2f} | {rest} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
