"""The one module of ``server`` that talks to the Kubernetes API.

Credentials come from a kubeconfig (tokens, token files, client certificates, exec plugins)
or the in-cluster service account (``Credentials``, loaded by ``CredentialsLoader``), and
every request goes out through one ``Session``: the credentials, the TLS context and the
httpx client built from them, never changed once built. When credentials must be reloaded
(a 401 or 403, a credential file rotated, an exec credential expiring) or a request fails
on the wire, a whole new session replaces it, and requests already under way finish on the
one they started with. However the API server answers, and however many answers arrive at
once, the client is never left half configured: that is why kpe loads credentials itself
rather than through kr8s, whose re-authentication emptied the server address of the client
it shared while another request built its HTTP session from it, a session nothing then
rebuilt (every request after it failed with "Request URL is missing an 'http://' or
'https://' protocol").

Watches, the one per-event hot path, are read by a small HTTP/1.1 reader of our own
(``WatchStream``) over the session's credentials and TLS context, httpx only where that
reader cannot go (a proxy). Everything else stays plain: objects are the API's JSON decoded
with orjson, and the caller owns resourceVersions, bookmarks and relists (see
``server.cluster.informer``).

Every failure surfaces as ``ApiError`` carrying the API's ``Status``, so callers catch one
exception type: bind answers the scheduler with the API's own message, the cache decides
between resuming, relisting and backing off.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import dataclasses
import datetime
import functools
import ipaddress
import json
import logging
import os
import socket
import ssl
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

import httpx
import orjson
import yaml

from server.cluster.apierrors import ApiError as ApiError
from server.cluster.apierrors import Expired as Expired
from server.cluster.apierrors import WatchError as WatchError
from server.cluster.apierrors import answer_error
from server.cluster.watchstream import WatchStream

if TYPE_CHECKING:
    from prometheus_client import Counter

log = logging.getLogger("kpe.kube")

Obj = dict[str, Any]
Objs = list[Obj]
Patch = list[dict[str, Any]]

POLICY_REPORTS = "/apis/wgpolicyk8s.io/v1alpha2"  # the Audit findings' PolicyReports (server.cluster.policyreports)
SERVICEACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
REQUEST_TIMEOUT_S = 10.0
USER_AGENT = "kpe (kube-policy-extender)"
# A quiet watch may send nothing for its whole timeoutSeconds; give the server
# that long plus slack before calling the connection dead.
WATCH_READ_SLACK_S = 30.0
# A peer that vanished without a word (a node gone, a NAT entry dropped) leaves a watch
# socket open and silent: TCP keepalive probes find out within about idle + interval * count.
KEEPALIVE_IDLE_S, KEEPALIVE_INTERVAL_S, KEEPALIVE_COUNT = 30, 10, 3
# How long an idle connection is kept for the next request. httpx's 5 s is the Lease renewal's
# period (15 s / 3): the connection expired just before each renewal, which made a new TLS
# connection to kube-apiserver every 5 s (12 of an idle kpe's 19 connections a minute). Below
# kube-apiserver's own idle timeout (90 s), which a server closing first would race.
IDLE_CONNECTION_S = 30.0
# Rotated files (a projected service-account token, cert-manager's certificates) are noticed
# by their stat at most this often; a request costs no system call in between.
FILE_CHECK_INTERVAL_S = 1.0
# An exec plugin is run again on a 401 or 403 only if its last credential is older than this:
# a refusal it cannot cure (RBAC still loading after an API server restart) must not start a
# process per request.
EXEC_RERUN_AFTER_S = 10.0
# An exec credential is replaced this long before its expirationTimestamp.
EXEC_EXPIRY_MARGIN_S = 10.0
EXEC_TIMEOUT_S = 60.0

Signature = tuple[int, int, int] | None  # (inode, mtime ns, size) of a file; None: it is missing


class CredentialsError(Exception):
    """Cluster access was required but no credentials were found, or they could not be loaded."""


def _status_of(response: httpx.Response) -> ApiError:
    """The ApiError for an error response, preferring the API's Status body."""
    return answer_error(response.status_code, response.reason_phrase, response.content, response.text, response.headers.get("retry-after", ""))


