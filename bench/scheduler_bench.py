"""Pods per second through a real kube-scheduler and kube-apiserver (the version of the binaries found): no
extender, a do-nothing extender (the floor), and kpe with the shipped policies.

    python bench/scheduler_bench.py                         # 1,000 nodes, 1,000 pods, 3 pairs, names and nodes
    python bench/scheduler_bench.py --modes names --pairs 5
    python bench/scheduler_bench.py --nodes 5000 --modes names
    python bench/scheduler_bench.py --modes names --shape tainted-gpu    # another cluster (--shape)

etcd and kube-apiserver run on loopback (``tests/e2e/controlplane.py``; the
binaries from ``$KPE_K8S_BIN`` or ``~/.cache/kpe-k8s/bin``, skipped without them).
Nodes are API objects (Ready, no taints, labelled so the shipped policies have
work: zones, team pools, arm64, GPU nodes, a few in maintenance). Each round
restarts kube-scheduler with that round's configuration (leader election off,
default percentageOfNodesToScore, client qps and burst 5000 as in Kubernetes'
scheduler_perf: the default qps 50 would be what is measured), creates P pods as fast as it can (16
concurrent creates) and clocks from the first create to the last binding, seen
on a watch. Between rounds the pods are deleted with gracePeriodSeconds 0.
Setups alternate within each pair (none, floor, kpe, none, floor, kpe, ...):

- none: kube-scheduler without extenders;
- floor: a do-nothing extender on Starlette, uvicorn and orjson, with uvicorn's
  default h11 parser (the floor issue 13 was measured against): filter passes
  every node (echoing NodeNames or Nodes), prioritize scores every node 0; the
  extender entry is kpe's without preemptVerb;
- floor-httptools: the same do-nothing extender on uvicorn's httptools parser,
  the one kpe serves with (a stricter floor: what any extender on this stack
  could reach by parsing HTTP in C);
- floor-watch: floor-httptools keeping a pod cache, as any extender that is sent
  node names must: it lists every pod and watches them (JSON over TLS with httpx,
  kpe's RBAC user), decoding each event with orjson into a dict by UID; it
  reads nothing of it. What the cache alone costs a Python extender on this
  stack, with no policy;
- floor-burn: floor-httptools spending ``--burn-ms`` of CPU (thread time, a busy
  loop) in each filter before its answer: how much CPU a pod an extender can add
  to the floor's before pods/s drop, on this machine, whatever the CPU does (a
  list, ``--burn-ms 0.5,1,2``: a setup per value, ``floor-burn-0.5ms`` ...);
- kpe: ``kpe serve`` on ``policies/`` (plain HTTP, ``--cluster on``, a fresh
  process per round), its entry from ``kpe scheduler-config``: kpe on the default
  scheduler, whose every profile then has the extender, so no pod is batched
  (OpportunisticBatching, KEP-5598: a profile with extenders signs no pod);
- own: kpe's own scheduler beside the default one, as deploy/scheduler/ runs it
  (``kpe scheduler-config --scheduler-name kpe-scheduler``, a second kube-scheduler
  process): every other pod (``--own-share``, half by default) names it in
  ``spec.schedulerName`` and goes through kpe, the rest go to the default scheduler
  without an extender, batched. The round line adds each scheduler's own pods/s.

Shapes (``--shape``): ``default`` as above, pods of four Deployments in one
namespace; ``tainted-gpu``, a quarter of the nodes GPU nodes tainted
``nvidia.com/gpu`` (kube-scheduler filters them out before kpe) and every pod
alike; ``many-teams``, the default nodes and pods of 30 small team namespaces,
two Deployments each, created interleaved (60 equivalence classes in flight);
``heterogeneous``, nodes and pods generated from a seed as a real cluster's
differ (``heterogeneous.py``: 34 namespaces, about 110 apps, requests drawn per
pod, spread, zone preferences, selectors, tainted GPU and arm64 pools, dedicated
nodes): about half of 1,000 pods are alike in nothing.
Beside each setup's pods/s the table shows its extender's CPU per scheduled pod
(kpe's or the floor's, from /proc/PID/stat).

Modes: ``names`` (nodeCacheCapable: true) and ``nodes`` (whole Node objects,
``--no-node-cache-capable``; 300 pods a round by default, ``--pods-whole-nodes``).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))

import heterogeneous  # noqa: E402
import realcluster as rc  # noqa: E402
import reload_round  # noqa: E402
from server_bench import FLOOR_APP  # noqa: E402 - the same do-nothing extender: Starlette, uvicorn, orjson

NAMESPACE = "batch"  # bin-packing scores pods here
# The do-nothing extenders, by the HTTP parser uvicorn runs them with.
FLOORS = {"floor": "h11", "floor-httptools": "httptools"}
# The floor with one cost added (on httptools): measured against the floors as kpe is.
REFERENCES = ("floor-watch", "floor-burn")


def burned(setup: str) -> float | None:
    """floor-burn-Xms's X (the setup ``floor-burn`` is one per ``--burn-ms`` value); None for other setups."""
    if setup.startswith("floor-burn-") and setup.endswith("ms"):
        return float(setup[len("floor-burn-"):-2])
    return None


