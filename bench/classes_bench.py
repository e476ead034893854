"""kpe's decision path alone on the heterogeneous shape: CPU a pod of the filter and the score
with the equivalence cache, in process, with no HTTP, no watch and no other process.

    python bench/classes_bench.py                                  # this tree, 5 rounds
    python bench/classes_bench.py --also-source /tmp/kpe-base      # and a tree before a change, alternating
    python bench/classes_bench.py --nodes 5000 --window 500

Each round is a fresh process per tree (``--tree``), so two trees' code never meet in one
interpreter: the cluster of ``bench/heterogeneous.py`` (this tree's, for every tree), a count
index over the pods bound so far, and the pods of one round one after another, each a filter
over the next window of node names (as kube-scheduler's windows move through the cluster), a
score over the names that passed, and a bind to the best-scored node, which replaces that
node's nodeInfo and counts the pod. Only the filter and the score are timed
(``time.process_time``, the collector paused as kpe pauses it around a verb). Why beside ``replay_bench.py``: there a round's CPU a pod moves by
10 to 20% from round to round with what else runs on the machine; here the only variable is
the code, so a change of a few percent to the decision path shows. It does not tell what the
server around it costs.

Prints per tree the CPU ms a pod of each round, their median, and the rule evaluations a pod
per policy (the same in every round: the pods and windows are the same).
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

import heterogeneous  # noqa: E402


def child(tree: Path, nodes: int, window: int, pods: int) -> dict[str, Any]:
    """One round in this process, with ``tree``'s engine."""
    sys.path.insert(0, str(tree))
    from engine.cel.types.counts import Counts
    from engine.cluster.counts import CountIndex
    from engine.cluster.nodeinfo import NodesByName, NodeState, node_info_map
    from engine.equivalence.classes import EquivalenceCache
    from engine.equivalence.filtering import filter_nodes
    from engine.equivalence.memo import TrackedNodeInfo
    from engine.equivalence.scoring import score_nodes
    from engine.policy.loader import load

    policies = load([tree / "policies"])
    cluster = []
    for i in range(nodes):
        node, status = heterogeneous.node_object(i)
        cluster.append({**node, **status})
    names = [n["metadata"]["name"] for n in cluster]
    bound: list[dict[str, Any]] = []
    on: dict[str, list[dict[str, Any]]] = {}
    info = TrackedNodeInfo(history=64)
    states: dict[str, NodeState] = {}

    def put(node: dict[str, Any], view: dict[str, Any]) -> None:
        name = node["metadata"]["name"]
        old = states.get(name)
        info[name] = view
        states[name] = NodeState(name, node, view)
        info.replaced(name, node=old is None or old.node is not node)

    for name, view in node_info_map(cluster, []).items():
        put(next(n for n in cluster if n["metadata"]["name"] == name), view)
    index = CountIndex.build(policies.counts, cluster, bound)
    memo = EquivalenceCache()
    gc.collect()
    gc.freeze()  # as kpe does once its cache is synced
    evaluations: Counter[str] = Counter()
    spent = 0.0
    start = 0
    for step in range(pods):
        pod = heterogeneous.pod(step, 1)
        pod["metadata"]["uid"] = f"pending-{step}"
        asked = [names[(start + k) % nodes] for k in range(window)]
        start += window
        counts = Counts(index)
        gc.disable()  # as kpe's verbs run: the collector waits until the answer is out
        t0 = time.process_time()
        result = filter_nodes(policies, pod, NodesByName(asked, states), node_info=info, memo=memo, counts=counts)
        scored = score_nodes(policies, pod, NodesByName(result.passed, states), node_info=info, memo=memo, counts=counts)
        spent += time.process_time() - t0
        gc.enable()
        for policy, _, n in (*result.rule_counts, *scored.rule_counts):
            evaluations[policy] += n
        if result.passed:
            best = max(result.passed, key=lambda n: scored.scores.get(n, 0))
            placed = copy.deepcopy(pod)
            placed["spec"]["nodeName"] = best
            placed["status"] = {"phase": "Running"}
            bound.append(placed)
            on.setdefault(best, []).append(placed)
            state = states[best]
            put(state.node, node_info_map([state.node], on[best])[best])
            index.set_pod(f"{placed['metadata']['namespace']}/{placed['metadata']['name']}", placed)
    return {"ms_per_pod": spent * 1000 / pods, "evaluations": {p: n / pods for p, n in sorted(evaluations.items())}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--window", type=int, default=420, help="node names per filter (420: kube-scheduler's at 1,000 nodes)")
    ap.add_argument("--pods", type=int, default=400, help="pods a round")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--also-source", action="append", default=[], metavar="DIR", help="another source tree too (git archive COMMIT)")
    ap.add_argument("--tree", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.tree is not None:
        print(json.dumps(child(args.tree, args.nodes, args.window, args.pods)))
        return 0
    trees = [ROOT, *(Path(d).resolve() for d in args.also_source)]
    rounds: dict[Path, list[dict[str, Any]]] = {tree: [] for tree in trees}
    for r in range(args.rounds):
        for tree in trees:
            out = subprocess.run([sys.executable, __file__, "--tree", str(tree), "--nodes", str(args.nodes), "--window", str(args.window), "--pods", str(args.pods)],
                                 check=True, capture_output=True, text=True, cwd=tree).stdout
            rounds[tree].append(json.loads(out.strip().splitlines()[-1]))
            print(f"  round {r + 1} {tree.name}: {rounds[tree][-1]['ms_per_pod']:.2f} ms/pod", flush=True)
    print(f"\nthe filter and score of {args.pods} heterogeneous pods a round, {args.nodes} nodes, windows of {args.window} names, in process; CPU ms a pod\n")
    print("| tree | rounds | median | rule evaluations a pod |")
    print("| --- | --- | --- | --- |")
    for tree in trees:
        times = [r["ms_per_pod"] for r in rounds[tree]]
        per = ", ".join(f"{p} {n:.1f}" for p, n in rounds[tree][0]["evaluations"].items())
        print(f"| {tree.name} | {', '.join(f'{t:.2f}' for t in times)} | {statistics.median(times):.2f} | {per} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
