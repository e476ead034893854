"""``kpe serve``: run the extender under uvicorn, over HTTP or HTTPS."""

from __future__ import annotations

import argparse
from typing import Any

from server.settings import Settings, UsageError, add_arguments, load_settings, plain


def uvicorn_options(settings: Settings, *, app: Any = None) -> dict[str, Any]:
    """uvicorn's options for ``settings``; with ``app`` (from ``create_app``), its
    serving certificate gets uvicorn's SSL context, to reload it when the files change."""
    from server.http.listeners import tls_options

    options: dict[str, Any] = {"host": settings.host, "port": settings.port, "log_config": None, "access_log": False}
    if settings.tls:
        options.update(tls_options(settings, client_ca=settings.tls_client_ca, app=app))
    return options


def cmd_serve(args: argparse.Namespace, out: Any) -> int:
    from engine.errors import PolicyLoadError

    from server.app import create_app
    from server.telemetry.logs import configure

    try:
        settings = load_settings(args)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    problems = settings.validate()
    if problems:
        raise UsageError("; ".join(problems))
    configure(settings.log_level)
    try:
        app = create_app(settings)
    except PolicyLoadError as exc:
        out.write(exc.render() + "\n\nkpe serve: the policies have errors; nothing to serve.\n")
        return 1
    from server.cluster.policyobjects import PolicySourceError
    from server.http.listeners import run

    try:
        run(app, settings)
    except SystemExit:
        # uvicorn exits when the lifespan fails; --policy-source cluster loads its first set there.
        if getattr(app.state, "startup_error", None) is None:
            raise
    failed = getattr(app.state, "startup_error", None)
    if isinstance(failed, PolicyLoadError):
        out.write(failed.render() + "\n\nkpe serve: the policies in the cluster have errors; nothing to serve.\n")
        return 1
    if isinstance(failed, PolicySourceError):
        raise UsageError(str(failed))
    return 1 if failed is not None else 0


def add_serve_command(sub: Any) -> None:
    serve = sub.add_parser(
        "serve",
        help="serve the extender verbs to kube-scheduler",
        # Forty-odd flags spelled out in the usage line would bury the help below it.
        usage="%(prog)s [options]",
        description=plain(__doc__ or "") + " Every option is also a KPE_* environment variable: a flag wins over the variable, the variable over the default.",
    )
    add_arguments(serve)
    serve.set_defaults(run=cmd_serve)