def is_reference(setup: str) -> bool:
    return setup == "floor-watch" or burned(setup) is not None


# The floor's handlers (floor_app.py, written beside it) with one cost added.
REFERENCE_APP = '''
import asyncio
import contextlib
import os
import time

import httpx
import orjson
from starlette.applications import Starlette
from starlette.responses import Response
from starlette.routing import Route

import floor_app

BURN_S = float(os.environ.get("FLOOR_BURN_MS", "0")) / 1000
URL = os.environ.get("FLOOR_WATCH_URL", "")
TOKEN = os.environ.get("FLOOR_WATCH_TOKEN", "")
pods = {}
listed_once = asyncio.Event()

async def filter_(request):
    if BURN_S:
        end = time.thread_time() + BURN_S
        while time.thread_time() < end:
            pass
    return await floor_app.filter_(request)

async def health(request):
    # Ready once the pods are listed, as kpe is once its cache has synced.
    return Response(b"ok") if listed_once.is_set() or not URL else Response(b"listing", status_code=503)

async def watch():
    async with httpx.AsyncClient(base_url=URL, headers={"Authorization": "Bearer " + TOKEN}, verify=False, timeout=None) as client:
        while True:
            try:
                listed = orjson.loads((await client.get("/api/v1/pods")).content)
                pods.clear()
                pods.update((p["metadata"]["uid"], p) for p in listed["items"])
                listed_once.set()
                params = {"watch": "1", "resourceVersion": listed["metadata"]["resourceVersion"], "allowWatchBookmarks": "true"}
                async with client.stream("GET", "/api/v1/pods", params=params) as response:
                    async for line in response.aiter_lines():
                        event = orjson.loads(line)
                        kind, obj = event["type"], event["object"]
                        if kind == "DELETED":
                            pods.pop(obj["metadata"]["uid"], None)
                        elif kind in ("ADDED", "MODIFIED"):
                            pods[obj["metadata"]["uid"]] = obj
            except httpx.HTTPError:
                await asyncio.sleep(1)

@contextlib.asynccontextmanager
async def lifespan(app):
    task = asyncio.create_task(watch()) if URL else None
    yield
    if task is not None:
        task.cancel()

app = Starlette(routes=[Route("/scheduler/filter", filter_, methods=["POST"]),
                        Route("/scheduler/prioritize", floor_app.prioritize, methods=["POST"]),
                        Route("/healthz", health)], lifespan=lifespan)
'''



# With --caps: at most 3 pods of an app and 6 of a team on a node, counted from nodeInfo.
CAPS = """apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: per-node-caps}
spec:
  match: {podSelector: {matchExpressions: [{key: app, operator: Exists}]}}
  filters:
  - name: app
    expression: "nodeInfo.pods.filter(p, p.metadata.?labels[?'app'].orValue('') == pod.metadata.labels['app']).size() < 3"
    message: three pods of this app run here already
  - name: team
    expression: "!has(pod.metadata.labels.team) || nodeInfo.pods.filter(p, p.metadata.?labels[?'team'].orValue('') == pod.metadata.labels['team']).size() < 6"
    message: six pods of this team run here already
"""

# Four "Deployments": what the shipped policies read differs between them (team, zone label).
TEMPLATES = [
    {"team": "vision", "kpe.dev/zone": "us-east-1a"},
    {"team": "search"},
    {"team": "platform", "kpe.dev/zone": "us-east-1b"},
    {},
]
# many-teams: this many team namespaces, two Deployments each (one pinned to a zone), so 2 * TEAM_COUNT
# classes: the first teams own the node pools of realcluster.TEAMS, the rest have none.
TEAM_COUNT = 30


OWN_SCHEDULER = "kpe-scheduler"  # the own setup's second kube-scheduler, kpe's (deploy/scheduler/)


