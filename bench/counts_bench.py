"""A filter with a count across nodes beside the same filter without it, at cluster scale.

    python bench/counts_bench.py                          # 5,000 nodes, 150,000 pods
    python bench/counts_bench.py --nodes 1000 --pods 30000
    python bench/counts_bench.py --quick                  # fewer repeats

Generates nodes over three zones and pods of many apps bound to them, keeps the counts
as kpe's cache does (one ``set_node``/``set_pod`` per watch event, timed), then times one
pod's filter over every node: the plain rule, and the same rule with "at most two pods of
the app in the node's zone" (``counts.inDomain``). Both are run by the decision itself
(every node evaluated) and through the equivalence cache (the second request of a
replica: the plain rule is remembered, the count runs on every request). Before timing it
checks the count against one made by scanning the pods, and exits 1 if they differ.
"""

from __future__ import annotations

import argparse
import gc
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from engine.cel.types.counts import Counts  # noqa: E402
from engine.cluster.counts import CountIndex  # noqa: E402
from engine.cluster.nodeinfo import node_info_map  # noqa: E402
from engine.decisions.filtering import filter_nodes  # noqa: E402
from engine.equivalence.classes import EquivalenceCache  # noqa: E402
from engine.equivalence.filtering import filter_nodes as memo_filter  # noqa: E402
from engine.policy.loader import load_text  # noqa: E402

ZONE = "topology.kubernetes.io/zone"
PLAIN = "node.metadata.labels[?'topology.kubernetes.io/zone'].hasValue() && nodeInfo.podCount < 110"
COUNTED = PLAIN + " && counts.inDomain(node, 'topology.kubernetes.io/zone', {'app': pod.metadata.labels.app}) < 2"
POLICY = """
apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: bench}
spec:
  filters:
  - name: rule
    expression: "%s"
"""


def cluster(nodes: int, pods: int, apps: int, seed: int = 1) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    rng = random.Random(seed)
    node_list = [{"metadata": {"name": f"node-{i:05d}", "labels": {ZONE: f"zone-{'abc'[i % 3]}", "kubernetes.io/hostname": f"node-{i:05d}"}}}
                 for i in range(nodes)]
    pod_list = [{"metadata": {"name": f"pod-{i}", "namespace": "bench", "uid": f"uid-{i}", "labels": {"app": f"app-{rng.randrange(apps)}"}},
                 "spec": {"nodeName": f"node-{rng.randrange(nodes):05d}", "containers": [{"name": "c", "image": "i"}]},
                 "status": {"phase": "Running"}}
                for i in range(pods)]
    return node_list, pod_list


def best(repeats: int, run: Callable[[], Any]) -> float:
    times = []
    for _ in range(repeats):
        gc.collect()
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=5_000)
    parser.add_argument("--pods", type=int, default=150_000)
    parser.add_argument("--apps", type=int, default=20_000)
    parser.add_argument("--quick", action="store_true", help="3 repeats instead of 10")
    args = parser.parse_args()
    repeats = 3 if args.quick else 10
    nodes, pods = cluster(args.nodes, args.pods, args.apps)
    plain, counted = load_text(POLICY % PLAIN), load_text(POLICY % COUNTED)
    info = node_info_map(nodes, pods)

    index = CountIndex(counted.counts)
    start = time.perf_counter()
    for node in nodes:
        index.set_node(node["metadata"]["name"], node)
    for pod in pods:
        index.set_pod(pod["metadata"]["uid"], pod)
    per_event = (time.perf_counter() - start) / (len(nodes) + len(pods))
    counts = Counts(index)

    app = pods[0]["metadata"]["labels"]["app"]
    new = {"metadata": {"name": "new", "namespace": "bench", "uid": "new", "labels": {"app": app}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}
    zones = {n["metadata"]["name"]: n["metadata"]["labels"][ZONE] for n in nodes}
    scanned: dict[str, int] = {}
    for pod in pods:
        if pod["metadata"]["labels"]["app"] == app:
            scanned[zones[pod["spec"]["nodeName"]]] = scanned.get(zones[pod["spec"]["nodeName"]], 0) + 1
    result = filter_nodes(counted, new, nodes, node_info=info, counts=counts)
    expected = sorted(n["metadata"]["name"] for n in nodes if scanned.get(zones[n["metadata"]["name"]], 0) < 2)
    if sorted(result.passed) != expected:
        print("the count disagrees with a scan of the pods", file=sys.stderr)
        return 1

    rows = []
    for label, policy_set in (("without count", plain), ("with count", counted)):
        full = best(repeats, lambda: filter_nodes(policy_set, new, nodes, node_info=info, counts=counts))
        memo = EquivalenceCache()
        memo_filter(policy_set, new, nodes, node_info=info, counts=counts, memo=memo)  # the first replica fills the class
        again = best(repeats, lambda: memo_filter(policy_set, new, nodes, node_info=info, counts=counts, memo=memo))
        rows.append((label, full, again))
    print(f"{len(nodes):,} nodes, {len(pods):,} pods of {args.apps:,} apps; counts kept in {per_event * 1e6:.2f} us per watch event")
    print(f"{'filter':>14} | {'every node (ms)':>15} | {'per node (us)':>13} | {'next replica, equivalence cache (ms)':>36}")
    for label, full, again in rows:
        print(f"{label:>14} | {full * 1e3:15.2f} | {full / len(nodes) * 1e6:13.2f} | {again * 1e3:36.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
