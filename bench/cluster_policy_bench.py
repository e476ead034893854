"""How soon a SchedulingPolicy written to the cluster decides pods (``--policy-source cluster``),
on a real kube-apiserver and kube-scheduler (the version of the binaries found).

    python bench/cluster_policy_bench.py              # 20 edits
    python bench/cluster_policy_bench.py --edits 50

kpe serves on plain HTTP with ``--cluster on`` as the user bound to deploy/rbac.yaml and
deploy/cluster-policies/rbac.yaml, and reads its policies from the cluster (the CRDs from
deploy/crds/). One policy keeps pods in pool a or pool b (one node each); each edit flips
the pool with a PUT (what ``kubectl apply`` of the edited file sends) while pods keep
arriving, one every ``--pod-interval-ms`` (50), and measures from the write:

- served: kpe serves the new set (its generation on /apis/v1/policies, polled every 2 ms);
- decided: kube-scheduler's first filter call that kpe answers under it (/apis/v1/decisions);
- status: the object's status says Ready for the new generation (the leader's write).

Pods are deleted between edits. Skipped without the control-plane binaries.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from realcluster import ROOT, control_plane, metrics, scheduler_config, skip_without_binaries, start_kpe, start_scheduler, wait_until

from tests.e2e.crds import POLICIES, delete_all, install_crds, ready_of

NAMESPACE = "bench-cluster-policies"
FILE = """apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: pool}
spec:
  filters:
  - {name: pool, expression: "true"}
"""


def pool_spec(pool: str) -> dict[str, Any]:
    return {"filters": [{"name": "pool", "expression": f"node.metadata.?labels[?'pool'].orValue('') == '{pool}'", "message": f"not in pool {pool}"}]}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--edits", type=int, default=20)
    parser.add_argument("--pod-interval-ms", type=float, default=50.0)
    args = parser.parse_args()
    skip_without_binaries()
    with tempfile.TemporaryDirectory() as tmp, control_plane(Path(tmp)) as plane:
        work = Path(tmp)
        install_crds(plane)
        plane.apply_rbac(ROOT / "deploy" / "cluster-policies" / "rbac.yaml")
        delete_all(plane)
        plane.api.namespace(NAMESPACE)
        for pool in ("a", "b"):
            plane.api.node(f"pool-{pool}", labels={"pool": pool})
        (work / "policies").mkdir()
        (work / "policies" / "pool.yaml").write_text(FILE)  # for kpe scheduler-config: the verbs the objects need
        plane.api.create(POLICIES, {"apiVersion": "kpe.dev/v1alpha1", "kind": "SchedulingPolicy", "metadata": {"name": "pool"}, "spec": pool_spec("a")})
        kpe, _ = start_kpe(plane, work, policies=work / "policies",
                           extra=("--policy-source", "cluster", "--allow-empty-policies", "--controllers", "requeue,status"))
        http = httpx.Client(base_url=kpe.url, timeout=10)
        scheduler = start_scheduler(scheduler_config(plane, kpe.url + "/scheduler", policies=work / "policies"), work)
        served_ms: list[float] = []
        decided_ms: list[float] = []
        status_ms: list[float] = []
        try:
            for edit in range(args.edits):
                pool = "b" if edit % 2 == 0 else "a"
                old = http.get("/apis/v1/policies").json()["generation"]
                current = plane.api.get(f"{POLICIES}/pool")
                current["spec"] = pool_spec(pool)
                stop = threading.Event()

                def pods(edit: int = edit) -> None:
                    i = 0
                    while not stop.is_set():
                        plane.api.pod(NAMESPACE, f"p{edit}-{i}")
                        i += 1
                        stop.wait(args.pod_interval_ms / 1000)

                written = time.time()
                generation = int(plane.api.call("PUT", f"{POLICIES}/pool", current)["metadata"]["generation"])
                feeder = threading.Thread(target=pods, daemon=True)
                feeder.start()
                new = wait_until(lambda: (g := http.get("/apis/v1/policies").json()["generation"]) != old and g, 10, "the edit to serve", interval=0.002)
                served_ms.append((time.time() - written) * 1000)

                def first_decision() -> float | None:
                    # Edits flip between two sets, so a generation comes back: only decisions after this write count.
                    decisions = http.get("/apis/v1/decisions", params={"verb": "filter"}).json()["decisions"]
                    times = [d["time"] for d in decisions if d["generation"] == new and d["time"] >= written]
                    return min(times) if times else None

                decided = wait_until(first_decision, 10, "a filter under the new set", interval=0.01)
                decided_ms.append((decided - written) * 1000)

                def ready() -> bool:
                    status = plane.api.get(f"{POLICIES}/pool").get("status") or {}
                    return status.get("observedGeneration") == generation and ready_of(status).get("status") == "True"

                wait_until(ready, 10, "the status of the new generation", interval=0.005)
                status_ms.append((time.time() - written) * 1000)
                stop.set()
                feeder.join()
                for pod in plane.api.pods(NAMESPACE):
                    plane.api.delete(f"/api/v1/namespaces/{NAMESPACE}/pods/{pod['metadata']['name']}", grace=0)
            m = metrics(kpe.url)
            print(f"kube-apiserver {plane.binaries.version}, {args.edits} edits of one SchedulingPolicy, a pod every {args.pod_interval_ms:.0f} ms")
            print(f"{'from the write to':<44}{'median':>9}{'p90':>9}{'max':>9}")
            for name, values in (("kpe serving the new set", served_ms), ("the first filter kpe answers under it", decided_ms),
                                 ("its status Ready for the new generation", status_ms)):
                print(f"{name:<44}{statistics.median(values):>7.0f}ms{percentile(values, 0.9):>7.0f}ms{max(values):>7.0f}ms")
            print(f"reloads: {m('kpe_policy_reloads_total', result='success'):.0f} served, {m('kpe_policy_reloads_total', result='failure'):.0f} refused")
        finally:
            http.close()
            scheduler.stop()
            kpe.stop()
            delete_all(plane)


if __name__ == "__main__":
    main()
