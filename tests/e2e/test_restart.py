"""kpe survives its control plane: the real kube-apiserver is restarted three times in the
middle of a burst of pods, once with kpe's ClusterRoleBinding gone while it comes back. Each
time kpe's API access recovers by itself (no request of kpe's fails a few seconds after the
server is back), its Lease is renewed, no pod lands on a node put in maintenance right after
the server returned, and kpe's /readyz tells the truth: not ready while kpe cannot be sure of
its cache, ready once it is."""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from .conftest import Cluster, Kpe
from .controlplane import KPE_TOKEN, REPO, Binaries, control_plane, wait_until

LEASE = "/apis/coordination.k8s.io/v1/namespaces/kpe-system/leases/kpe-gate-controller"
BINDING = "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/kpe"
# Answers a caller expects (a Lease not there yet, a conflict, a failed JSONPatch test op): not failures of kpe's access.
EXPECTED = {"200", "201", "404", "409", "422"}
MAINTENANCE = "kpe.dev/maintenance"


@pytest.fixture
def private(binaries: Binaries, tmp_path: Path, ca: Any, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """A control plane of its own: restarting its API server leaves the session's alone."""
    (tmp_path / "plane").mkdir()
    (tmp_path / "scenario").mkdir()
    with control_plane(tmp_path / "plane", binaries) as plane:
        c = Cluster(plane, tmp_path / "scenario", ca, "e2e-restart")
        try:
            yield c
        finally:
            if getattr(request.node, "rep_call", None) is not None and request.node.rep_call.failed:
                print("\n--- kube-scheduler log ---\n" + c.scheduler_log())
                for kpe in c.kpes:
                    print(f"\n--- {kpe.process.name} log ---\n" + kpe.process.tail(200))
            with contextlib.suppress(Exception):
                c.close()


def failing_requests(kpe: Kpe) -> float:
    """kpe's requests to the API server so far that got no answer or one no caller expects."""
    total = 0.0
    for line in kpe.health.get("/metrics").text.splitlines():
        if line.startswith("kpe_kube_api_requests_total{"):
            sample, _, value = line.rpartition(" ")
            code = sample.split('code="', 1)[1].split('"', 1)[0]
            if code not in EXPECTED:
                total += float(value)
    return total


def renewed_since(api: Any, wall: float) -> bool:
    lease = api.http.get(LEASE)
    if lease.status_code != 200:
        return False
    spec = lease.json()["spec"]
    renew = datetime.strptime(spec["renewTime"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc).timestamp()
    return spec.get("holderIdentity") == "kpe-a" and renew > wall


class Sampler:
    """GET ``path`` every 50 ms in a thread: (monotonic time, status) pairs, 0 when nothing answered."""

    def __init__(self, client: httpx.Client, path: str) -> None:
        self.samples: list[tuple[float, int]] = []
        self._client, self._path = client, path
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            at = time.monotonic()
            try:
                code = self._client.get(self._path).status_code
            except httpx.HTTPError:
                code = 0
            self.samples.append((at, code))
            self._stop.wait(0.05)

    def between(self, start: float, end: float) -> list[int]:
        return [code for at, code in list(self.samples) if start <= at <= end]

    def first(self, wanted: set[int] | None, after: float) -> float | None:
        """When the first answer in ``wanted`` (any answer at all: None) came after ``after``."""
        return next((at for at, c in list(self.samples) if at >= after and (c in wanted if wanted is not None else c != 0)), None)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._client.close()


class Burst:
    """Pods created one after another in a thread for as long as it runs; creations the API
    server cannot take while it restarts are skipped."""

    def __init__(self, cluster: Cluster, every: float = 0.2) -> None:
        self.cluster, self.every = cluster, every
        self.created: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        ns = self.cluster.namespace
        http = httpx.Client(base_url=self.cluster.plane.url, headers=dict(self.cluster.api.http.headers), verify=False, timeout=5.0)
        for i in itertools.count():
            if self._stop.is_set():
                break
            pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"burst-{i}", "namespace": ns},
                   "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10", "resources": {"requests": {"cpu": "10m"}}}]}}
            with contextlib.suppress(httpx.HTTPError):
                if http.post(f"/api/v1/namespaces/{ns}/pods", json=pod).status_code == 201:
                    self.created.append(f"burst-{i}")
            self._stop.wait(self.every)
        http.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


