"""``kpe snapshot -o FILE``: save what kpe's decisions need from a live cluster (the
nodes and pods, trimmed; ``engine.cluster.snapshot``), optionally anonymised
(``engine.cluster.anonymise``) and with a running kpe's view (``--server``), so that
``kpe diff --snapshot FILE`` runs where there are no cluster credentials.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any, TextIO

from engine.cluster.anonymise import Anonymiser, words_in
from engine.cluster.snapshot import Snapshot, write

from server.cli.remote import (
    add_cluster_arguments,
    add_server_arguments,
    get_json,
    read_cluster,
    read_namespaces,
    with_cluster,
)
from server.settings import UsageError, exit_codes

EXIT_OK = 0
EXIT_CODES = exit_codes("written", None, "usage errors, a file that cannot be written, a cluster or a running kpe that cannot be reached")
POLICY_SUFFIXES = (".yaml", ".yml", ".json")
DECISIONS_KEPT = 5000  # the decision log holds fewer within its default 4 MiB


def kpe_view(args: argparse.Namespace) -> dict[str, Any]:
    """What the kpe at ``--server`` serves: its generation, policies, the pods its gates hold, its
    recent decisions and its reservations' slots."""
    policies = get_json(args, "/apis/v1/policies")
    view: dict[str, Any] = {
        "server": str(args.server),
        "generation": policies.get("generation"),
        "policies": [p.get("name") for p in policies.get("policies") or []],
    }
    try:
        view["gated"] = get_json(args, "/apis/v1/gated").get("pods") or []
    except UsageError:
        view["gated"] = []  # a replica that is not the leader, or runs no gate controller
    # For kpe view --snapshot: the decisions kpe keeps and its reservations' slots.
    view["decisions"] = get_json(args, "/apis/v1/decisions", {"limit": str(DECISIONS_KEPT)}).get("decisions") or []
    try:
        view["reservations"] = get_json(args, "/apis/v1/reservations")
    except UsageError:
        pass  # no cache synced, or a kpe from before the endpoint answered 200 for it
    return view


def policy_texts(paths: list[str]) -> list[str]:
    """The text of every policy file under ``paths`` (for the names ``--anonymise`` keeps)."""
    texts: list[str] = []
    for raw in paths:
        path = Path(raw)
        files = sorted(p for p in path.rglob("*") if p.suffix in POLICY_SUFFIXES) if path.is_dir() else [path]
        for file in files:
            try:
                texts.append(file.read_text())
            except OSError as exc:
                raise UsageError(f"--keep-names-from: cannot read {file}: {exc.strerror}") from None
    return texts


def salt(args: argparse.Namespace) -> bytes:
    if not args.salt_file:
        return os.urandom(32)
    try:
        data = Path(args.salt_file).read_bytes().strip()
    except OSError as exc:
        raise UsageError(f"--salt-file: cannot read {args.salt_file}: {exc.strerror}") from None
    if len(data) < 16:
        raise UsageError(f"--salt-file: {args.salt_file} holds {len(data)} bytes; use at least 16 (e.g. head -c 32 /dev/urandom | base64)")
    return data


def take(args: argparse.Namespace) -> Snapshot:
    async def work(client: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]], str]:
        nodes, pods = await read_cluster(client, include_finished=args.include_finished)
        return nodes, pods, await read_namespaces(client), client.source

    nodes, pods, namespaces, source = with_cluster(args, work)
    view = kpe_view(args) if args.server else None
    snapshot = Snapshot(nodes=nodes, pods=pods, taken_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), source=source, kpe=view,
                        namespaces=namespaces)
    if args.anonymise:
        anonymiser = Anonymiser(salt(args), args.keep_name or [], words=words_in(policy_texts(args.keep_names_from or [])))
        anonymiser.learn_nodes(nodes)
        snapshot.nodes = [anonymiser.node(n) for n in nodes]
        snapshot.pods = [anonymiser.pod(p) for p in pods]
        snapshot.namespaces = [anonymiser.namespace(n) for n in namespaces]
        snapshot.kpe = anonymiser.kpe_view(view) if view is not None else None
        snapshot.source = "anonymised"
        snapshot.anonymised = True
    return snapshot


def cmd_snapshot(args: argparse.Namespace, out: TextIO) -> int:
    if not args.anonymise and (args.keep_names_from or args.keep_name or args.salt_file):
        raise UsageError("--keep-names-from, --keep-name and --salt-file go with --anonymise")
    snapshot = take(args)
    try:
        size = write(snapshot, args.output)
    except OSError as exc:
        raise UsageError(f"cannot write {args.output}: {exc.strerror}") from None
    gated = f", kpe generation {snapshot.kpe.get('generation')}" if snapshot.kpe else ""
    anonymised = ", anonymised" if snapshot.anonymised else ""
    out.write(f"wrote {args.output}: {len(snapshot.nodes)} nodes, {len(snapshot.pods)} pods{gated}{anonymised} ({size:,} bytes)\n")
    return EXIT_OK


def add_snapshot_command(sub: Any) -> None:
    snap = sub.add_parser(
        "snapshot",
        help="save the cluster's nodes and pods for kpe diff",
        description="Save what kpe's decisions need from a live cluster (nodes and pods, trimmed) to a file, "
        "optionally anonymised, so that kpe diff --snapshot runs without cluster credentials.",
        epilog=EXIT_CODES,
    )
    snap.add_argument("-o", "--output", required=True, metavar="FILE", help="where to write the snapshot (JSON; gzip-compressed when FILE ends in .gz)")
    add_cluster_arguments(snap)
    add_server_arguments(snap, "also record its serving generation, policies and gated pods")
    snap.add_argument("--include-finished", action="store_true", help="keep Succeeded and Failed pods (left out: they use no node and wait for nothing)")
    snap.add_argument("--anonymise", action="store_true", help="hash node, pod and namespace names and drop annotations, environment, commands and addresses (docs/gitops.md)")
    snap.add_argument("--keep-names-from", action="append", metavar="PATH", help="with --anonymise: keep the namespaces, node names and annotation keys that appear in these policy files or directories (repeatable)")
    snap.add_argument("--keep-name", action="append", metavar="NAME", help="with --anonymise: keep this name as it is (repeatable)")
    snap.add_argument("--salt-file", metavar="FILE", help="with --anonymise: the secret that names are hashed with (the same names hash the same in every snapshot made with it); default a new random one")
    snap.set_defaults(run=cmd_snapshot)
