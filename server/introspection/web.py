"""The web view: the introspection API's documents as pages, under ``/ui/`` on the
introspection listener (same TLS and client-certificate checks; ``kubectl
port-forward`` is the documented way in).

Read-only by construction: every route is a GET that reads a document of
``server.introspection.documents`` and renders it. With ``Accept: application/json``
a page answers that document itself, so a page's data is the API's. Pages are
rendered on the server by Jinja2 templates (``templates/``): autoescaped (pod names,
rule messages and policy errors are the cluster's text, never markup), no build step
and no script, so a page works offline from ``kpe view --snapshot`` the same.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from server.http.responses import json_response
from server.introspection import views
from server.introspection.documents import Answer, Source

if TYPE_CHECKING:
    import jinja2

SourceOf = Callable[[Request], Source]

@functools.cache
def templates() -> jinja2.Environment:
    """The pages' templates, loaded at the first page: a kpe nobody looks at never imports
    Jinja2 (each module imported stays in kpe's memory; docs/performance.md)."""
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(Path(__file__).parent / "templates"),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["q"] = lambda text: quote(str(text), safe="")
    env.filters["duration"] = views.duration
    env.filters["stamp"] = lambda t: datetime.fromtimestamp(float(t), timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC") if t is not None else "?"
    return env


def wants_json(request: Request) -> bool:
    """Whether the client asked for the page's data rather than the page: ``application/json``
    accepted and ``text/html`` not (a browser sends both, with HTML first)."""
    accept = request.headers.get("accept", "")
    return "application/json" in accept and "text/html" not in accept


def _page(request: Request, source: Source, answer: Answer, template: str, **context: Any) -> Response:
    status, document = answer
    if wants_json(request):
        return json_response(document, status)
    html = templates().get_template(template).render(
        source=source.label, now=source.now(), error=document.get("error"), doc=document, section=template.removesuffix(".html"), **context,
    )
    return HTMLResponse(html, status)


def routes(source_of: SourceOf) -> list[Route]:
    """The web view's routes, reading documents from ``source_of(request)``."""

    async def index(request: Request) -> Response:
        return RedirectResponse("/ui/pending", 303)

    async def policies(request: Request) -> Response:
        source = source_of(request)
        return _page(request, source, await source.policies(), "policies.html")

    async def pending(request: Request) -> Response:
        source = source_of(request)
        answer = await source.pending()
        names = await _policy_names(source)
        show_all = request.query_params.get("all") == "1"
        groups = views.pending_groups(answer[1], names)
        return _page(request, source, answer, "pending.html", groups=groups, shown=None if show_all else views.SHOWN_PODS)

    async def pod(request: Request) -> Response:
        source = source_of(request)
        namespace, name = request.path_params["namespace"], request.path_params["name"]
        status, data = await source.pod(namespace, name)
        context: dict[str, Any] = {"namespace": namespace, "name": name}
        if status == 200:
            columns, rows, more = views.score_rows(data)
            context.update(summary=views.pod_summary(data), groups=views.verdict_groups(data), columns=columns, rows=rows, more_scored=more,
                           total=len(data.get("nodes") or []))
        return _page(request, source, (status, data), "pod.html", **context)

    async def reservations(request: Request) -> Response:
        source = source_of(request)
        return _page(request, source, await source.reservations(), "reservations.html")

    async def decisions(request: Request) -> Response:
        source = source_of(request)
        query = request.query_params
        try:
            limit = max(1, min(int(query.get("limit", "200")), 5000))
        except ValueError:
            return json_response({"error": "limit must be an integer"}, 400)
        verb, pod, policy = query.get("verb") or None, query.get("pod") or None, query.get("policy") or None
        status, document = await source.decisions(verb=verb, pod=pod, limit=limit)
        entries = views.filter_decisions(document.get("decisions") or [], policy=policy)
        document = {**document, "decisions": entries}
        rows = [{**e, "summary": views.decision_summary(e)} for e in entries]
        return _page(request, source, (status, document), "decisions.html", rows=rows, verb=verb or "", pod=pod or "", policy=policy or "",
                     verbs=("filter", "prioritize", "preempt", "bind", "admit"))

    return [
        Route("/ui", index, methods=["GET"]),
        Route("/ui/", index, methods=["GET"]),
        Route("/ui/policies", policies, methods=["GET"]),
        Route("/ui/pending", pending, methods=["GET"]),
        Route("/ui/pods/{namespace}/{name}", pod, methods=["GET"]),
        Route("/ui/reservations", reservations, methods=["GET"]),
        Route("/ui/decisions", decisions, methods=["GET"]),
    ]


async def _policy_names(source: Source) -> list[str]:
    _, document = await source.policies()
    return [p["name"] for p in document.get("policies") or []]