def templates(shape: str) -> list[tuple[str, str, dict[str, str]]]:
    """The shape's pod templates: (namespace, app, labels beyond app); pod i takes template i modulo their number.
    default: four Deployments in one namespace; tainted-gpu: one (every pod alike); many-teams:
    TEAM_COUNT small team namespaces of two Deployments each."""
    if shape == "tainted-gpu":
        return [(NAMESPACE, "web", {})]
    if shape == "many-teams":
        out = []
        for k in range(TEAM_COUNT):
            team = rc.TEAMS[k] if k < len(rc.TEAMS) else f"team-{k:02d}"
            out.append((f"team-{k:02d}", f"{team}-api", {"team": team}))
            out.append((f"team-{k:02d}", f"{team}-worker", {"team": team, "kpe.dev/zone": rc.ZONES[k % len(rc.ZONES)]}))
        return out
    return [(NAMESPACE, f"app-{t}", labels) for t, labels in enumerate(TEMPLATES)]


def namespaces(shape: str) -> list[str]:
    if shape == "heterogeneous":
        return heterogeneous.namespaces()
    return sorted({ns for ns, _, _ in templates(shape)})


def pod(i: int, round_: int, *, scheduler_name: str = "", shape: str = "default") -> dict[str, Any]:
    if shape == "heterogeneous":  # no templates: every pod drawn from the seed (heterogeneous.py)
        return heterogeneous.pod(i, round_, scheduler_name=scheduler_name)
    shaped = templates(shape)
    t = i % len(shaped)
    namespace, app, extra = shaped[t]
    labels = {"app": app, "pod-template-hash": f"5d8f{t}c7b9", **extra}
    spec: dict[str, Any] = {
        "containers": [{"name": "main", "image": f"registry.example.com/{app}:1.0",
                        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}}}],
        "terminationGracePeriodSeconds": 30,
    }
    if scheduler_name:
        spec["schedulerName"] = scheduler_name
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"{app}-r{round_}-{i:05d}", "namespace": namespace, "labels": labels}, "spec": spec}


def to_own(i: int, share: float) -> bool:
    """Whether pod ``i`` goes to kpe's own scheduler: spread evenly through the round, ``share`` of them."""
    return share > 0 and int((i + 1) * share) != int(i * share)


class BindWatch(threading.Thread):
    """Watches every namespace's pods and records when each one first has a nodeName."""

    def __init__(self, plane: rc.ControlPlane, resource_version: str, target: int) -> None:
        super().__init__(daemon=True)
        self.plane, self.rv, self.target = plane, resource_version, target
        self.bound: dict[str, float] = {}
        self.done = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            headers = {"Authorization": f"Bearer {rc.ADMIN_TOKEN}"}
            params = {"watch": "1", "resourceVersion": self.rv, "timeoutSeconds": "1800"}
            with httpx.Client(verify=False, timeout=httpx.Timeout(10, read=None), headers=headers) as client, \
                    client.stream("GET", f"{self.plane.url}/api/v1/pods", params=params) as response:
                for line in response.iter_lines():
                    if not line:
                        continue
                    event = orjson.loads(line)
                    obj = event["object"]
                    if event["type"] == "ERROR":
                        raise RuntimeError(f"watch error: {obj}")
                    if event["type"] in ("ADDED", "MODIFIED") and obj["spec"].get("nodeName"):
                        name = obj["metadata"]["name"]
                        if name not in self.bound:
                            self.bound[name] = time.monotonic()
                            if len(self.bound) >= self.target:
                                return
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            self.error = e
        finally:
            self.done.set()


