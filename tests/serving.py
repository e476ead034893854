"""Run an ASGI app under real uvicorn on a loopback port, in a background thread."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import uvicorn


class ServerThread:
    def __init__(self, app: Any, **config: Any) -> None:
        self.config = uvicorn.Config(app, host="127.0.0.1", port=0, log_config=None, access_log=False, lifespan="on", **config)
        self.server = uvicorn.Server(self.config)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.port = 0

    def _run(self) -> None:
        asyncio.run(self.server.serve())

    def start(self, timeout: float = 10.0) -> str:
        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self.thread.is_alive():
                raise RuntimeError("uvicorn exited during start-up")
            if time.monotonic() > deadline:
                raise TimeoutError("uvicorn did not start")
            time.sleep(0.01)
        self.port = self.server.servers[0].sockets[0].getsockname()[1]
        scheme = "https" if self.config.ssl_certfile else "http"
        return f"{scheme}://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


@contextlib.contextmanager
def serve(app: Any, **config: Any) -> Iterator[str]:
    """``with serve(app) as url:`` — the app answers on ``url`` until the block ends."""
    thread = ServerThread(app, **config)
    url = thread.start()
    try:
        yield url
    finally:
        thread.stop()
