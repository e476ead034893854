"""Where kpe's Kubernetes client gets its credentials (server/cluster/kube.py): kubeconfig
files (merged as $KUBECONFIG is, paths relative to the file that names them, inline data or
files, tokens or token files, client certificates, exec plugins) and the in-cluster service
account, each read again when it rotates or the API server refuses it; a reload that fails
keeps what works. Against the fake API server."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import json
import logging
import os
import ssl
import stat
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import trustme
import yaml

from server.cluster import kube
from server.cluster.kube import ApiError, CredentialsError, KubeClient
from tests.fakeapi import FakeApiServer


def run(test: Callable[[], Awaitable[None]], timeout: float = 20.0) -> None:
    asyncio.run(asyncio.wait_for(test(), timeout))


def kubeconfig(path: Path, *, clusters: dict[str, dict[str, Any]], users: dict[str, dict[str, Any]], current: str = "x",
               contexts: dict[str, tuple[str, str]] | None = None) -> str:
    contexts = contexts if contexts is not None else {"x": (next(iter(clusters)), next(iter(users)))}
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": current,
        "clusters": [{"name": name, "cluster": cluster} for name, cluster in clusters.items()],
        "users": [{"name": name, "user": user} for name, user in users.items()],
        "contexts": [{"name": name, "context": {"cluster": c, "user": u}} for name, (c, u) in contexts.items()],
    }))
    return str(path)


@contextlib.asynccontextmanager
async def client_on(config: str = "", **options: Any) -> AsyncIterator[KubeClient]:
    client = await KubeClient.connect(kubeconfig=config, required=True, **options)
    assert client is not None
    try:
        yield client
    finally:
        await client.close()


def bearer(api: FakeApiServer) -> str:
    return api.state.requests[-1].headers.get("authorization", "")


def test_a_token_file_is_read_again_when_it_rotates_without_waiting_for_a_refusal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kube, "FILE_CHECK_INTERVAL_S", 0.0)
    token = tmp_path / "token"
    token.write_text("first\n")
    with FakeApiServer() as api:
        config = kubeconfig(tmp_path / "kc", clusters={"c": {"server": api.url}}, users={"u": {"tokenFile": "token"}})  # relative to the kubeconfig

        async def body() -> None:
            async with client_on(config) as client:
                await client.list("/api/v1/nodes")
                assert bearer(api) == "Bearer first"
                (tmp_path / "token.new").write_text("second")
                os.replace(tmp_path / "token.new", token)  # as the kubelet swaps a projected token
                await client.list("/api/v1/nodes")
                assert bearer(api) == "Bearer second"
                assert len(api.state.requests) == 2  # no refusal, no retry

        run(body)


def test_in_cluster_a_refused_token_is_read_again_and_the_request_asked_once_more(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert.private_key_pem.write_to_path(str(tmp_path / "tls.key"))
    cert.cert_chain_pems[0].write_to_path(str(tmp_path / "tls.crt"))
    account = tmp_path / "serviceaccount"
    account.mkdir()
    ca.cert_pem.write_to_path(str(account / "ca.crt"))
    (account / "token").write_text("old")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setattr(kube, "FILE_CHECK_INTERVAL_S", 3600.0)  # only the refusal can make it look
    tls = {"ssl_keyfile": str(tmp_path / "tls.key"), "ssl_certfile": str(tmp_path / "tls.crt")}
    with FakeApiServer(uvicorn_options=tls) as api:
        api.state.token = "old"
        monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
        monkeypatch.setenv("KUBERNETES_SERVICE_PORT", api.url.rsplit(":", 1)[1])

        async def body() -> None:
            async with client_on(serviceaccount=str(account)) as client:
                assert client.source == "in-cluster service account" and client.server == api.url
                await client.list("/api/v1/nodes")
                (account / "token").write_text("new")  # the kubelet rotated it; the server takes only the new one
                api.state.token = "new"
                assert (await client.list("/api/v1/nodes"))["kind"] == "NodeList"
                assert [r.headers.get("authorization") for r in api.state.requests] == ["Bearer old", "Bearer old", "Bearer new"]

        run(body)


def test_an_exec_plugin_runs_once_and_again_when_its_credential_expires_or_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kube, "EXEC_RERUN_AFTER_S", 0.0)
    monkeypatch.setattr(kube, "EXEC_EXPIRY_MARGIN_S", 3600.0)
    soon = (datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(minutes=30)).strftime("%Y-%m-%dT%H:%M:%SZ")
    runs = tmp_path / "runs"
    plugin = tmp_path / "bin" / "get-token"
    plugin.parent.mkdir()
    # Prints the token in ./current-token, counts its runs, and says when the credential expires.
    plugin.write_text(f"""#!{sys.executable}
