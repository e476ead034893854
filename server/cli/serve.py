"""``kpe serve``: run the extender under uvicorn, over HTTP or HTTPS."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from server.settings import Settings, UsageError, add_arguments, exit_codes, load_settings, plain

EXIT_CODES = exit_codes(
    "stopped by a signal (SIGTERM, Ctrl-C)",
    "the policies do not load at start-up (files, or the cluster's objects), or kpe could not start (a port in use)",
    "usage errors: settings that are invalid or do not go together, no policies given, the cluster cannot be the policy source (no CRDs, no access)",
)


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

    quiet = _ExplainedStartupFailure(app, explained=(PolicySourceError,))
    logging.getLogger("uvicorn.error").addFilter(quiet)
    try:
        run(app, settings)
    except SystemExit:
        # uvicorn exits when the lifespan fails; --policy-source cluster lists its objects there.
        if getattr(app.state, "startup_error", None) is None:
            raise
    finally:
        logging.getLogger("uvicorn.error").removeFilter(quiet)
    failed = getattr(app.state, "startup_error", None)
    if isinstance(failed, PolicySourceError):
        raise UsageError(str(failed))
    return 1 if failed is not None else 0


class _ExplainedStartupFailure(logging.Filter):
    """Drops uvicorn's traceback of a start-up failure that ``kpe serve`` says in one line
    itself (the cluster cannot be the policy source): a stack trace there reads as a crash of
    kpe's, when the fix is the operator's. Any other failure keeps its traceback."""

    def __init__(self, app: Any, *, explained: tuple[type[BaseException], ...]) -> None:
        super().__init__()
        self.app = app
        self.explained = explained

    def filter(self, record: logging.LogRecord) -> bool:
        failed = getattr(self.app.state, "startup_error", None)
        return not (isinstance(failed, self.explained) and str(record.msg).startswith("Traceback"))


def add_serve_command(sub: Any) -> None:
    serve = sub.add_parser(
        "serve",
        help="serve the extender verbs to kube-scheduler",
        # Forty-odd flags spelled out in the usage line would bury the help below it.
        usage="%(prog)s [options]",
        description=plain(__doc__ or "") + " Every option is also a KPE_* environment variable: a flag wins over the variable, the variable over the default.",
        epilog=EXIT_CODES,
    )
    add_arguments(serve)
    serve.set_defaults(run=cmd_serve)
