"""Policies kept in the cluster (``--policy-source cluster``) on the real API server and
kube-scheduler: an applied SchedulingPolicy decides kube-scheduler's next pods, one that
breaks the set is stored but not served while the last good set keeps serving, and the
status kpe's leader writes is what `kubectl get` and GitOps tools read."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from .conftest import Cluster, Kpe
from .controlplane import REPO, Binaries, ControlPlane, wait_until
from .crds import POLICIES, RESERVATIONS, delete_all, install_crds, kubectl, ready_of, status_of

SOURCE = ("--policy-source", "cluster", "--allow-empty-policies", "--controllers", "gates,reservations,requeue,status")


def pool_policy(pool: str) -> dict[str, Any]:
    return {"apiVersion": "kpe.dev/v1alpha1", "kind": "SchedulingPolicy", "metadata": {"name": "pool"},
            "spec": {"filters": [{"name": "pool", "expression": f"node.metadata.?labels[?'pool'].orValue('') == '{pool}'",
                                  "message": f"not in pool {pool}"}]}}


def gated(name: str, gate: str) -> dict[str, Any]:
    return {"apiVersion": "kpe.dev/v1alpha1", "kind": "SchedulingPolicy", "metadata": {"name": name},
            "spec": {"admission": {"gate": gate, "expression": "true"}}}


POOL_FILE = """apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: pool}
spec:
  filters:
  - {name: pool, expression: "true"}
"""


LAST_GOOD = "/api/v1/namespaces/kpe-system/configmaps/kpe-last-good-policies"
BROKEN = {"filters": [{"name": "pool", "expression": "node.metadata.name > 3"}]}


def last_good(plane: ControlPlane) -> dict[str, Any] | None:
    found = plane.api.call("GET", LAST_GOOD, ok=(200, 404))
    return found if found.get("kind") == "ConfigMap" else None


def forget_last_good(plane: ControlPlane) -> None:
    if last_good(plane) is not None:
        plane.api.delete(LAST_GOOD)


@pytest.fixture
def objects(plane: ControlPlane) -> Iterator[ControlPlane]:
    install_crds(plane)
    plane.apply_rbac(REPO / "deploy" / "cluster-policies" / "rbac.yaml")
    delete_all(plane)
    forget_last_good(plane)
    try:
        yield plane
    finally:
        delete_all(plane)
        forget_last_good(plane)


def start(cluster: Cluster) -> Kpe:
    """kpe reading its policies from the cluster, and kube-scheduler calling it. The scheduler's
    configuration comes from a file with the verbs the objects use (kpe scheduler-config reads files)."""
    cluster.write_policy("pool.yaml", POOL_FILE)
    kpe = cluster.start_kpe(extra=SOURCE)
    cluster.start_scheduler(kpe)
    for pool in ("a", "b"):
        cluster.node(f"{cluster.namespace}-{pool}", labels={"pool": pool})
    return kpe


def edit(plane: ControlPlane, name: str, spec: dict[str, Any]) -> int:
    """Replace the policy's spec (what `kubectl apply` of an edited file does); its new generation."""
    current = plane.api.get(f"{POLICIES}/{name}")
    current["spec"] = spec
    return int(plane.api.call("PUT", f"{POLICIES}/{name}", current)["metadata"]["generation"])


def ready(plane: ControlPlane, name: str, generation: int, status: str = "True") -> dict[str, Any]:
    """The object's status once kpe has judged ``generation`` of it and Ready says ``status``."""
    path = f"{POLICIES}/{name}"
    return dict(wait_until(lambda: (s := status_of(plane, path)).get("observedGeneration") == generation and ready_of(s).get("status") == status and s,
                           10, f"{name}'s status for generation {generation}"))


def first_decision(kpe: Kpe, generation: str) -> float | None:
    times = [d["time"] for d in kpe.http.get("/apis/v1/decisions", params={"verb": "filter"}).json()["decisions"] if d["generation"] == generation]
    return min(times) if times else None


def test_an_applied_policy_decides_the_next_pods_and_its_status_follows_its_edits(cluster: Cluster, objects: ControlPlane) -> None:
    kpe = start(cluster)
    ns, api = cluster.namespace, objects.api
    api.create(POLICIES, pool_policy("a"))
    status = ready(objects, "pool", 1)
    assert status["servedGeneration"] == kpe.generation() and status["decisions"] == "filter"
    assert ready_of(status)["reason"] == "Served"
    cluster.api.pod(ns, "web-1")
    assert cluster.wait_bound(["web-1"])["web-1"] == f"{ns}-a"

    # A pod only pool b can take waits, rejected under the policy served now.
    cluster.api.pod(ns, "web-2", extra={"nodeSelector": {"pool": "b"}})
    wait_until(lambda: kpe.http.get("/apis/v1/decisions", params={"pod": f"{ns}/web-2"}).json()["decisions"], 30, "kpe to reject web-2")
    assert "web-2" not in cluster.bound()

    # How long after the write this happens is bench/cluster_policy_bench.py's to measure, not a test's.
    old = kpe.generation()
    generation = edit(objects, "pool", pool_policy("b")["spec"])
    new = wait_until(lambda: (g := kpe.generation()) != old and g, 10, "kpe to serve the edited policy", interval=0.005)
    assert cluster.wait_bound(["web-2"])["web-2"] == f"{ns}-b", "placed under the edited policy"
    decided = first_decision(kpe, new)
    assert decided is not None
    cluster.api.pod(ns, "web-3")
    assert cluster.wait_bound(["web-3"])["web-3"] == f"{ns}-b"
    status = ready(objects, "pool", generation)
    assert generation == 2 and status["servedGeneration"] == new


