"""HTTPS with kube-scheduler's tlsConfig: server certificate, optional client-certificate verification."""

from __future__ import annotations

import ssl
from pathlib import Path

import httpx
import pytest
import trustme

from server.app import create_app
from server.cli.serve import uvicorn_options
from server.settings import Settings

from .serving import serve

POLICIES = Path(__file__).parent / "cases" / "wire-policies.yaml"
REQUEST = {"Pod": {"metadata": {"name": "p"}}, "Nodes": {"items": [{"metadata": {"name": "node-1", "labels": {}}}]}}


def tls_settings(tmp_path: Path, ca: trustme.CA, *, client_ca: bool) -> Settings:
    cert = ca.issue_cert("127.0.0.1", "localhost")
    cert.private_key_pem.write_to_path(str(tmp_path / "tls.key"))
    cert.cert_chain_pems[0].write_to_path(str(tmp_path / "tls.crt"))
    ca.cert_pem.write_to_path(str(tmp_path / "ca.crt"))
    return Settings(
        policies=str(POLICIES),
        cluster="off",
        tls_cert=str(tmp_path / "tls.crt"),
        tls_key=str(tmp_path / "tls.key"),
        tls_client_ca=str(tmp_path / "ca.crt") if client_ca else "",
    )


def ssl_options(settings: Settings) -> dict[str, object]:
    return {k: v for k, v in uvicorn_options(settings).items() if k.startswith("ssl")}


def test_https_serves_the_verbs_with_the_given_certificate(tmp_path: Path) -> None:
    ca = trustme.CA()
    settings = tls_settings(tmp_path, ca, client_ca=False)
    with serve(create_app(settings), **ssl_options(settings)) as url:
        assert url.startswith("https://")
        context = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
        response = httpx.post(url + "/scheduler/filter", json=REQUEST, verify=context)
        assert response.status_code == 200 and response.json()["Error"] == ""
        with pytest.raises(httpx.ConnectError):
            httpx.get(url + "/healthz")  # not trusted without the CA


def test_client_certificates_are_required_when_a_client_ca_is_set(tmp_path: Path) -> None:
    ca = trustme.CA()
    settings = tls_settings(tmp_path, ca, client_ca=True)
    client_cert = ca.issue_cert("kube-scheduler")
    client_cert.private_key_and_cert_chain_pem.write_to_path(str(tmp_path / "client.pem"))
    with serve(create_app(settings), **ssl_options(settings)) as url:
        anonymous = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
        with pytest.raises((httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError)):
            httpx.post(url + "/scheduler/filter", json=REQUEST, verify=anonymous)
        trusted = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
        trusted.load_cert_chain(str(tmp_path / "client.pem"))
        assert httpx.post(url + "/scheduler/filter", json=REQUEST, verify=trusted).status_code == 200


def test_half_a_tls_configuration_is_a_usage_error() -> None:
    assert Settings(policies=str(POLICIES), tls_cert="x").validate() == ["--tls-cert and --tls-key go together"]
    assert "--tls-client-ca needs --tls-cert and --tls-key" in Settings(policies=str(POLICIES), tls_client_ca="ca").validate()


def served_certificate(url: str) -> str:
    host, port = url.removeprefix("https://").split(":")
    return ssl.get_server_certificate((host, int(port)))


def publish_secret(mount: Path, version: int, cert: trustme.LeafCert) -> None:
    """Write the pair as the kubelet updates a Secret mount: a new directory, then one symlink swap."""
    data = mount / f"..{version}"
    data.mkdir()
    cert.private_key_pem.write_to_path(str(data / "tls.key"))
    cert.cert_chain_pems[0].write_to_path(str(data / "tls.crt"))
    (mount / "..data_tmp").symlink_to(data.name)
    (mount / "..data_tmp").replace(mount / "..data")
    for name in ("tls.crt", "tls.key"):
        if not (mount / name).is_symlink():
            (mount / name).symlink_to(f"..data/{name}")


def test_a_renewed_certificate_is_served_without_a_restart_and_a_broken_one_is_not(tmp_path: Path) -> None:
    import time

    ca = trustme.CA()
    mount = tmp_path / "tls"
    mount.mkdir()
    first, renewed = ca.issue_cert("127.0.0.1"), ca.issue_cert("127.0.0.1")
    publish_secret(mount, 1, first)
    settings = Settings(policies=str(POLICIES), cluster="off", tls_cert=str(mount / "tls.crt"), tls_key=str(mount / "tls.key"), reload_debounce_ms=50)
    app = create_app(settings)
    with serve(app, **{k: v for k, v in uvicorn_options(settings, app=app).items() if k.startswith("ssl")}) as url:
        assert served_certificate(url) == first.cert_chain_pems[0].bytes().decode()
        publish_secret(mount, 2, renewed)
        deadline = time.monotonic() + 10
        while served_certificate(url) != renewed.cert_chain_pems[0].bytes().decode():
            assert time.monotonic() < deadline, "the renewed certificate was not picked up"
            time.sleep(0.05)

        # A key that does not match its certificate: the renewed pair stays in use.
        broken = mount / "..3"
        broken.mkdir()
        first.cert_chain_pems[0].write_to_path(str(broken / "tls.crt"))
        renewed.private_key_pem.write_to_path(str(broken / "tls.key"))
        (mount / "..data_tmp").symlink_to(broken.name)
        (mount / "..data_tmp").replace(mount / "..data")
        reloads = app.state.kpe.certificate.reloads
        time.sleep(0.5)
        assert app.state.kpe.certificate.reloads == reloads
        assert served_certificate(url) == renewed.cert_chain_pems[0].bytes().decode()
        context = ssl.create_default_context()
        ca.configure_trust(context)
        assert httpx.post(url + "/scheduler/filter", json=REQUEST, verify=context).status_code == 200


def test_other_files_beside_the_certificate_do_not_reload_it(tmp_path: Path) -> None:
    import time

    ca = trustme.CA()
    mount = tmp_path / "tls"
    mount.mkdir()
    publish_secret(mount, 1, ca.issue_cert("127.0.0.1"))
    settings = Settings(policies=str(POLICIES), cluster="off", tls_cert=str(mount / "tls.crt"), tls_key=str(mount / "tls.key"), reload_debounce_ms=50)
    app = create_app(settings)
    certificate = app.state.kpe.certificate
    with serve(app, **{k: v for k, v in uvicorn_options(settings, app=app).items() if k.startswith("ssl")}):
        log = mount / "kpe.log"  # e.g. a log written next to the certificate, as the end-to-end tests do
        for i in range(5):
            log.write_text(f"line {i}\n" * (i + 1))
            time.sleep(0.1)
        time.sleep(0.3)  # six debounce periods after the last write
        assert certificate.reloads == 0
        publish_secret(mount, 2, ca.issue_cert("127.0.0.1"))  # a real renewal still is picked up
        deadline = time.monotonic() + 10
        while certificate.reloads == 0:
            assert time.monotonic() < deadline, "the renewal was not picked up"
            time.sleep(0.05)
