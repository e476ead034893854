"""Memory of kpe beside kube-scheduler's, both caching the same real cluster.

    python bench/memory_bench.py                          # 1,000 nodes, 20,000 bound pods
    python bench/memory_bench.py --nodes 5000 --pods 150000

etcd and kube-apiserver (the version of the binaries found) run on loopback (``tests/e2e/controlplane.py``;
skipped without the binaries). Nodes are created as API objects, then pods that
are already bound (``spec.nodeName`` set, so nothing is scheduled), shaped as a
real API server returns a running Deployment's pod: labels, annotations, an
ownerReference, a container with env, a port, a probe, volume mounts, the
projected service-account volume, and a status (conditions, IPs, container
statuses, written through the status subresource); the API server adds
``managedFields`` itself (two entries: the create and the status update).
About 4 KiB of JSON per pod, printed.

Before the pods exist, a kpe and a kube-scheduler are started on the nodes alone
(the baseline). With the pods, kpe runs alone first (``kpe serve`` on the shipped
policies, plain HTTP, ``--cluster on``: its initial sync time is from its start
to /readyz), then kube-scheduler alone (no extender, leader election off; until
its /readyz). After each has synced and settled 5 s, VmRSS and VmHWM come from
/proc/PID/status. ``--also-source DIR`` measures another kpe source tree the same
way on the same cluster (before and after a change). Every kpe runs on a Python with kpe's
runtime dependencies only, as its image has them (``--test-venv``: on this one instead, whose
test extras kpe's dependencies import when present: ``realcluster.runtime_python``).

``--schedule N`` measures the other way too: kpe and a kube-scheduler that calls it (node
names) run beside each other on the same objects, and N more pods (heterogeneous.py's:
34 namespaces, about 110 apps, requests drawn per pod) are created pending and scheduled
through kpe; then both are measured again (each ``--also-source`` tree too, in turn, with a
kube-scheduler of its own; the pods one scheduled are deleted before the next). What kpe keeps from scheduling counts there (the
equivalence classes, the decision log, pods in flight, the namespaces and counts the shipped
policies turn on), and kube-scheduler holds the pods it placed. With it the nodes are
heterogeneous.py's too, so those pods fit. ``--lean-pods``: the bound pods as a script makes
them (a container with requests, labels, no status): kube-scheduler's cost a pod then falls
more than kpe's, which is what moves the ratio between clusters.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))

import heterogeneous  # noqa: E402
import realcluster as rc  # noqa: E402

NAMESPACES = ["shop", "search", "batch", "ml-train", "payments"]


def pod_body(i: int, node: str) -> dict[str, Any]:
    ns = NAMESPACES[i % len(NAMESPACES)]
    app = f"svc-{i % 97:02d}"
    rs_hash = f"{(i % 97) * 7919 % 0xFFFFFFF:07x}"[:9]
    name = f"{app}-{rs_hash}-{i:06x}"
    team = rc.TEAMS[i % len(rc.TEAMS)]
    env = [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}},
        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}},
        {"name": "LOG_LEVEL", "value": "info"},
        {"name": "OTEL_EXPORTER_OTLP_ENDPOINT", "value": "http://otel-collector.monitoring.svc:4317"},
    ]
    probe = {"httpGet": {"path": "/healthz", "port": 8080, "scheme": "HTTP"}, "initialDelaySeconds": 5, "timeoutSeconds": 1,
             "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3}
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": name, "namespace": ns, "generateName": f"{app}-{rs_hash}-",
            "labels": {"app.kubernetes.io/name": app, "app.kubernetes.io/part-of": ns, "app.kubernetes.io/version": "2.14.0",
                       "pod-template-hash": rs_hash, "team": team, "tier": "backend"},
            "annotations": {"kubectl.kubernetes.io/restartedAt": "2026-11-20T09:14:03Z", "prometheus.io/scrape": "true"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"{app}-{rs_hash}",
                                 "uid": f"6f1c2d3e-4b5a-4c6d-8e7f-{i % 97:012d}", "controller": True, "blockOwnerDeletion": True}],
        },
        "spec": {
            "nodeName": node,
            "containers": [
                {"name": "app", "image": f"registry.example.com/{ns}/{app}:2.14.0", "imagePullPolicy": "IfNotPresent",
                 "args": ["--config=/etc/app/config.yaml", "--port=8080"],
                 "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
                 "env": env,
                 "resources": {"requests": {"cpu": "250m", "memory": "512Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}},
                 "volumeMounts": [{"name": "config", "mountPath": "/etc/app", "readOnly": True},
                                  {"name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": True}],
                 "readinessProbe": probe,
                 "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File"},
            ],
            "volumes": [
                {"name": "config", "configMap": {"name": f"{app}-config", "defaultMode": 420}},
                {"name": "kube-api-access", "projected": {"defaultMode": 420, "sources": [
                    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                    {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
                ]}},
            ],
            "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
            "serviceAccountName": app, "serviceAccount": app, "securityContext": {"fsGroup": 2000},
            "schedulerName": "default-scheduler", "enableServiceLinks": False, "priority": 0, "preemptionPolicy": "PreemptLowerPriority",
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
            ],
        },
    }


def pod_status(i: int) -> dict[str, Any]:
    t = "2026-11-20T09:14:09Z"
    ip = f"10.{64 + i // 65536 % 64}.{i // 256 % 256}.{i % 256}"
    host = f"10.0.{i // 256 % 256}.{i % 200}"

    def running(name: str, image: str, digest: str) -> dict[str, Any]:
        return {"name": name, "ready": True, "restartCount": 0, "started": True, "image": image,
                "imageID": f"{image.rsplit(':', 1)[0]}@sha256:{digest}",
                "containerID": f"containerd://{(digest * 2)[i % 7:i % 7 + 64]}",
                "state": {"running": {"startedAt": t}}, "lastState": {}}

    return {"status": {
        "phase": "Running", "qosClass": "Burstable", "hostIP": host, "hostIPs": [{"ip": host}], "podIP": ip, "podIPs": [{"ip": ip}],
        "startTime": "2026-11-20T09:14:04Z",
        "conditions": [{"type": c, "status": "True", "lastProbeTime": None, "lastTransitionTime": t}
                       for c in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled")],
        "containerStatuses": [
            running("app", "registry.example.com/app:2.14.0", "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"),
        ],
    }}


def settle(pid: int, seconds: float) -> dict[str, int]:
    """RSS after ``seconds`` of quiet (the last of one sample a second)."""
    sample = rc.rss(pid)
    for _ in range(int(seconds)):
        time.sleep(1)
        sample = rc.rss(pid)
    return sample


def mib(n: float) -> str:
    return f"{n / 2**20:,.0f} MiB"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--pods", type=int, default=20000)
    ap.add_argument("--concurrency", type=int, default=16, help="concurrent creates (default 16)")
    ap.add_argument("--settle", type=float, default=5, help="seconds to let each settle after syncing before reading RSS")
    ap.add_argument("--also-source", action="append", default=[], metavar="DIR",
                    help="also measure the kpe of this source tree (python -m server.cli.main with PYTHONPATH=DIR), e.g. an older "
                         "commit from `git archive COMMIT | tar -x -C DIR`; repeatable")
    ap.add_argument("--schedule", type=int, default=0, metavar="N",
                    help="then kpe and a kube-scheduler calling it side by side, N more (heterogeneous) pods scheduled through kpe, and both measured again")
    ap.add_argument("--test-venv", action="store_true",
                    help="run kpe on this Python, test extras and all, instead of one with kpe's runtime dependencies only (realcluster.runtime_python)")
    ap.add_argument("--lean-pods", action="store_true", help="bound pods with only labels and a container's requests (no status, env, volumes)")
    args = ap.parse_args()
    rc.skip_without_binaries()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kpe-memory-bench-") as tmp, rc.control_plane(Path(tmp)) as plane:
        workdir = Path(tmp)
        for ns in NAMESPACES + (heterogeneous.namespaces() if args.schedule else []):
            plane.api.namespace(ns)
        names, t_nodes = rc.create_nodes(plane, args.nodes, args.concurrency, shape="heterogeneous" if args.schedule else "default")
        print(f"control plane up; {args.nodes:,} nodes created in {t_nodes:.1f} s", flush=True)

        # Baseline: the nodes alone.
        kpe, kpe_sync0 = rc.start_kpe(plane, workdir, name="kpe-baseline", runtime=not args.test_venv)
        scheduler = rc.start_scheduler(rc.scheduler_config(plane, None), workdir, name="kube-scheduler-baseline")
        base = {"kpe": settle(kpe.process.popen.pid, args.settle), "kube-scheduler": settle(scheduler.popen.pid, 1)}
        kpe.stop()
        scheduler.stop()
        print(f"baseline (nodes only): kpe {mib(base['kpe']['VmRSS'])}, kube-scheduler {mib(base['kube-scheduler']['VmRSS'])}", flush=True)

        per_node = (args.pods + args.nodes - 1) // args.nodes
        make = lean_body if args.lean_pods else pod_body
        t_create = rc.run_many(plane, [("POST", f"/api/v1/namespaces/{NAMESPACES[i % len(NAMESPACES)]}/pods", make(i, names[i // per_node]))
                                       for i in range(args.pods)], args.concurrency)
        print(f"{args.pods:,} bound pods created in {t_create:.1f} s ({args.pods / t_create:.0f}/s)", flush=True)
        if not args.lean_pods:
            t_status = rc.run_many(plane, [("PATCH", f"/api/v1/namespaces/{NAMESPACES[i % len(NAMESPACES)]}/pods/{pod_body(i, '')['metadata']['name']}/status",
                                            pod_status(i)) for i in range(args.pods)], args.concurrency)
            print(f"their status written in {t_status:.1f} s", flush=True)
        sample = plane.api.get(f"/api/v1/namespaces/{NAMESPACES[0]}/pods", params={"limit": 200})["items"]
        json_bytes = sum(len(orjson.dumps({"apiVersion": "v1", "kind": "Pod", **p})) for p in sample) / len(sample)
        mf_bytes = sum(len(orjson.dumps(p["metadata"].get("managedFields", []))) for p in sample) / len(sample)

        # kpe (and any --also-source) alone, then kube-scheduler alone: each one's sync is its own.
        trees: list[tuple[str, Path | None]] = [("kpe", None)] + [(f"kpe ({Path(d).name})", Path(d)) for d in args.also_source]
        kpes: list[tuple[str, float, dict[str, int]]] = []
        for label, source in trees:
            kpe, sync = rc.start_kpe(plane, workdir, name=label.replace(" ", "_").strip("()"), source=source, runtime=not args.test_venv)
            print(f"{label} synced in {sync:.1f} s", flush=True)
            kpes.append((label, sync, settle(kpe.process.popen.pid, args.settle)))
            m = rc.metrics(kpe.url)
            cached_pods, cached_nodes = m("kpe_cache_objects", kind="pod"), m("kpe_cache_objects", kind="node")
            kpe.stop()
        t0 = time.monotonic()
        scheduler = rc.start_scheduler(rc.scheduler_config(plane, None), workdir, name="kube-scheduler")
        sched_sync = time.monotonic() - t0
        sched_rss = settle(scheduler.popen.pid, args.settle)
        scheduler.stop()
        # Each tree beside its own kube-scheduler, in turn, on the same cluster: the pods one
        # scheduled are deleted before the next starts.
        besides = [(label, scheduled(plane, workdir, args, source=source, round_=r)) for r, (label, source) in enumerate(trees)] if args.schedule else []

    print()
    print(f"real kube-apiserver ({plane.binaries.version}), {args.nodes:,} nodes, {args.pods:,} bound pods "
          f"({json_bytes / 1024:.1f} KiB of JSON each as the API server returns them, {mf_bytes / 1024:.1f} KiB of it managedFields); "
          f"kpe cached {cached_nodes:,.0f} nodes and {cached_pods:,.0f} pods")
    print()
    print("| process | sync (start to /readyz) | VmRSS | VmHWM | VmRSS, nodes only | per pod |")
    print("| --- | --- | --- | --- | --- | --- |")
    for who, sync, now_, b in [("kube-scheduler", sched_sync, sched_rss, base["kube-scheduler"])] + [(k[0], k[1], k[2], base["kpe"]) for k in kpes]:
        per_pod = (now_["VmRSS"] - b["VmRSS"]) / args.pods
        print(f"| {who} | {sync:.1f} s | {mib(now_['VmRSS'])} | {mib(now_['VmHWM'])} | {mib(b['VmRSS'])} | "
              f"{per_pod / 1024:.1f} KiB ({per_pod / json_bytes:.1f}x the JSON) |")
    for label, kpe_sync, kpe_rss in kpes:
        print(f"| {label} / kube-scheduler | {kpe_sync / sched_sync:.1f}x | {kpe_rss['VmRSS'] / sched_rss['VmRSS']:.2f}x | "
              f"{kpe_rss['VmHWM'] / sched_rss['VmHWM']:.2f}x | {base['kpe']['VmRSS'] / base['kube-scheduler']['VmRSS']:.2f}x | |")
    if besides:
        print()
        print(f"Beside each other: kpe and a kube-scheduler calling it (node names), then {args.schedule:,} heterogeneous pods created "
              f"pending and scheduled through kpe (those that fit no node stay pending); each tree in turn, with a kube-scheduler of its own")
        print()
        print("| kpe | pods bound | seconds | kube-scheduler VmRSS | kpe VmRSS | kpe VmHWM | kpe / kube-scheduler (VmRSS) |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
        for label, (kpe_after, sched_after, bound, seconds) in besides:
            print(f"| {label} | {bound:,} | {seconds:.0f} | {mib(sched_after['VmRSS'])} | {mib(kpe_after['VmRSS'])} | {mib(kpe_after['VmHWM'])} | "
                  f"{kpe_after['VmRSS'] / sched_after['VmRSS']:.2f}x |")
    print()
    print(f"kpe on the nodes alone synced in {kpe_sync0:.1f} s; total {time.monotonic() - started:.0f} s")
    return 0


def lean_body(i: int, node: str) -> dict[str, Any]:
    """A bound pod as a test script makes one: its labels and one container's requests."""
    full = pod_body(i, node)
    container = {"name": "app", "image": full["spec"]["containers"][0]["image"], "resources": {"requests": {"cpu": "250m", "memory": "512Mi"}}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {k: full["metadata"][k] for k in ("name", "namespace", "labels")},
            "spec": {"nodeName": node, "containers": [container]}}