def test_an_object_that_breaks_the_set_is_stored_not_served_and_its_status_says_why(cluster: Cluster, objects: ControlPlane) -> None:
    kpe = start(cluster)
    ns, api = cluster.namespace, objects.api
    api.create(POLICIES, pool_policy("a"))
    api.create(POLICIES, gated("first", "example.com/quota"))
    ready(objects, "pool", 1)
    ready(objects, "first", 1)
    good = kpe.generation()

    # Valid on its own, so the API server stores it; two policies may not share a gate (KPE404).
    api.create(POLICIES, gated("second", "example.com/quota"))
    second = ready(objects, "second", 1, status="False")
    condition = ready_of(second)
    assert condition["reason"] == "Invalid"
    assert condition["message"] == (
        "refused: spec.admission.gate: scheduling gate 'example.com/quota' is also the gate of policy 'first' (schedulingpolicy/first); "
        f"each policy needs a gate of its own (KPE404); kpe keeps serving policy set generation {good}"
    )
    assert second["servedGeneration"] == good and kpe.generation() == good
    assert [(c["type"], c["status"]) for c in second["conditions"]] == [("Ready", "False"), ("Stalled", "True")], "kstatus reads Stalled"
    assert ready_of(status_of(objects, f"{POLICIES}/first"))["status"] == "True", "what the set serves stays Ready"

    # An edit made while the set is broken is not served: the last good set keeps deciding.
    edit(objects, "pool", pool_policy("b")["spec"])
    pool = ready(objects, "pool", 2, status="False")
    assert ready_of(pool)["reason"] == "SetNotServed" and "schedulingpolicy/second: spec.admission.gate" in ready_of(pool)["message"]
    print("\n[e2e cluster policies] " + "\n".join(f"{name}: {ready_of(status_of(objects, f'{POLICIES}/{name}'))}" for name in ("first", "second", "pool")))
    cluster.api.pod(ns, "web-1")
    assert cluster.wait_bound(["web-1"])["web-1"] == f"{ns}-a", "placed under the last good set"

    # Remove the clash: the whole set, the edit included, serves.
    api.delete(f"{POLICIES}/second")
    pool = ready(objects, "pool", 2)
    assert pool["servedGeneration"] == kpe.generation() != good
    cluster.api.pod(ns, "web-2")
    assert cluster.wait_bound(["web-2"])["web-2"] == f"{ns}-b"


def test_kubectl_get_shows_what_kpe_serves(cluster: Cluster, objects: ControlPlane, binaries: Binaries) -> None:
    client = kubectl(binaries)
    if client is None:
        pytest.skip(f"no kubectl {binaries.version} beside {binaries.folder} or in ~/.cache/kpe-k8s/{binaries.version}/bin (tests/e2e/build-control-plane.sh builds it)")
    kpe = start(cluster)
    objects.api.create(POLICIES, pool_policy("a"))
    objects.api.create(POLICIES, gated("quota", "example.com/quota"))
    ready(objects, "pool", 1)
    ready(objects, "quota", 1)

    def get(*args: str) -> str:
        return subprocess.run([str(client), "--kubeconfig", str(objects.kubeconfig), *args], check=True, capture_output=True, text=True, timeout=30).stdout

    table = get("get", "schedulingpolicies")
    print(f"\n[e2e kubectl {binaries.version}]\n{table}")
    header, *rows = [line.split() for line in table.strip().splitlines()]
    assert header == ["NAME", "MODE", "DECISIONS", "READY", "SERVED", "AGE"]
    served = kpe.generation()
    assert [row[:5] for row in rows] == [["pool", "Enforce", "filter", "True", served], ["quota", "Enforce", "admission", "True", served]]
    assert get("get", "spol", "pool", "-o", "jsonpath={.status.observedGeneration}") == "1"
    # A Reservation (no slot: no placeholder pod), and both kinds under the category `kpe`.
    objects.api.create(RESERVATIONS, {"apiVersion": "kpe.dev/v1alpha1", "kind": "Reservation", "metadata": {"name": "spare"},
                                      "spec": {"slots": 0, "template": {"resources": {"requests": {"cpu": "1"}}}}})
    wait_until(lambda: ready_of(status_of(objects, f"{RESERVATIONS}/spare")).get("status") == "True", 10, "the reservation's status")
    reservations = get("get", "kres")
    print(reservations)
    header, row = [line.split() for line in reservations.strip().splitlines()]
    assert header == ["NAME", "SLOTS", "MODE", "READY", "SERVED", "AGE"] and row[:5] == ["spare", "0", "Required", "True", kpe.generation()]
    listed = get("get", "kpe", "-o", "name").split()
    assert sorted(listed) == ["reservation.kpe.dev/spare", "schedulingpolicy.kpe.dev/pool", "schedulingpolicy.kpe.dev/quota"]
    edit(objects, "pool", pool_policy("b")["spec"])
    wait_until(lambda: get("get", "spol", "pool", "-o", "jsonpath={.status.observedGeneration}") == "2", 10, "observedGeneration to follow the edit")


