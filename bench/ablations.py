"""Source trees of this kpe with one feature of the round turned off, for ``scheduler_bench.py
--also-source DIR --own-policies``: each feature's cost is then measured before and after in one
run, on the same code otherwise.

    python bench/ablations.py /tmp/kpe-ablations
    python bench/scheduler_bench.py --modes names --pairs 2 --setups floor,kpe --own-policies \\
        --also-source /tmp/kpe-ablations/no-in-flight --also-source /tmp/kpe-ablations/no-counts \\
        --also-source /tmp/kpe-ablations/no-dra

Each tree is ``git archive HEAD`` (the committed tree, not the working copy) with one change:

- ``no-in-flight``: no pods in flight (engine/cluster/inflight.py): the filter verb neither
  records the nodes it passed a pod on nor judges a node with the pods in flight there
  (``server.verbs.inflight.to_count`` and ``record`` return at once);
- ``no-counts``: the shipped policies without the three that read ``counts``
  (``app-zone-cap``, ``team-node-cap``, ``team-pod-cap``, added with the feature): with no policy
  reading it, the cache keeps no count index and nothing counts across nodes;
- ``no-dra``: the shipped GPU policies as they were before they read ``dra`` (at the parent of
  17f22af): no policy reads ``dra``, so the cache watches no DRA object and no rule calls the
  device helpers.

Typed checking and policies from the cluster have no tree here: the typed check runs when a set
is compiled and its result is not part of the compiled program (``engine.policy.compiler``:
``cel_types.check`` beside ``cel.compile``), so the request path is the same code with it or
without; where the policies come from changes only the informer that reads them.
"""

from __future__ import annotations

import argparse
import io
import subprocess
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BEFORE_DRA = "17f22af^"


def _replace(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    if text.count(old) != 1:
        raise SystemExit(f"{path}: the text to change is not there once; update bench/ablations.py for this tree:\n{old}")
    path.write_text(text.replace(old, new))


def no_in_flight(tree: Path) -> None:
    source = tree / "server/verbs/inflight.py"
    _replace(source, '    """What the pods in flight leave to evaluate for ``result`` (None: nothing, the answer is\n',
             '    return None  # ablation: no pods in flight\n    """What the pods in flight leave to evaluate for ``result`` (None: nothing, the answer is\n')
    _replace(source, '    """The filter passed ``pod`` on ``passed``: it counts there until kpe sees it placed."""\n',
             '    """The filter passed ``pod`` on ``passed``: it counts there until kpe sees it placed."""\n    return  # ablation: no pods in flight\n')


def no_counts(tree: Path) -> None:
    for name in ("app-zone-cap", "team-node-cap", "team-pod-cap"):
        (tree / "policies" / f"{name}.yaml").unlink()


def no_dra(tree: Path) -> None:
    for name in ("gpu-placement", "gpu-quota", "keep-general-off-gpu"):
        old = subprocess.run(["git", "show", f"{BEFORE_DRA}:policies/{name}.yaml"], cwd=ROOT, check=True, capture_output=True).stdout
        (tree / "policies" / f"{name}.yaml").write_bytes(old)


ABLATIONS: dict[str, Callable[[Path], None]] = {"no-in-flight": no_in_flight, "no-counts": no_counts, "no-dra": no_dra}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="where the trees go (one directory per ablation, replaced)")
    parser.add_argument("--only", default=",".join(ABLATIONS), help="comma-separated ablations")
    args = parser.parse_args()
    archive = subprocess.run(["git", "archive", "HEAD"], cwd=ROOT, check=True, capture_output=True).stdout
    for name in args.only.split(","):
        tree = args.out / name
        if tree.exists():
            subprocess.run(["rm", "-rf", str(tree)], check=True)
        tree.mkdir(parents=True)
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(tree, filter="data")
        ABLATIONS[name](tree)
        # Every tree must still load its policies as kpe serve would.
        subprocess.run([sys.executable, "-m", "server.cli", "check", str(tree / "policies")], cwd=tree, check=True,
                       env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"}, stdout=subprocess.DEVNULL)
        print(tree)
    return 0


if __name__ == "__main__":
    sys.exit(main())