import json, os, pathlib
here = pathlib.Path({str(tmp_path)!r})
with open(here / "runs", "a") as fh:
    fh.write(os.environ["KUBERNETES_EXEC_INFO"] + "\\n")
status = {{"token": (here / "current-token").read_text()}}
expiry = here / "expiry"
if expiry.exists():
    status["expirationTimestamp"] = expiry.read_text()
print(json.dumps({{"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential", "status": status}}))
""")
    plugin.chmod(plugin.stat().st_mode | stat.S_IXUSR)
    (tmp_path / "current-token").write_text("one")
    exec_config = {"apiVersion": "client.authentication.k8s.io/v1", "command": "bin/get-token", "interactiveMode": "Never",
                   "env": [{"name": "KPE_TEST", "value": "1"}]}

    with FakeApiServer() as api:
        api.state.token = "one"
        config = kubeconfig(tmp_path / "kc", clusters={"c": {"server": api.url}}, users={"u": {"exec": exec_config}})

        async def body() -> None:
            async with client_on(config) as client:
                await client.list("/api/v1/nodes")
                await client.list("/api/v1/nodes")
                assert len(runs.read_text().splitlines()) == 1  # its credential is kept
                assert json.loads(runs.read_text().splitlines()[0]) == {
                    "apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential", "spec": {"interactive": False}}
                # Refused: the plugin runs again and the request is asked once more with what it prints now.
                (tmp_path / "current-token").write_text("two")
                api.state.token = "two"
                await client.list("/api/v1/nodes")
                assert len(runs.read_text().splitlines()) == 2 and bearer(api) == "Bearer two"
                # A credential about to expire is replaced before it is used: no refusal first.
                (tmp_path / "current-token").write_text("three")
                (tmp_path / "expiry").write_text(soon)
                api.state.token = "three"
                await client.list("/api/v1/nodes")  # refused, then the plugin's credential that ends within the margin
                (tmp_path / "current-token").write_text("four")
                (tmp_path / "expiry").write_text("2999-01-01T00:00:00Z")
                api.state.token = "four"
                asked = len(api.state.requests)
                await client.list("/api/v1/nodes")
                assert len(api.state.requests) == asked + 1 and bearer(api) == "Bearer four"
                assert len(runs.read_text().splitlines()) == 4

        run(body)


def test_client_certificates_and_the_ca_inline_or_in_files_next_to_the_kubeconfig(tmp_path: Path) -> None:
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1")
    server.private_key_pem.write_to_path(str(tmp_path / "tls.key"))
    server.cert_chain_pems[0].write_to_path(str(tmp_path / "tls.crt"))
    ca.cert_pem.write_to_path(str(tmp_path / "ca.crt"))
    client = ca.issue_cert("kpe")
    (tmp_path / "certs").mkdir()
    client.cert_chain_pems[0].write_to_path(str(tmp_path / "certs" / "kpe.crt"))
    client.private_key_pem.write_to_path(str(tmp_path / "certs" / "kpe.key"))
    tls = {"ssl_keyfile": str(tmp_path / "tls.key"), "ssl_certfile": str(tmp_path / "tls.crt"),
           "ssl_ca_certs": str(tmp_path / "ca.crt"), "ssl_cert_reqs": ssl.CERT_REQUIRED}  # no client certificate, no handshake

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    with FakeApiServer(uvicorn_options=tls) as api:
        inline = kubeconfig(tmp_path / "inline", clusters={"c": {"server": api.url, "certificate-authority-data": b64(ca.cert_pem.bytes())}},
                            users={"u": {"client-certificate-data": b64(client.cert_chain_pems[0].bytes()),
                                         "client-key-data": b64(client.private_key_pem.bytes())}})
        (tmp_path / "conf").mkdir()
        files = kubeconfig(tmp_path / "conf" / "files", clusters={"c": {"server": api.url, "certificate-authority": "../ca.crt"}},
                           users={"u": {"client-certificate": "../certs/kpe.crt", "client-key": "../certs/kpe.key"}})
        without = kubeconfig(tmp_path / "without", clusters={"c": {"server": api.url, "certificate-authority": str(tmp_path / "ca.crt")}},
                             users={"u": {"token": "t"}})

        async def body() -> None:
            for config in (inline, files):
                async with client_on(config) as kpe:
                    assert (await kpe.list("/api/v1/nodes"))["kind"] == "NodeList"
                    assert [e async for e in kpe.watch("/api/v1/nodes", resource_version="", timeout_seconds=1)] == []
            async with client_on(without) as kpe:
                with pytest.raises(ApiError) as refused:
                    await kpe.list("/api/v1/nodes")
                assert refused.value.status == 0

        run(body)


def test_kubeconfig_files_in_kubeconfig_merge_the_first_to_name_an_entry_winning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeApiServer() as api:
        api.state.token = "right"
        first = kubeconfig(tmp_path / "first", clusters={"c": {"server": api.url}}, users={"u": {"token": "right"}}, current="x")
        second = kubeconfig(tmp_path / "second", clusters={"c": {"server": "http://127.0.0.1:9"}}, users={"u": {"token": "wrong"}}, current="y",
                            contexts={"x": ("c", "u"), "y": ("c", "u")})
        monkeypatch.setenv("KUBECONFIG", os.pathsep.join([first, str(tmp_path / "missing"), second]))

        async def body() -> None:
            async with client_on() as client:
                assert client.server == api.url and client.source.startswith("$KUBECONFIG ")
                assert (await client.list("/api/v1/nodes"))["kind"] == "NodeList"

        run(body)


@pytest.mark.parametrize("server, user, says", [
    ("", {"token": "t"}, "is not an http:// or https:// URL"),
    ("127.0.0.1:6443", {"token": "t"}, "is not an http:// or https:// URL"),
    ("https://127.0.0.1:6443", {"username": "admin", "password": "x"}, "basic authentication"),
    ("https://127.0.0.1:6443", {"client-certificate-data": "LS0tLS1CRUdJTg=="}, "needs its key"),
    ("https://127.0.0.1:6443", {"exec": {"apiVersion": "client.authentication.k8s.io/v1alpha1", "command": "x"}}, "v1alpha1"),
    ("https://127.0.0.1:6443", {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "/nonexistent/plugin"}}, "cannot run"),
])
def test_credentials_no_request_could_be_built_on_are_refused_when_loading_with_the_reason(tmp_path: Path, server: str, user: dict[str, Any], says: str) -> None:
    config = kubeconfig(tmp_path / "kc", clusters={"c": {"server": server}}, users={"u": user})

    async def body() -> None:
        with pytest.raises(CredentialsError, match=says):
            await KubeClient.connect(kubeconfig=config, required=True)

    run(body)


def test_a_reload_that_fails_keeps_the_credentials_in_use_and_says_why(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with FakeApiServer() as api:
        config = kubeconfig(tmp_path / "kc", clusters={"c": {"server": api.url}}, users={"u": {"token": "t"}})

        async def body() -> None:
            async with client_on(config) as client:
                Path(config).write_text("clusters: [")  # someone is halfway through rewriting it
                api.state.fail_next(1, 401)
                with caplog.at_level(logging.ERROR, logger="kpe.kube"), pytest.raises(ApiError) as refused:
                    await client.list("/api/v1/nodes")
                assert refused.value.status == 401
                assert "cannot load Kubernetes credentials" in (client.credentials_error or "")
                assert any("credentials not reloaded" in r.getMessage() for r in caplog.records)
                assert (await client.list("/api/v1/nodes"))["kind"] == "NodeList" and client.server == api.url

        run(body)
