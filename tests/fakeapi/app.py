"""The ASGI app: kube-apiserver's REST paths over a ``State``.

Plain ASGI (no framework) so a watch can be streamed, ended cleanly, or
broken mid-stream exactly as the tests ask.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import logging
import uuid
from typing import Any
from urllib.parse import parse_qsl

import httpx

from .patch import PatchError, apply_json_patch, apply_merge_patch
from .records import MutatingWebhook, Request, go_bool
from .state import State
from .wire import (
    CUSTOM, JSONPATCH_FAILED, NODES, PODS, ApiError, Obj, Resource, bad_request, by_path, canonical, dumps, generic, not_found,
    status,
)

VERSION = {"major": "1", "minor": "25+", "gitVersion": "v1.25.0-alpha.0+fakeapi", "gitCommit": "9d577d8",
           "gitTreeState": "clean", "buildDate": "2026-11-21T16:00:00Z", "goVersion": "go1.18", "compiler": "gc",
           "platform": "linux/amd64"}
PATCH_TYPES = ("application/json-patch+json", "application/merge-patch+json", "application/apply-patch+yaml",
               "application/strategic-merge-patch+json")


class _Dropped(Exception):
    """Raised inside a watch stream to make uvicorn close the socket without ending the chunked body."""


class _QuietDrops(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, _Dropped)


logging.getLogger("uvicorn.error").addFilter(_QuietDrops())


def _headers(content_type: str = "application/json", extra: dict[str, str] | None = None) -> list[tuple[bytes, bytes]]:
    h = {"audit-id": str(uuid.uuid4()), "cache-control": "no-cache, private", "content-type": content_type,
         "x-kubernetes-pf-flowschema-uid": "c0ffee00-0000-4000-8000-000000000001",
         "x-kubernetes-pf-prioritylevel-uid": "c0ffee00-0000-4000-8000-000000000002", **(extra or {})}
    return [(k.encode(), v.encode()) for k, v in h.items()]


class FakeApiApp:
    def __init__(self, state: State) -> None:
        self.state = state

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                msg = await receive()
                if msg["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif msg["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        body = b""
        while True:
            msg = await receive()
            body += msg.get("body", b"")
            if not msg.get("more_body"):
                break
        query: dict[str, str] = {}
        for k, v in parse_qsl(scope.get("query_string", b"").decode(), keep_blank_values=True):
            query.setdefault(k, v)  # Go's url.Values.Get: the first value
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        req = Request(scope["method"], scope["path"], query, headers, body)
        self.state.record(req)
        ua = headers.get("user-agent", "")
        pretty = query.get("pretty") in ("true", "1") or ua.startswith(("curl", "Wget"))
        try:
            if self.state.token and headers.get("authorization") != f"Bearer {self.state.token}":
                raise ApiError(generic(401))
            fault = self.state.take_fault(req.method, req.path, watching=query.get("watch", "") in ("1", "t", "T", "TRUE", "true", "True"))
            if fault is not None:
                extra = {"retry-after": "1"} if fault.get("code") in (429, 503) else None
                raise ApiError(fault, extra)
            change = self.state.take_interlude(req.method, req.path)
            if change is not None:
                change(self.state)
            if self.state.take_cut(req.method, req.path):
                await self._cut(req, receive, send)
                return
            answer = await self._route(req, receive, send)
            if answer is None:  # streamed
                return
            code, obj = answer
        except ApiError as exc:
            code, obj = exc.code, exc.status
            await self._respond(send, code, obj, pretty, exc.headers)
            return
        await self._respond(send, code, obj, pretty)

    async def _cut(self, req: Request, receive: Any, send: Any) -> None:
        """Serve the request, then send half its answer and break the connection (``State.cut_next``)."""
        if go_bool(req.query.get("watch", "")):
            await send({"type": "http.response.start", "status": 200, "headers": _headers()})
            await send({"type": "http.response.body", "body": b'{"type":"ADDED","object":{"kind":', "more_body": True})
            raise _Dropped("watch cut by the test")
        try:
            answer = await self._route(req, receive, send)
        except ApiError as exc:
            answer = exc.code, exc.status
        assert answer is not None
        data = dumps(canonical(answer[1]) if "kind" in answer[1] else answer[1])
        await send({"type": "http.response.start", "status": answer[0], "headers": _headers(extra={"content-length": str(len(data))})})
        await send({"type": "http.response.body", "body": data[: len(data) // 2], "more_body": True})
        raise _Dropped("answer cut by the test")

    async def _respond(self, send: Any, code: int, obj: Obj, pretty: bool, extra: dict[str, str] | None = None) -> None:
        data = dumps(canonical(obj) if "kind" in obj else obj, pretty=pretty)
        await send({"type": "http.response.start", "status": code,
                    "headers": _headers(extra={**(extra or {}), "content-length": str(len(data))})})
        await send({"type": "http.response.body", "body": data})

    # ---------------------------------------------------------------- routing

    async def _route(self, req: Request, receive: Any, send: Any) -> tuple[int, Obj] | None:
        parts = [p for p in req.path.split("/") if p]
        if req.path in ("/version", "/version/"):
            return 200, VERSION
        if req.path in ("/healthz", "/readyz", "/livez"):
            return 200, {"ok": True}
        if len(parts) >= 2 and parts[:2] == ["api", "v1"]:
            group, version, rest = "", "v1", parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis":
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise ApiError(generic(404))
        namespace: str | None = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        if not rest or len(rest) > 3:
            raise ApiError(generic(404))
        if group == "" and rest[0] == "bindings" and namespace is not None and len(rest) == 1 and req.method == "POST":
            body = _decode(req)
            return self._bind(namespace, str((body.get("metadata") or {}).get("name", "")), body)
        res = by_path(group, version, rest[0])
        if res is None or (res.namespaced and namespace is None and len(rest) > 1) or (not res.namespaced and namespace is not None):
            raise ApiError(generic(404))
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else ""
        m = req.method
        if name is None:
            if m == "GET":
                if go_bool(req.query.get("watch", "")):
                    await self._watch(res, namespace, req.query, receive, send)
                    return None
                return 200, self.state.list_response(res, namespace, req.query)
            if m == "POST" and namespace is not None or m == "POST" and not res.namespaced:
                return await self._create(req, res, namespace or "")
            raise ApiError(generic(405))
        ns = namespace or ""
        if sub == "binding" and res is PODS:
            if m != "POST":
                raise ApiError(generic(405))
            return self._bind(ns, name, _decode(req))
        if sub and not (sub == "status" and res in (PODS, NODES, *CUSTOM)):
            raise ApiError(generic(404))
        if m == "GET":
            obj = self.state.get(res, name, ns)
            if obj is None:
                raise not_found(res, name)
            return 200, obj
        if m == "PUT":
            body = _decode(req, res)
            body_name = (body.get("metadata") or {}).get("name", "")
            if body_name != name:
                raise bad_request(f"the name of the object ({body_name}) does not match the name on the URL ({name})")
            _check_namespace(body, ns)
            return 200, self.state.replace(res, body, ns, subresource=sub)
        if m == "PATCH":
            return 200, self._patch(req, res, ns, name, sub)
        if m == "DELETE" and not sub:
            return self._delete(req, res, ns, name)
        raise ApiError(generic(405))

    # ---------------------------------------------------------------- verbs

    async def _create(self, req: Request, res: Resource, namespace: str) -> tuple[int, Obj]:
        body = _decode(req, res)
        _check_namespace(body, namespace)
        if (body.get("metadata") or {}).get("resourceVersion"):
            raise ApiError(status(500, "", "resourceVersion should not be set on objects to be created"))
        obj = self.state.prepare_create(res, namespace, body, admission=True)
        for hook in list(self.state.webhooks):
            if res.plural in hook.resources and "CREATE" in hook.operations:
                obj = await self._admit(hook, res, namespace, obj, req)
        return 201, self.state.create(res, obj, namespace)

    def _patch(self, req: Request, res: Resource, ns: str, name: str, sub: str) -> Obj:
        ctype = req.headers.get("content-type", "").split(";")[0].strip()
        if ctype not in PATCH_TYPES:
            raise ApiError(status(415, "UnsupportedMediaType",
                                  f"the body of the request was in an unknown format - accepted media types include: {', '.join(PATCH_TYPES)}"))
        if ctype in ("application/apply-patch+yaml", "application/strategic-merge-patch+json"):
            raise ApiError(status(415, "UnsupportedMediaType", f"the fake API server does not implement {ctype}"))
        try:
            patch = json.loads(req.body or b"null")
        except ValueError as exc:
            raise bad_request(f"invalid character in patch: {exc}") from None
        with self.state.lock:  # read-patch-write as one step, like GuaranteedUpdate
            cur = self.state.get(res, name, ns)
            if cur is None:
                raise not_found(res, name)
            try:
                patched = apply_json_patch(cur, patch) if ctype == "application/json-patch+json" else apply_merge_patch(cur, patch)
            except TypeError as exc:
                raise bad_request(str(exc)) from None
            except PatchError:
                raise ApiError(status(422, "Invalid", JSONPATCH_FAILED, {})) from None
            if not isinstance(patched, dict):
                raise ApiError(status(422, "Invalid", JSONPATCH_FAILED, {}))
            meta = patched.setdefault("metadata", {})
            if meta.get("name") != name:
                raise bad_request(f"the name of the object ({meta.get('name')}) does not match the name on the URL ({name})")
            return self.state.replace(res, patched, ns, subresource=sub)

    def _delete(self, req: Request, res: Resource, ns: str, name: str) -> tuple[int, Obj]:
        opts = json.loads(req.body) if req.body.strip() else {}
        if not isinstance(opts, dict):
            raise bad_request("the body of the request was not a DeleteOptions object")
        grace = opts.get("gracePeriodSeconds", req.query.get("gracePeriodSeconds"))
        obj, gone = self.state.delete_object(res, name, ns, grace_seconds=int(grace) if grace not in (None, "") else None,
                                             preconditions=opts.get("preconditions"))
        if res is PODS or not gone:
            return 200, obj
        details: Obj = {"name": name}
        if res.group:
            details["group"] = res.group
        details.update({"kind": res.plural, "uid": obj["metadata"]["uid"]})
        return 200, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}

    def _bind(self, ns: str, name: str, body: Obj) -> tuple[int, Obj]:
        meta = body.get("metadata") or {}
        _check_namespace(body, ns)
        if meta.get("name", "") != name:
            raise bad_request("name in URL does not match name in Binding object")
        target = body.get("target") or {}
        if not target.get("name"):
            raise ApiError(status(500, "", "target.name: Required value"))
        if target.get("kind") not in (None, "", "Node"):
            raise ApiError(status(500, "", f'target.kind: Unsupported value: "{target["kind"]}": supported values: "Node", ""'))
        self.state.bind(ns, name, target["name"], uid=meta.get("uid", ""), resource_version=meta.get("resourceVersion", ""),
                        annotations=meta.get("annotations"))
        return 201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}

    # ---------------------------------------------------------------- watch

    async def _watch(self, res: Resource, namespace: str | None, params: dict[str, str], receive: Any, send: Any) -> None:
        text = params.get("timeoutSeconds", "")
        if text and not text.lstrip("-").isdigit():  # an int64 on the real server too
            raise bad_request(f'strconv.ParseInt: parsing "{text}": invalid syntax')
        timeout = int(text) if text and int(text) > 0 else None
        loop = asyncio.get_running_loop()
        state = self.state  # the watch stays with this cluster even if the server is reset
        w = state.open_watch(res, namespace, params, loop)
        await send({"type": "http.response.start", "status": 200, "headers": _headers()})

        async def disconnected() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            w.push("gone")

        watcher_task = asyncio.ensure_future(disconnected())
        deadline = loop.time() + timeout if timeout else None
        interval = state.bookmark_interval
        next_bookmark = loop.time() + interval
        carry = b""
        try:
            while True:
                now = loop.time()
                wait = next_bookmark - now if deadline is None else min(next_bookmark, deadline) - now
                try:
                    kind, data = await asyncio.wait_for(w.queue.get(), timeout=max(wait, 0.0))
                except asyncio.TimeoutError:
                    now = loop.time()
                    if deadline is not None and now >= deadline:
                        break
                    if now >= next_bookmark:
                        state.bookmark(w)
                        next_bookmark = now + interval
                    continue
                if kind == "data" and not state.watch_chunk_bytes:
                    await send({"type": "http.response.body", "body": data, "more_body": True})
                elif kind == "data":
                    # Fault injection: the stream cut at a fixed size regardless of event
                    # boundaries, so chunks end mid-event and hold several events.
                    carry += data
                    while len(carry) >= state.watch_chunk_bytes:
                        await send({"type": "http.response.body", "body": carry[: state.watch_chunk_bytes], "more_body": True})
                        carry = carry[state.watch_chunk_bytes :]
                    if carry and w.queue.empty():
                        await send({"type": "http.response.body", "body": carry, "more_body": True})
                        carry = b""
                elif kind == "end":
                    break
                elif kind == "gone":
                    return
                elif kind == "drop":
                    state.close_watch(w)
                    raise _Dropped("watch dropped by the test")
            state.close_watch(w)  # before the client can see the end
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            state.close_watch(w)
            watcher_task.cancel()

    # ---------------------------------------------------------------- admission

    async def _admit(self, hook: MutatingWebhook, res: Resource, namespace: str, obj: Obj, req: Request) -> Obj:
        gvk = {"group": res.group, "version": res.version, "kind": res.kind}
        gvr = {"group": res.group, "version": res.version, "resource": res.plural}
        options: Obj = {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"}
        for key in ("fieldManager", "fieldValidation"):
            if req.query.get(key):
                options[key] = req.query[key]
        uid = str(uuid.uuid4())
        request: Obj = {"uid": uid, "kind": gvk, "resource": gvr, "requestKind": gvk, "requestResource": gvr}
        if (obj.get("metadata") or {}).get("name"):
            request["name"] = obj["metadata"]["name"]
        if namespace:
            request["namespace"] = namespace
        request.update({"operation": "CREATE", "userInfo": copy.deepcopy(USER_INFO), "object": canonical(obj),
                        "oldObject": None, "dryRun": False, "options": options})
        review = {"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": request}
        url = hook.url + ("&" if "?" in hook.url else "?") + f"timeout={hook.timeout_seconds}s"
        record: Obj = {"request": review}
        hook.reviews.append(record)
        try:
            async with httpx.AsyncClient(verify=hook.verify, timeout=hook.timeout_seconds) as client:
                resp = await client.post(url, content=dumps(review), headers={
                    "Accept": "application/json, */*", "Content-Type": "application/json",
                    "User-Agent": "kube-apiserver-admission"})
            if resp.status_code != 200:
                raise ValueError(f"expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got status {resp.status_code}")
            answer = resp.json()
            record["response"] = answer
            response = answer.get("response") or {}
            if response.get("uid") != uid:
                raise ValueError(f'expected response.uid="{uid}", got "{response.get("uid", "")}"')
        except (httpx.HTTPError, ValueError) as exc:
            if hook.failure_policy == "Ignore":
                return obj
            prefix = "failed to call webhook: " if isinstance(exc, httpx.HTTPError) else ""
            where = f'Post "{url}": ' if isinstance(exc, httpx.HTTPError) else ""
            raise ApiError(generic(500, f'failed calling webhook "{hook.name}": {prefix}{where}{exc}')) from None
        if not response.get("allowed"):
            st = dict(response.get("status") or {})
            denied = f'admission webhook "{hook.name}" denied the request'
            msg = st.get("message") or st.get("reason")
            out = status(max(int(st.get("code") or 400), 400), st.get("reason", ""), f"{denied}: {msg}" if msg else f"{denied} without explanation",
                         st.get("details"))
            raise ApiError(out)
        if response.get("patch"):
            if response.get("patchType") != "JSONPatch":
                raise ApiError(generic(500, f'failed calling webhook "{hook.name}": unsupported patch type {response.get("patchType")!r}'))
            try:
                obj = apply_json_patch(obj, json.loads(base64.b64decode(response["patch"])))
            except (PatchError, TypeError, ValueError) as exc:
                raise ApiError(generic(500, str(exc))) from None
        return obj


USER_INFO: Obj = {"username": "admin", "uid": "admin", "groups": ["system:masters", "system:authenticated"]}


def _decode(req: Request, res: Resource | None = None) -> Obj:
    try:
        body = json.loads(req.body)
    except ValueError as exc:
        raise bad_request(f"couldn't get version/kind; json parse error: {exc}") from None
    if not isinstance(body, dict):
        raise bad_request("couldn't get version/kind; json parse error: json: cannot unmarshal array into Go value of type struct")
    if res is not None:
        kind, api = body.get("kind"), body.get("apiVersion")
        if (kind and kind != res.kind) or (api and api != res.api_version):
            raise bad_request(f"the object provided is unrecognized (must be of type {res.kind}): {kind} in version {api!r}")
    return body


def _check_namespace(body: Obj, namespace: str) -> None:
    ns = (body.get("metadata") or {}).get("namespace")
    if ns and namespace and ns != namespace:
        raise bad_request("the namespace of the provided object does not match the namespace sent on the request")
