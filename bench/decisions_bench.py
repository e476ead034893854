"""Filter + score of one pod over generated nodes with the shipped policies,
side by side with the same rules hand-written in Python.

    python bench/decisions_bench.py            # 1,000 and 5,000 nodes
    python bench/decisions_bench.py --quick    # fewer repeats

Before timing, the script checks that the hand-written rules give exactly
kpe's verdicts and scores on every node, so the comparison is like for like.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(Path(__file__).parent)]

import cluster  # noqa: E402

from engine.cel.ext.timestamps import parse_duration, parse_timestamp  # noqa: E402
from engine.decisions.evaluation import current_time  # noqa: E402
from engine.decisions.filtering import filter_nodes  # noqa: E402
from engine.policy.loader import load  # noqa: E402
from engine.cluster.nodeinfo import node_info_map  # noqa: E402
from engine.decisions.scoring import normalise, policy_raw, score_nodes  # noqa: E402

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": 1e-9, "u": 1e-6, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
GPU = "nvidia.com/gpu"


def qty(text: str) -> float:
    """A minimal quantity parser (no exponents), good for the generated cluster."""
    if text[-2:] in _BINARY:
        return float(text[:-2]) * _BINARY[text[-2:]]
    if text[-1] in _DECIMAL:
        return float(text[:-1]) * _DECIMAL[text[-1]]
    return float(text)


class HandWritten:
    """The shipped policies that match the benchmark pod, written out in Python."""

    def __init__(self, pod: dict[str, Any], now: Any) -> None:
        self.pod = pod
        self.now = now
        labels = pod["metadata"].get("labels", {})
        containers = pod["spec"]["containers"]
        self.team = labels.get("team", "")
        self.zone = labels["kpe.dev/zone"]
        self.gpus = sum(int(qty(c["resources"].get("limits", {}).get(GPU, c["resources"].get("requests", {}).get(GPU, "0")))) for c in containers)
        self.cpu = sum(qty(c["resources"].get("requests", {}).get("cpu", "0")) for c in containers)
        self.memory = sum(qty(c["resources"].get("requests", {}).get("memory", "0")) for c in containers)
        tolerations = pod["spec"].get("tolerations", [])
        self.tolerates_gpu = any(t.get("key", "") == GPU or ("key" not in t and t.get("operator", "") == "Exists") for t in tolerations)
        self.lead, self.length = parse_duration("2h"), parse_duration("4h")
        annotations = pod["metadata"].get("annotations", {})
        self.multi_arch = annotations.get("kpe.dev/multi-arch", "") == "true" or pod["spec"].get("nodeSelector", {}).get("kubernetes.io/arch", "") == "arm64"

    def verdict(self, node: dict[str, Any], info: dict[str, Any]) -> str:
        meta, labels = node["metadata"], node["metadata"].get("labels", {})
        allocatable = int(qty(node["status"].get("allocatable", {}).get(GPU, "0")))
        if allocatable <= 0:
            return "unresolvable"
        if any(t["key"] == GPU for t in node["spec"].get("taints", [])) and not self.tolerates_gpu:
            return "unresolvable"
        state = labels.get("kpe.dev/maintenance", "")
        if state not in ("", "done"):
            return "unresolvable"
        window = meta.get("annotations", {}).get("kpe.dev/maintenance-window-start", "")
        if window:
            start = parse_timestamp(window)
            if not (self.now < start - self.lead or self.now >= start + self.length):
                return "unresolvable"
        node_team = labels.get("node.kpe.dev/team", "")
        if node_team and node_team != self.team:
            return "unresolvable"
        free = allocatable - int(qty(info["requested"].get(GPU, "0")))
        # The Audit rule runs too (and changes nothing), as it does in kpe.
        _ = labels.get("kubernetes.io/arch", "amd64") != "arm64" or self.multi_arch
        return "fail" if free < self.gpus else "pass"

    def score(self, node: dict[str, Any], info: dict[str, Any]) -> tuple[float | None, ...]:
        """The raw score of each scoring policy (bin-packing, team-node-pools, zone-affinity); normalised per request."""
        labels = node["metadata"].get("labels", {})
        allocatable = node["status"]["allocatable"]
        cpu_full = (qty(info["requested"].get("cpu", "0")) + self.cpu) / qty(allocatable["cpu"])
        memory_full = (qty(info["requested"].get("memory", "0")) + self.memory) / qty(allocatable["memory"])
        node_team = labels.get("node.kpe.dev/team", "")
        own_pool = 100 if self.team != "" and node_team == self.team else 0
        zone, region = labels.get("topology.kubernetes.io/zone", ""), labels.get("topology.kubernetes.io/region", "")
        near = 100 if zone == self.zone else (40 if region != "" and self.zone.startswith(region) else 0)
        clamp: Callable[[float], float] = lambda v: min(max(v, 0.0), 100.0)  # noqa: E731
        return (policy_raw([(2, clamp(cpu_full * 100.0)), (1, clamp(memory_full * 100.0))]), float(own_pool), float(near))


def best_ms(fn: Callable[[], object], repeats: int) -> float:
    gc.disable()
    try:
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            fn()
            times.append((time.perf_counter() - start) * 1000)
        return min(times)
    finally:
        gc.enable()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", default="1000,5000", help="comma-separated node counts")
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    args = parser.parse_args()
    repeats = 3 if args.quick else 9
    policies = load([ROOT / "policies"])
    pod = cluster.scheduling_pod(gpus=1)
    now = current_time()
    print(f"shipped policies, generation {policies.generation}; pod {pod['metadata']['namespace']}/{pod['metadata']['name']}")
    print(f"{'nodes':>6} | {'hand-written':>12} | {'kpe':>9} | {'kpe/hand':>8} | {'per node (kpe)':>14} | verdicts (pass/fail/unresolvable)")
    print("-" * 96)
    for count in (int(c) for c in args.nodes.split(",")):
        nodes = cluster.nodes(count)
        info = node_info_map(nodes, cluster.pods_on(nodes))
        hand = HandWritten(pod, now)

        def run_kpe() -> tuple[Any, Any]:
            filtered = filter_nodes(policies, pod, nodes, node_info=info, now=now)
            passed = set(filtered.passed)
            passing = [n for n in nodes if n["metadata"]["name"] in passed]
            return filtered, score_nodes(policies, pod, passing, node_info=info, now=now)

        def run_hand() -> tuple[dict[str, str], dict[str, int]]:
            verdicts = {n["metadata"]["name"]: hand.verdict(n, info[n["metadata"]["name"]]) for n in nodes}
            raws = {n["metadata"]["name"]: hand.score(n, info[n["metadata"]["name"]]) for n in nodes if verdicts[n["metadata"]["name"]] == "pass"}
            scores = dict(zip(raws, normalise(list(raws.values()), [3, 3, 2])))
            return verdicts, scores

        filtered, scored = run_kpe()
        verdicts, scores = run_hand()
        kpe_verdicts = {name: "pass" for name in filtered.passed} | {n: "fail" for n in filtered.failed} | {n: "unresolvable" for n in filtered.unresolvable}
        if kpe_verdicts != verdicts or scored.scores != scores:
            diff = [n for n in verdicts if verdicts[n] != kpe_verdicts.get(n) or scores.get(n) != scored.scores.get(n)]
            print(f"hand-written rules disagree with kpe on {len(diff)} nodes, e.g. {diff[:3]}", file=sys.stderr)
            return 1
        kpe_ms, hand_ms = best_ms(run_kpe, repeats), best_ms(run_hand, repeats)
        counts = f"{len(filtered.passed)}/{len(filtered.failed)}/{len(filtered.unresolvable)}"
        print(f"{count:>6} | {hand_ms:>9.1f} ms | {kpe_ms:>6.1f} ms | {kpe_ms / hand_ms:>7.2f}x | {kpe_ms * 1000 / count:>11.1f} µs | {counts}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
