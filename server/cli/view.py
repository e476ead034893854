"""``kpe view --snapshot FILE --policies PATH``: the web view of a snapshot, with no cluster
and no running kpe (``server.introspection.offline``): the pages a running kpe serves under
``/ui/``, on loopback, for an incident's snapshot shared by file.
"""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from starlette.applications import Starlette

from engine.cluster.snapshot import SnapshotError, read
from engine.errors import PolicyLoadError
from engine.policy.loader import load

from server.introspection import web
from server.introspection.offline import SnapshotSource
from server.settings import UsageError, exit_codes

EXIT_CODES = exit_codes("stopped by a signal (SIGTERM, Ctrl-C)", None, "usage errors, an unreadable snapshot, a policy set that does not load, a port in use")


def app_for(source: SnapshotSource) -> Starlette:
    """The web view's routes over one snapshot (nothing else is served)."""
    return Starlette(routes=web.routes(lambda request: source))


def cmd_view(args: argparse.Namespace, out: TextIO) -> int:
    try:
        snapshot = read(args.snapshot)
    except SnapshotError as exc:
        raise UsageError(f"--snapshot: {exc}") from None
    try:
        policy_set = load(args.policies)
    except PolicyLoadError as exc:
        raise UsageError(f"--policies do not load:\n{exc}") from None
    # Pending pods the snapshot recorded no decision for are decided at the first pending page: it waits
    # half a second for them, then shows how many are decided so far (server.introspection.offline).
    source = SnapshotSource(snapshot, policy_set, path=args.snapshot, first_wait=0.5)
    import uvicorn

    out.write(f"kpe view: {source.label}; open http://{args.host}:{args.port}/ui/ (Ctrl-C stops)\n")
    out.flush()
    try:
        uvicorn.run(app_for(source), host=args.host, port=args.port, log_level="warning")
    except SystemExit as exc:  # uvicorn exits when it cannot bind
        raise UsageError(f"cannot serve on {args.host}:{args.port}") from exc
    return 0


def add_view_command(sub: Any) -> None:
    view = sub.add_parser(
        "view",
        help="the web view of a snapshot, served on loopback",
        description="Serve the pages kpe serves under /ui/ (pending pods, a pod's explanation, policies, reservations, "
        "decisions) for a file written by kpe snapshot, decided with the policies given.",
        epilog=EXIT_CODES,
    )
    view.add_argument("--snapshot", metavar="FILE", required=True, help="a file written by kpe snapshot (anonymised or not)")
    view.add_argument("--policies", nargs="+", required=True, metavar="PATH", help="the policy files or directories to decide with")
    view.add_argument("--host", default="127.0.0.1", help="the address to listen on (default 127.0.0.1: this machine only)")
    view.add_argument("--port", type=int, default=8080, help="the port (default 8080)")
    view.set_defaults(run=cmd_view)
