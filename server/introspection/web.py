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

import asyncio
import functools
import gc
import time
from collections.abc import Awaitable, Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from engine.reports.diagnosis.view import render_text

from server.http.responses import json_response
from server.introspection import views
from server.introspection.documents import Answer, Document, Source

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


FRESH_FOR = 1.0  # seconds a built page is answered again (see Pages)
KEPT_PAGES = 16  # pages kept at most


class Pages:
    """Builds one page at a time, in a thread, and answers it again for ``fresh_for`` seconds.

    Why: kube-scheduler waits for kpe on every pod, and a page reads every pending pod or
    every node (tens to hundreds of milliseconds at 5,000 nodes). Built on the event loop,
    a page would hold up every verb request behind it; built in a thread, it shares the
    interpreter with them, so only one page is built at a time, and a page loaded again
    within ``fresh_for`` (a refresh, a second person in an incident, a script polling) is
    the one already built: the view costs the verbs at most one build per page a second,
    however many look. Only complete pages (status 200) are kept.
    """

    def __init__(self, *, clock: Callable[[], float] = time.monotonic, fresh_for: float = FRESH_FOR, kept: int = KEPT_PAGES) -> None:
        self.clock, self.fresh_for, self.kept_most = clock, fresh_for, kept
        self._kept: dict[tuple[str, str, bool], tuple[float, Response]] = {}
        self._building = asyncio.Lock()
        self.built = 0  # pages built, for tests and the benchmark

    def _fresh(self, key: tuple[str, str, bool]) -> Response | None:
        hit = self._kept.get(key)
        return hit[1] if hit is not None and self.clock() - hit[0] < self.fresh_for else None

    async def serve(self, request: Request, build: Callable[[Request], Awaitable[Response]]) -> Response:
        key = (request.url.path, request.url.query, wants_json(request))
        response = self._fresh(key)
        if response is not None:
            return response
        async with self._building:
            response = self._fresh(key)  # built while this request waited its turn
            if response is not None:
                return response
            # The collector waits while a page is built, as it does while a verb is answered
            # (server.verbs.endpoints): a page's objects (a pod's explanation of every node is
            # millions) are acyclic and gone once it is rendered, and walking them meanwhile is
            # most of a pod's page at 5,000 nodes and 20,000 pods: 940-1,180 ms a build with the
            # collector, 560-860 ms without.
            collecting = gc.isenabled()
            gc.disable()
            try:
                response = await build(request)
            finally:
                if collecting:
                    gc.enable()
            self.built += 1
            if response.status_code == 200:
                now = self.clock()
                self._kept = {k: v for k, v in self._kept.items() if now - v[0] < self.fresh_for}
                if len(self._kept) >= self.kept_most:
                    self._kept.pop(next(iter(self._kept)))
                self._kept[key] = (now, response)
            return response


async def _page(
    request: Request, source: Source, answer: Answer, template: str, context: Callable[[Document], dict[str, Any]] | None = None,
    **fixed: Any,
) -> Response:
    """The page (or, asked for JSON, its document), rendered in a thread (see Pages)."""
    status, document = answer
    as_json = wants_json(request)
    label, now = source.label, source.now()

    def render() -> Response:
        if as_json:
            return json_response(document, status)
        extra = context(document) if context is not None and status == 200 else {}
        html = templates().get_template(template).render(
            source=label, now=now, error=document.get("error"), doc=document, section=template.removesuffix(".html"), **fixed, **extra,
        )
        return HTMLResponse(html, status)

    return await asyncio.to_thread(render)


def routes(source_of: SourceOf, *, pages: Pages | None = None) -> list[Route]:
    """The web view's routes, reading documents from ``source_of(request)``."""
    built = pages if pages is not None else Pages()

    async def index(request: Request) -> Response:
        return RedirectResponse("/ui/pending", 303)

    async def policies(request: Request) -> Response:
        source = source_of(request)
        return await _page(request, source, await source.policies(), "policies.html")

    async def pending(request: Request) -> Response:
        source = source_of(request)
        answer = await source.pending()
        names = await _policy_names(source)
        shown = None if request.query_params.get("all") == "1" else views.SHOWN_PODS
        return await _page(request, source, answer, "pending.html", lambda doc: {"groups": views.pending_groups(doc, names), "shown": shown})

    async def pod(request: Request) -> Response:
        source = source_of(request)
        namespace, name = request.path_params["namespace"], request.path_params["name"]

        def context(data: Document) -> dict[str, Any]:
            columns, rows, more = views.score_rows(data)
            # The text as kpe explain pod prints it by default (its first nodes): the document's own
            # lists every node, megabytes at 5,000 nodes, which the groups above already summarise.
            return {"summary": views.pod_summary(data), "groups": views.verdict_groups(data), "columns": columns, "rows": rows,
                    "more_scored": more, "total": len(data.get("nodes") or []), "text": render_text(data)}

        answer = await source.pod(namespace, name, text=wants_json(request))  # the page renders its own, shorter text
        return await _page(request, source, answer, "pod.html", context, namespace=namespace, name=name)

    async def reservations(request: Request) -> Response:
        source = source_of(request)
        return await _page(request, source, await source.reservations(), "reservations.html")

    async def decisions(request: Request) -> Response:
        source = source_of(request)
        query = request.query_params
        try:
            limit = max(1, min(int(query.get("limit", "200")), 5000))
        except ValueError:
            return json_response({"error": "limit must be an integer"}, 400)
        verb, pod, policy = query.get("verb") or None, query.get("pod") or None, query.get("policy") or None
        status, document = await source.decisions(verb=verb, pod=pod, limit=limit)
        document = {**document, "decisions": views.filter_decisions(document.get("decisions") or [], policy=policy)}
        form = {"verb": verb or "", "pod": pod or "", "policy": policy or "", "verbs": ("filter", "prioritize", "preempt", "bind", "admit")}
        return await _page(request, source, (status, document), "decisions.html",
                           lambda doc: {"rows": [{**e, "summary": views.decision_summary(e)} for e in doc["decisions"]]}, **form)

    def kept(build: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
        async def serve(request: Request) -> Response:
            return await built.serve(request, build)

        return serve

    return [
        Route("/ui", index, methods=["GET"]),
        Route("/ui/", index, methods=["GET"]),
        Route("/ui/policies", kept(policies), methods=["GET"]),
        Route("/ui/pending", kept(pending), methods=["GET"]),
        Route("/ui/pods/{namespace}/{name}", kept(pod), methods=["GET"]),
        Route("/ui/reservations", kept(reservations), methods=["GET"]),
        Route("/ui/decisions", kept(decisions), methods=["GET"]),
    ]


async def _policy_names(source: Source) -> list[str]:
    _, document = await source.policies()
    return [p["name"] for p in document.get("policies") or []]

