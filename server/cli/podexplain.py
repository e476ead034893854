"""``kpe explain pod NAMESPACE/NAME``: why is this pod pending, on the live cluster.

Two sources, one report (``engine.reports.diagnosis.diagnose``, printed by ``engine.reports.diagnosis.view``):

- the cluster itself (``--kubeconfig`` or in-cluster credentials): the pod, every
  node and every pod are read from the API server and decided with the policies
  given with ``--policies`` (default: the shipped ones), ``nodeInfo`` made from
  the pods bound to each node, the reservations' slots from the placeholders in
  ``--reservation-namespace`` and the owners' claims;
- a running kpe (``--server URL``): ``GET /apis/v1/explain?pod=`` on its
  introspection listener, decided by that replica with the generation it serves,
  its cache's nodes and ``nodeInfo`` and its reservation controller's slots:
  exactly what its extender verbs see.

Exit codes: 0 explained, 1 the policies have errors, 2 usage errors and
failures to reach the cluster or kpe, or an unknown pod.
"""

from __future__ import annotations

import argparse
import json
from typing import Any, TextIO

from engine.reports.diagnosis.diagnose import diagnose
from engine.reports.diagnosis.view import DEFAULT_LIMIT, render_markdown, render_text
from engine.errors import PolicyLoadError
from engine.policy.loader import load

from server.cli.remote import (
    add_cluster_arguments,
    add_server_arguments,
    get_json,
    read_cluster,
    with_cluster,
)
from server.settings import Settings, UsageError, policy_paths

EXIT_OK, EXIT_FAILED = 0, 1


def parse_target(words: list[str]) -> tuple[str, str]:
    """``pod NAMESPACE/NAME`` (or ``NAMESPACE/NAME`` alone) as (namespace, name)."""
    if words and words[0] in ("pod", "pods", "po"):
        words = words[1:]
    if len(words) != 1:
        raise UsageError("expected: kpe explain pod NAMESPACE/NAME (or --pod FILE --nodes FILE)")
    namespace, sep, name = words[0].partition("/")
    if not sep or not namespace or not name or "/" in name:
        raise UsageError(f"the pod must be given as NAMESPACE/NAME, not {words[0]!r}")
    return namespace, name


def from_server(args: argparse.Namespace, namespace: str, name: str) -> dict[str, Any]:
    if args.policies:
        raise UsageError("--policies: with --server, kpe explains with the policies it serves")
    data = get_json(args, "/apis/v1/explain", {"pod": f"{namespace}/{name}"})
    data.pop("text", None)
    data["source"] = f"served by kpe at {str(args.server).rstrip('/')}"
    return data


def from_cluster(args: argparse.Namespace, namespace: str, name: str, policy_paths: list[str]) -> dict[str, Any]:
    from server.cluster.kube import ApiError

    policy_set = load(policy_paths)

    async def work(client: Any) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]], str]:
        try:
            pod = await client.get_pod(namespace, name)
        except ApiError as exc:
            if exc.status == 404:
                raise UsageError(f"pod {namespace}/{name} not found ({client.source})") from None
            raise
        nodes, pods = await read_cluster(client)
        return pod, nodes, pods, client.source

    pod, nodes, pods, source = with_cluster(args, work)
    data = diagnose(policy_set, pod, nodes, cluster_pods=pods, placeholder_namespace=args.reservation_namespace).to_dict()
    data["source"] = f"policies {' '.join(policy_paths)}, cluster from {source}"
    return data


def add_explain_pod_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``kpe explain pod`` (the explain command's other options are cli.py's)."""
    add_cluster_arguments(parser)
    add_server_arguments(parser, "explain the pod as that replica decides it (its policies, its cache)")
    parser.add_argument(
        "--reservation-namespace", default=Settings.reservation_namespace, metavar="NS",
        help=f"namespace of the reservations' placeholders, as kpe serve's flag (default {Settings.reservation_namespace})",
    )
    parser.add_argument("--limit", type=int, default=DEFAULT_LIMIT, metavar="N", help=f"node rows shown by table and markdown, nodes that can take the pod first (default {DEFAULT_LIMIT}; 0: all)")


def cmd_explain_pod(args: argparse.Namespace, out: TextIO) -> int:
    namespace, name = parse_target(args.target)
    if args.pod or args.nodes or args.cluster_pods:
        raise UsageError("--pod, --nodes and --cluster-pods explain files; kpe explain pod reads the cluster")
    if args.limit < 0:
        raise UsageError("--limit must be 0 (every node) or more")
    if args.server:
        data = from_server(args, namespace, name)
    else:
        try:
            data = from_cluster(args, namespace, name, policy_paths(args.policies))
        except PolicyLoadError as exc:
            out.write(exc.render() + "\n")
            return EXIT_FAILED
    write(data, args.output, out, limit=args.limit)
    return EXIT_OK


def write(data: dict[str, Any], output: str, out: TextIO, *, limit: int) -> None:
    if output == "json":
        json.dump(data, out, indent=2, default=str)
    elif output == "markdown":
        out.write(render_markdown(data, limit=limit))
    else:
        out.write(render_text(data, limit=limit))
    out.write("\n")


__all__ = ["add_explain_pod_arguments", "cmd_explain_pod", "from_cluster", "from_server", "parse_target", "write"]
