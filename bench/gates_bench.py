"""Time from the change that admits a gated pod to kpe lifting its gate.

    python bench/gates_bench.py [--rounds 10]

kpe runs in this process (uvicorn thread) against the tests' fake API server,
which calls kpe's webhook on pod CREATE. Each round: a team pod runs, a second
one is created and gated (quota 1), the first is deleted, and the clock runs
until the second pod's gate is gone. Debounce is the default (200 ms).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from server.app import create_app  # noqa: E402
from server.settings import Settings  # noqa: E402
from tests.fakeapi import FakeApiServer  # noqa: E402
from tests.serving import serve  # noqa: E402

POLICY = """apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: quota}
spec:
  match: {podSelector: {matchLabels: {team: ml}}}
  admission:
    expression: "pods.filter(p, p.metadata.?labels[?'team'].orValue('') == 'ml' && p.spec.?nodeName.orValue('') != '').size() < 1"
"""


def pod(name: str, node: str = "") -> dict[str, object]:
    spec: dict[str, object] = {"containers": [{"name": "c", "image": "x"}]}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "demo", "labels": {"team": "ml"}}, "spec": spec}


def wait(check, timeout: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError
        time.sleep(0.005)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, FakeApiServer(bookmark_interval=1.0) as api:
        (Path(tmp) / "policy.yaml").write_text(POLICY)
        api.state.add_node({"metadata": {"name": "node-1"}, "status": {"allocatable": {"cpu": "64"}}})
        settings = Settings(policies=str(Path(tmp) / "policy.yaml"), kubeconfig=api.write_kubeconfig(Path(tmp) / "kubeconfig"), cluster="on", gate_resync_s=30)
        with serve(create_app(settings)) as url:
            wait(lambda: httpx.get(url + "/readyz").status_code == 200)
            api.state.add_mutating_webhook("kpe", url + "/admission/pods")
            latencies = []
            for i in range(args.rounds):
                api.state.add_pod(pod(f"running-{i}", node="node-1"))
                created = httpx.post(api.url + "/api/v1/namespaces/demo/pods", json=pod(f"waiting-{i}"))
                assert created.json()["spec"].get("schedulingGates"), "the webhook did not gate the pod"
                time.sleep(0.5)  # let the controller see it and keep it
                assert api.state.get_pod("demo", f"waiting-{i}")["spec"].get("schedulingGates")
                start = time.monotonic()
                api.state.delete("pods", f"running-{i}", "demo")
                wait(lambda: not api.state.get_pod("demo", f"waiting-{i}")["spec"].get("schedulingGates"))
                latencies.append((time.monotonic() - start) * 1000)
                api.state.update("pods", f"waiting-{i}", "demo", merge={"spec": {"nodeName": "node-1"}})
                api.state.delete("pods", f"waiting-{i}", "demo")
    print(f"gate removal after the admitting change, {args.rounds} rounds (debounce 200 ms):")
    print(f"  p50 {statistics.median(latencies):.0f} ms   min {min(latencies):.0f} ms   max {max(latencies):.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
