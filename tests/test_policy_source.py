"""``--policy-source``: the setting and what `kpe serve` says when the cluster cannot be its
source (no CRDs): one line, no traceback. The fake API server stages the missing CRDs. Objects
that do not compile do not stop start-up (tests/test_last_good.py)."""

from __future__ import annotations

import io
import socket
from pathlib import Path

import pytest

from server.cli.main import main
from server.settings import NO_POLICIES, Settings

from .fakeapi import FakeApiServer


def test_the_cluster_source_needs_no_path_but_cluster_access_and_status_needs_the_cluster_source() -> None:
    assert Settings(policy_source="cluster").validate() == []
    assert Settings().validate() == [NO_POLICIES], "files stay the default, and need a path"
    assert Settings(policy_source="cluster", cluster="off").validate() == [
        "--policy-source cluster reads the policies from the cluster: it needs --cluster auto or on"
    ]
    assert Settings(policies="p", controllers="gates,status").validate() == [
        "--controllers status writes the status of the policies kept in the cluster: it needs --policy-source cluster"
    ]
    assert Settings(policies="p", policy_source="git").validate() == ["--policy-source must be files or cluster, not 'git'"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve(kubeconfig: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    out = io.StringIO()
    code = main(["serve", "--policy-source", "cluster", "--cluster", "on", "--kubeconfig", kubeconfig, "--port", str(free_port())], out=out)
    return code, out.getvalue(), capsys.readouterr().err


def test_serve_without_the_crds_says_how_to_install_them(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with FakeApiServer() as api:
        api.state.fail_next(1, 404, method="GET", path="/apis/kpe.dev/v1alpha1/schedulingpolicies")
        code, _, err = serve(api.write_kubeconfig(tmp_path / "kubeconfig"), capsys)
    assert code == 2
    assert err.splitlines()[-1] == (
        "kpe serve: --policy-source cluster: the API server does not serve schedulingpolicies.kpe.dev: install kpe's CRDs (kubectl apply -k deploy/crds)"
    )
    assert "Traceback" not in err and "never retrieved" not in err, "the operator's fix, not a crash of kpe's"