def _transport_error(exc: Exception) -> ApiError:
    """The ApiError for a request that got no whole answer."""
    if isinstance(exc, httpx.TimeoutException):
        return ApiError(0, "Timeout", f"timed out waiting for the Kubernetes API server ({type(exc).__name__})")
    if isinstance(exc, httpx.ConnectError):
        return ApiError(0, "Unreachable", f"{type(exc).__name__}: {exc}")
    # The connection broke mid-answer (a restarting server, a reset), or the answer could not be read.
    return ApiError(0, "ConnectionLost", f"{type(exc).__name__}: {exc}")


# --- credentials ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Credentials:
    """What a session is built from. Equal credentials make the same session; ``files`` and
    ``expires`` say when to look again, and take no part in the comparison."""

    server: str
    token: str = ""
    ca: bytes = b""  # PEM (or DER) of the CAs to trust; empty: the usual trust store
    cert: bytes = b""  # client certificate and key, PEM
    key: bytes = b""
    insecure: bool = False
    tls_server_name: str = ""
    proxy: str = ""
    expires: float | None = dataclasses.field(default=None, compare=False)  # time.time() an exec credential ends
    files: tuple[tuple[str, Signature], ...] = dataclasses.field(default=(), compare=False)

    def expiring(self, now: float) -> bool:
        return self.expires is not None and now >= self.expires - EXEC_EXPIRY_MARGIN_S


def _signature(path: str) -> Signature:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


@dataclasses.dataclass(frozen=True)
class _Exec:
    """An exec plugin's last credential."""

    config: str  # the plugin's configuration, as JSON: another configuration runs again
    token: str
    cert: bytes
    key: bytes
    expires: float | None
    ran: float  # time.monotonic()


