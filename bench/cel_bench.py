"""How fast kpe's compiled CEL is, next to the same checks hand-written in Python
and to cel-python's interpreter, on a realistic GPU node and training pod.

    .venv/bin/python bench/cel_bench.py            # ~0.2 s per cell
    .venv/bin/python bench/cel_bench.py --quick    # a fast smoke run
    .venv/bin/python bench/cel_bench.py --rows 1,4 # only some rows

It needs cel-python, which kpe does not depend on: ``pip install -e '.[bench]'``
(the test extra has it too).

Before timing anything the script checks that hand-written Python, kpe
(``evaluate`` and ``bind(pod=...)(node=...)``) and cel-python agree on every
row's result, and prints the results.

Columns (µs per evaluation, best of several repeats):

- hand-written: the same check as plain Python over the same dicts;
- kpe evaluate: ``program.evaluate({"pod": pod, "node": node})``;
- kpe bound: ``program.bind(pod=pod)`` once, then ``f(node=node)`` timed:
  the per-node cost the scheduler path pays;
- cel-python: ``celpy`` interpreted runner on the same expression, with the
  pod and node converted by ``celpy.json_to_cel`` once, outside the timing
  (converting the node costs extra per node; printed below the table);
- bound/hand: kpe bound ÷ hand-written (the per-node cost kpe's decisions pay);
  evaluate/hand: kpe evaluate ÷ hand-written; cel-python/kpe: cel-python ÷ kpe evaluate.

The data lives in bench/data/{node,pod}.json (shared with other benches and tests).
"""

from __future__ import annotations

import argparse
import gc
import json
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

try:
    import celpy  # noqa: E402
except ImportError:
    # Not a dependency of kpe (which never runs it): an extra of its own.
    sys.exit("bench/cel_bench.py compares kpe with cel-python, which is not installed: pip install -e '.[bench]'")

import engine.cel as cel  # noqa: E402

DATA = Path(__file__).resolve().parent / "data"


def load(name: str) -> Any:
    return json.loads((DATA / f"{name}.json").read_text())


# --- hand-written equivalents --------------------------------------------------

def hand_label_match(pod: Any, node: Any) -> bool:
    return node["metadata"]["labels"]["topology.kubernetes.io/zone"] == pod["metadata"]["labels"]["zone"]


def hand_taints_tolerated(pod: Any, node: Any) -> bool:
    tolerations = pod["spec"]["tolerations"]
    for t in node["spec"]["taints"]:
        if t["effect"] != "NoSchedule":
            continue
        for tol in tolerations:
            if tol["key"] == t["key"] and (tol["operator"] == "Exists" or tol["value"] == t["value"]):
                break
        else:
            return False
    return True


_BINARY = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "Pi": 1 << 50, "Ei": 1 << 60}
_DECIMAL = {"m": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}


def milli_units(quantity: str) -> int:
    """A minimal Kubernetes quantity parser: the value in thousandths (no exponents)."""
    if quantity[-1] == "i":
        number, scale = quantity[:-2], _BINARY[quantity[-2:]] * 1000
    elif quantity[-1] in _DECIMAL:
        number, scale = quantity[:-1], _DECIMAL[quantity[-1]] * (1 if quantity[-1] == "m" else 1000)
    else:
        number, scale = quantity, 1000
    return int(number) * scale if "." not in number else round(float(number) * scale)


def hand_quantity_fits(pod: Any, node: Any) -> bool:
    allocatable = node["status"]["allocatable"]
    requests = pod["spec"]["containers"][0]["resources"]["requests"]
    return (
        milli_units(allocatable["nvidia.com/gpu"]) >= milli_units(requests["nvidia.com/gpu"])
        and milli_units(allocatable["memory"]) > milli_units(requests["memory"])
    )


def hand_memory_limits(pod: Any, node: Any) -> bool:
    return all("limits" in c["resources"] and "memory" in c["resources"]["limits"] for c in pod["spec"]["containers"])


_INSTANCE_TYPE = re.compile(r"^p[0-9]+\.[0-9]*xlarge$")


def hand_name_and_regex(pod: Any, node: Any) -> bool:
    meta = node["metadata"]
    return meta["name"].startswith("gpu-") and _INSTANCE_TYPE.search(meta["labels"]["node.kubernetes.io/instance-type"]) is not None


