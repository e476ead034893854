"""JSON logs, one object per line, with the request id of the request being served."""

from __future__ import annotations

import contextvars
import itertools
import logging
import secrets
import sys
import time
from typing import Any

import orjson

request_id: contextvars.ContextVar[str] = contextvars.ContextVar("kpe_request_id", default="")
# Request ids only need to tell requests apart in the logs: a random prefix per process and a
# counter, instead of a uuid4 per request (a system call for 16 random bytes each time).
_ID_PREFIX = secrets.token_hex(4)
_ids = itertools.count(1)


def new_request_id() -> str:
    return f"{_ID_PREFIX}{next(_ids):08x}"

CHATTY = ("httpx", "watchfiles")

_STANDARD = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime", "color_message"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        rid = request_id.get()
        if rid:
            entry["requestId"] = rid
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(entry, default=str).decode()


def configure(level: str = "info") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logger = logging.getLogger(name)
        logger.handlers[:] = []
        logger.propagate = True
    # Access lines for every scheduler request would drown the decision logs.
    logging.getLogger("uvicorn.access").setLevel(logging.WARNING)
    # httpx logs every API call kpe's cache and controllers make ("HTTP Request: GET ...") and
    # watchfiles every batch of file events ("3 changes detected"): at info level they would
    # bury kpe's own lines, so they show only when debugging.
    for name in CHATTY:
        logging.getLogger(name).setLevel(logging.NOTSET if level.lower() == "debug" else logging.WARNING)