def test_kpe_recovers_from_three_api_server_restarts_mid_burst_with_its_rbac_briefly_missing_once(private: Cluster) -> None:
    cluster, plane, api = private, private.plane, private.api
    ns = cluster.namespace
    cluster.copy_shipped("maintenance-drain.yaml")
    for i in range(4):
        cluster.node(f"plain-{i}", pods="250")
    for i in range(3):
        cluster.node(f"maint-{i}", pods="250")  # in maintenance from right after restart i on
    kpe = cluster.start_kpe(extra=("--lease-duration-s", "6"))
    cluster.start_scheduler(kpe, node_cache_capable=True)
    wait_until(lambda: renewed_since(api, time.time() - 5), 30, "kpe to hold its Lease")
    readiness = Sampler(httpx.Client(base_url=str(kpe.health.base_url), timeout=2.0), "/readyz")
    # When kpe's credentials can list nodes again (a restarted API server answers 403 to everyone while it
    # loads RBAC, and kpe's own RBAC is missing once): before that, nothing can have told kpe what changed.
    listable = Sampler(httpx.Client(base_url=plane.url, headers={"Authorization": f"Bearer {KPE_TOKEN}"}, verify=False, timeout=2.0),
                       "/api/v1/nodes?limit=1")
    burst = Burst(cluster)
    labelled: dict[str, int] = {}  # maintenance node -> the resourceVersion its label was written at
    figures: list[str] = []
    try:
        wait_until(lambda: len(cluster.bound()) >= 10, 60, "the burst to be scheduled")
        for restart in range(3):
            rbac_gone = restart == 1
            time.sleep(3)  # the burst goes on under a kpe that has run a while
            if rbac_gone:
                api.delete(BINDING, ok=(200,))
            down = time.monotonic()
            plane.stop_apiserver()
            stopped = time.monotonic()
            plane.start_apiserver()
            launched, back, wall_back = plane.apiserver_started_at, time.monotonic(), time.time()
            failed_at_back = failing_requests(kpe)
            node = f"maint-{restart}"
            labelled[node] = int(api.patch(f"/api/v1/nodes/{node}", {"metadata": {"labels": {MAINTENANCE: "in-progress"}}})["metadata"]["resourceVersion"])
            restored = back
            if rbac_gone:
                time.sleep(5)  # kpe cannot list nodes or pods meanwhile
                binding = next(doc for doc in yaml.safe_load_all((REPO / "deploy" / "rbac.yaml").read_text()) if doc and doc["kind"] == "ClusterRoleBinding")
                binding["subjects"] = [{"kind": "User", "name": "kpe", "apiGroup": "rbac.authorization.k8s.io"}]
                restored = time.monotonic()  # before: kpe may list the moment the binding is stored
                api.create("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", binding)

            def recovered() -> bool:
                cached = kpe.http.get(f"/apis/v1/nodes/{node}")
                seen = cached.status_code == 200 and cached.json()["node"]["metadata"]["labels"].get(MAINTENANCE) == "in-progress"
                return seen and kpe.health.get("/readyz").status_code == 200 and renewed_since(api, wall_back)

            wait_until(recovered, 60, f"kpe's cache, /readyz and Lease after restart {restart + 1}", interval=0.1)
            done = time.monotonic()
            failed_by_then = failing_requests(kpe)
            time.sleep(5)  # the burst, the Lease and the watches go on
            failed_after = failing_requests(kpe) - failed_by_then

            noticed = readiness.first({503}, down)
            allowed = listable.first({200}, launched)
            assert noticed is not None and noticed < back, f"restart {restart + 1}: kpe's /readyz never said it was cut off"
            assert allowed is not None and (not rbac_gone or allowed >= restored)
            ready_again = readiness.first({200}, noticed)
            # Not ready from the moment kpe noticed until its credentials could list again: nothing could
            # have told it what changed meanwhile.
            assert set(readiness.between(noticed, allowed)) == {503}
            assert ready_again is not None and ready_again >= allowed
            assert set(readiness.between(done, time.monotonic())) == {200}, "kpe's /readyz flapped after it recovered"
            assert failed_after == 0, f"restart {restart + 1}: {failed_after:.0f} of kpe's API requests failed after it had recovered"
            figures.append(
                f"restart {restart + 1}{' (kpe RBAC missing 5 s)' if rbac_gone else ''}: kube-apiserver stopping {stopped - down:.1f} s, "
                f"ready {back - stopped:.1f} s and listing for kpe's credentials {allowed - stopped:.1f} s after it stopped; "
                f"kpe not ready for {ready_again - noticed:.1f} s, ready again {ready_again - allowed:.2f} s and caught up "
                f"(label seen, Lease renewed) {done - allowed:.2f} s after its credentials could list; kpe's failing API requests "
                f"from the API server's /readyz to recovery {failed_by_then - failed_at_back:.0f}, in the 5 s after: {failed_after:.0f}"
            )
    finally:
        burst.stop()
        readiness.close()
        listable.close()
    wait_until(lambda: all(name in cluster.bound() for name in burst.created), 90, "every pod of the burst to be bound", interval=0.5)
    pods = api.pods(ns)
    misplaced = sorted(p["metadata"]["name"] for p in pods if p["spec"].get("nodeName") in labelled
                       and int(p["metadata"]["resourceVersion"]) > labelled[p["spec"]["nodeName"]])
    placed = {node: sum(1 for p in pods if p["spec"].get("nodeName") == node) for node in sorted(labelled)}
    print(f"\n[e2e restart] {len(burst.created)} pods in the burst, on the nodes put in maintenance {placed} (all before their label); "
          f"misplaced after the label: {len(misplaced)}\n  " + "\n  ".join(figures))
    assert misplaced == []