def hand_node_affinity(pod: Any, node: Any) -> bool:
    labels = node["metadata"]["labels"]
    terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    for term in terms:
        for e in term["matchExpressions"]:
            op = e["operator"]
            if op == "In":
                if not (e["key"] in labels and labels[e["key"]] in e["values"]):
                    break
            elif op == "Exists":
                if e["key"] not in labels:
                    break
        else:
            return True
    return False


# --- the rows -------------------------------------------------------------------

@dataclass(frozen=True)
class Row:
    name: str
    expression: str
    hand: Callable[[Any, Any], bool]
    celpy_missing: str | None = None  # why cel-python cannot run the row, if it cannot


ROWS = [
    Row(
        "label match",
        "node.metadata.labels['topology.kubernetes.io/zone'] == pod.metadata.labels['zone']",
        hand_label_match,
    ),
    Row(
        "taints/tolerations",
        "node.spec.taints.all(t, t.effect != 'NoSchedule' || pod.spec.tolerations.exists(tol,"
        " tol.key == t.key && (tol.operator == 'Exists' || tol.value == t.value)))",
        hand_taints_tolerated,
    ),
    Row(
        "quantity compare",
        "quantity(node.status.allocatable['nvidia.com/gpu']).compareTo("
        "quantity(pod.spec.containers[0].resources.requests['nvidia.com/gpu'])) >= 0"
        " && quantity(node.status.allocatable.memory).isGreaterThan("
        "quantity(pod.spec.containers[0].resources.requests.memory))",
        hand_quantity_fits,
        celpy_missing="cel-python has no Kubernetes quantity() library",
    ),
    Row(
        "memory limits set",
        "pod.spec.containers.all(c, has(c.resources.limits) && 'memory' in c.resources.limits)",
        hand_memory_limits,
    ),
    Row(
        "name prefix + regex",
        "node.metadata.name.startsWith('gpu-')"
        " && node.metadata.labels['node.kubernetes.io/instance-type'].matches('^p[0-9]+\\\\.[0-9]*xlarge$')",
        hand_name_and_regex,
    ),
    Row(
        "node affinity",
        "pod.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms.exists(term,"
        " term.matchExpressions.all(e, e.operator == 'In'"
        " ? (e.key in node.metadata.labels && node.metadata.labels[e.key] in e.values)"
        " : e.operator == 'Exists' ? e.key in node.metadata.labels : true))",
        hand_node_affinity,
    ),
]


# --- timing ---------------------------------------------------------------------

def _run(fn: Callable[[], object], n: int) -> int:
    start = time.perf_counter_ns()
    for _ in range(n):
        fn()
    return time.perf_counter_ns() - start


def time_per_call_us(fn: Callable[[], object], target_s: float, repeats: int = 5) -> float:
    """µs per call: calibrate an iteration count so that ``repeats`` runs take
    about ``target_s`` in all, then report the fastest run."""
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        n = 1
        while True:
            elapsed = _run(fn, n)
            if elapsed >= target_s * 1e9 / 20 or n >= 1 << 24:
                break
            n *= 2 if elapsed > target_s * 1e9 / 200 else 8
        per_call_ns = elapsed / n
        per_repeat = max(1, int(target_s * 1e9 / repeats / max(per_call_ns, 1.0)))
        best = min(_run(fn, per_repeat) for _ in range(repeats)) / per_repeat
        return best / 1000
    finally:
        if gc_was_enabled:
            gc.enable()


# --- main -------------------------------------------------------------------------

def celpy_program(expression: str) -> tuple[Any, str | None]:
    try:
        env = celpy.Environment()
        return env.program(env.compile(expression)), None
    except Exception as exc:  # noqa: BLE001 - reported as n/a
        return None, f"cannot compile: {type(exc).__name__}: {str(exc).splitlines()[0][:100]}"


def celpy_plain(value: Any) -> Any:
    """A cel-python result as plain Python (BoolType subclasses int, so check it first)."""
    if isinstance(value, celpy.celtypes.BoolType):
        return bool(value)
    if isinstance(value, celpy.celtypes.IntType):
        return int(value)
    if isinstance(value, celpy.celtypes.StringType):
        return str(value)
    return value


def fmt_us(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:.2f}" if value < 10 else f"{value:.1f}" if value < 1000 else f"{value:,.0f}"


