"""Memory of kpe's node and pod cache per pod: objects kept as the API server sends
them ("raw", what kpe did before) beside trimmed ones (``server.cluster.cache.trim``: no
managedFields, string values interned) and what the cache keeps now with the shipped
policies ("projected": trimmed, and bound pods cut to the fields the policies and kpe
read, ``engine.cluster.projection``), in the same run.

    python bench/cache_memory_bench.py                          # 30,000 pods on 1,000 nodes
    python bench/cache_memory_bench.py --pods 150000 --per-node 30   # 5,000 nodes
    python bench/cache_memory_bench.py --no-tracemalloc         # RSS only (faster)
    python bench/cache_memory_bench.py --namespaces 2000        # and what watching namespaces adds

Pods are ``bench/cluster.py``'s ``realistic_pod``: running Deployment replicas as a
real API server returns them (managedFields of kube-controller-manager and kubelet,
status with conditions and containerStatuses, the projected service-account token
volume, env, probes, ownerReferences), 30 per node by default; nodes are
``cluster.nodes`` with managedFields added. Each measurement runs in a fresh child
process: it serializes the cluster into list pages of 500 (the API server's bytes,
kept alive throughout, so they are in the baseline), then runs the real
``ClusterCache`` against a stub client whose ``list_all`` decodes those pages with
orjson as ``KubeClient.list_all`` does, until the cache has synced and every
node's ``nodeInfo`` is built. "raw" replaces ``server.cluster.cache.trim`` with the
identity; "stripped" only drops managedFields; "trimmed" keeps every pod whole;
"projected" gives the cache the shipped policies' projection (``--policies``), as
``kpe serve`` does; "reported" adds what their Audit policies read of the pod they judge, as
``kpe serve --policy-reports`` does (``engine.reports.audit.audit_projection``). It prints, per mode: the RSS growth (VmRSS after the sync minus before
it) and the bytes tracemalloc sees allocated (in a second child), each per pod,
and the CPU time the first sync took (without tracemalloc).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import subprocess
import sys
import time
import tracemalloc
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(Path(__file__).parent)]

import cluster  # noqa: E402

Obj = dict[str, Any]
PAGE = 500
NODE_MANAGED_FIELDS = [
    {"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "time": "2026-11-01T08:00:00Z", "fieldsType": "FieldsV1",
     "fieldsV1": {"f:metadata": {"f:annotations": {".": {}, "f:node.alpha.kubernetes.io/ttl": {}, "f:volumes.kubernetes.io/controller-managed-attach-detach": {}},
                                 "f:labels": {".": {}, "f:beta.kubernetes.io/arch": {}, "f:beta.kubernetes.io/os": {}, "f:kubernetes.io/arch": {},
                                              "f:kubernetes.io/hostname": {}, "f:kubernetes.io/os": {}}},
                  "f:spec": {"f:podCIDR": {}, "f:podCIDRs": {".": {}, 'v:"10.244.1.0/24"': {}}, "f:providerID": {}}}},
    {"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "time": "2026-11-20T08:00:00Z", "fieldsType": "FieldsV1", "subresource": "status",
     "fieldsV1": {"f:status": {"f:allocatable": {"f:cpu": {}, "f:ephemeral-storage": {}, "f:memory": {}, "f:pods": {}},
                               "f:capacity": {"f:cpu": {}, "f:ephemeral-storage": {}, "f:memory": {}, "f:pods": {}},
                               "f:conditions": {**{f'k:{{"type":"{t}"}}': {"f:lastHeartbeatTime": {}, "f:lastTransitionTime": {}, "f:message": {}, "f:reason": {}, "f:status": {}}
                                                   for t in ("DiskPressure", "MemoryPressure", "PIDPressure", "Ready")}},
                               "f:images": {}, "f:nodeInfo": {"f:bootID": {}, "f:kernelVersion": {}}}}},
]


def pages(kind: str, objects: Iterator[Obj], resource_version: str = "1000000") -> list[bytes]:
    """The list pages the API server would send, as bytes."""
    out: list[bytes] = []
    batch: list[Obj] = []

    def flush(last: bool) -> None:
        meta: Obj = {"resourceVersion": resource_version}
        if not last:
            meta["continue"] = f"page-{len(out) + 1}"
        out.append(orjson.dumps({"kind": f"{kind}List", "apiVersion": "v1", "metadata": meta, "items": batch}))

    for obj in objects:
        batch.append(obj)
        if len(batch) == PAGE:
            flush(False)
            batch = []
    flush(True)
    return out


class PagesClient:
    """What ``ClusterCache`` needs of ``KubeClient``: ``list_all`` over prepared pages, and a
    watch that stays open, saying nothing, until the cache stops."""

    def __init__(self, bodies: dict[str, list[bytes]]) -> None:
        self.bodies = bodies

    async def list_all(self, path: str, *, page_size: int = 500, transform: Callable[[Obj], Obj] | None = None) -> tuple[list[Obj], str]:
        items: list[Obj] = []
        rv = ""
        for body in self.bodies[path]:
            page = orjson.loads(body)
            found = page.get("items") or []
            items.extend(map(transform, found) if transform is not None else found)
            rv = page["metadata"]["resourceVersion"]
            await asyncio.sleep(0)
        return items, rv

    async def watch(self, path: str, *, resource_version: str, timeout_seconds: int = 300, bookmarks: bool = True,
                    on_open: Callable[[], None] | None = None) -> AsyncIterator[Obj]:
        if on_open is not None:
            on_open()
        await asyncio.sleep(3600)
        return
        yield {}


def rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def child(mode: str, count: int, per_node: int, traced: bool, policies: str) -> Obj:
    import server.cluster.cache
    from engine.policy.loader import load
    from engine.cluster.projection import EVERYTHING
    from server.cluster.cache import ClusterCache

    projection = EVERYTHING
    if mode in ("projected", "reported"):
        policy_set = load([policies])
        projection = policy_set.pod_projection
        if mode == "reported":
            from engine.reports.audit import audit_projection

            projection = projection.union(audit_projection(policy_set))

    nodes = cluster.nodes(max(1, -(-count // per_node)))
    for node in nodes:
        node["metadata"]["managedFields"] = NODE_MANAGED_FIELDS
    names = [n["metadata"]["name"] for n in nodes]
    json_bytes = 0

    def pods() -> Iterator[Obj]:
        nonlocal json_bytes
        for i in range(count):
            pod = cluster.realistic_pod(i, names[i // per_node])
            json_bytes += len(orjson.dumps(pod))
            yield pod

    bodies = {"/api/v1/nodes": pages("Node", iter(nodes)), "/api/v1/pods": pages("Pod", pods())}
    del nodes
    if mode == "raw":
        server.cluster.cache.trim = lambda obj, projection=EVERYTHING: obj  # type: ignore[assignment]  # objects kept as decoded
    elif mode == "stripped":
        server.cluster.cache.trim = _strip_only  # type: ignore[assignment]
    gc.collect()
    if traced:
        tracemalloc.start()
    before_rss = rss_bytes()
    before_traced = tracemalloc.get_traced_memory()[0] if traced else 0
    started = time.process_time()

    async def sync() -> ClusterCache:
        cache = ClusterCache(PagesClient(bodies), page_size=PAGE, projection=projection)  # type: ignore[arg-type]
        stop = asyncio.Event()
        task = asyncio.create_task(cache.run(stop))
        await cache.synced.wait()
        _ = {name: cache.node_info[name] for name in names}  # every nodeInfo view built, as the first requests do
        stop.set()
        await task
        return cache

    cache = asyncio.run(sync())
    sync_s = time.process_time() - started  # CPU: the machine may be busy
    gc.collect()
    after_traced = tracemalloc.get_traced_memory()[0] if traced else 0
    after_rss = rss_bytes()
    assert len(cache.pods()) == count and len(cache.nodes()) == len(names)
    return {"mode": mode, "pods": count, "nodes": len(names), "json_per_pod": json_bytes / count, "rss": after_rss - before_rss,
            "traced": after_traced - before_traced, "sync_s": sync_s}


def realistic_namespace(i: int) -> Obj:
    """A namespace as the API server returns one made with kubectl apply: labels, a few
    annotations among them the last-applied configuration, managedFields."""
    name = f"team-{i:05d}"
    labels = {"kubernetes.io/metadata.name": name, "team": f"team-{i % 40}", "cost-center": f"cc-{i % 12:03d}", "environment": "production"}
    annotations = {"kpe.dev/allow-gpu-nodes": "true" if i % 10 == 0 else "false", "owner": f"platform-{i % 7}@example.com",
                   "kubectl.kubernetes.io/last-applied-configuration": orjson.dumps({"apiVersion": "v1", "kind": "Namespace",
                                                                                    "metadata": {"name": name, "labels": labels}}).decode()}
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "uid": f"5f3c2d1e-0000-4000-8000-{i:012d}", "resourceVersion": str(1000 + i), "creationTimestamp": "2026-11-01T08:00:00Z",
                         "labels": labels, "annotations": annotations,
                         "managedFields": [{"manager": "kubectl-client-side-apply", "operation": "Update", "apiVersion": "v1", "time": "2026-11-01T08:00:00Z",
                                            "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:annotations": {".": {}, "f:owner": {}}, "f:labels": {".": {}, "f:team": {}}}}}]},
            "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}


def namespaces_child(count: int) -> Obj:
    """The bytes kpe's namespace watch (``server.cluster.namespaces``) holds once it has listed
    ``count`` namespaces, beside their JSON, measured with tracemalloc."""
    from server.cluster.informer import Informer
    from server.cluster.namespaces import PATH, Namespaces

    json_bytes = 0

    def made() -> Iterator[Obj]:
        nonlocal json_bytes
        for i in range(count):
            namespace = realistic_namespace(i)
            json_bytes += len(orjson.dumps(namespace))
            yield namespace

    client = PagesClient({PATH: pages("Namespace", made())})
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]

    async def listed() -> Namespaces:
        namespaces = Namespaces(lambda sink: Informer("namespace", PATH, client=client, sink=sink, page_size=PAGE))  # type: ignore[arg-type]
        stop = asyncio.Event()
        namespaces.start(stop)
        await namespaces.listed.wait()
        stop.set()
        await namespaces.stop()
        return namespaces

    namespaces = asyncio.run(listed())
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - before
    assert len(namespaces.by_name) == count
    return {"namespaces": count, "json_per_namespace": json_bytes / count, "traced": held}


def _strip_only(obj: Obj, projection: Any = None) -> Obj:
    """managedFields dropped, strings not interned: what each half of ``trim`` is worth."""
    if type(obj) is dict and type(obj.get("metadata")) is dict:
        obj["metadata"].pop("managedFields", None)
    return obj


def run_child(mode: str, count: int, per_node: int, traced: bool, policies: str) -> Obj:
    args = [sys.executable, __file__, "--child", mode, "--pods", str(count), "--per-node", str(per_node), "--policies", policies]
    if traced:
        args.append("--traced")
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    result: Obj = json.loads(out.strip().splitlines()[-1])
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=30_000)
    parser.add_argument("--per-node", type=int, default=30)
    parser.add_argument("--modes", default="raw,trimmed,projected", help="comma-separated: raw, stripped (managedFields only), trimmed, projected, reported")
    parser.add_argument("--policies", default=str(ROOT / "policies"), help="the policy set whose projection 'projected' uses (default: the shipped one)")
    parser.add_argument("--no-tracemalloc", action="store_true", help="skip the tracemalloc children")
    parser.add_argument("--namespaces", type=int, default=0, help="also measure the namespace watch holding this many namespaces")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--traced", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child == "namespaces":
        print(json.dumps(namespaces_child(args.namespaces)))
        return 0
    if args.child:
        print(json.dumps(child(args.child, args.pods, args.per_node, args.traced, args.policies)))
        return 0
    modes = [m for m in args.modes.split(",") if m]
    rows = []
    for mode in modes:
        row = run_child(mode, args.pods, args.per_node, False, args.policies)
        if not args.no_tracemalloc:
            row["traced"] = run_child(mode, args.pods, args.per_node, True, args.policies)["traced"]
        else:
            row["traced"] = None
        rows.append(row)
    first = rows[0]
    print(f"{first['pods']:,} realistic pods on {first['nodes']:,} nodes, {first['json_per_pod'] / 1024:.2f} KiB of JSON per pod")
    print(f"{'mode':>9} | {'RSS MiB':>8} | {'RSS/pod KiB':>11} | {'x JSON':>6} | {'traced/pod KiB':>14} | {'sync CPU s':>10}")
    for row in rows:
        per_pod = row["rss"] / row["pods"]
        traced = f"{row['traced'] / row['pods'] / 1024:14.1f}" if row["traced"] is not None else f"{'-':>14}"
        print(f"{row['mode']:>9} | {row['rss'] / 2**20:8.0f} | {per_pod / 1024:11.1f} | {per_pod / row['json_per_pod']:6.1f} | {traced} | {row['sync_s']:10.2f}")
    for row in rows[1:]:
        print(f"{row['mode']}/{rows[0]['mode']} RSS: {row['rss'] / rows[0]['rss']:.2f}x")
    by_mode = {row["mode"]: row for row in rows}
    if "trimmed" in by_mode and "projected" in by_mode and rows[0]["mode"] != "trimmed":
        print(f"projected/trimmed RSS: {by_mode['projected']['rss'] / by_mode['trimmed']['rss']:.2f}x")
    if args.namespaces:
        out = subprocess.run([sys.executable, __file__, "--child", "namespaces", "--namespaces", str(args.namespaces)], check=True, capture_output=True, text=True).stdout
        ns = json.loads(out.strip().splitlines()[-1])
        print(f"namespaces: {ns['namespaces']:,} kept in {ns['traced'] / 2**20:.2f} MiB traced, {ns['traced'] / ns['namespaces']:.0f} bytes each "
              f"({ns['json_per_namespace']:.0f} bytes of JSON each)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
