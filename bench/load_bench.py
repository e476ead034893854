"""What the typed check costs: compiling the shipped policies with it and without it, side by side.

    python bench/load_bench.py              # 20 loads of each, alternating
    python bench/load_bench.py --loads 50

The typed check (``engine.cel.checker.types.check``) runs when a set is compiled, at start-up and
on every reload, beside the code generator (``engine.policy.compiler``); the programs a request
runs are the code generator's, so with the check or without it a request runs the same code.
"Without" replaces the check by one that finds nothing (every expression ``dyn``), which is what
compiling cost before the check existed. The script also compares what the two sets evaluate:
the same expressions, the same generated code.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.cel.checker import types as cel_types  # noqa: E402
from engine.cel.checker.typemodel import DYN  # noqa: E402
from engine.policy.loader import load  # noqa: E402
from engine.policy.model import PolicySet  # noqa: E402


def _unchecked(*_args: object, **_kwargs: object) -> cel_types.Checked:
    return cel_types.Checked(DYN)


def _programs(policy_set: PolicySet) -> list[tuple[str, str]]:
    """Every rule's expression and the source of its generated code."""
    out = []
    for policy in policy_set.policies:
        for rule in (*policy.filters, *policy.scores):
            program = rule.expression.program
            out.append((rule.expression.text, getattr(program, "source", repr(type(program)))))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--loads", type=int, default=20)
    parser.add_argument("--policies", type=Path, default=ROOT / "policies")
    args = parser.parse_args()
    times: dict[str, list[float]] = {"with the typed check": [], "without it": []}
    sets: dict[str, PolicySet] = {}
    for _ in range(args.loads):
        for label in times:
            with mock.patch.object(cel_types, "check", _unchecked) if label == "without it" else contextlib.nullcontext():
                start = time.perf_counter()
                sets[label] = load([args.policies])
                times[label].append(time.perf_counter() - start)
    same = _programs(sets["with the typed check"]) == _programs(sets["without it"])
    print(f"{len(sets['with the typed check'].policies)} policies from {args.policies}, {args.loads} loads each, alternating\n")
    print("| compile | median ms | min ms |")
    print("| --- | --- | --- |")
    for label, values in times.items():
        print(f"| {label} | {1000 * statistics.median(values):.1f} | {1000 * min(values):.1f} |")
    with_, without = (statistics.median(v) for v in times.values())
    print(f"\nthe typed check: {1000 * (with_ - without):.1f} ms a load ({with_ / without:.2f}x); "
          f"the compiled rules {'are the same expressions and code' if same else 'DIFFER'} with it and without it")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