class CredentialsLoader:
    """Reads credentials from their source each time it is asked: kubeconfig files (merged
    as client-go merges $KUBECONFIG: the first file to name a cluster, user or context wins)
    or, with no files, the in-cluster service account."""

    def __init__(self, kubeconfigs: tuple[str, ...], *, serviceaccount: str = SERVICEACCOUNT_DIR, description: str = "") -> None:
        self.kubeconfigs = kubeconfigs
        self.serviceaccount = serviceaccount
        self.description = description
        self._exec: _Exec | None = None

    async def load(self, *, refused: bool = False) -> Credentials:
        """The credentials as they are now; ``refused``: the API server refused the last
        ones, so an exec plugin runs again unless it ran just now. CredentialsError when they
        cannot be loaded."""
        try:
            if not self.kubeconfigs:
                return self._service_account()
            return await self._kubeconfig(refused)
        except CredentialsError:
            raise
        except (OSError, ValueError, KeyError, TypeError, AttributeError, yaml.YAMLError) as exc:
            raise CredentialsError(f"cannot load Kubernetes credentials from {self.description}: {type(exc).__name__}: {exc}") from exc

    def _service_account(self) -> Credentials:
        host, port = os.environ.get("KUBERNETES_SERVICE_HOST", ""), os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        if not host:
            raise CredentialsError("cannot load Kubernetes credentials from the in-cluster service account: KUBERNETES_SERVICE_HOST is not set")
        with contextlib.suppress(ValueError):
            if isinstance(ipaddress.ip_address(host), ipaddress.IPv6Address):
                host = f"[{host}]"
        token_file = os.path.join(self.serviceaccount, "token")
        ca_file = os.path.join(self.serviceaccount, "ca.crt")
        files = ((token_file, _signature(token_file)), (ca_file, _signature(ca_file)))
        ca = _read(ca_file) if os.path.exists(ca_file) else b""
        return Credentials(server=_server(f"https://{host}:{port}"), token=_read(token_file).decode().strip(), ca=ca, files=files)

    async def _kubeconfig(self, refused: bool) -> Credentials:
        files: list[tuple[str, Signature]] = []
        merged: dict[str, dict[str, tuple[Obj, str]]] = {"clusters": {}, "users": {}, "contexts": {}}
        current = ""
        for path in self.kubeconfigs:
            path = os.path.expanduser(path)
            files.append((path, _signature(path)))
            with open(path, "rb") as fh:
                doc = yaml.safe_load(fh)
            if doc is None:
                continue
            if not isinstance(doc, dict):
                raise CredentialsError(f"cannot load Kubernetes credentials from {self.description}: {path} is not a kubeconfig")
            home = os.path.dirname(os.path.abspath(path))
            for section, entries in merged.items():
                for entry in doc.get(section) or []:
                    name = str((entry or {}).get("name") or "")
                    if name and name not in entries:
                        entries[name] = (dict(entry.get(section[:-1]) or {}), home)
            current = current or str(doc.get("current-context") or "")
        contexts = merged["contexts"]
        if not contexts:
            raise CredentialsError(f"cannot load Kubernetes credentials from {self.description}: it has no context")
        if current and current not in contexts:
            raise CredentialsError(f"cannot load Kubernetes credentials from {self.description}: no context named {current!r}")
        context, _ = contexts[current] if current else next(iter(contexts.values()))
        cluster_name, user_name = str(context.get("cluster") or ""), str(context.get("user") or "")
        if cluster_name not in merged["clusters"]:
            raise CredentialsError(f"cannot load Kubernetes credentials from {self.description}: no cluster named {cluster_name!r}")
        cluster, cluster_home = merged["clusters"][cluster_name]
        user, user_home = merged["users"].get(user_name, ({}, ""))

        def file_of(entry: Obj, key: str, home: str) -> bytes:
            path = os.path.join(home, os.path.expanduser(str(entry[key])))
            files.append((path, _signature(path)))
            return _read(path)

        server = _server(str(cluster.get("server") or ""))
        if cluster.get("certificate-authority-data"):
            ca = _data(cluster["certificate-authority-data"])
        elif cluster.get("certificate-authority"):
            ca = file_of(cluster, "certificate-authority", cluster_home)
        else:
            ca = b""
        token = str(user.get("token") or "")
        if user.get("tokenFile"):
            token = file_of(user, "tokenFile", user_home).decode().strip()
        cert = _data(user["client-certificate-data"]) if user.get("client-certificate-data") else (
            file_of(user, "client-certificate", user_home) if user.get("client-certificate") else b"")
        key = _data(user["client-key-data"]) if user.get("client-key-data") else (
            file_of(user, "client-key", user_home) if user.get("client-key") else b"")
        if user.get("username") or user.get("password"):
            raise CredentialsError(f"cannot load Kubernetes credentials from {self.description}: basic authentication (username/password) "
                                   "was removed from Kubernetes in 1.19")
        provider = user.get("auth-provider")
        if provider:
            if provider.get("name") != "oidc" or not (provider.get("config") or {}).get("id-token"):
                raise CredentialsError(f"cannot load Kubernetes credentials from {self.description}: auth-provider "
                                       f"{provider.get('name')!r} is not supported; use an exec plugin")
            token = str(provider["config"]["id-token"])
        expires: float | None = None
        if user.get("exec"):
            ran = await self._run_exec(dict(user["exec"]), user_home, cluster, server, ca, refused)
            expires = ran.expires
            if ran.token:
                token = ran.token
            else:
                cert, key = ran.cert, ran.key
        if bool(cert) != bool(key):
            raise CredentialsError(f"cannot load Kubernetes credentials from {self.description}: a client certificate needs its key and a key its certificate")
        return Credentials(
            server=server, token=token, ca=ca, cert=cert, key=key, insecure=bool(cluster.get("insecure-skip-tls-verify")),
            tls_server_name=str(cluster.get("tls-server-name") or ""), proxy=str(cluster.get("proxy-url") or ""), expires=expires, files=tuple(files),
        )

    async def _run_exec(self, config: Obj, home: str, cluster: Obj, server: str, ca: bytes, refused: bool) -> _Exec:
        """The exec plugin's credential (client.authentication.k8s.io v1 or v1beta1), run again
        only when it changed, expired, or was refused and is not brand new."""
        key = json.dumps(config, sort_keys=True, default=str)
        last = self._exec
        if last is not None and last.config == key and not (last.expires is not None and time.time() >= last.expires - EXEC_EXPIRY_MARGIN_S):
            if not refused or time.monotonic() - last.ran < EXEC_RERUN_AFTER_S:
                return last
        version = str(config.get("apiVersion") or "")
        if version not in ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1"):
            raise CredentialsError(f"cannot load Kubernetes credentials from {self.description}: exec plugin apiVersion {version!r} is not supported")
        if config.get("interactiveMode") == "Always":
            raise CredentialsError(f"cannot load Kubernetes credentials from {self.description}: the exec plugin wants a terminal (interactiveMode: Always)")
        command = str(config.get("command") or "")
        if os.sep in command and not os.path.isabs(command):
            command = os.path.join(home, command)  # as client-go: relative to the kubeconfig that names it
        spec: Obj = {"interactive": False}
        if config.get("provideClusterInfo"):
            spec["cluster"] = {"server": server, "certificate-authority-data": base64.b64encode(ca).decode() if ca else None,
                               "insecure-skip-tls-verify": bool(cluster.get("insecure-skip-tls-verify")),
                               "tls-server-name": cluster.get("tls-server-name") or None, "proxy-url": cluster.get("proxy-url") or None}
        env = {**os.environ, **{str(e["name"]): str(e["value"]) for e in config.get("env") or []},
               "KUBERNETES_EXEC_INFO": json.dumps({"apiVersion": version, "kind": "ExecCredential", "spec": spec})}
        hint = f" ({config['installHint']})" if config.get("installHint") else ""
        try:
            process = await asyncio.create_subprocess_exec(command, *map(str, config.get("args") or []), env=env, stdin=asyncio.subprocess.DEVNULL,
                                                           stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        except OSError as exc:
            raise CredentialsError(f"cannot run the kubeconfig's exec plugin {command}: {exc}{hint}") from exc
        try:
            async with asyncio.timeout(EXEC_TIMEOUT_S):
                out, err = await process.communicate()
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            raise CredentialsError(f"the kubeconfig's exec plugin {command} did not answer within {EXEC_TIMEOUT_S:g} s") from None
        if process.returncode != 0:
            said = err.decode(errors="replace").strip()[-500:]
            raise CredentialsError(f"the kubeconfig's exec plugin {command} failed (exit status {process.returncode}): {said}{hint}")
        try:
            status = json.loads(out)["status"]
        except (ValueError, KeyError, TypeError) as exc:
            raise CredentialsError(f"the kubeconfig's exec plugin {command} did not print an ExecCredential: {exc}") from exc
        token = str(status.get("token") or "")
        cert = str(status.get("clientCertificateData") or "").encode()
        private = str(status.get("clientKeyData") or "").encode()
        if not token and not (cert and private):
            raise CredentialsError(f"the kubeconfig's exec plugin {command} gave neither a token nor a client certificate and key")
        expires = None
        if status.get("expirationTimestamp"):
            expires = datetime.datetime.fromisoformat(str(status["expirationTimestamp"]).replace("Z", "+00:00")).timestamp()
        self._exec = _Exec(key, token, cert, private, expires, time.monotonic())
        return self._exec


def _read(path: str) -> bytes:
    with open(path, "rb") as fh:
        return fh.read()


def _data(value: Any) -> bytes:
    """A kubeconfig *-data field: base64, or (as kr8s and kubectl accept) PEM as it is."""
    text = str(value)
    if "-----BEGIN" in text:
        return text.encode()
    try:
        return base64.b64decode(text, validate=True)
    except binascii.Error as exc:
        raise ValueError(f"a *-data field is neither base64 nor PEM: {exc}") from exc


def _server(url: str) -> str:
    """The API server's URL, refused at load time unless a request can be built on it."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise CredentialsError(f"the API server address {url!r} is not an http:// or https:// URL with a host")
    return url


def _tls_context(credentials: Credentials) -> ssl.SSLContext:
    if credentials.insecure:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    elif credentials.ca:
        # The cluster's CA replaces the usual trust store, as in client-go.
        ca = credentials.ca
        context = ssl.create_default_context(cadata=ca.decode("ascii", "replace") if b"-----BEGIN" in ca else ca)
    else:
        # httpx's own default: certifi's bundle, or $SSL_CERT_FILE / $SSL_CERT_DIR.
        context = httpx.create_ssl_context()
    if credentials.cert:
        # ssl loads a certificate and key only from files: they live as long as this call.
        with tempfile.TemporaryDirectory(prefix="kpe-client-") as folder:
            cert, key = os.path.join(folder, "tls.crt"), os.path.join(folder, "tls.key")
            for path, data in ((cert, credentials.cert), (key, credentials.key)):
                with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as fh:
                    fh.write(data)
            context.load_cert_chain(cert, key)
    context.set_alpn_protocols(["http/1.1"])
    return context


@functools.cache
def _default_tls() -> ssl.SSLContext:
    """The usual trust store, for a plain-HTTP server's redirects and proxies: made once, as
    loading it costs milliseconds and a failing server's session is rebuilt after each failure."""
    return httpx.create_ssl_context()


def _credentials_source(kubeconfig: str, serviceaccount: str) -> CredentialsLoader | None:
    """Which credentials to load, in client-go's order for controllers: an explicit
    kubeconfig, then $KUBECONFIG, then the in-cluster service account, then
    ~/.kube/config. None when there are none."""
    if kubeconfig:
        if not os.path.isfile(os.path.expanduser(kubeconfig)):
            raise CredentialsError(f"kubeconfig {kubeconfig} does not exist")
        return CredentialsLoader((kubeconfig,), description="kubeconfig " + kubeconfig)
    env = os.environ.get("KUBECONFIG", "")
    found = tuple(p for p in env.split(os.pathsep) if p and os.path.isfile(os.path.expanduser(p)))
    if found:
        return CredentialsLoader(found, description="$KUBECONFIG " + env)
    if os.environ.get("KUBERNETES_SERVICE_HOST") and os.path.isfile(os.path.join(serviceaccount, "token")):
        return CredentialsLoader((), serviceaccount=serviceaccount, description="in-cluster service account")
    home = os.path.expanduser("~/.kube/config")
    if os.path.isfile(home):
        return CredentialsLoader((home,), description="kubeconfig " + home)
    return None


# --- sessions ------------------------------------------------------------------------------


class Session:
    """One set of credentials and the TLS context and httpx client built from them. Nothing
    here changes after it is built: a client whose credentials change gets a new Session.
    ``users`` counts the requests under way on it, so a replaced one closes after its last."""

    def __init__(self, credentials: Credentials, *, timeout: float, tls: ssl.SSLContext | None = None) -> None:
        self.credentials = credentials
        url = urllib.parse.urlsplit(credentials.server)
        self.tls = (tls or _tls_context(credentials)) if url.scheme == "https" else None
        headers = {"User-Agent": USER_AGENT, "Accept": "application/json"}
        if credentials.token:
            headers["Authorization"] = f"Bearer {credentials.token}"
        self.extensions: dict[str, Any] = {"sni_hostname": credentials.tls_server_name} if credentials.tls_server_name else {}
        self.http = httpx.AsyncClient(base_url=credentials.server, headers=headers, verify=self.tls if self.tls is not None else _default_tls(),
                                      timeout=timeout, proxy=credentials.proxy or None, follow_redirects=True,
                                      limits=httpx.Limits(max_connections=100, max_keepalive_connections=20, keepalive_expiry=IDLE_CONNECTION_S))
        self.users = 0
        self.retired = False


class KubeClient:
    """Async Kubernetes API calls. Paths are API paths ("/api/v1/nodes"); answers are
    decoded JSON dicts; every failure is an ApiError."""

    def __init__(self, session: Session, loader: CredentialsLoader, *, timeout: float = REQUEST_TIMEOUT_S) -> None:
        self._session = session
        self._loader = loader
        self.source = loader.description
        self.timeout = timeout
        self._lock = asyncio.Lock()  # one credentials reload at a time
        self._reloads = 0  # reloads done: a refused request that started before one retries no further
        self._files = session.credentials.files  # what the credentials in use were read from, as it was then
        self._next_check = time.monotonic() + FILE_CHECK_INTERVAL_S
        self._closing: set[asyncio.Task[None]] = set()
        self._counter: Counter | None = None
        self.credentials_error: str | None = None  # why the last reload failed (the credentials in use stay)

    @classmethod
    async def connect(
        cls, *, kubeconfig: str = "", required: bool = False, serviceaccount: str = SERVICEACCOUNT_DIR, timeout: float = REQUEST_TIMEOUT_S
    ) -> KubeClient | None:
        """Load credentials (no request is made: an API server that is down at
        start-up is the cache's business, retried with backoff, not a crash).
        None when there are none and they are not ``required``."""
        loader = _credentials_source(kubeconfig, serviceaccount)
        if loader is None:
            if required:
                raise CredentialsError(
                    "cluster access is required but no credentials were found "
                    "(no --kubeconfig, $KUBECONFIG, in-cluster service account or ~/.kube/config)"
                )
            return None
        credentials = await loader.load()
        try:
            session = Session(credentials, timeout=timeout)
        except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError: a certificate or key that does not load
            raise CredentialsError(f"cannot load Kubernetes credentials from {loader.description}: {type(exc).__name__}: {exc}") from exc
        return cls(session, loader, timeout=timeout)

    @property
    def server(self) -> str:
        return self._session.credentials.server

    def measure(self, counter: Counter) -> None:
        """Count this client's requests by method and answer in ``counter`` (kpe_kube_api_requests_total)."""
        self._counter = counter

    def _count(self, method: str, code: str) -> None:
        if self._counter is not None:
            self._counter.labels(method, code).inc()

    # --- the session in use ----------------------------------------------------------------

    async def _current(self) -> Session:
        """The session to send a request on: the one in use, unless its credentials are due
        for a reload (an exec credential expiring, a file rotated) or it was closed."""
        session = self._session
        if session.http.is_closed:
            session = self._replace(session, Session(session.credentials, timeout=self.timeout, tls=session.tls))
        now = time.monotonic()
        due = session.credentials.expiring(time.time())
        if not due and now >= self._next_check:
            self._next_check = now + FILE_CHECK_INTERVAL_S
            current = tuple((path, _signature(path)) for path, _ in self._files)
            # Noted before the reload: one that fails is tried again when the files change again
            # (or the server refuses), not at every check while they stay broken.
            due, self._files = current != self._files, current
        if due:
            renewed = await self._renew(session, self._reloads, "credentials rotated or expiring", refused=False)
            if renewed is not None:
                return renewed
        return self._session

    async def _renew(self, used: Session, reloads: int, why: str, *, refused: bool = True) -> Session | None:
        """After ``used`` was refused (or its credentials are due): the session to try again
        with, or None when there is nothing new to try. Concurrent callers share one reload."""
        async with self._lock:
            current = self._session
            if current is not used:
                return current  # someone replaced it meanwhile: try the new one
            if self._reloads != reloads:
                return None  # reloaded since this request began, and nothing new was found
            self._reloads += 1
            try:
                fresh = await self._loader.load(refused=refused)
                same = fresh == used.credentials and fresh.expires == used.credentials.expires
                session = None if same else Session(fresh, timeout=self.timeout)
            except (CredentialsError, OSError, ValueError) as exc:
                self.credentials_error = str(exc)
                log.error("Kubernetes credentials not reloaded (%s); the ones in use stay: %s", why, exc, extra={"source": self.source})
                return None
            self.credentials_error = None
            # The files as they are now: not read again until they change.
            self._files = fresh.files
            if session is None:
                return None
            log.info("Kubernetes credentials reloaded (%s)", why, extra={"source": self.source, "server": fresh.server})
            return self._replace(used, session)

    def _replace(self, old: Session, new: Session) -> Session:
        if self._session is old:
            self._session = new
            self._retire(old)
        else:  # already replaced by someone else: theirs stays
            self._retire(new)
        return self._session

    def _retire(self, session: Session) -> None:
        session.retired = True
        if not session.users:
            self._close_later(session)

    def _release(self, session: Session) -> None:
        session.users -= 1
        if session.retired and not session.users:
            self._close_later(session)

    def _close_later(self, session: Session) -> None:
        if session.http.is_closed:
            return
        try:
            task = asyncio.get_running_loop().create_task(session.http.aclose())
        except RuntimeError:
            return  # no loop: the process is ending
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    def _failed(self, session: Session) -> None:
        """A request got no whole answer: the next goes out on a new session (no pooled
        connection of the old one is reused), with the same credentials and TLS context."""
        if self._session is session:
            self._replace(session, Session(session.credentials, timeout=self.timeout, tls=session.tls))

    # --- requests --------------------------------------------------------------------------

    async def _send(self, session: Session, method: str, path: str, params: dict[str, Any] | None, content: bytes | None,
                    headers: dict[str, str] | None) -> httpx.Response:
        session.users += 1
        try:
            response = await session.http.request(method, path, params=params, content=content, headers=headers,
                                                  extensions=session.extensions or None)
        except (httpx.HTTPError, httpx.InvalidURL, httpx.StreamError) as exc:
            error = _transport_error(exc)
            self._count(method, error.reason)
            self._failed(session)
            raise error from exc
        finally:
            self._release(session)
        self._count(method, str(response.status_code))
        return response

    async def _call(self, method: str, path: str, *, params: dict[str, Any] | None = None, body: Any = None, content_type: str = "") -> Obj:
        content = orjson.dumps(body) if body is not None else None
        headers = {"content-type": content_type or "application/json"} if body is not None else None
        session = await self._current()
        reloads = self._reloads
        response = await self._send(session, method, path, params, content, headers)
        if response.status_code in (401, 403):
            # Expired or rotated credentials: reload them and ask once more if they changed.
            renewed = await self._renew(session, reloads, f"{response.status_code} from {method} {path}")
            if renewed is not None:
                response = await self._send(renewed, method, path, params, content, headers)
        if response.is_error:
            raise _status_of(response)
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
        session = await self._current()
        reloads = self._reloads
        retried = False
        # The lean reader inline rather than in a generator of its own: every layer of
        # async generator is paid once per event, and events are the hot path.
        while True:
            if not self._lean_watch_fits(session):
                async for event in self._watch_httpx(session, path, params, read_timeout, on_open):
                    yield event
                return
            stream = await self._open_watch(session, path, params, read_timeout)
            try:
                try:
                    await stream.wait_for_head()
                except ApiError as exc:
                    self._count("WATCH", exc.reason)
                    raise
                self._count("WATCH", str(stream.status))
                if not 200 <= stream.status < 300:
                    error = await stream.error_answer()
                    if stream.status in (401, 403) and not retried:
                        # Expired or rotated credentials: reload them and ask once more if they changed.
                        stream.close()
                        renewed = await self._renew(session, reloads, f"{stream.status} from a watch of {path}")
                        if renewed is not None:
                            session, retried = renewed, True
                            continue
                    raise error
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

    def _lean_watch_fits(self, session: Session | None = None) -> bool:
        """Whether the lean reader can carry this client's watches. It speaks plain
        HTTP/1.1 straight to the server over TCP or TLS; it cannot go through a proxy
        (kubeconfig proxy-url, or the HTTP(S)_PROXY/ALL_PROXY variables httpx honours).
        Those watches take the httpx path. Redirects and compressed answers it cannot
        handle either, but those cannot be known before asking: it asks for identity
        encoding, which the API server honours, and an API server does not redirect
        watches (a redirect would be an ApiError here, where httpx would follow it)."""
        credentials = (session or self._session).credentials
        if credentials.proxy:
            return False
        url = urllib.parse.urlsplit(credentials.server)
        proxies = urllib.request.getproxies_environment()
        if (proxies.get(url.scheme) or proxies.get("all")) and not urllib.request.proxy_bypass(url.hostname or ""):
            return False
        return True

    async def _open_watch(self, session: Session, path: str, params: dict[str, Any], read_timeout: float) -> WatchStream:
        credentials = session.credentials
        url = urllib.parse.urlsplit(credentials.server)
        host = url.hostname or ""
        tls = session.tls
        port = url.port or (443 if tls is not None else 80)
        query = urllib.parse.urlencode(params)
        target = url.path.rstrip("/") + path + ("&" if "?" in path else "?") + query
        headers = [f"GET {target} HTTP/1.1", f"Host: {url.netloc.rpartition('@')[2]}", "Accept: application/json",
                   "Accept-Encoding: identity", f"User-Agent: {USER_AGENT}"]
        if credentials.token:
            headers.append(f"Authorization: Bearer {credentials.token}")
        request = ("\r\n".join(headers) + "\r\n\r\n").encode("latin-1")
        loop = asyncio.get_running_loop()
        try:
            # asyncio.timeout, not wait_for: 3.11's wait_for returns a connection that completes
            # as the task is cancelled and drops the cancellation, leaving the cache's stop hanging.
            async with asyncio.timeout(self.timeout):
                transport, stream = await loop.create_connection(lambda: WatchStream(loop, read_timeout), host, port, ssl=tls,
                                                                 server_hostname=(credentials.tls_server_name or host) if tls is not None else None)
        except TimeoutError as exc:
            self._count("WATCH", "Timeout")
            raise ApiError(0, "Timeout", "timed out waiting for the Kubernetes API server (connecting)") from exc
        except OSError as exc:  # refused, unresolvable, TLS handshake or certificate failures
            self._count("WATCH", "Unreachable")
            raise ApiError(0, "Unreachable", f"{type(exc).__name__}: {exc}") from exc
        _keep_alive(transport.get_extra_info("socket"))
        stream.send(request)
        return stream

    async def _watch_httpx(self, session: Session, path: str, params: dict[str, Any], read_timeout: float,
                           on_open: Callable[[], None] | None) -> AsyncIterator[Obj]:
        timeout = httpx.Timeout(self.timeout, read=read_timeout)
        reloads = self._reloads
        for attempt in range(2):
            session.users += 1
            try:
                async with session.http.stream("GET", path, params=params, timeout=timeout, extensions=session.extensions or None) as response:
                    self._count("WATCH", str(response.status_code))
                    if response.is_error:
                        await response.aread()
                        error = _status_of(response)
                        if response.status_code in (401, 403) and not attempt:
                            renewed = await self._renew(session, reloads, f"{response.status_code} from a watch of {path}")
                            if renewed is not None:
                                session = renewed
                                continue
                        raise error
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
                    return
            except (httpx.HTTPError, httpx.InvalidURL, httpx.StreamError) as exc:
                error = _transport_error(exc)
                self._count("WATCH", error.reason)
                self._failed(session)
                raise error from exc
            finally:
                self._release(session)

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

    async def merge_patch(self, path: str, patch: Obj) -> Obj:
        """A JSON merge patch of any object or subresource (the status kpe writes on its own
        kinds); ``metadata.resourceVersion`` in it makes the API server refuse it (409) when stale."""
        return await self._call("PATCH", path, body=patch, content_type="application/merge-patch+json")

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

    async def get_configmap(self, namespace: str, name: str) -> Obj:
        return await self._call("GET", f"/api/v1/namespaces/{namespace}/configmaps/{name}")

    async def create_configmap(self, namespace: str, configmap: Obj) -> Obj:
        return await self._call("POST", f"/api/v1/namespaces/{namespace}/configmaps", body=configmap)

    async def replace_configmap(self, namespace: str, name: str, configmap: Obj) -> Obj:
        """PUT: carries metadata.resourceVersion, so a concurrent writer gets 409."""
        return await self._call("PUT", f"/api/v1/namespaces/{namespace}/configmaps/{name}", body=configmap)

    async def create_policy_report(self, namespace: str, report: Obj) -> Obj:
        return await self._call("POST", f"{POLICY_REPORTS}/namespaces/{namespace}/policyreports", body=report)

    async def replace_policy_report(self, namespace: str, name: str, report: Obj) -> Obj:
        """PUT: carries metadata.resourceVersion, so a report changed since it was read gets 409."""
        return await self._call("PUT", f"{POLICY_REPORTS}/namespaces/{namespace}/policyreports/{name}", body=report)

    async def delete_policy_report(self, namespace: str, name: str, *, uid: str = "") -> Obj:
        options: Obj = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if uid:
            options["preconditions"] = {"uid": uid}
        return await self._call("DELETE", f"{POLICY_REPORTS}/namespaces/{namespace}/policyreports/{name}", body=options)

    async def close(self) -> None:
        """Close the connections; a call made afterwards opens new ones."""
        session = self._session
        session.retired = True
        await session.http.aclose()
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)


def _keep_alive(sock: socket.socket | None) -> None:
    if sock is None:
        return
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        for option, value in (("TCP_KEEPIDLE", KEEPALIVE_IDLE_S), ("TCP_KEEPINTVL", KEEPALIVE_INTERVAL_S), ("TCP_KEEPCNT", KEEPALIVE_COUNT)):
            if hasattr(socket, option):
                sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, option), value)


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