def scheduled(plane: Any, workdir: Path, args: argparse.Namespace, *, source: Path | None = None,
              round_: int = 0) -> tuple[dict[str, int], dict[str, int], int, float]:
    """kpe (of ``source``, or this tree) and a kube-scheduler calling it, ``args.schedule`` pending pods
    scheduled through kpe; the RSS of each after, the pods bound and the seconds it took. The pods are
    deleted once both are measured, so the next tree starts from the same cluster."""
    kpe, _ = rc.start_kpe(plane, workdir, name=f"kpe-beside-{round_}", source=source, runtime=not args.test_venv)
    scheduler = rc.start_scheduler(rc.scheduler_config(plane, kpe.url + "/scheduler"), workdir, name=f"kube-scheduler-beside-{round_}")
    pods = [heterogeneous.pod(i, round_) for i in range(args.schedule)]
    try:
        t0 = time.monotonic()
        rc.run_many(plane, [("POST", f"/api/v1/namespaces/{p['metadata']['namespace']}/pods", p) for p in pods], args.concurrency)
        wanted = {(p["metadata"]["namespace"], p["metadata"]["name"]) for p in pods}

        def bound() -> int:
            items = plane.api.get("/api/v1/pods", params={"fieldSelector": "spec.nodeName!=", "labelSelector": "app"})["items"]
            return sum((p["metadata"]["namespace"], p["metadata"]["name"]) in wanted for p in items)

        count, still = bound(), 0
        while still < 10 and count < len(wanted):  # until every pod is bound or none was for 10 s
            time.sleep(1)
            now = bound()
            still = still + 1 if now == count else 0
            count = now
        seconds = time.monotonic() - t0
        if count < len(wanted):  # say why the others wait, as kube-scheduler put it
            pending = plane.api.get("/api/v1/pods", params={"fieldSelector": "spec.nodeName=", "labelSelector": "app", "limit": 1})["items"]
            why = [c.get("message", "") for p in pending for c in (p.get("status") or {}).get("conditions") or [] if c.get("type") == "PodScheduled"]
            print(f"a pod left pending: {why[0][:300] if why else 'no PodScheduled condition yet'}", flush=True)
        return settle(kpe.process.popen.pid, args.settle), settle(scheduler.popen.pid, 1), count, seconds
    finally:
        scheduler.stop()
        kpe.stop()
        rc.run_many(plane, [("DELETE", f"/api/v1/namespaces/{p['metadata']['namespace']}/pods/{p['metadata']['name']}?gracePeriodSeconds=0", None)
                            for p in pods], args.concurrency)


if __name__ == "__main__":
    sys.exit(main())
