"""The ``kpe`` command as a client: of a running kpe's introspection API (``--server``)
and, through ``server.cluster.kube``, of the Kubernetes API (``--kubeconfig`` or in-cluster).

kpe's introspection listener is on loopback by default (``--introspection-host``):
reach a deployed replica with ``kubectl -n kpe-system port-forward deploy/kpe 8081``
and ``--server https://127.0.0.1:8081 --ca-file ca.crt --tls-server-name kpe.kpe-system.svc``
(its serving certificate names the Service, not 127.0.0.1).

Every failure is a ``UsageError`` whose message says what could not be reached and
why: the commands exit 2 with it.
"""

from __future__ import annotations

import argparse
import asyncio
import ssl
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import httpx

from server.settings import UsageError

T = TypeVar("T")
TIMEOUT_S = 60.0  # explaining a pod on a large cluster takes a while


def add_cluster_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--kubeconfig", default="", metavar="FILE",
        help="kubeconfig for the cluster (default: $KUBECONFIG, the in-cluster service account, ~/.kube/config)",
    )


def add_server_arguments(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--server", metavar="URL", help=f"a running kpe's introspection listener: {what}")
    parser.add_argument("--ca-file", metavar="FILE", help="CA bundle that signed kpe's serving certificate (with --server over HTTPS)")
    parser.add_argument("--tls-server-name", metavar="NAME", help="the name kpe's certificate is checked against, when --server names a port-forward (e.g. kpe.kpe-system.svc)")
    parser.add_argument("--insecure-skip-tls-verify", action="store_true", help="do not check kpe's certificate (with --server over HTTPS)")


def get_json(args: argparse.Namespace, path: str, params: dict[str, str] | None = None) -> dict[str, Any]:
    """GET ``path`` from ``args.server``; the JSON object it answers. Error answers
    (kpe's ``{"error": ...}``) and transport failures become a UsageError."""
    base = str(args.server).rstrip("/")
    verify: Any = True
    if getattr(args, "insecure_skip_tls_verify", False):
        verify = False
    elif getattr(args, "ca_file", None):
        try:
            verify = ssl.create_default_context(cafile=str(args.ca_file))
        except (OSError, ssl.SSLError) as exc:
            raise UsageError(f"--ca-file: cannot load {args.ca_file}: {exc}") from None
    extensions = {"sni_hostname": args.tls_server_name} if getattr(args, "tls_server_name", None) else None
    try:
        with httpx.Client(verify=verify, timeout=TIMEOUT_S) as client:
            response = client.get(base + path, params=params, extensions=extensions)
    except httpx.HTTPError as exc:
        hint = (
            "check --ca-file, and --tls-server-name when the URL is a port-forward"
            if "CERTIFICATE_VERIFY_FAILED" in str(exc)
            else "its introspection listener is on loopback by default: kubectl port-forward to it, see docs/operations.md"
        )
        raise UsageError(f"cannot reach kpe at {base}: {type(exc).__name__}: {exc} ({hint})") from None
    except (OSError, ValueError) as exc:  # a CA file that cannot be read
        raise UsageError(f"cannot connect to kpe at {base}: {exc}") from None
    try:
        data = response.json()
    except ValueError:
        data = None
    if response.status_code != 200:
        message = data.get("error") or data.get("Error") if isinstance(data, dict) else response.text[:300]
        raise UsageError(f"kpe at {base} answered {response.status_code} to GET {path}: {message}")
    if not isinstance(data, dict):
        raise UsageError(f"kpe at {base} answered GET {path} with something else than a JSON object")
    return data


async def read_cluster(client: Any, *, include_finished: bool = False) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Every node and pod of the cluster, trimmed as they arrive (``engine.cluster.snapshot.trim``),
    finished pods left out unless ``include_finished``."""
    from engine.cluster.snapshot import is_finished, trim

    nodes, _ = await client.list_all("/api/v1/nodes", transform=trim)
    pods, _ = await client.list_all("/api/v1/pods", transform=trim)
    if not include_finished:
        pods = [p for p in pods if not is_finished(p)]
    return nodes, pods


async def read_namespaces(client: Any) -> list[dict[str, Any]]:
    """Every namespace as ``namespaceObject`` holds it (``engine.cluster.projection.namespace_view``);
    none when the credentials may not list namespaces (policies then see null, as kpe would
    without its namespace RBAC)."""
    from engine.cluster.projection import namespace_view
    from server.cluster.kube import ApiError

    try:
        namespaces, _ = await client.list_all("/api/v1/namespaces", transform=namespace_view)
    except ApiError as exc:
        if exc.status not in (401, 403):
            raise
        return []
    return list(namespaces)


async def read_dra(client: Any) -> dict[str, Any]:
    """``dra`` (engine.cluster.devices) from the cluster's resource.k8s.io/v1 objects, each cut
    as kpe's cache cuts it; empty where the API server does not serve them or the credentials
    may not list them (policies then see no devices, as kpe would)."""
    from engine.cluster.devices import GROUP, KINDS, VERSION, dra_of
    from server.cluster.kube import ApiError

    objects: dict[str, list[dict[str, Any]]] = {}
    for kind in KINDS:
        try:
            items, _ = await client.list_all(f"/apis/{GROUP}/{VERSION}/{kind}")
        except ApiError as exc:
            if exc.status not in (401, 403, 404):
                raise
            items = []
        objects[kind] = list(items)
    return dra_of(objects)


def with_cluster(args: argparse.Namespace, work: Callable[[Any], Awaitable[T]]) -> T:
    """Run ``work(client)`` with a Kubernetes client made from ``--kubeconfig`` (or the
    environment), closing it afterwards; credential and API failures become UsageError."""
    from server.cluster.kube import ApiError, CredentialsError, KubeClient

    async def run() -> T:
        try:
            client = await KubeClient.connect(kubeconfig=args.kubeconfig, required=True)
        except CredentialsError as exc:
            raise UsageError(str(exc)) from None
        assert client is not None
        try:
            return await work(client)
        except ApiError as exc:
            raise UsageError(f"the Kubernetes API server ({client.source}) refused or failed: {exc}") from None
        finally:
            await client.close()

    return asyncio.run(run())


__all__ = ["add_cluster_arguments", "add_server_arguments", "get_json", "read_cluster", "with_cluster"]
