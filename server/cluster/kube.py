"""The one module of ``server`` that talks to the Kubernetes API.

kr8s does configuration and authentication (kubeconfig with exec plugins,
tokens and client certificates; the in-cluster service account) and hands us
raw httpx responses through ``Api.call_api``. Watches, the one per-event hot
path, are read by a small HTTP/1.1 reader of our own over kr8s's credentials
(``WatchStream``), httpx only where that reader cannot go. Everything else
stays here and stays plain: objects are the API's JSON decoded with orjson, and the caller
owns resourceVersions, bookmarks and relists (see ``server.cluster.cache``).

Every failure surfaces as ``ApiError`` carrying the API's ``Status``, so
callers catch one exception type: bind answers the scheduler with the API's
own message, the cache decides between resuming, relisting and backing off.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import ssl
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httpx
import kr8s
import kr8s.asyncio
import orjson

from server.cluster.apierrors import ApiError as ApiError
from server.cluster.apierrors import Expired as Expired
from server.cluster.apierrors import WatchError as WatchError
from server.cluster.apierrors import answer_error
from server.cluster.watchstream import WatchStream

Obj = dict[str, Any]
Objs = list[Obj]
Patch = list[dict[str, Any]]

SERVICEACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
REQUEST_TIMEOUT_S = 10.0
# A quiet watch may send nothing for its whole timeoutSeconds; give the server
# that long plus slack before calling the connection dead.
WATCH_READ_SLACK_S = 30.0
# Makes kr8s skip kubeconfig files so the service account wins (kr8s silently
# ignores kubeconfig paths that do not exist; nothing can exist under /dev/null).
_NO_KUBECONFIG = "/dev/null/kpe-in-cluster"


class CredentialsError(Exception):
    """Cluster access was required but no credentials were found, or they could not be loaded."""


def _status_of(response: httpx.Response) -> ApiError:
    """The ApiError for an error response, preferring the API's Status body."""
    return answer_error(response.status_code, response.reason_phrase, response.content, response.text, response.headers.get("retry-after", ""))


@contextlib.contextmanager
def _translated() -> Iterator[None]:
    """kr8s raises ServerError/APITimeoutError, httpx its own transport errors: make them all ApiError."""
    try:
        yield
    except kr8s.ServerError as exc:
        if exc.response is None:
            raise ApiError(0, "ServerError", str(exc)) from exc
        raise _status_of(exc.response) from exc
    except kr8s.APITimeoutError as exc:
        raise ApiError(0, "Timeout", "timed out waiting for the Kubernetes API server") from exc
    except httpx.TimeoutException as exc:
        raise ApiError(0, "Timeout", f"timed out waiting for the Kubernetes API server ({type(exc).__name__})") from exc
    except httpx.ConnectError as exc:
        raise ApiError(0, "Unreachable", f"{type(exc).__name__}: {exc}") from exc
    except httpx.HTTPError as exc:  # the connection broke mid-answer (a dropped watch, a reset)
        raise ApiError(0, "ConnectionLost", f"{type(exc).__name__}: {exc}") from exc


def _split(path: str) -> tuple[str, str]:
    """kr8s builds URLs as base/version/url; a whole path fits as base + url
    (an empty url would add a trailing slash, which the API server rejects)."""
    head, _, tail = path.strip("/").partition("/")
    return "/" + head, tail


def _credentials_source(kubeconfig: str, serviceaccount: str) -> tuple[str, str] | None:
    """Which credentials to load, in client-go's order for controllers: an
    explicit kubeconfig, then $KUBECONFIG, then the in-cluster service account,
    then ~/.kube/config. None when there are none."""
    if kubeconfig:
        if not os.path.isfile(os.path.expanduser(kubeconfig)):
            raise CredentialsError(f"kubeconfig {kubeconfig} does not exist")
        return kubeconfig, "kubeconfig " + kubeconfig
    env = os.environ.get("KUBECONFIG", "")
    if any(os.path.isfile(os.path.expanduser(p)) for p in env.split(os.pathsep) if p):
        return env, "$KUBECONFIG " + env
    if os.environ.get("KUBERNETES_SERVICE_HOST") and os.path.isfile(os.path.join(serviceaccount, "token")):
        return _NO_KUBECONFIG, "in-cluster service account"
    home = os.path.expanduser("~/.kube/config")
    if os.path.isfile(home):
        return home, "kubeconfig " + home
    return None


