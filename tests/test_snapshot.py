"""``kpe snapshot`` against the fake API server: what it keeps and drops, the gzip
form, ``--anonymise`` (names hashed consistently, what policies decide on kept), and
a running kpe's view with ``--server``."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from engine.cluster import snapshot
from engine.cluster.anonymise import Anonymiser
from server.app import create_app
from server.settings import Settings

from .livecluster import POLICIES, Live, cluster, live_cluster
from .serving import serve

SECRET = "s3cr3t-value-in-env"


@pytest.fixture
def live(tmp_path: Path) -> Iterator[Live]:
    with live_cluster(tmp_path) as found:
        # What a real cluster adds: managedFields, kubectl's last-applied copy, a finished pod,
        # an environment with a secret in it, and the hostname label of every node.
        found.api.state.add_pod({
            "metadata": {"name": "done", "namespace": "ml"},
            "spec": {"nodeName": "cpu-1", "containers": [{"name": "c", "image": "job"}]},
            "status": {"phase": "Succeeded"},
        })
        found.api.state.add_pod({
            "metadata": {
                "name": "web-7d9f", "namespace": "web", "labels": {"app": "web", "statefulset.kubernetes.io/pod-name": "web-7d9f"},
                "annotations": {snapshot.LAST_APPLIED: "{...}", "example.com/owner": "alice@example.com", "kpe.dev/multi-arch": "true"},
                "managedFields": [{"manager": "kubectl", "operation": "Apply"}],
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web", "uid": "u1", "controller": True}],
            },
            "spec": {
                "nodeName": "cpu-1",
                "containers": [{"name": "c", "image": "web:1", "env": [{"name": "TOKEN", "value": SECRET}], "command": ["serve"],
                                "resources": {"requests": {"cpu": "1"}}}],
                "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "web-data-7d9f"}}],
                "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["cpu-1"]}]}]}}},
            },
            "status": {"phase": "Running", "podIP": "10.0.0.7", "hostIP": "192.168.1.5"},
        })
        for node in cluster()["nodes"]:
            name = node["metadata"]["name"]
            found.api.state.update("nodes", name, merge={"metadata": {"labels": {"kubernetes.io/hostname": name}},
                                                         "status": {"addresses": [{"type": "InternalIP", "address": "192.168.1.5"}]}})
        yield found


def take(live: Live, path: Path, *extra: str) -> dict[str, Any]:
    code, out = live.kpe("snapshot", "-o", str(path), "--kubeconfig", live.kubeconfig, *extra)
    assert code == 0, out
    assert out.startswith(f"wrote {path}: 4 nodes, 7 pods")
    return snapshot.read(path).to_dict()


def names(data: dict[str, Any], kind: str) -> list[str]:
    return sorted(o["metadata"]["name"] for o in data[kind])


def test_a_snapshot_holds_every_node_and_unfinished_pod_without_managed_fields(live: Live, tmp_path: Path) -> None:
    data = take(live, tmp_path / "snap.json")
    assert data["apiVersion"] == "kpe.dev/v1alpha1" and data["kind"] == "ClusterSnapshot"
    assert data["metadata"]["anonymised"] is False and data["metadata"]["source"].startswith("kubeconfig ")
    assert names(data, "nodes") == ["cpu-1", "db-1", "gpu-1", "gpu-2"]
    assert "done" not in names(data, "pods") and len(data["pods"]) == 7
    web = next(p for p in data["pods"] if p["metadata"]["name"] == "web-7d9f")
    assert "managedFields" not in web["metadata"]
    assert snapshot.LAST_APPLIED not in web["metadata"]["annotations"]
    assert web["spec"]["containers"][0]["env"][0]["value"] == SECRET, "not anonymised: only what no decision reads goes"
    assert "kpe" not in data


def test_finished_pods_are_kept_when_asked_and_gz_files_are_compressed(live: Live, tmp_path: Path) -> None:
    code, out = live.kpe("snapshot", "-o", str(tmp_path / "snap.json.gz"), "--kubeconfig", live.kubeconfig, "--include-finished")
    assert code == 0 and "8 pods" in out
    raw = (tmp_path / "snap.json.gz").read_bytes()
    assert raw[:2] == b"\x1f\x8b"
    assert "done" in names(snapshot.read(tmp_path / "snap.json.gz").to_dict(), "pods")


def test_anonymised_names_are_hashed_consistently_and_what_policies_read_is_kept(live: Live, tmp_path: Path) -> None:
    salt = tmp_path / "salt"
    salt.write_text("a-salt-of-at-least-sixteen-bytes")
    data = take(live, tmp_path / "anon.json", "--anonymise", "--keep-names-from", str(POLICIES), "--salt-file", str(salt))
    text = json.dumps(data)
    assert not {p["metadata"]["name"] for p in data["pods"]} & {p["metadata"]["name"] for p in cluster()["pods"]}
    for secret in ("gpu-1", "cpu-1", "db-1", "web-7d9f", "192.168.1.5", "10.0.0.7", SECRET, "alice@example.com", "web-data-7d9f"):
        assert secret not in text, secret
    assert data["metadata"] == {"takenAt": data["metadata"]["takenAt"], "source": "anonymised", "anonymised": True}
    nodes = {n["metadata"]["name"]: n for n in data["nodes"]}
    assert all(name.startswith("node-") and len(name) == 15 for name in nodes)
    for name, node in nodes.items():
        assert node["metadata"]["labels"]["kubernetes.io/hostname"] == name
        assert "addresses" not in node["status"]
    # Labels, taints and resources decide: kept as they are.
    tainted = next(n for n in data["nodes"] if n["spec"].get("taints"))
    assert tainted["spec"]["taints"] == [{"key": "dedicated", "value": "db", "effect": "NoSchedule"}]
    assert sorted(n["metadata"].get("labels", {}).get("team", "") for n in data["nodes"]) == ["", "", "", "vision"]
    pods = {p["metadata"]["name"]: p for p in data["pods"]}
    namespaces = sorted({p["metadata"]["namespace"] for p in data["pods"]})
    assert "ml" in namespaces, "named in the policies: kept"
    assert "web" not in namespaces and any(ns.startswith("ns-") for ns in namespaces)
    web = next(p for p in pods.values() if p["metadata"].get("labels", {}).get("app") == "web")
    assert web["spec"]["nodeName"] in nodes
    assert web["metadata"]["labels"]["statefulset.kubernetes.io/pod-name"] == web["metadata"]["name"]
    assert web["metadata"]["annotations"] == {"kpe.dev/multi-arch": "true"}
    assert web["metadata"]["ownerReferences"][0]["kind"] == "StatefulSet" and web["metadata"]["ownerReferences"][0]["name"].startswith("owner-")
    assert web["spec"]["containers"] == [{"name": "c", "image": "web:1", "resources": {"requests": {"cpu": "1"}}, "imagePullPolicy": "IfNotPresent"}]
    assert web["spec"]["volumes"] == [{"name": "data", "persistentVolumeClaim": {}}]
    assert web["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]["matchFields"][0]["values"] == [web["spec"]["nodeName"]]
    assert web["status"] == {"phase": "Running", "qosClass": "Burstable"}
    gated = next(p for p in pods.values() if p["spec"].get("schedulingGates") == [{"name": "kpe.dev/quota"}])
    assert gated["metadata"]["annotations"] == {"kpe.dev/gates": "kpe.dev/quota"}
    # The same salt, the same names; another salt, others.
    again = take(live, tmp_path / "again.json", "--anonymise", "--keep-names-from", str(POLICIES), "--salt-file", str(salt))
    assert names(again, "nodes") == names(data, "nodes") and names(again, "pods") == names(data, "pods")
    other = take(live, tmp_path / "other.json", "--anonymise")
    assert not set(names(other, "nodes")) & set(names(data, "nodes"))


def test_the_kubernetes_namespaces_and_given_names_are_never_hashed() -> None:
    anonymiser = Anonymiser(b"0123456789abcdef", keep={"keep-me"})
    assert anonymiser.name("namespace", "kube-system") == "kube-system"
    assert anonymiser.name("pod", "keep-me") == "keep-me"
    assert anonymiser.name("namespace", "team-a") == anonymiser.name("namespace", "team-a") != anonymiser.name("pod", "team-a")


def test_with_a_running_kpe_its_view_is_recorded(live: Live, tmp_path: Path) -> None:
    app = create_app(Settings(policies=str(POLICIES), kubeconfig=live.kubeconfig, cluster="on", gate_resync_s=0))
    with serve(app) as url:
        deadline = time.monotonic() + 10
        while httpx.get(url + "/readyz").status_code != 200:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        generation = httpx.get(url + "/apis/v1/policies").json()["generation"]
        data = take(live, tmp_path / "snap.json", "--server", url)
        anonymised = take(live, tmp_path / "anon.json", "--server", url, "--anonymise")
    assert data["kpe"]["generation"] == generation and data["kpe"]["policies"] == ["gpus", "quota", "team-pools"]
    assert data["kpe"]["server"] == url
    assert anonymised["kpe"]["generation"] == generation
    for held in anonymised["kpe"]["gated"]:
        assert held["name"].startswith("pod-") and "message" not in json.dumps(held)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--keep-name", "x"], "--keep-names-from, --keep-name and --salt-file go with --anonymise"),
        (["--anonymise", "--salt-file", "{tmp}/short"], "holds 5 bytes; use at least 16"),
        (["--anonymise", "--keep-names-from", "{tmp}/missing.yaml"], "--keep-names-from: cannot read"),
    ],
)
def test_bad_options_are_usage_errors(live: Live, tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    (tmp_path / "short").write_text("short")
    code, _ = live.kpe("snapshot", "-o", str(tmp_path / "s.json"), "--kubeconfig", live.kubeconfig, *[a.replace("{tmp}", str(tmp_path)) for a in argv])
    assert code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "s.json").exists()


def test_an_unwritable_output_or_unreachable_cluster_is_a_usage_error(live: Live, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert live.kpe("snapshot", "-o", str(tmp_path / "no" / "dir.json"), "--kubeconfig", live.kubeconfig)[0] == 2
    assert "cannot write" in capsys.readouterr().err
    live.api.state.fail_next(5, 503)
    assert live.kpe("snapshot", "-o", str(tmp_path / "s.json"), "--kubeconfig", live.kubeconfig)[0] == 2
    assert "the Kubernetes API server (kubeconfig " in capsys.readouterr().err


def test_reading_something_else_than_a_snapshot_says_so(tmp_path: Path) -> None:
    (tmp_path / "pod.yaml").write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: x}\n")
    with pytest.raises(snapshot.SnapshotError, match="is not a kpe cluster snapshot"):
        snapshot.read(tmp_path / "pod.yaml")
    with pytest.raises(snapshot.SnapshotError, match="cannot read"):
        snapshot.read(tmp_path / "missing.json")
