"""``kpe explain pod NAMESPACE/NAME`` against the fake API server: read from the cluster
(``--kubeconfig``) with the given policies, or from a running kpe (``--server``) with
the generation it serves and its cache's nodeInfo; what it says of each node (the first
rejecting rule, kube-scheduler's own filters, whether eviction could help), of gates,
and of pods that are not kpe's to decide."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from server.app import create_app
from server.settings import Settings

from .livecluster import POLICIES, Live, live_cluster
from .serving import serve


@pytest.fixture
def live(tmp_path: Path) -> Iterator[Live]:
    with live_cluster(tmp_path) as found:
        yield found


def explained(live: Live, pod: str, *extra: str) -> dict[str, Any]:
    code, out = live.kpe("explain", "pod", pod, "--kubeconfig", live.kubeconfig, "--policies", str(POLICIES), "--output", "json", *extra)
    assert code == 0, out
    data: dict[str, Any] = json.loads(out)
    return data


def by_node(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {n["node"]: n for n in data["nodes"]}


def test_a_pending_pod_is_explained_node_by_node_from_the_live_cluster(live: Live) -> None:
    data = explained(live, "ml/train")
    assert data["pod"] == "ml/train" and data["status"] == {"state": "pending", "kpeDecides": True, "notes": [], "podScheduled": None}
    assert data["matchedPolicies"] == ["gpus", "team-pools"]
    nodes = by_node(data)
    # The first rule that rejects each node, and whether eviction is a way out.
    assert (nodes["cpu-1"]["verdict"], nodes["cpu-1"]["reason"]) == ("unresolvable", "gpus/gpu-node: node has no GPUs")
    assert (nodes["gpu-1"]["verdict"], nodes["gpu-1"]["reason"]) == ("fail", "gpus/enough-free-gpus: node has 1 GPUs free, pod needs 2")
    assert nodes["gpu-1"]["eviction"] == {"possible": True, "reason": "evicting 1 pod of lower priority would make room, and kpe allows it", "victims": ["ml/big"]}
    assert nodes["gpu-2"]["eviction"]["possible"] is False
    assert nodes["gpu-2"]["eviction"]["reason"] == "kpe refuses: gpus/preemption.victim: victim ml/critical may not be preempted"
    assert nodes["cpu-1"]["eviction"]["reason"] == "kpe's rule gpus/gpu-node is unresolvable: no eviction helps"
    # kpe keeps db-1, kube-scheduler's TaintToleration does not: not kpe's rejection.
    assert nodes["db-1"]["verdict"] == "pass"
    assert nodes["db-1"]["kubeScheduler"] == {"reasons": ["node(s) had untolerated taint {dedicated: db}"], "unresolvable": True}
    assert data["feasibleNodes"] == []
    assert data["source"].startswith(f"policies {POLICIES}, cluster from kubeconfig ")


def test_the_table_says_the_verdict_first_and_marks_kube_scheduler_s_rejections_as_not_kpe_s(live: Live) -> None:
    code, out = live.kpe("explain", "pod", "ml/train", "--kubeconfig", live.kubeconfig, "--policies", str(POLICIES))
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("pod ml/train  (policy generation ")
    assert lines[1] == "state: pending"
    assert lines[3].startswith("verdict: no node can take the pod now: 3 of 4 rejected by kpe's policies, 1 more by kube-scheduler's own filters (not kpe's)")
    assert lines[3].endswith("eviction could help on gpu-1")
    header = next(line for line in lines if line.startswith("NODE "))
    assert header.split("  ")[0] == "NODE" and "KUBE-SCHEDULER (NOT KPE'S)" in header and "EVICTION" in header
    assert "scores of the nodes kpe's filters keep (what prioritize answers, 0..10):" in lines


def test_markdown_is_a_heading_a_list_and_tables(live: Live) -> None:
    code, out = live.kpe("explain", "pod", "ml/train", "--kubeconfig", live.kubeconfig, "--policies", str(POLICIES), "--output", "markdown")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "### `ml/train`"
    assert "- state: pending" in lines
    assert "| NODE | KPE | FIRST REJECTING RULE | KUBE-SCHEDULER (NOT KPE'S) | EVICTION | SCORE |" in lines
    assert any(line.startswith("| gpu-1 | FAIL | gpus/enough-free-gpus: node has 1 GPUs free, pod needs 2 |") for line in lines)


def test_a_pod_at_kpe_s_gate_says_which_gate_holds_it_and_why(live: Live) -> None:
    data = explained(live, "ml/waiting")
    assert data["status"]["state"] == "gated" and data["status"]["kpeDecides"] is True
    assert data["gates"] == [{"gate": "kpe.dev/quota", "owner": "kpe", "policy": "quota", "held": True,
                              "message": "quota: team vision uses 9 of its 8 GPUs; this pod needs 4 more"}]


@pytest.mark.parametrize(
    ("pod", "state", "note"),
    [
        ("ml/foreign", "gated", "Held by a scheduling gate kpe did not add (example.com/approval): kube-scheduler will not try the pod until whoever added it lifts it; kpe never does."),
        ("web/plain", "pending", "Not kpe's to decide: no policy of generation"),
        ("ml/big", "bound", "Not kpe's to decide: the pod is already bound to gpu-1."),
    ],
)
def test_it_says_plainly_when_a_pod_is_not_kpe_s_to_decide(live: Live, pod: str, state: str, note: str) -> None:
    data = explained(live, pod)
    assert data["status"]["state"] == state
    assert data["status"]["kpeDecides"] is (pod == "ml/foreign")  # kpe decides once the foreign gate lifts
    assert any(n.startswith(note) for n in data["status"]["notes"]), data["status"]["notes"]
    code, out = live.kpe("explain", "pod", pod, "--kubeconfig", live.kubeconfig, "--policies", str(POLICIES))
    assert code == 0 and note in out


def test_a_bound_pod_is_judged_without_itself_on_its_node(live: Live) -> None:
    nodes = by_node(explained(live, "ml/big"))
    # 8 GPUs, 7 of them its own: without itself, gpu-1 can take it again.
    assert nodes["gpu-1"]["verdict"] == "pass" and nodes["gpu-1"]["kubeScheduler"]["reasons"] == []


def test_an_unknown_pod_or_target_is_a_usage_error(live: Live, capsys: pytest.CaptureFixture[str]) -> None:
    code, _ = live.kpe("explain", "pod", "ml/nope", "--kubeconfig", live.kubeconfig, "--policies", str(POLICIES))
    assert code == 2
    assert "kpe explain: pod ml/nope not found (kubeconfig " in capsys.readouterr().err
    assert live.kpe("explain", "pod", "just-a-name", "--kubeconfig", live.kubeconfig)[0] == 2
    assert "the pod must be given as NAMESPACE/NAME, not 'just-a-name'" in capsys.readouterr().err
    assert live.kpe("explain", "pod", "ml/train", "--pod", "x.yaml", "--kubeconfig", live.kubeconfig)[0] == 2
    assert live.kpe("explain")[0] == 2
    assert "expected --pod FILE --nodes FILE, or pod NAMESPACE/NAME" in capsys.readouterr().err


def test_a_cluster_without_credentials_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from server.cli.main import main

    assert main(["explain", "pod", "ml/train", "--policies", str(POLICIES), "--kubeconfig", str(tmp_path / "missing")]) == 2
    assert f"kubeconfig {tmp_path / 'missing'} does not exist" in capsys.readouterr().err


# -- through a running kpe -------------------------------------------------------------------


@pytest.fixture
def kpe_url(live: Live) -> Iterator[str]:
    app = create_app(Settings(policies=str(POLICIES), kubeconfig=live.kubeconfig, cluster="on", gate_resync_s=0))
    with serve(app) as url:
        deadline = time.monotonic() + 10
        while httpx.get(url + "/readyz").status_code != 200:
            assert time.monotonic() < deadline, "kpe did not sync"
            time.sleep(0.05)
        yield url


def test_through_a_running_kpe_the_answer_is_that_replica_s_with_its_generation_and_cache(live: Live, kpe_url: str) -> None:
    direct = explained(live, "ml/train")
    code, out = live.kpe("explain", "pod", "ml/train", "--server", kpe_url, "--output", "json")
    assert code == 0, out
    served = json.loads(out)
    assert served["generation"] == httpx.get(kpe_url + "/apis/v1/policies").json()["generation"] == direct["generation"]
    assert served["source"] == f"served by kpe at {kpe_url}"
    assert "text" not in served
    for name, node in by_node(direct).items():
        got = by_node(served)[name]
        for key in ("verdict", "reason", "kubeScheduler", "eviction", "score"):
            assert got[key] == node[key], (name, key)
    assert served["gates"] == direct["gates"] and served["status"] == direct["status"]


def test_through_a_running_kpe_victims_are_chosen_by_priority_although_its_cache_cuts_bound_pods(live: Live, kpe_url: str) -> None:
    # ml/big at the pending pod's priority: no longer a victim, whatever else kpe's cache drops of it.
    live.api.state.update("pods", "big", "ml", mutate=lambda pod: pod["spec"].update(priority=100))
    deadline = time.monotonic() + 10
    while True:
        code, out = live.kpe("explain", "pod", "ml/train", "--server", kpe_url, "--output", "json")
        gpu1 = by_node(json.loads(out))["gpu-1"]["eviction"]
        if gpu1["possible"] is False or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert gpu1 == {"possible": False, "reason": "no pod of lower priority runs there", "victims": []}
    assert by_node(explained(live, "ml/train"))["gpu-1"]["eviction"] == gpu1


def test_the_endpoint_explains_by_namespace_and_name_and_answers_errors_in_json(live: Live, kpe_url: str) -> None:
    answer = httpx.get(kpe_url + "/apis/v1/explain", params={"pod": "ml/waiting"})
    assert answer.status_code == 200
    data = answer.json()
    assert data["gates"][0]["held"] is True and data["text"].startswith("pod ml/waiting  (policy generation ")
    assert httpx.get(kpe_url + "/apis/v1/explain", params={"pod": "ml"}).json() == {"error": "pod must be NAMESPACE/NAME, not 'ml'"}
    missing = httpx.get(kpe_url + "/apis/v1/explain", params={"pod": "ml/nope"})
    assert missing.status_code == 404 and missing.json() == {"error": "pod ml/nope is not in kpe's cache (deleted, or not seen yet)"}


def test_through_a_running_kpe_an_unknown_pod_or_a_policies_flag_is_a_usage_error(live: Live, kpe_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert live.kpe("explain", "pod", "ml/nope", "--server", kpe_url)[0] == 2
    assert f"kpe at {kpe_url} answered 404 to GET /apis/v1/explain: pod ml/nope is not in kpe's cache" in capsys.readouterr().err
    assert live.kpe("explain", "pod", "ml/train", "--server", kpe_url, "--policies", str(POLICIES))[0] == 2
    assert "with --server, kpe explains with the policies it serves" in capsys.readouterr().err


def test_a_kpe_without_cluster_access_says_it_has_no_pod_cache(tmp_path: Path) -> None:
    app = create_app(Settings(policies=str(POLICIES), cluster="off"))
    with serve(app) as url:
        answer = httpx.get(url + "/apis/v1/explain", params={"pod": "ml/train"})
    assert answer.status_code == 503 and "no pod cache" in answer.json()["error"]


def test_over_https_kpe_s_certificate_is_checked_against_the_name_given_for_a_port_forward(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import trustme

    from server.cli.main import main

    ca = trustme.CA()
    cert = ca.issue_cert("kpe.kpe-system.svc")
    cert.cert_chain_pems[0].write_to_path(str(tmp_path / "tls.crt"))
    cert.private_key_pem.write_to_path(str(tmp_path / "tls.key"))
    ca.cert_pem.write_to_path(str(tmp_path / "ca.crt"))
    app = create_app(Settings(policies=str(POLICIES), cluster="off"))
    with serve(app, ssl_certfile=str(tmp_path / "tls.crt"), ssl_keyfile=str(tmp_path / "tls.key")) as url:
        argv = ["explain", "pod", "ml/train", "--server", url, "--ca-file", str(tmp_path / "ca.crt")]
        assert main(argv) == 2
        assert "certificate is not valid for '127.0.0.1'" in capsys.readouterr().err
        # The right name: the connection is made, and this kpe (no cluster access) answers why it cannot explain.
        assert main([*argv, "--tls-server-name", "kpe.kpe-system.svc"]) == 2
        assert "answered 503 to GET /apis/v1/explain: kpe runs without cluster access" in capsys.readouterr().err
