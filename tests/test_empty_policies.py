"""An empty policy set is refused (KPE402) by kpe check, by kpe serve at start-up and on
reload, unless --allow-empty-policies (KPE_ALLOW_EMPTY_POLICIES) says it is wanted: with
no policy every node passes every pod, which is more often a wrong path or a ConfigMap
emptied by mistake than a wish."""

from __future__ import annotations

import io
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from server.app import create_app
from server.cli.main import main
from server.settings import Settings, load_settings

from .serving import serve

POLICY = """apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: only-pool-a}
spec:
  filters:
  - {name: pool, expression: "node.metadata.labels[?'pool'].orValue('') == 'a'", message: "not in pool a"}
"""
REQUEST = {"Pod": {"metadata": {"name": "p", "namespace": "demo"}}, "Nodes": {"items": [{"metadata": {"name": "a", "labels": {"pool": "a"}}}, {"metadata": {"name": "b", "labels": {"pool": "b"}}}]}}


def refusal(path: Path, files: int = 0) -> str:
    read = f"{files} file{'s' if files != 1 else ''} read"
    return (
        f"{path}: error[KPE402] no policies found in {path} ({read}): with an empty set every node passes every pod; "
        "add a SchedulingPolicy, or pass --allow-empty-policies (KPE_ALLOW_EMPTY_POLICIES=true for kpe serve) if an empty set is what you want"
    )


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), out=out)
    return code, out.getvalue()


def wait_for(check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_kpe_check_refuses_an_empty_directory_and_says_how_to_allow_it(tmp_path: Path) -> None:
    code, out = run("check", str(tmp_path))
    assert code == 1
    assert out == refusal(tmp_path) + "\n\n1 error found.\n"


def test_kpe_check_refuses_a_directory_holding_only_policy_tests(tmp_path: Path) -> None:
    (tmp_path / "t.yaml").write_text("apiVersion: kpe.dev/v1alpha1\nkind: PolicyTest\nmetadata: {name: t}\nspec: {policies: [.], cases: []}\n")
    code, out = run("check", "--output", "json", str(tmp_path))
    assert code == 1
    [error] = json.loads(out)["errors"]
    assert error["code"] == "KPE402" and error["file"] == str(tmp_path)
    assert "(1 file read)" in error["message"]


def test_kpe_check_accepts_an_empty_directory_with_the_flag(tmp_path: Path) -> None:
    code, out = run("check", "--allow-empty-policies", str(tmp_path))
    assert code == 0
    assert out.endswith("0 policies OK (generation 4f53cda18c2b).\n")


def test_kpe_serve_will_not_start_on_an_empty_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KPE_ALLOW_EMPTY_POLICIES", raising=False)
    code, out = run("serve", "--policies", str(tmp_path), "--cluster", "off")
    assert code == 1
    assert out == refusal(tmp_path) + "\n\nkpe serve: the policies have errors; nothing to serve.\n"


def test_kpe_serve_starts_on_an_empty_directory_when_the_environment_allows_it(tmp_path: Path) -> None:
    settings = load_settings(environ={"KPE_ALLOW_EMPTY_POLICIES": "true", "KPE_POLICIES": str(tmp_path), "KPE_CLUSTER": "off"})
    assert settings.allow_empty_policies is True
    with serve(create_app(settings)) as url:
        assert httpx.get(url + "/readyz").status_code == 200
        answer = httpx.post(url + "/scheduler/filter", json=REQUEST).json()
        assert [n["metadata"]["name"] for n in answer["Nodes"]["items"]] == ["a", "b"]


def publish(mount: Path, version: int, files: dict[str, str]) -> None:
    """What the kubelet does with a ConfigMap: a new timestamped dir, ..data repointed, one link per key (stale links removed)."""
    stamp = mount / f"..2026_11_21_00_00_0{version}"
    stamp.mkdir()
    for name, text in files.items():
        (stamp / name).write_text(text)
    tmp = mount / "..data_tmp"
    os.symlink(stamp.name, tmp)
    os.replace(tmp, mount / "..data")
    for link in mount.iterdir():
        if link.is_symlink() and not link.name.startswith("..") and link.name not in files:
            link.unlink()
    for name in files:
        if not (mount / name).is_symlink():
            os.symlink(f"..data/{name}", mount / name)


def test_a_configmap_emptied_of_keys_is_a_failed_reload_and_the_last_good_set_keeps_serving(tmp_path: Path) -> None:
    publish(tmp_path, 1, {"policy.yaml": POLICY})
    app = create_app(Settings(policies=str(tmp_path), cluster="off", reload_debounce_ms=50))
    with serve(app) as url:
        before = httpx.post(url + "/scheduler/filter", json=REQUEST)
        assert [n["metadata"]["name"] for n in before.json()["Nodes"]["items"]] == ["a"]
        generation = before.headers["x-kpe-policy-generation"]

        publish(tmp_path, 2, {})
        wait_for(lambda: httpx.get(url + "/apis/v1/policies").json()["lastLoad"]["ok"] is False)
        state = httpx.get(url + "/apis/v1/policies").json()
        assert state["generation"] == generation
        [error] = state["lastLoad"]["errors"]
        assert error["text"] == refusal(tmp_path)
        after = httpx.post(url + "/scheduler/filter", json=REQUEST)
        assert after.headers["x-kpe-policy-generation"] == generation
        assert [n["metadata"]["name"] for n in after.json()["Nodes"]["items"]] == ["a"]
        metrics = httpx.get(url + "/metrics").text
        assert "kpe_policy_load_errors 1.0" in metrics and 'kpe_policy_reloads_total{result="failure"} 1.0' in metrics


def test_a_configmap_emptied_of_keys_reloads_when_empty_sets_are_allowed(tmp_path: Path) -> None:
    publish(tmp_path, 1, {"policy.yaml": POLICY})
    app = create_app(Settings(policies=str(tmp_path), cluster="off", reload_debounce_ms=50, allow_empty_policies=True))
    with serve(app) as url:
        generation = httpx.get(url + "/apis/v1/policies").json()["generation"]
        publish(tmp_path, 2, {})
        wait_for(lambda: httpx.get(url + "/apis/v1/policies").json()["generation"] != generation)
        assert httpx.get(url + "/apis/v1/policies").json()["policies"] == []
        answer = httpx.post(url + "/scheduler/filter", json=REQUEST).json()
        assert [n["metadata"]["name"] for n in answer["Nodes"]["items"]] == ["a", "b"]
