"""Where kpe's CPU goes, by activity and phase, from a sampling profile of a running kpe.

    py-spy record --gil --format raw -r 250 -o kpe.txt --pid PID    # while a bench drives kpe
    python bench/profile_phases.py kpe.txt

``--gil`` samples only the thread holding the interpreter, so the shares are of kpe's Python CPU,
over every thread (the event loop, the worker thread that evaluates requests and fills classes
ahead, the watch; ``ps`` finds the PID: ``kpe serve``). Each sample is put under the activity it
serves (the first of ``ACTIVITIES`` whose frames its stack holds) and the phase it is in (the
innermost frame that names one); the table's rows are phases, its columns activities. Frames are
matched by substring of ``function (file)``.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter

# (activity, frame names that start it), outermost wins.
ACTIVITIES = [
    ("warming", ("Warming.step",)),
    ("lookahead", ("_look_ahead",)),
    ("filter", ("handle_filter", "_after_filter")),
    ("prioritize", ("handle_prioritize", "_prioritize")),
    ("watch events", ("Informer._run", "KubeClient.watch", "ClusterCache.apply")),
    ("HTTP", ("httptools_impl.py", "listeners.py", "endpoints.py", "selector_events.py")),
]
# (phase, frame names), innermost wins.
PHASES = [
    ("CEL programs", ("_factory.<locals>._eval", "(<cel")),
    ("rule evaluation", ("evaluate_rule", "judge", "score_node", "_run_timed", "_remember", "rule_message", "reword", "PolicyScope.evaluate")),
    ("binding rules to the pod", ("PolicyScope.bind", "PolicyScope.caller", "Program.bind")),
    ("cache lookups", ("ClassMemo.lookup_names", "ClassMemo.lookup", "ClassMemo.pending", "afford_all", "ClassMemo.sync")),
    ("putting the answer together", ("FilterView.build", "FilterView.patched", "merge", "normalise_columns", "_pieces", "EquivalenceCache.prefixes")),
    ("fingerprinting", ("pod_fingerprint", "inputs_print", "EquivalenceCache.table", "EquivalenceCache.tables", "EquivalenceCache._table")),
    ("matching policies", ("matching_scopes", "EquivalenceCache.match", "FilterRequest.of", "ScoreRequest.of")),
    ("metrics and decision log", ("_after_filter", "ServerState.record", "count_rules", "Metrics.", "Histogram.observe")),
    ("parsing and answering HTTP", ("parse_json", "decode_extender_args", "body.py", "wire.py", "responses.py", "httptools_impl.py", "listeners.py",
                                    "endpoints.py", "applications.py", "errors.py", "selector_events.py")),
    ("watch events", ("cache.py", "trim.py", "kube.py", "watchstream.py", "informer.py")),
]


def _names(stack: str) -> list[str]:
    """The frames of one collapsed stack, outermost first, as ``function (file)`` without line numbers."""
    return [frame.rsplit(":", 1)[0] + ")" if frame.endswith(")") and ":" in frame else frame for frame in stack.split(";")]


def classify(frames: list[str]) -> tuple[str, str]:
    activity = next((name for name, parts in ACTIVITIES if any(part in frame for frame in frames for part in parts)), "other")
    for frame in reversed(frames):
        for phase, parts in PHASES:
            if any(part in frame for part in parts):
                return activity, phase
    return activity, "other"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("profile", help="py-spy's raw (collapsed) output")
    args = ap.parse_args()
    cells: Counter[tuple[str, str]] = Counter()
    with open(args.profile, encoding="utf-8") as f:
        for line in f:
            stack, _, count = line.rstrip("\n").rpartition(" ")
            if stack and count.isdigit():
                cells[classify(_names(stack))] += int(count)
    total = sum(cells.values())
    if not total:
        print("no samples")
        return 1
    activities = [name for name, _ in ACTIVITIES] + ["other"]
    phases = [name for name, _ in PHASES] + ["other"]
    print(f"{total} samples; share of all, per phase (rows) and activity (columns)")
    print("| phase | " + " | ".join(activities) + " | all |")
    print("| --- | " + " | ".join("---" for _ in activities) + " | --- |")
    for phase in phases:
        row = [cells[(a, phase)] for a in activities]
        if sum(row):
            print(f"| {phase} | " + " | ".join(f"{100 * n / total:.1f}%" for n in row) + f" | {100 * sum(row) / total:.1f}% |")
    column = [sum(cells[(a, p)] for p in phases) for a in activities]
    print("| all | " + " | ".join(f"{100 * n / total:.1f}%" for n in column) + " | 100% |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
