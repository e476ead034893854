"""``kpe explain pod NAMESPACE/NAME``: why is this pod pending, on the live cluster.

Two sources, one report (``engine.reports.diagnosis.diagnose``, printed by ``engine.reports.diagnosis.view``):

- the cluster itself (``--kubeconfig`` or in-cluster credentials): the pod, every
  node and every pod are read from the API server and decided with the policies
  given with ``--policies`` (required: there is no default set), ``nodeInfo`` made from
  the pods bound to each node, ``dra`` from the cluster's resource.k8s.io/v1 objects
  (the devices the pod asks for and each node's free devices are shown), the
  reservations' slots from the placeholders in
  ``--reservation-namespace`` and the owners' claims;
- a running kpe (``--server URL``): ``GET /apis/v1/explain?pod=`` on its
  introspection listener, decided by that replica with the generation it serves,
  its cache's nodes and ``nodeInfo`` and its reservation controller's slots:
  exactly what its extender verbs see.

Either way the report adds what kpe's preempt verb last kept out of the pod's
preemption, and by which policy's rule: from that replica's decision log
(``/apis/v1/decisions``), or from the PreemptionVetoed Event kpe posted on the pod
(``server.verbs.vetoes``).

Exit codes: those of ``kpe explain`` (server.cli.main's EXPLAIN_EXIT_CODES).
"""

from __future__ import annotations

import argparse
import json
from datetime import datetime, timezone
from typing import Any, TextIO

from engine.reports.diagnosis.diagnose import diagnose, preemption_vetoes
from engine.reports.diagnosis.view import DEFAULT_LIMIT, render_markdown, render_text
from engine.errors import PolicyLoadError
from engine.policy.loader import load
from engine.cluster.projection import namespaces_by_name

from server.cli.remote import (
    add_cluster_arguments,
    add_server_arguments,
    get_json,
    read_cluster,
    read_dra,
    read_namespaces,
    with_cluster,
)
from server.settings import Settings, UsageError, policy_paths
from server.verbs.vetoes import ANNOTATION as VETO_ANNOTATION, REASON as VETO_REASON

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
    # What that replica's preempt verb last did for the pod, from its decision log.
    entries = get_json(args, "/apis/v1/decisions", {"pod": f"{namespace}/{name}", "verb": "preempt", "limit": "1"}).get("decisions") or []
    if entries and isinstance(entries[0], dict):
        entry = entries[0]
        data["preemption"] = preemption_vetoes(
            entry.get("rejected") or {}, unchecked=entry.get("unchecked"), source=f"kpe's decision log, preempt at {_when(entry.get('time'))}"
        )
    return data


def _when(at: Any) -> str:
    try:
        return datetime.fromtimestamp(float(at), tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (TypeError, ValueError, OverflowError):
        return "?"


async def vetoed_by_event(client: Any, pod: dict[str, Any]) -> dict[str, Any] | None:
    """The pod's latest PreemptionVetoed Event (``server.verbs.vetoes``), as ``preemption_vetoes``
    gives it; None when there is none, or events cannot be read (they only add to the report)."""
    from server.cluster.kube import ApiError

    meta = pod.get("metadata") or {}
    selector = f"involvedObject.name={meta.get('name')},reason={VETO_REASON}"
    try:
        listed = await client.list(f"/api/v1/namespaces/{meta.get('namespace')}/events", params={"fieldSelector": selector})
    except ApiError:
        return None
    uid = meta.get("uid")
    events = [e for e in listed.get("items") or [] if not uid or (e.get("involvedObject") or {}).get("uid") in (None, "", uid)]
    if not events:
        return None
    latest = max(events, key=lambda e: (str(e.get("lastTimestamp") or ""), int((e.get("metadata") or {}).get("resourceVersion") or 0)))
    try:
        noted = json.loads(((latest.get("metadata") or {}).get("annotations") or {}).get(VETO_ANNOTATION) or "")
        vetoed, nodes = dict(noted["vetoed"]), int(noted["nodes"])
    except (ValueError, KeyError, TypeError):
        return None  # not kpe's shape: the Event's message is still there for kubectl describe
    return preemption_vetoes(vetoed, nodes=nodes, source=f"PreemptionVetoed Event at {latest.get('lastTimestamp') or '?'}")


def from_cluster(args: argparse.Namespace, namespace: str, name: str, policy_paths: list[str]) -> dict[str, Any]:
    from server.cluster.kube import ApiError

    policy_set = load(policy_paths)

    async def work(client: Any) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]], dict[str, Any], str,
                                         dict[str, Any] | None]:
        try:
            pod = await client.get_pod(namespace, name)
        except ApiError as exc:
            if exc.status == 404:
                raise UsageError(f"pod {namespace}/{name} not found ({client.source})") from None
            raise
        nodes, pods = await read_cluster(client)
        namespaces = await read_namespaces(client)
        return pod, nodes, pods, namespaces, await read_dra(client), client.source, await vetoed_by_event(client, pod)

    pod, nodes, pods, namespaces, dra, source, vetoed = with_cluster(args, work)
    data = diagnose(
        policy_set, pod, nodes, cluster_pods=pods, placeholder_namespace=args.reservation_namespace, namespaces=namespaces_by_name(namespaces),
        dra=dra,
    ).to_dict()
    data["source"] = f"policies {' '.join(policy_paths)}, cluster from {source}"
    if vetoed is not None:
        data["preemption"] = vetoed
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
