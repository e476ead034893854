"""``kpe diff --from OLD --to NEW``: what a policy change would do to the cluster's
pods, before it is merged (``engine.reports.impact.compare``; printed by ``engine.reports.impact.view``).

The cluster comes from a snapshot (``--snapshot FILE``, made by ``kpe snapshot``:
a CI job needs no credentials) or live (``--kubeconfig``, in-cluster).

A CI job fails a pull request on its exit code (EXIT_CODES, the end of ``kpe diff --help``):
``--fail-on`` chooses which changes make it 1.
"""

from __future__ import annotations

import argparse
import json
from typing import Any, TextIO

from engine.errors import PolicyLoadError
from engine.reports.impact.compare import preview
from engine.reports.impact.view import DEFAULT_MAX_ROWS, render_markdown, render_text
from engine.policy.loader import load
from engine.policy.model import PolicySet
from engine.cluster.snapshot import Snapshot, SnapshotError, read

from server.cli.remote import add_cluster_arguments, read_cluster, read_namespaces, with_cluster
from server.settings import UsageError, exit_codes

EXIT_NO_CHANGE, EXIT_CHANGES, EXIT_ERROR = 0, 1, 2
EXIT_CODES = exit_codes(
    "no change (or none that --fail-on counts)",
    "changes (with --fail-on unschedulable: a pod would become unschedulable)",
    "errors: usage, a policy set that does not load, an unreadable snapshot, an unreachable cluster",
)
FAIL_ON = ("changes", "unschedulable", "never")
DEFAULT_SAMPLE = 100


def load_set(paths: list[str], flag: str, out: TextIO) -> PolicySet | None:
    try:
        return load(paths)
    except PolicyLoadError as exc:
        out.write(f"kpe diff: the {flag} policies do not load:\n{exc.render()}\n")
        return None


def cluster_view(args: argparse.Namespace) -> tuple[Snapshot, str]:
    if args.snapshot:
        try:
            snapshot = read(args.snapshot)
        except SnapshotError as exc:
            raise UsageError(str(exc)) from None
        taken = f", taken {snapshot.taken_at}" if snapshot.taken_at else ""
        return snapshot, f"snapshot {args.snapshot}{taken}"

    async def work(client: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]], str]:
        nodes, pods = await read_cluster(client)
        return nodes, pods, await read_namespaces(client), client.source

    nodes, pods, namespaces, source = with_cluster(args, work)
    return Snapshot(nodes=nodes, pods=pods, namespaces=namespaces, source=source), f"the cluster ({source})"


def cmd_diff(args: argparse.Namespace, out: TextIO) -> int:
    if args.sample < 0 or args.top < 1:
        raise UsageError("--sample must be 0 or more and --top 1 or more")
    if args.snapshot and args.kubeconfig:
        raise UsageError("--snapshot and --kubeconfig: give one source of pods and nodes")
    old = load_set(args.old, "--from", out)
    new = load_set(args.new, "--to", out)
    if old is None or new is None:
        return EXIT_ERROR
    snapshot, source = cluster_view(args)
    impact = preview(old, new, snapshot.nodes, snapshot.pods, sample=args.sample, top=args.top, namespaces=snapshot.namespaces)
    served = (snapshot.kpe or {}).get("generation")
    if served and served != old.generation:
        impact.notes.append(f"kpe served generation {served} when the snapshot was taken, not --from's {old.generation}")
    data = impact.to_dict()
    if args.output == "json":
        json.dump({**data, "source": source}, out, indent=2, default=str)
        out.write("\n")
    elif args.output == "markdown":
        out.write(render_markdown(data, source=source, max_rows=DEFAULT_MAX_ROWS if args.max_rows is None else args.max_rows) + "\n")
    else:
        out.write(render_text(data, source=source, max_rows=args.max_rows or 0) + "\n")
    if args.fail_on == "never":
        return EXIT_NO_CHANGE
    if args.fail_on == "unschedulable":
        return EXIT_CHANGES if impact.unschedulable else EXIT_NO_CHANGE
    return EXIT_CHANGES if impact.changes else EXIT_NO_CHANGE


def add_diff_command(sub: Any) -> None:
    diff = sub.add_parser(
        "diff",
        help="preview what a policy change does to the cluster's pods",
        description="Decide every pending pod and a sample of running pods under two policy sets and print what changes: "
        "nodes gained and lost, pods that become unschedulable, gates, preemption, ranking.",
        epilog=EXIT_CODES,
    )
    diff.add_argument("--from", dest="old", nargs="+", required=True, metavar="PATH", help="the policies now (files or directories)")
    diff.add_argument("--to", dest="new", nargs="+", required=True, metavar="PATH", help="the policies proposed")
    diff.add_argument("--snapshot", metavar="FILE", help="the cluster as kpe snapshot saved it (default: read the live cluster)")
    add_cluster_arguments(diff)
    diff.add_argument("--sample", type=int, default=DEFAULT_SAMPLE, metavar="N", help=f"running pods decided too, the same ones every run (default {DEFAULT_SAMPLE}; every pending pod always)")
    diff.add_argument("--top", type=int, default=3, metavar="K", help="a ranking change is a change in the order of the K best-scored nodes (default 3)")
    diff.add_argument("--output", choices=("table", "json", "markdown"), default="table")
    diff.add_argument("--max-rows", type=int, default=None, metavar="N", help=f"changes listed, the rest counted (default: all for table, {DEFAULT_MAX_ROWS} for markdown; 0: all)")
    diff.add_argument(
        "--fail-on", choices=FAIL_ON, default="changes",
        help="exit 1 on any change (changes), only when a pod would become unschedulable (unschedulable), or never",
    )
    diff.set_defaults(run=cmd_diff)