def one_round(plane: rc.ControlPlane, workdir: Path, config: dict[str, Any], pods: int, round_: int, timeout: float,
              cpu: dict[str, float], extender_pid: int | None, *, own: dict[str, Any] | None = None, own_share: float = 0.0,
              split: dict[str, float] | None = None, shape: str = "default", backlog: bool = False) -> tuple[float, float]:
    """Restart kube-scheduler with ``config`` (and with ``own``, kpe's own scheduler beside it, which
    ``own_share`` of the pods name), create the pods; returns pods/s from the first create to the
    last binding, and the seconds the creates took. Adds each process's CPU seconds over the round to
    ``cpu``; with ``own``, ``split`` gets each scheduler's own pods/s (its pods over the time to its last binding).

    With ``backlog`` the pods are created before kube-scheduler starts, and pods/s are from the first
    binding to the last: the scheduler's own pace through a queue of waiting pods, which creating
    pods on the same cores does not hold back (on two cores it can: creating 1,000 pods can take
    longer than scheduling them)."""
    pids = {p.name: p.popen.pid for p in plane.processes if p.alive()}
    if extender_pid is not None:
        pids["extender"] = extender_pid
    before = {name: rc.cpu_seconds(pid) for name, pid in pids.items()}
    schedulers: list[rc.Process] = []

    def start_schedulers() -> None:
        schedulers.append(rc.start_scheduler(config, workdir, name=f"kube-scheduler-{round_}"))
        pids["kube-scheduler"] = schedulers[-1].popen.pid
        if own is not None:
            schedulers.append(rc.start_scheduler(own, workdir, name=f"{OWN_SCHEDULER}-{round_}"))
            pids[OWN_SCHEDULER] = schedulers[-1].popen.pid
        for name in ("kube-scheduler", OWN_SCHEDULER):
            if name in pids:
                before[name] = rc.cpu_seconds(pids[name])

    try:
        if not backlog:
            start_schedulers()
        rv = plane.api.get("/api/v1/pods", params={"limit": 1})["metadata"]["resourceVersion"]
        watch = BindWatch(plane, rv, pods)
        watch.start()
        time.sleep(0.2)  # the watch is established
        t0 = time.monotonic()
        bodies = [pod(i, round_, scheduler_name=OWN_SCHEDULER if own is not None and to_own(i, own_share) else "", shape=shape) for i in range(pods)]
        created = rc.run_many(plane, [("POST", f"/api/v1/namespaces/{body['metadata']['namespace']}/pods", body) for body in bodies], 16)
        if backlog:
            start_schedulers()
        if not watch.done.wait(timeout):
            raise RuntimeError(f"round {round_}: {len(watch.bound)} of {pods} pods bound after {timeout:.0f} s\n" + "\n".join(s.tail(20) for s in schedulers))
        if watch.error is not None:
            raise watch.error
        for name, pid in pids.items():
            cpu[name] = rc.cpu_seconds(pid) - before[name]
        if own is not None and split is not None:
            for who, mine in (("kpe's pods", True), ("others", False)):
                times = [watch.bound[b["metadata"]["name"]] for b in bodies if bool(b["spec"].get("schedulerName")) == mine]
                if times:
                    split[who] = len(times) / (max(times) - (min(watch.bound.values()) if backlog else t0))
        if backlog:
            return (pods - 1) / (max(watch.bound.values()) - min(watch.bound.values())), created
        return pods / (max(watch.bound.values()) - t0), created
    finally:
        for s in schedulers:
            s.stop()


def kpe_stats(url: str) -> dict[str, float]:
    m = rc.metrics(url)
    out: dict[str, float] = {}
    for verb in ("filter", "prioritize", "preempt"):
        out[f"{verb}_n"] = m("kpe_request_duration_seconds_count", verb=verb)
        out[f"{verb}_s"] = m("kpe_request_duration_seconds_sum", verb=verb)
        out[f"{verb}_nodes"] = m("kpe_request_nodes_sum", verb=verb)
        out[f"{verb}_hit"] = m("kpe_equivalence_cache_nodes_total", verb=verb, result="hit")
        out[f"{verb}_miss"] = m("kpe_equivalence_cache_nodes_total", verb=verb, result="miss")
    for outcome in ("answered", "rescored", "unasked"):
        out[f"ahead_{outcome}"] = m("kpe_prioritize_ahead_total", outcome=outcome)
    out["ahead_s"] = m("kpe_prioritize_ahead_seconds_total")
    out["events"] = m("kpe_cache_events_total")
    out["events_s"] = m("kpe_cache_event_seconds_total")
    out["warmed"] = m("kpe_equivalence_warmed_nodes_total")
    return out


CLUSTER_SETUP = "kpe (policies from the cluster)"