def kept_filters(plane: ControlPlane) -> list[str]:
    """The filter expressions of the set kept (the API server adds the CRD's defaults to each spec)."""
    import json

    found = last_good(plane)
    return [f["expression"] for o in json.loads(found["data"]["objects.json"])["objects"] for f in o["spec"].get("filters", [])] if found else []


def expressions(spec: dict[str, Any]) -> list[str]:
    return [f["expression"] for f in spec["filters"]]


def test_a_kpe_started_while_a_broken_policy_is_stored_serves_the_last_good_set_until_it_is_fixed(cluster: Cluster, objects: ControlPlane) -> None:
    kpe = start(cluster)
    ns, api = cluster.namespace, objects.api
    api.create(POLICIES, pool_policy("a"))
    ready(objects, "pool", 1)
    served = kpe.generation()
    wait_until(lambda: kept_filters(objects) == expressions(pool_policy("a")["spec"]), 10, "the leader to keep the set it serves")

    # kpe is down (a rollout, an OOM kill) when an edit that does not compile is applied: with
    # the policy webhook's failurePolicy Ignore, the API server stores it.
    kpe.process.stop()
    generation = edit(objects, "pool", BROKEN)
    kpe = cluster.start_kpe(extra=SOURCE, ports=kpe.ports)  # waits for /readyz: it starts, and is ready
    readyz = kpe.health.get("/readyz").text
    print(f"\n[e2e last good set] /readyz: {readyz}")
    assert readyz == ("ok, on a fallback set: the policies in the cluster are refused (schedulingpolicy/pool); "
                      "serving the last good set kept in the cluster (1 objects)")
    assert kpe.generation() == served and kpe.metric("kpe_policy_fallback") == 1
    condition = ready_of(ready(objects, "pool", generation, status="False"))
    assert condition["reason"] == "Invalid" and condition["message"].startswith(
        "refused: spec.filters[0].expression: found no matching overload for '_>_' applied to '(string, int)'")
    assert condition["message"].endswith(f"kpe keeps serving policy set generation {served}")
    # The last good set decides: the pool-b node is rejected as before the broken edit.
    cluster.api.pod(ns, "web-1")
    assert cluster.wait_bound(["web-1"])["web-1"] == f"{ns}-a", "placed by the last good set"
    assert kept_filters(objects) == expressions(pool_policy("a")["spec"]), "a fallback is never kept as the last good set"

    # Fixed: the cluster's set serves, and is kept.
    fixed = edit(objects, "pool", pool_policy("b")["spec"])
    ready(objects, "pool", fixed)
    assert kpe.health.get("/readyz").text == "ok" and kpe.metric("kpe_policy_fallback") == 0
    cluster.api.pod(ns, "web-2")
    assert cluster.wait_bound(["web-2"])["web-2"] == f"{ns}-b"
    wait_until(lambda: kept_filters(objects) == expressions(pool_policy("b")["spec"]), 10, "the fixed set to be kept")


def test_a_fresh_install_whose_only_policy_is_broken_serves_no_policy_and_says_so(cluster: Cluster, objects: ControlPlane) -> None:
    # No set was ever served, so none is kept: the broken object protected nothing yet.
    objects.api.create(POLICIES, pool_policy("a") | {"spec": BROKEN})
    kpe = start(cluster)
    assert kpe.health.get("/readyz").text == ("ok, on a fallback set: the policies in the cluster are refused (schedulingpolicy/pool); "
                                              "serving the 0 objects of the cluster that compile without the refused ones")
    assert ready_of(ready(objects, "pool", 1, status="False"))["reason"] == "Invalid"
    cluster.api.pod(cluster.namespace, "web-1")
    assert cluster.wait_bound(["web-1"])["web-1"] in {f"{cluster.namespace}-a", f"{cluster.namespace}-b"}, "scheduled, under no policy"
    assert last_good(objects) is None, "nothing kept while no set of the cluster's compiles"
