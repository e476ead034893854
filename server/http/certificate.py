"""The serving certificate, reloaded when its files change.

cert-manager renews the certificate into the Secret, and the kubelet swaps
the mounted files (a ``..data`` symlink, as for ConfigMaps). kpe watches the
directories that hold ``--tls-cert`` and ``--tls-key`` and loads the new pair
into the live ``SSLContext``: new connections get the new certificate,
connections already open keep theirs, and nothing restarts. A pair that does
not load (a half-written file, a key that does not match) is logged and the
certificate in use stays.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger("kpe.tls")


class ServingCertificate:
    def __init__(self, cert: str, key: str) -> None:
        self.cert = cert
        self.key = key
        self.contexts: list[ssl.SSLContext] = []  # one per TLS listener
        self.reloads = 0

    @property
    def context(self) -> ssl.SSLContext | None:
        return self.contexts[0] if self.contexts else None

    def context_factory(self, _config: Any, default: Callable[[], ssl.SSLContext]) -> ssl.SSLContext:
        """uvicorn's ``ssl_context_factory``: uvicorn's own context, kept so it can be reloaded."""
        context = default()
        self.contexts.append(context)
        return context

    def reload(self) -> bool:
        """Load the files into the live context, if they hold a matching pair."""
        if not self.contexts:
            return False
        try:
            # Tried on a scratch context first: a failed load_cert_chain can leave
            # a context with the new certificate and the old key.
            ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(self.cert, self.key)
            for context in self.contexts:
                context.load_cert_chain(self.cert, self.key)
        except (OSError, ssl.SSLError) as exc:
            log.error("serving certificate not reloaded, the one in use stays: %s", exc, extra={"cert": self.cert, "key": self.key})
            return False
        self.reloads += 1
        log.info("serving certificate reloaded", extra={"cert": self.cert})
        return True

    async def watch(self, *, stop: asyncio.Event, debounce_ms: int) -> None:
        """Reload after the files' directories change, until ``stop``."""
        from watchfiles import awatch

        # The mount directories, not where the symlinks point: those are replaced whole.
        directories = sorted({str(Path(self.cert).parent), str(Path(self.key).parent)})
        names = {Path(self.cert).name, Path(self.key).name}
        async for changes in awatch(*directories, stop_event=stop, debounce=debounce_ms, recursive=False):
            # Other files in those directories (logs, say) are none of our business; the
            # kubelet's swap shows as its ..data link and timestamped directories.
            if any(Path(path).name in names or Path(path).name.startswith("..") for _, path in changes):
                self.reload()