def policy_objects(plane: rc.ControlPlane, policies: Path) -> None:
    """The CRDs as ``kubectl apply -k deploy/crds`` installs them, kpe's RBAC to read them, and one
    SchedulingPolicy per file of ``policies``, for ``--cluster-source``."""
    import yaml

    from tests.e2e.crds import POLICIES, install_crds

    install_crds(plane)
    plane.apply_rbac(rc.ROOT / "deploy" / "cluster-policies" / "rbac.yaml")
    for path in sorted(policies.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == "SchedulingPolicy":
                plane.api.create(POLICIES, doc)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--pods", type=int, default=1000, help="pods per round (default 1000)")
    ap.add_argument("--pods-whole-nodes", type=int, default=300,
                    help="pods per round in the nodes mode, where every setup with an extender is 5 to 10 times slower "
                         "(default 300, to keep the default run near 6 minutes; 0: --pods)")
    ap.add_argument("--pairs", type=int, default=3, help="rounds of each setup, alternating (default 3)")
    ap.add_argument("--modes", default="names,nodes", help="names (nodeCacheCapable), nodes (whole nodes), or both")
    ap.add_argument("--setups", default="none,floor,kpe", help="of none, floor, floor-httptools, floor-watch, floor-burn, kpe, own (default none,floor,kpe)")
    ap.add_argument("--burn-ms", default="1", help="floor-burn's CPU a filter, in ms; a comma-separated list runs a floor-burn per value (default 1)")
    ap.add_argument("--own-share", type=float, default=0.5,
                    help="with the own setup, the share of the pods that name kpe's own scheduler (default 0.5)")
    ap.add_argument("--round-timeout", type=float, default=600)
    ap.add_argument("--scheduler-qps", type=float, default=5000,
                    help="kube-scheduler's clientConnection qps and burst (default 5000, as Kubernetes' scheduler_perf sets them; "
                         "kube-scheduler's own default, qps 50 and burst 100, caps every setup at about 55 pods/s per 1,000 pods)")
    ap.add_argument("--also-source", action="append", default=[], metavar="DIR",
                    help="also run the kpe of another source tree (e.g. `git archive COMMIT | tar -x -C DIR`) as a setup of its "
                         "own, 'kpe (DIR's name)', alternating with the others: a before and after in the same run; repeatable")
    ap.add_argument("--cluster-source", action="store_true",
                    help="also run kpe serving the same policies as SchedulingPolicy objects (--policy-source cluster; the CRDs "
                         "from deploy/crds/ installed, one object per policy file), a setup of its own: '%s'" % CLUSTER_SETUP)
    ap.add_argument("--own-policies", action="store_true",
                    help="each --also-source tree serves its own policies/ (bench/ablations.py: a feature off, its policies "
                         "with it) instead of this tree's")
    ap.add_argument("--shape", default="default", choices=rc.SHAPES,
                    help="the cluster: default (four Deployments in one namespace on varied nodes), tainted-gpu (a quarter of the "
                         "nodes tainted GPU nodes, every pod alike), many-teams (%d small team namespaces of two Deployments each: "
                         "many classes), heterogeneous (generated from a seed: heterogeneous.py)" % TEAM_COUNT)
    ap.add_argument("--reload-round", action="store_true",
                    help="after the pairs (--pairs 0: instead of them), a round of kpe alone with node names: steady state, then "
                         "the first round after a policy reload and after a kpe restart, filter and prioritize p50 and p99 from "
                         "kpe's latency histogram (bench/reload_round.py)")
    ap.add_argument("--reload-policy", default="team-node-pools",
                    help="the shipped policy whose file the reload round edits (default team-node-pools, which matches every pod)")
    ap.add_argument("--profile", metavar="DIR", type=Path,
                    help="run each kpe round's kpe under cProfile, writing DIR/kpe-ROUND.prof (its event loop only; "
                         "read with python -m pstats); the profiler slows kpe, so not for the pods/s")
    ap.add_argument("--pin-extender", action="store_true",
                    help="the extender (kpe or the floor) on a CPU of its own, everything else (the control plane, this "
                         "script) on the others, as a Deployment with its own CPU gets it: pods/s then tell the extender's "
                         "latency, not what its CPU takes from the control plane on a shared machine (needs 2 CPUs or more)")
    ap.add_argument("--backlog", action="store_true",
                    help="each round's pods are created before kube-scheduler starts, and pods/s are from the first binding "
                         "to the last: how fast the scheduler works through waiting pods, without creating them on the same "
                         "cores at the same time (CPU per pod still counts from the first create)")
    ap.add_argument("--caps", action="store_true",
                    help="kpe serves the shipped policies and per-node caps that count pods on a node (nodeInfo), so every "
                         "filter counts the pods in flight")
    args = ap.parse_args()
    rc.skip_without_binaries()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    setups = [s.strip() for s in args.setups.split(",") if s.strip()]
    assert set(modes) <= {"names", "nodes"} and set(setups) <= {"none", *FLOORS, *REFERENCES, "kpe", "own"}, "unknown mode or setup"
    if "floor-burn" in setups:
        at = setups.index("floor-burn")
        setups[at:at + 1] = [f"floor-burn-{float(v):g}ms" for v in args.burn_ms.split(",") if v.strip()]
    assert 0 < args.own_share <= 1, "--own-share is a share of the pods, above 0 and at most 1"
    sources: dict[str, Path | None] = {"kpe": None} | {f"kpe ({Path(d).name})": Path(d).resolve() for d in args.also_source}
    if args.cluster_source:
        sources[CLUSTER_SETUP] = None
    setups += list(sources)[1:]
    kpes = [s for s in setups if is_reference(s)] + [s for s in setups if s in sources or s == "own"]

    pinned = _pin_plan() if args.pin_extender else None
    if pinned is not None:
        os.sched_setaffinity(0, pinned[0])  # inherited by every process this script starts

    started = time.monotonic()
    results: dict[tuple[str, str], list[float]] = {}
    cpu_ms: dict[tuple[str, str], list[dict[str, float]]] = {}
    stats: dict[tuple[str, str], list[dict[str, float]]] = {}
    pods_per_mode: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="kpe-scheduler-bench-") as tmp, rc.control_plane(Path(tmp)) as plane:
        workdir = Path(tmp)
        for namespace in namespaces(args.shape):
            plane.api.namespace(namespace)
        _, t_nodes = rc.create_nodes(plane, args.nodes, shape=args.shape)
        print(f"control plane up; {args.nodes} nodes ({args.shape}) created in {t_nodes:.1f} s", flush=True)
        policies = rc.POLICIES
        if args.cluster_source:
            policy_objects(plane, policies)
        if args.caps:
            policies = workdir / "policies"
            policies.mkdir()
            for shipped in rc.POLICIES.glob("*.yaml"):
                shutil.copy(shipped, policies / shipped.name)
            (policies / "per-node-caps.yaml").write_text(CAPS)
        floors: dict[str, tuple[rc.Process, int]] = {}
        for setup in setups:
            if setup in FLOORS or is_reference(setup):
                floors[setup] = start_floor(workdir, setup, plane=plane)
                if pinned is not None:
                    _pin(floors[setup][0].popen.pid, pinned[1])
        round_ = 0
        try:
            for mode in modes:
                names = mode == "names"
                pods = args.pods if names or not args.pods_whole_nodes else args.pods_whole_nodes
                pods_per_mode[mode] = pods
                for pair, setup in itertools.product(range(args.pairs), setups):
                    round_ += 1
                    kpe = None
                    own = None
                    if setup == "none":
                        config = rc.scheduler_config(plane, None)
                    elif setup == "own":
                        kpe, _ = rc.start_kpe(plane, workdir, name=f"kpe-{round_}", policies=policies)
                        config = rc.scheduler_config(plane, None)
                        own = rc.scheduler_config(plane, kpe.url + "/scheduler", node_cache_capable=names, policies=policies, scheduler_name=OWN_SCHEDULER)
                    elif setup in floors:
                        config = rc.scheduler_config(plane, f"http://127.0.0.1:{floors[setup][1]}/scheduler", node_cache_capable=names, drop_preempt=True)
                    else:
                        profile = args.profile / f"kpe-{round_}.prof" if args.profile else None
                        served, source = policies, sources[setup]
                        if args.own_policies and source is not None:
                            served = source / "policies"
                        extra = ("--policy-source", "cluster") if setup == CLUSTER_SETUP else ()
                        kpe, _ = rc.start_kpe(plane, workdir, name=f"kpe-{round_}", source=source, policies=served, profile=profile, extra=extra)
                        config = rc.scheduler_config(plane, kpe.url + "/scheduler", node_cache_capable=names, policies=served)
                    if args.scheduler_qps > 0:
                        for c in (config, own) if own is not None else (config,):
                            c["clientConnection"].update(qps=args.scheduler_qps, burst=int(args.scheduler_qps))
                    cpu: dict[str, float] = {}
                    split: dict[str, float] = {}
                    extender_pid = kpe.process.popen.pid if kpe is not None else floors[setup][0].popen.pid if setup in floors else None
                    if pinned is not None and kpe is not None:
                        _pin(kpe.process.popen.pid, pinned[1])
                    try:
                        rate, created = one_round(plane, workdir, config, pods, round_, args.round_timeout, cpu, extender_pid,
                                                  own=own, own_share=args.own_share, split=split, shape=args.shape, backlog=args.backlog)
                        if kpe is not None:
                            stats.setdefault((mode, setup), []).append(kpe_stats(kpe.url))
                    finally:
                        if kpe is not None:
                            kpe.stop()
                    results.setdefault((mode, setup), []).append(rate)
                    cpu_ms.setdefault((mode, setup), []).append({k: 1000 * v / pods for k, v in cpu.items()})
                    deleted = sum(rc.delete_pods(plane, namespace) for namespace in namespaces(args.shape))
                    each = ("; " + ", ".join(f"{who} {r:.1f} pods/s" for who, r in split.items())) if split else ""
                    print(f"  {mode:5} pair {pair + 1} {setup:5}: {rate:7.1f} pods/s   (created in {created:.1f} s, deleted in {deleted:.1f} s{each})", flush=True)
            if args.reload_round:
                def qps(config: dict[str, Any]) -> dict[str, Any]:
                    if args.scheduler_qps > 0:
                        config["clientConnection"].update(qps=args.scheduler_qps, burst=int(args.scheduler_qps))
                    return config

                phases = reload_round.run(
                    plane, workdir, pods=args.pods, policy=args.reload_policy, first_round=round_,
                    one_round=lambda config, r, cpu, pid: one_round(plane, workdir, qps(config), args.pods, r, args.round_timeout, cpu, pid, shape=args.shape),
                    configure=lambda url, pol: rc.scheduler_config(plane, url + "/scheduler", policies=pol),
                    delete=lambda: sum(rc.delete_pods(plane, namespace) for namespace in namespaces(args.shape)),
                )
        finally:
            for process, _ in floors.values():
                process.stop()

    if args.reload_round:
        print()
        print(f"reload round: real kube-scheduler and kube-apiserver ({plane.binaries.version}), {args.nodes} nodes ({args.shape} shape), "
              f"{args.pods} pods a round with node names, one kpe through steady state and a reload of {args.reload_policy}, then restarted; "
              "latency from kpe's kpe_request_duration_seconds buckets, interpolated")
        print()
        print("\n".join(reload_round.table(phases)))
    if not args.pairs:
        print()
        print(f"total {time.monotonic() - started:.0f} s")
        return 0
    print()
    print(f"real kube-scheduler and kube-apiserver ({plane.binaries.version}), {args.nodes} nodes ({args.shape} shape), "
          + ", ".join(f"{n} pods per round ({m})" for m, n in pods_per_mode.items())
          + f", {args.pairs} alternating pairs, scheduler client qps {args.scheduler_qps:g}; pods/s "
          + ("from the first binding to the last, the pods created before kube-scheduler started (--backlog)" if args.backlog else "from the first create to the last binding")
          + (f"; the extender on CPU {min(pinned[1])}, everything else on CPU {','.join(map(str, sorted(pinned[0])))}" if pinned is not None else ""))
    print()
    # Beside each setup's rates: its extender's CPU per scheduled pod (kpe's or the floor's) and every process's.
    head = "| mode | setup | " + " | ".join(f"round {i + 1}" for i in range(args.pairs)) + " | median | extender CPU ms/pod | all CPU ms/pod |"
    print(head)
    print("|" + " --- |" * (args.pairs + 5))
    for mode in modes:
        for setup in setups:
            rates = results[(mode, setup)]
            rows = cpu_ms[(mode, setup)]
            extender = statistics.median(r.get("extender", 0.0) for r in rows)
            every = statistics.median(sum(r.values()) for r in rows)
            print(f"| {mode} | {setup} | " + " | ".join(f"{r:.1f}" for r in rates) + f" | {statistics.median(rates):.1f} | "
                  + (f"{extender:.2f}" if extender else "-") + f" | {every:.2f} |")
        for kpe_setup, base in itertools.product(kpes, [f for f in FLOORS if f in setups] + (["none"] if "none" in setups else [])):
            ratios = [k / f for k, f in zip(results[(mode, kpe_setup)], results[(mode, base)], strict=True)]
            cpu_ratio = ""
            if base in FLOORS:
                mine, floor = (statistics.median(r.get("extender", 0.0) for r in cpu_ms[(mode, s_)]) for s_ in (kpe_setup, base))
                cpu_ratio = f"{mine / floor:.2f}x" if floor else ""
            print(f"| {mode} | {kpe_setup}/{base} | " + " | ".join(f"{r:.2f}x" for r in ratios) + f" | {statistics.median(ratios):.2f}x | {cpu_ratio} | |")
    print()
    print("CPU ms per pod over a round, median of the rounds (from /proc/PID/stat; the script creating pods is not counted):")
    print()
    procs = ["etcd", "kube-apiserver", "kube-scheduler", *([OWN_SCHEDULER] if "own" in setups else []), "extender"]
    print("| mode | setup | " + " | ".join(procs) + " | all |")
    print("|" + " --- |" * (len(procs) + 3))
    for mode in modes:
        for setup in setups:
            rows = cpu_ms[(mode, setup)]
            cells = [statistics.median(r.get(p, 0.0) for r in rows) for p in procs]
            total = statistics.median(sum(r.values()) for r in rows)
            print(f"| {mode} | {setup} | " + " | ".join(f"{c:.2f}" if c else "-" for c in cells) + f" | {total:.2f} |")
    if stats:
        print()
        print("kpe's /metrics, summed over its rounds (a fresh kpe per round):")
        print()
        print("| mode | kpe | verb | requests | mean ms | mean nodes per request | equivalence-cache hits |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
        loops: list[str] = []  # after the table, which a line between its rows would break
        for (mode, kpe_setup), rounds in stats.items():
            total = {k: sum(s[k] for s in rounds) for k in rounds[0]}
            for verb in ("filter", "prioritize", "preempt"):
                n = total[f"{verb}_n"]
                if not n:
                    continue
                looked = total[f"{verb}_hit"] + total[f"{verb}_miss"]
                hits = f"{100 * total[f'{verb}_hit'] / looked:.1f}% of {looked:,.0f} nodes" if looked else "n/a (whole nodes)"
                nodes = f"{total[f'{verb}_nodes'] / n:.0f}" if verb != "preempt" else "-"
                print(f"| {mode} | {kpe_setup} | {verb} | {n:,.0f} | {1000 * total[f'{verb}_s'] / n:.2f} | {nodes} | {hits} |")
            pods = pods_per_mode[mode] * len(rounds) * (args.own_share if kpe_setup == "own" else 1)  # the pods kpe was asked about
            requests_s = sum(total[f"{verb}_s"] for verb in ("filter", "prioritize", "preempt"))
            loops.append(f"{kpe_setup}'s event loop per scheduled pod ({mode}): {1000 * requests_s / pods:.2f} ms answering the scheduler, "
                         f"{1000 * total.get('ahead_s', 0.0) / pods:.2f} ms working out prioritize answers ahead, "
                         f"{1000 * total['events_s'] / pods:.2f} ms applying {total['events'] / pods:.1f} watch events "
                         f"({1e6 * total['events_s'] / max(total['events'], 1):.0f} µs each); "
                         f"{total.get('warmed', 0.0) / pods:.0f} nodes evaluated ahead for classes (--warm-classes)")
            expected = sum(total.get(f"ahead_{o}", 0.0) for o in ("answered", "rescored", "unasked"))
            if expected:
                loops.append(f"{kpe_setup}'s prioritize expected after a filter ({mode}): " + ", ".join(
                    f"{total.get(f'ahead_{o}', 0.0):,.0f} {o}" for o in ("answered", "rescored", "unasked")))
        print()
        print("\n".join(loops))
    print()
    print(f"total {time.monotonic() - started:.0f} s")
    return 0


def _pin_plan() -> tuple[set[int], set[int]]:
    """(the CPUs of everything but the extender, the extender's CPU): the last CPU this script may use for the extender."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise SystemExit("--pin-extender needs 2 CPUs or more")
    return set(cpus[:-1]), {cpus[-1]}


def _pin(pid: int, cpus: set[int]) -> None:
    """Every thread of ``pid`` on ``cpus`` (threads it starts later inherit it from theirs)."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(ProcessLookupError):
            os.sched_setaffinity(int(task.name), cpus)


def start_floor(workdir: Path, setup: str, *, plane: rc.ControlPlane | None = None) -> tuple[rc.Process, int]:
    """The do-nothing extender ``setup`` (one of FLOORS, by its HTTP parser, or of REFERENCES, on
    httptools) on a free port, once it answers: its process and port."""
    env = dict(os.environ)
    (workdir / "floor_app.py").write_text(FLOOR_APP)
    if is_reference(setup):
        (workdir / "reference_app.py").write_text(REFERENCE_APP)
        module, parser = "reference_app", "httptools"
        burn_ms = burned(setup)
        if burn_ms is not None:
            env["FLOOR_BURN_MS"] = str(burn_ms)
        else:
            assert plane is not None, "floor-watch watches the control plane's pods"
            env |= {"FLOOR_WATCH_URL": plane.url, "FLOOR_WATCH_TOKEN": rc.KPE_TOKEN}
    else:
        module, parser = "floor_app", FLOORS[setup]
    port = rc.free_port()
    process = rc.start(setup, [sys.executable, "-m", "uvicorn", f"{module}:app", "--host", "127.0.0.1", "--port", str(port),
                               "--http", parser, "--log-level", "warning", "--no-access-log", "--app-dir", str(workdir)], workdir, env=env)
    rc.wait_until(lambda: _ok(f"http://127.0.0.1:{port}/healthz"), 30, f"the {setup} extender")
    return process, port


def _ok(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


if __name__ == "__main__":
    sys.exit(main())