def fmt_ratio(a: float | None, b: float | None) -> str:
    return "n/a" if a is None or b is None else f"{a / b:.1f}x"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="short timings (a smoke run, noisy numbers)")
    parser.add_argument("--rows", help="comma-separated 1-based row numbers to run (default: all)")
    args = parser.parse_args(argv)
    target = 0.02 if args.quick else 0.2
    celpy_target = 0.02 if args.quick else 0.2
    selected = [int(r) for r in args.rows.split(",")] if args.rows else list(range(1, len(ROWS) + 1))

    pod, node = load("pod"), load("node")
    cel_pod, cel_node = celpy.json_to_cel(pod), celpy.json_to_cel(node)

    print(f"pod {len(json.dumps(pod, separators=(',', ':')))} B, node {len(json.dumps(node, separators=(',', ':')))} B (compact JSON)")
    print()

    prepared = []
    notes = []
    print("results (checked to agree before timing):")
    for i in selected:
        row = ROWS[i - 1]
        program = cel.compile(row.expression, variables=["pod", "node"])
        bound = program.bind(pod=pod)
        hand = row.hand(pod, node)
        kpe_eval = program.evaluate({"pod": pod, "node": node})
        kpe_bound = bound(node=node)
        assert kpe_eval == hand and type(kpe_eval) is type(hand), (row.name, "evaluate", kpe_eval, hand)
        assert kpe_bound == hand and type(kpe_bound) is type(hand), (row.name, "bound", kpe_bound, hand)
        cp_prog, why = (None, row.celpy_missing) if row.celpy_missing else celpy_program(row.expression)
        cp_result: Any = "n/a"
        if cp_prog is not None:
            try:
                cp_result = celpy_plain(cp_prog.evaluate({"pod": cel_pod, "node": cel_node}))
            except Exception as exc:  # noqa: BLE001 - reported as n/a
                cp_prog, why = None, f"cannot evaluate: {type(exc).__name__}: {str(exc).splitlines()[0][:100]}"
        if cp_prog is not None:
            assert cp_result == hand and type(cp_result) is type(hand), (row.name, "cel-python", cp_result, hand)
        else:
            notes.append(f"  row {i} cel-python n/a: {why}")
        print(f"  {i}. {row.name:20} hand={hand!s:5} kpe evaluate={kpe_eval!s:5} kpe bound={kpe_bound!s:5} cel-python={cp_result!s:5}")
        print(f"     {row.expression}")
        prepared.append((i, row, program, bound, cp_prog))
    print()

    baseline = time_per_call_us(lambda: None, target)
    header = ("row", "hand-written", "kpe evaluate", "kpe bound", "cel-python", "bound/hand", "evaluate/hand", "cel-python/kpe")
    table = []
    for i, row, program, bound, cp_prog in prepared:
        hand_fn = row.hand
        evaluate = program.evaluate
        hand_us = time_per_call_us(lambda: hand_fn(pod, node), target)
        eval_us = time_per_call_us(lambda: evaluate({"pod": pod, "node": node}), target)
        bound_us = time_per_call_us(lambda: bound(node=node), target)
        cp_us = None
        if cp_prog is not None:
            cp_eval = cp_prog.evaluate
            cp_us = time_per_call_us(lambda: cp_eval({"pod": cel_pod, "node": cel_node}), celpy_target, repeats=3)
        table.append((
            f"{i}. {row.name}", fmt_us(hand_us), fmt_us(eval_us), fmt_us(bound_us), fmt_us(cp_us),
            fmt_ratio(bound_us, hand_us), fmt_ratio(eval_us, hand_us), fmt_ratio(cp_us, eval_us),
        ))

    widths = [max(len(r[c]) for r in [header, *table]) for c in range(len(header))]
    line = lambda cells: "| " + " | ".join(  # noqa: E731
        c.ljust(w) if k == 0 else c.rjust(w) for k, (c, w) in enumerate(zip(cells, widths))
    ) + " |"
    print(f"µs per evaluation ({'quick' if args.quick else 'full'} run, best of repeats, Python {sys.version.split()[0]})")
    print(line(header))
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in table:
        print(line(r))
    print()
    convert_us = time_per_call_us(lambda: celpy.json_to_cel(node), celpy_target, repeats=3)
    print(f"  empty-call overhead included in every cell: {fmt_us(baseline)} µs")
    print(f"  celpy.json_to_cel(node), not included in cel-python column: {fmt_us(convert_us)} µs per node")
    for note in notes:
        print(note)
    return 0


if __name__ == "__main__":
    sys.exit(main())