class KubeClient:
    """Async Kubernetes API calls over one kr8s session. Paths are API paths
    ("/api/v1/nodes"); answers are decoded JSON dicts."""

    def __init__(self, api: kr8s.asyncio.Api, *, source: str = "", timeout: float = REQUEST_TIMEOUT_S) -> None:
        self._api = api
        self.source = source
        self.timeout = timeout
        # The lean watch's TLS context and the credential files it was built from: building
        # one re-reads them, and kr8s's own session keeps its context for its whole life too.
        self._tls: tuple[tuple[Any, ...], ssl.SSLContext] | None = None

    @classmethod
    async def connect(
        cls, *, kubeconfig: str = "", required: bool = False, serviceaccount: str = SERVICEACCOUNT_DIR
    ) -> KubeClient | None:
        """Load credentials (no request is made: an API server that is down at
        start-up is the cache's business, retried with backoff, not a crash).
        None when there are none and they are not ``required``."""
        found = _credentials_source(kubeconfig, serviceaccount)
        if found is None:
            if required:
                raise CredentialsError(
                    "cluster access is required but no credentials were found "
                    "(no --kubeconfig, $KUBECONFIG, in-cluster service account or ~/.kube/config)"
                )
            return None
        path, source = found
        try:
            # Api() directly rather than kr8s.asyncio.api(): that factory shares
            # instances between callers and probes /version, which would make a
            # passing API-server outage fatal at start-up.
            api = kr8s.asyncio.Api(bypass_factory=True, kubeconfig=path, serviceaccount=serviceaccount)
            await api.auth
            # kr8s creates its httpx session lazily inside call_api, and two first
            # calls racing (the node and pod informers) each make one, leaking the
            # loser's connections: make it now, before anything runs concurrently.
            await api._create_session()
        except Exception as exc:  # noqa: BLE001 - kr8s raises ValueError, KeyError, RuntimeError, OSError... for broken configs
            raise CredentialsError(f"cannot load Kubernetes credentials from {source}: {type(exc).__name__}: {exc}") from exc
        return cls(api, source=source)

    @property
    def server(self) -> str:
        return str(self._api.auth.server)

    async def _call(self, method: str, path: str, *, params: dict[str, Any] | None = None, body: Any = None, content_type: str = "") -> Obj:
        kwargs: dict[str, Any] = {"timeout": self.timeout}
        if params:
            kwargs["params"] = params
        if body is not None:
            kwargs["content"] = orjson.dumps(body)
            kwargs["headers"] = {"content-type": content_type or "application/json"}
        with _translated():
            base, url = _split(path)
            async with self._api.call_api(method, base=base, version="", url=url, **kwargs) as response:
                try:
                    answer = orjson.loads(response.content)
                except orjson.JSONDecodeError as exc:
                    raise ApiError(response.status_code, "BadResponse", f"not JSON from {method} {path}: {exc}") from exc
        if not isinstance(answer, dict):
            raise ApiError(response.status_code, "BadResponse", f"{method} {path} answered {type(answer).__name__}, not an object")
        return answer

    async def list(self, path: str, *, params: dict[str, Any] | None = None) -> Obj:
        """One page of a list (pass ``limit``/``continue`` in params)."""
        return await self._call("GET", path, params=params)

    async def list_all(self, path: str, *, page_size: int = 500, transform: Callable[[Obj], Obj] | None = None) -> tuple[Objs, str]:
        """Every item, following ``continue`` tokens; the resourceVersion to watch from.
        An expired continue token raises Expired: the caller starts over. ``transform``
        is applied to each item as its page arrives (before the next page is fetched)."""
        items: Objs = []
        params: dict[str, Any] = {"limit": page_size}
        while True:
            page = await self.list(path, params=params)
            found = page.get("items") or []
            items.extend(map(transform, found) if transform is not None else found)
            meta = page.get("metadata") or {}
            token = meta.get("continue")
            if not token:
                return items, str(meta.get("resourceVersion") or "")
            params = {"limit": page_size, "continue": token}

    async def watch(
        self, path: str, *, resource_version: str, timeout_seconds: int = 300, bookmarks: bool = True, on_open: Callable[[], None] | None = None
    ) -> AsyncIterator[Obj]:
        """Events from a chunked watch stream, one per line, as decoded dicts.
        Ends when the server closes the stream cleanly (its timeoutSeconds);
        raises Expired on 410, WatchError on any other ERROR event, ApiError when
        the connection fails or breaks. ``on_open`` is called once the server has
        accepted the watch (a quiet stream may say nothing for minutes)."""
        params: dict[str, Any] = {"watch": "true", "timeoutSeconds": timeout_seconds}
        if resource_version:
            params["resourceVersion"] = resource_version
        if bookmarks:
            params["allowWatchBookmarks"] = "true"
        read_timeout = timeout_seconds + WATCH_READ_SLACK_S
        if not self._lean_watch_fits():
            async for event in self._watch_httpx(path, params, read_timeout, on_open):
                yield event
            return
        # The lean reader inline rather than in a generator of its own: every layer of
        # async generator is paid once per event, and events are the hot path.
        auth_attempts = 0
        while True:
            stream = await self._open_watch(path, params, read_timeout)
            try:
                await stream.wait_for_head()
                # Expired credentials (a rotated service-account token, an exec plugin's
                # short-lived one): reload them and ask again, as kr8s's call_api does.
                if stream.status in (401, 403) and auth_attempts < 3:
                    auth_attempts += 1
                    stream.close()
                    await self._api.auth.reauthenticate()
                    self._tls = None  # certificate files rotated in place count too
                    continue
                if not 200 <= stream.status < 300:
                    raise await stream.error_answer()
                if on_open is not None:
                    on_open()
                chunks = stream.chunks
                buffer = b""
                while True:
                    if not chunks:
                        if stream.failure is not None:
                            raise stream.failure
                        if stream.finished:
                            break
                        await stream.wait()
                        continue
                    chunk = stream.take()
                    newline = chunk.find(b"\n")
                    if newline < 0:
                        buffer += chunk  # part of an event: pods are several KiB
                        continue
                    if not buffer and newline == len(chunk) - 1 and chunk[0] == 0x7B:  # b"{"
                        # The API server writes one event per chunk: decode it as it is, uncopied.
                        yield _event(chunk)
                        continue
                    # One split per chunk: a chunk holds many events after a relist or in a burst.
                    lines = (buffer + chunk).split(b"\n") if buffer else chunk.split(b"\n")
                    buffer = lines.pop()
                    for line in lines:
                        if line.strip():
                            yield _event(line)
                if buffer.strip():
                    yield _event(buffer)
                return
            finally:
                # Also on cancellation (the cache cancels its watches to relist) and on
                # aclose: the socket must not outlive the generator.
                stream.close()

    def _lean_watch_fits(self) -> bool:
        """Whether the lean reader can carry this client's watches. It speaks plain
        HTTP/1.1 straight to the server over TCP or TLS; it cannot go through a proxy
        (kubeconfig proxy-url, or the HTTP(S)_PROXY/ALL_PROXY variables httpx honours),
        nor use a scheme other than http/https. Those watches take the httpx path.
        Redirects and compressed answers it cannot handle either, but those cannot be
        known before asking: it asks for identity encoding, which the API server
        honours, and an API server does not redirect watches (a redirect would be
        an ApiError here, where httpx would follow it)."""
        auth = self._api.auth
        if auth.proxy:
            return False
        url = urllib.parse.urlsplit(str(auth.server))
        if url.scheme not in ("http", "https") or not url.hostname:
            return False
        proxies = urllib.request.getproxies_environment()
        if (proxies.get(url.scheme) or proxies.get("all")) and not urllib.request.proxy_bypass(url.hostname):
            return False
        return True

    async def _open_watch(self, path: str, params: dict[str, Any], read_timeout: float) -> WatchStream:
        auth = self._api.auth
        url = urllib.parse.urlsplit(str(auth.server))
        host = url.hostname or ""
        tls = url.scheme == "https"
        port = url.port or (443 if tls else 80)
        context = await self._tls_context() if tls else None
        query = urllib.parse.urlencode(params)
        target = url.path.rstrip("/") + path + ("&" if "?" in path else "?") + query
        headers = [f"GET {target} HTTP/1.1", f"Host: {url.netloc.rpartition('@')[2]}", "Accept: application/json",
                   "Accept-Encoding: identity", f"User-Agent: {self._api.__version__}"]
        if auth.token:
            headers.append(f"Authorization: Bearer {auth.token}")
        request = ("\r\n".join(headers) + "\r\n\r\n").encode("latin-1")
        loop = asyncio.get_running_loop()
        try:
            # asyncio.timeout, not wait_for: 3.11's wait_for returns a connection that completes
            # as the task is cancelled and drops the cancellation, leaving the cache's stop hanging.
            async with asyncio.timeout(self.timeout):
                _, stream = await loop.create_connection(lambda: WatchStream(loop, read_timeout), host, port, ssl=context,
                                                         server_hostname=(auth.tls_server_name or host) if tls else None)
        except TimeoutError as exc:
            raise ApiError(0, "Timeout", "timed out waiting for the Kubernetes API server (connecting)") from exc
        except OSError as exc:  # refused, unresolvable, TLS handshake or certificate failures
            raise ApiError(0, "Unreachable", f"{type(exc).__name__}: {exc}") from exc
        stream.send(request)
        return stream

    async def _tls_context(self) -> ssl.SSLContext:
        auth = self._api.auth
        # Whatever kr8s builds its context from: a reauthentication that yields other
        # credentials (an exec plugin's fresh certificate lands in a new file) shows here.
        key = (auth.client_cert_file, auth.client_key_file, auth.server_ca_file, getattr(auth, "_insecure_skip_tls_verify", None))
        if self._tls is not None and self._tls[0] == key:
            return self._tls[1]
        verify = await auth.ssl_context()  # type: ignore[no-untyped-call]
        # kr8s answers True for "verify as usual": httpx then trusts certifi's bundle
        # (or $SSL_CERT_FILE/$SSL_CERT_DIR), so the lean reader asks httpx for the same context.
        context = verify if isinstance(verify, ssl.SSLContext) else httpx.create_ssl_context(verify=verify)
        context.set_alpn_protocols(["http/1.1"])
        self._tls = (key, context)
        return context

    async def _watch_httpx(self, path: str, params: dict[str, Any], read_timeout: float, on_open: Callable[[], None] | None) -> AsyncIterator[Obj]:
        timeout = httpx.Timeout(self.timeout, read=read_timeout)
        base, url = _split(path)
        with _translated():
            async with self._api.call_api("GET", base=base, version="", url=url, stream=True, params=params, timeout=timeout) as response:
                if on_open is not None:
                    on_open()
                buffer = b""
                # Watch streams come uncompressed from the API server: the raw bytes skip httpx's
                # decoder layers, a measurable part of every event's cost (decoded if ever encoded).
                plain = response.headers.get("content-encoding", "identity") == "identity"
                async for chunk in response.aiter_raw() if plain else response.aiter_bytes():
                    if b"\n" not in chunk:
                        buffer += chunk  # part of an event: pods are several KiB
                        continue
                    # One split per chunk: a chunk holds many events after a relist or in a burst.
                    lines = (buffer + chunk).split(b"\n") if buffer else chunk.split(b"\n")
                    buffer = lines.pop()
                    for line in lines:
                        if line.strip():
                            yield _event(line)
                if buffer.strip():
                    yield _event(buffer)

    async def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        """Bind a pod as kube-scheduler's DefaultBinder does; the UID makes the API
        refuse a different pod that reuses the name."""
        meta: Obj = {"name": name, "namespace": namespace}
        if uid:
            meta["uid"] = uid
        binding = {"apiVersion": "v1", "kind": "Binding", "metadata": meta, "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
        await self._call("POST", f"/api/v1/namespaces/{namespace}/pods/{name}/binding", body=binding)

    async def get_node(self, name: str) -> Obj:
        return await self._call("GET", f"/api/v1/nodes/{name}")

    async def get_pod(self, namespace: str, name: str) -> Obj:
        return await self._call("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")

    async def patch_pod(self, namespace: str, name: str, patch: Patch) -> Obj:
        """A JSONPatch; put a ``test`` op first to make it conflict-safe (422 when it fails)."""
        return await self._call("PATCH", f"/api/v1/namespaces/{namespace}/pods/{name}", body=patch, content_type="application/json-patch+json")

    async def merge_patch_pod(self, namespace: str, name: str, patch: Obj) -> Obj:
        """A JSON merge patch (for a plain annotation change)."""
        return await self._call("PATCH", f"/api/v1/namespaces/{namespace}/pods/{name}", body=patch, content_type="application/merge-patch+json")

    async def create_pod(self, namespace: str, pod: Obj) -> Obj:
        """Create a pod (the reservation controller's placeholders); 409 when the name is taken."""
        return await self._call("POST", f"/api/v1/namespaces/{namespace}/pods", body=pod)

    async def delete_pod(self, namespace: str, name: str, *, uid: str = "", grace_seconds: int | None = None) -> Obj:
        """Delete a pod; with ``uid``, only that pod (409 if the name now belongs to another)."""
        options: Obj = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if uid:
            options["preconditions"] = {"uid": uid}
        if grace_seconds is not None:
            options["gracePeriodSeconds"] = grace_seconds
        return await self._call("DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}", body=options)

    async def create_event(self, namespace: str, event: Obj) -> Obj:
        group = "/apis/events.k8s.io/v1" if event.get("apiVersion") == "events.k8s.io/v1" else "/api/v1"
        return await self._call("POST", f"{group}/namespaces/{namespace}/events", body=event)

    async def get_lease(self, namespace: str, name: str) -> Obj:
        return await self._call("GET", f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}")

    async def create_lease(self, namespace: str, lease: Obj) -> Obj:
        return await self._call("POST", f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases", body=lease)

    async def replace_lease(self, namespace: str, name: str, lease: Obj) -> Obj:
        """PUT: carries metadata.resourceVersion, so a concurrent writer gets 409."""
        return await self._call("PUT", f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}", body=lease)

    async def close(self) -> None:
        # kr8s has no public close; its session is recreated on the next call if needed.
        session = getattr(self._api, "_session", None)
        if session is not None:
            with contextlib.suppress(RuntimeError):
                await session.aclose()


def _event(line: bytes) -> Obj:
    try:
        event = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise ApiError(0, "BadResponse", f"undecodable watch event: {exc}") from exc
    if not isinstance(event, dict):
        raise ApiError(0, "BadResponse", "watch event is not an object")
    if event.get("type") == "ERROR":
        status = event.get("object")
        err = ApiError.from_status(status if isinstance(status, dict) else {})
        if isinstance(err, Expired):
            raise err
        raise WatchError(err.status, err.reason, err.message, err.body)
    return event
