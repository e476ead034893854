"""A TCP balancer in front of kpe replicas, as kube-proxy is in front of a Service's endpoints:
each new connection goes to one replica and stays there (TLS passes through untouched).

``round-robin``: each new connection to the next replica, what a Service without session
affinity does with kube-scheduler's connections. ``client-ip``: every connection from one
client address to the replica its first one went to, for as long as that replica answers,
then to the next that does: a Service with ``sessionAffinity: ClientIP`` (deploy/service.yaml).
A replica that refuses the connection is skipped, as kube-proxy drops an endpoint that is not
ready (here at once: kube-proxy waits for the readiness probe to fail).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections import Counter
from collections.abc import Iterator


class Balancer:
    def __init__(self, backends: list[int], *, mode: str) -> None:
        assert mode in ("round-robin", "client-ip")
        self.backends = list(backends)
        self.mode = mode
        self.connections: Counter[int] = Counter()  # backend port -> connections it was given
        self.sticky: dict[str, int] = {}  # client address -> backend port (client-ip)
        self._next = 0
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self.port = int(self._sock.getsockname()[1])
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def _order(self, client: str) -> list[int]:
        if self.mode == "client-ip" and client in self.sticky:
            first = self.backends.index(self.sticky[client])
        else:
            first = self._next % len(self.backends)
            self._next += 1
        return self.backends[first:] + self.backends[:first]

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, ConnectionError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        with contextlib.suppress(OSError, ConnectionError):
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        client = str(writer.get_extra_info("peername")[0])
        for port in self._order(client):
            try:
                up_reader, up_writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                continue
            self.connections[port] += 1
            if self.mode == "client-ip":
                self.sticky[client] = port
            await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
            return
        writer.close()

    @contextlib.contextmanager
    def running(self) -> Iterator[Balancer]:
        self._thread.start()
        server = asyncio.run_coroutine_threadsafe(asyncio.start_server(self._serve, sock=self._sock), self._loop).result(10)
        try:
            yield self
        finally:
            server.close()
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
