"""Serve the fake API with uvicorn on a loopback port, in a background thread."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from typing import Any

import uvicorn

from .app import FakeApiApp
from .state import State


class FakeApiServer:
    """``with FakeApiServer(bookmark_interval=0.1) as api: httpx.get(api.url + "/api/v1/nodes")``.

    ``api.state`` is the cluster the tests drive. Extra keyword arguments go to ``State`` (bookmark_interval,
    start_rv, pod_defaults, graceful_pod_deletion, priority_classes, clock); ``ssl_certfile``/``ssl_keyfile``
    (and other uvicorn options) via ``uvicorn_options``.
    """

    def __init__(self, state: State | None = None, *, uvicorn_options: dict[str, Any] | None = None, **state_options: Any) -> None:
        self.state = state or State(**state_options)
        self.app = FakeApiApp(self.state)
        opts = {"log_config": None, "access_log": False, "lifespan": "on", "server_header": False,
                "timeout_graceful_shutdown": 2, **(uvicorn_options or {})}
        self.config = uvicorn.Config(self.app, host="127.0.0.1", port=0, **opts)
        self._server = uvicorn.Server(self.config)
        self._thread: threading.Thread | None = None
        self.url = ""

    def start(self, timeout: float = 10.0) -> FakeApiServer:
        """Serve; after a ``stop``, again on the same port with the same cluster (a restarted API server)."""
        if self._thread is not None:
            raise RuntimeError("already started")
        if self.url:
            self.config.port = int(self.url.rsplit(":", 1)[1])
            self._server = uvicorn.Server(self.config)
        self._thread = threading.Thread(target=lambda: asyncio.run(self._server.serve()), name="fake-kube-apiserver", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive():
                raise RuntimeError("the fake API server exited during start-up")
            if time.monotonic() > deadline:
                raise TimeoutError("the fake API server did not start")
            time.sleep(0.005)
        port = self._server.servers[0].sockets[0].getsockname()[1]
        scheme = "https" if self.config.ssl_certfile else "http"
        self.url = f"{scheme}://127.0.0.1:{port}"
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """End open watches cleanly, then shut uvicorn down and join its thread; until ``start``
        again, connections to its port are refused."""
        if self._thread is None:
            return
        self.state.end_watches()
        self._server.should_exit = True
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise RuntimeError("the fake API server thread did not stop")
        self._thread = None

    def reset(self, state: State | None = None, **state_options: Any) -> State:
        """Start over with an empty cluster (open watches on the old one end cleanly). Cheaper than a new
        server per test: uvicorn needs ~0.2 s to stop."""
        self.state.end_watches()
        self.state = self.app.state = state or State(**state_options)
        return self.state

    def __enter__(self) -> FakeApiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def write_kubeconfig(self, path: str | os.PathLike[str], *, namespace: str = "default", token: str | None = None,
                         ca_file: str | None = None, require_token: bool = True) -> str:
        """Write a kubeconfig pointing at this server (for kpe's --kubeconfig); returns its path.
        With ``token`` the server also starts requiring "Authorization: Bearer <token>" (401 otherwise), unless
        ``require_token`` is False: then the token only tells clients apart in ``requests`` (as replicas that
        each mount their own service-account token)."""
        if token and require_token:
            self.state.token = token
        cluster = f"    server: {self.url}\n"
        if ca_file:
            cluster += f"    certificate-authority: {ca_file}\n"
        user = f"    token: {token or 'fakeapi-unchecked'}\n"  # clients want some credential; only ``token`` is enforced
        text = ("apiVersion: v1\nkind: Config\n"
                f"clusters:\n- name: fake\n  cluster:\n{cluster}"
                f"users:\n- name: fake\n  user:\n{user}"
                f"contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\n    namespace: {namespace}\n"
                "current-context: fake\n")
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
        return str(path)
