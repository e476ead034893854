"""The cluster of the live explain, snapshot and impact preview tests: the fake API
server (tests/fakeapi) filled from tests/cases/live/cluster.yaml, a kubeconfig for it,
and ``kpe`` run in process."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from server.cli.main import main

from .fakeapi import FakeApiServer

LIVE = Path(__file__).resolve().parent / "cases" / "live"
POLICIES = LIVE / "policies.yaml"


@dataclass
class Live:
    api: FakeApiServer
    kubeconfig: str

    def kpe(self, *argv: str) -> tuple[int, str]:
        """``kpe ARGV`` in this process: (exit code, standard output)."""
        out = io.StringIO()
        code = main(list(argv), out=out)
        return code, out.getvalue()


def cluster() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((LIVE / "cluster.yaml").read_text())
    return data


@contextlib.contextmanager
def live_cluster(tmp_path: Path) -> Iterator[Live]:
    with FakeApiServer(bookmark_interval=0.2) as api:
        data = cluster()
        for node in data["nodes"]:
            api.state.add_node(node)
        for pod in data["pods"]:
            api.state.add_pod(pod)
        yield Live(api, api.write_kubeconfig(tmp_path / "kubeconfig"))
