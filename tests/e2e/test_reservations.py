"""Reservations on the real control plane: kube-scheduler places kpe's placeholders (on the
template's nodes, spread as it says), an owner lands in the reserved slot of a full cluster
by preempting one, a non-owner of higher priority pending beside it does not take it (neither
the room the owner's preemption frees nor, later, the owner's place), and a finished owner
gives the slot back, with nobody taking the room before its placeholder returns. There is no
kubelet: a stand-in finalises pods that get a deletion timestamp, as a kubelet would once
their containers stop."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

from .conftest import Cluster
from .controlplane import Api, wait_until

PLACEHOLDERS = "kpe-system"

RESERVATION = """apiVersion: kpe.dev/v1alpha1
kind: Reservation
metadata: {{name: {name}}}
spec:
  slots: 1
  owners: {{namespaces: [{namespace}], podSelector: {{matchLabels: {{team: a}}}}}}
  template:
    resources: {{requests: {{cpu: "2"}}}}
"""


@contextlib.contextmanager
def stand_in_kubelet(api: Api, namespaces: tuple[str, ...]) -> Iterator[None]:
    """Deletes at once every pod in ``namespaces`` that has a deletionTimestamp."""
    stop = threading.Event()

    def run() -> None:
        while not stop.is_set():
            for namespace in namespaces:
                for pod in api.pods(namespace):
                    if pod["metadata"].get("deletionTimestamp"):
                        api.delete(f"/api/v1/namespaces/{namespace}/pods/{pod['metadata']['name']}", grace=0)
            stop.wait(0.1)

    thread = threading.Thread(target=run, name="stand-in-kubelet", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(5)


def placeholder(api: Api, name: str) -> dict[str, Any] | None:
    found = [p for p in api.pods(PLACEHOLDERS) if p["metadata"]["name"] == name and not p["metadata"].get("deletionTimestamp")]
    return found[0] if found else None


def test_an_owner_takes_the_reserved_slot_of_a_full_cluster_and_a_higher_priority_non_owner_pending_beside_it_does_not(cluster: Cluster) -> None:
    ns, api = cluster.namespace, cluster.api
    name = "r" + ns[-6:]
    slot = f"kpe-{name}-0"
    api.priority_class("kpe-placeholder", -10)
    cluster.write_policy("reservation.yaml", RESERVATION.format(name=name, namespace=ns))
    for node in ("a", "b"):
        cluster.node(f"{ns}-{node}", cpu="4")
    try:
        with stand_in_kubelet(api, (ns, PLACEHOLDERS)):
            kpe = cluster.start_kpe(extra=("--reservation-grace-s", "2", "--gate-resync-s", "1", "--lease-name", f"kpe-{name}"))
            cluster.start_scheduler(kpe)
            held = wait_until(lambda: (p := placeholder(api, slot)) and p["spec"].get("nodeName") and p, 30, "kube-scheduler to place the placeholder")
            reserved = held["spec"]["nodeName"]
            other = f"{ns}-b" if reserved == f"{ns}-a" else f"{ns}-a"
            assert held["spec"]["priority"] == -10
            # Fill everything else with pods nobody may preempt for the pods below (same priority as the intruder).
            for i in range(2):
                api.pod(ns, f"fill-{reserved[-1]}-{i}", cpu="1", priority_class="e2e-high", node=reserved)
            for i in range(4):
                api.pod(ns, f"fill-{other[-1]}-{i}", cpu="1", priority_class="e2e-high", node=other)

            calls = kpe.metric("kpe_requests_total", verb="preempt", code="200")
            api.pod(ns, "intruder", cpu="2", priority_class="e2e-high", labels={"team": "b"})
            wait_until(lambda: kpe.metric("kpe_requests_total", verb="preempt", code="200") > calls, 30, "kube-scheduler to ask kpe about preempting the placeholder")
            time.sleep(1.0)
            assert "intruder" not in cluster.bound() and placeholder(api, slot) is not None, "a non-owner took the reserved slot"

            # The intruder stays pending, at a higher priority than the owner: kube-scheduler does not keep the room the
            # owner's preemption frees from it, kpe's filter does (reserved room in transit), and once the owner runs
            # there kpe's preempt verb keeps the intruder from evicting it.
            started = time.monotonic()
            api.pod(ns, "owner", cpu="2", priority_class="e2e-low", labels={"team": "a"})
            assert cluster.wait_bound(["owner"], 30)["owner"] == reserved
            landed = time.monotonic() - started
            claimed = wait_until(lambda: api.get_pod(ns, "owner")["metadata"].get("annotations", {}).get("kpe.dev/reservation-slot"), 15, "kpe to record the owner's slot")
            assert claimed == f"{name}/0"
            vetoed = kpe.metric("kpe_preemption_rejections_total", policy=f"reservation.{name}", rule="placeholders")
            wait_until(lambda: kpe.metric("kpe_preemption_rejections_total", policy=f"reservation.{name}", rule="placeholders") > vetoed, 30,
                       "the intruder to try evicting the owner from its slot")
            time.sleep(1.0)
            assert "intruder" not in cluster.bound() and cluster.bound()["owner"] == reserved, "the intruder took the owner's slot"

            api.patch(f"/api/v1/namespaces/{ns}/pods/owner/status", {"status": {"phase": "Succeeded"}})
            finished = time.monotonic()
            back = wait_until(lambda: (p := placeholder(api, slot)) and p["spec"].get("nodeName") and p, 30, "the slot to come back")
            returned = time.monotonic() - finished
            assert back["spec"]["nodeName"] == reserved
            wait_until(lambda: kpe.http.get("/apis/v1/reservations").json()["reservations"][0]["slotStates"][0]["state"] == "free", 10, "the status to show the slot free")
            assert "intruder" not in cluster.bound()
            kept_off = kpe.metric("kpe_node_rejections_total", policy=f"reservation.{name}", rule="reserved-room")
            print(f"\n[e2e reservations] owner arrival to bound {landed:.2f}s, owner finished to placeholder bound {returned:.2f}s, "
                  f"the intruder kept off room in transit {kept_off:.0f} time(s)")
    finally:
        for pod in api.pods(PLACEHOLDERS):
            if pod["metadata"].get("labels", {}).get("kpe.dev/reservation") == name:
                api.delete(f"/api/v1/namespaces/{PLACEHOLDERS}/pods/{pod['metadata']['name']}", grace=0)


OTHER = """apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: anything}
spec:
  scores: [{name: flat, expression: "1"}]
"""


def test_two_replicas_create_each_placeholder_once_and_removing_the_reservation_frees_its_capacity(cluster: Cluster) -> None:
    ns, api = cluster.namespace, cluster.api
    name = "r" + ns[-6:]
    api.priority_class("kpe-placeholder", -10)
    cluster.write_policy("reservation.yaml", RESERVATION.format(name=name, namespace=ns).replace("slots: 1", "slots: 2"))
    cluster.node(f"{ns}-a", cpu="4")
    flags = ("--reservation-grace-s", "2", "--gate-resync-s", "1", "--lease-name", f"kpe-{name}", "--lease-duration-s", "3")
    try:
        with stand_in_kubelet(api, (ns, PLACEHOLDERS)):
            replicas = [cluster.start_kpe(identity=identity, extra=flags) for identity in ("kpe-a", "kpe-b")]
            cluster.start_scheduler(replicas[0])
            slots = [f"kpe-{name}-0", f"kpe-{name}-1"]
            wait_until(lambda: all((p := placeholder(api, s)) and p["spec"].get("nodeName") for s in slots), 30, "both placeholders placed")
            time.sleep(2.0)  # a few more passes of both replicas
            created = sum(k.metric("kpe_reservation_placeholders_total", reservation=name, action="created") for k in replicas)
            assert created == 2, f"{created} placeholders created for 2 slots"

            calls = replicas[0].metric("kpe_requests_total", verb="preempt", code="200")
            api.pod(ns, "web", cpu="2", priority_class="e2e-high", labels={"team": "b"})
            wait_until(lambda: replicas[0].metric("kpe_requests_total", verb="preempt", code="200") > calls, 30, "the scheduler to ask kpe to preempt")
            assert "web" not in cluster.bound() and all(placeholder(api, s) for s in slots)

            cluster.write_policy("other.yaml", OTHER)
            started = time.monotonic()
            (cluster.policies / "reservation.yaml").unlink()
            wait_until(lambda: not any(placeholder(api, s) for s in slots), 30, "the placeholders of the removed reservation to go")
            assert cluster.wait_bound(["web"], 60)["web"] == f"{ns}-a"
            print(f"\n[e2e reservations] reservation removed to the non-owner bound {time.monotonic() - started:.2f}s")
    finally:
        for pod in api.pods(PLACEHOLDERS):
            if pod["metadata"].get("labels", {}).get("kpe.dev/reservation") == name:
                api.delete(f"/api/v1/namespaces/{PLACEHOLDERS}/pods/{pod['metadata']['name']}", grace=0)


def test_preferred_owners_go_to_a_slot_first_and_run_elsewhere_when_none_is_free_while_required_ones_wait(cluster: Cluster) -> None:
    ns, api = cluster.namespace, cluster.api
    name = "r" + ns[-6:]
    slot = f"kpe-{name}-0"
    api.priority_class("kpe-placeholder", -10)
    preferred = RESERVATION.format(name=name, namespace=ns).replace("  slots: 1\n", "  slots: 1\n  mode: Preferred\n")
    cluster.write_policy("reservation.yaml", preferred)
    for node in ("a", "b"):
        cluster.node(f"{ns}-{node}", cpu="4")
    try:
        with stand_in_kubelet(api, (ns, PLACEHOLDERS)):
            kpe = cluster.start_kpe(extra=("--reservation-grace-s", "2", "--gate-resync-s", "1", "--lease-name", f"kpe-{name}"))
            cluster.start_scheduler(kpe)
            held = wait_until(lambda: (p := placeholder(api, slot)) and p["spec"].get("nodeName") and p, 30, "the placeholder placed")
            reserved = held["spec"]["nodeName"]
            # Room on both nodes: kpe's score sends the owner beside the placeholder, and it takes the slot.
            api.pod(ns, "first", cpu="1", priority_class="e2e-low", labels={"team": "a"})
            assert cluster.wait_bound(["first"])["first"] == reserved
            wait_until(lambda: placeholder(api, slot) is None, 15, "the taken slot's placeholder to go")
            assert api.get_pod(ns, "first")["metadata"]["annotations"]["kpe.dev/reservation-slot"] == f"{name}/0"
            # No free slot left: a Preferred owner still runs.
            api.pod(ns, "second", cpu="1", priority_class="e2e-low", labels={"team": "a"})
            cluster.wait_bound(["second"])
            # The same reservation Required: a third owner has no slot anywhere and waits.
            cluster.write_policy("reservation.yaml", RESERVATION.format(name=name, namespace=ns))
            wait_until(lambda: kpe.http.get("/apis/v1/reservations").json()["reservations"][0]["mode"] == "Required", 15, "the reload")
            api.pod(ns, "third", cpu="1", priority_class="e2e-low", labels={"team": "a"})
            time.sleep(2.0)
            assert "third" not in cluster.bound()
            api.delete(f"/api/v1/namespaces/{ns}/pods/first", grace=0)  # its slot comes back, and the third owner takes it
            assert cluster.wait_bound(["third"], 30)["third"] == reserved
    finally:
        for pod in api.pods(PLACEHOLDERS):
            if pod["metadata"].get("labels", {}).get("kpe.dev/reservation") == name:
                api.delete(f"/api/v1/namespaces/{PLACEHOLDERS}/pods/{pod['metadata']['name']}", grace=0)


def test_a_non_owner_that_comes_between_an_owner_ending_and_its_placeholder_returning_does_not_take_the_room(cluster: Cluster) -> None:
    ns, api = cluster.namespace, cluster.api
    name = "r" + ns[-6:]
    slot = f"kpe-{name}-0"
    api.priority_class("kpe-placeholder", -10)
    cluster.write_policy("reservation.yaml", RESERVATION.format(name=name, namespace=ns))
    for node in ("a", "b"):
        cluster.node(f"{ns}-{node}", cpu="4")
    try:
        with stand_in_kubelet(api, (ns, PLACEHOLDERS)):
            kpe = cluster.start_kpe(extra=("--reservation-grace-s", "2", "--gate-resync-s", "1", "--lease-name", f"kpe-{name}"))
            cluster.start_scheduler(kpe)
            held = wait_until(lambda: (p := placeholder(api, slot)) and p["spec"].get("nodeName") and p, 30, "kube-scheduler to place the placeholder")
            reserved = held["spec"]["nodeName"]
            other = f"{ns}-b" if reserved == f"{ns}-a" else f"{ns}-a"
            for i in range(2):
                api.pod(ns, f"fill-{reserved[-1]}-{i}", cpu="1", priority_class="e2e-high", node=reserved)
            for i in range(4):
                api.pod(ns, f"fill-{other[-1]}-{i}", cpu="1", priority_class="e2e-high", node=other)
            api.pod(ns, "owner", cpu="2", priority_class="e2e-low", labels={"team": "a"})
            assert cluster.wait_bound(["owner"], 30)["owner"] == reserved
            wait_until(lambda: api.get_pod(ns, "owner")["metadata"].get("annotations", {}).get("kpe.dev/reservation-slot"), 15, "kpe to record the owner's slot")
            # A non-owner waits for room (the owner's priority: it may not evict it).
            api.pod(ns, "newcomer", cpu="2", priority_class="e2e-low", labels={"team": "b"})
            time.sleep(1.0)
            assert "newcomer" not in cluster.bound()

            # Hold the window open: without its PriorityClass the placeholder cannot come back (kpe retries each pass).
            api.delete("/apis/scheduling.k8s.io/v1/priorityclasses/kpe-placeholder")
            kept_off = kpe.metric("kpe_node_rejections_total", policy=f"reservation.{name}", rule="reserved-room")
            finished = time.monotonic()
            api.patch(f"/api/v1/namespaces/{ns}/pods/owner/status", {"status": {"phase": "Succeeded"}})
            wait_until(lambda: kpe.metric("kpe_node_rejections_total", policy=f"reservation.{name}", rule="reserved-room") > kept_off, 30,
                       "kube-scheduler to try the newcomer on the freed node, and kpe to keep it off")
            asked = time.monotonic() - finished
            time.sleep(2.0)
            assert "newcomer" not in cluster.bound(), "a non-owner took the room of a slot whose placeholder had not returned"
            state = kpe.http.get("/apis/v1/reservations").json()["reservations"][0]["slotStates"][0]
            assert (state["state"], state["node"]) == ("missing", reserved)

            api.priority_class("kpe-placeholder", -10)
            back = wait_until(lambda: (p := placeholder(api, slot)) and p["spec"].get("nodeName") and p, 30, "the placeholder to come back")
            assert back["spec"]["nodeName"] == reserved
            time.sleep(1.0)
            assert "newcomer" not in cluster.bound()
            print(f"\n[e2e reservations] owner finished to the newcomer kept off the slot's room {asked:.2f}s; room held {time.monotonic() - finished:.1f}s until the placeholder returned")
    finally:
        api.priority_class("kpe-placeholder", -10)
        for pod in api.pods(PLACEHOLDERS):
            if pod["metadata"].get("labels", {}).get("kpe.dev/reservation") == name:
                api.delete(f"/api/v1/namespaces/{PLACEHOLDERS}/pods/{pod['metadata']['name']}", grace=0)


SPREAD = """apiVersion: kpe.dev/v1alpha1
kind: Reservation
metadata: {{name: {name}}}
spec:
  slots: 4
  owners: {{namespaces: [{namespace}]}}
  template:
    resources: {{requests: {{cpu: "1"}}}}
    nodeSelector: {{pool: {pool}}}
    topologySpreadConstraints:
    - {{maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule}}
"""


def test_kube_scheduler_places_placeholders_only_on_the_template_s_nodes_and_spreads_them_as_it_says(cluster: Cluster) -> None:
    ns, api = cluster.namespace, cluster.api
    name = "r" + ns[-6:]
    pool = "p" + ns[-6:]
    api.priority_class("kpe-placeholder", -10)
    cluster.write_policy("reservation.yaml", SPREAD.format(name=name, namespace=ns, pool=pool))
    # Left to its scores, kube-scheduler would put most placeholders on the big node, and the
    # biggest node is outside the pool: only the template's constraints send them elsewhere.
    cluster.node(f"{ns}-big", cpu="64", labels={"pool": pool, "topology.kubernetes.io/zone": f"{ns}-z1"})
    cluster.node(f"{ns}-small", cpu="4", labels={"pool": pool, "topology.kubernetes.io/zone": f"{ns}-z2"})
    cluster.node(f"{ns}-outside", cpu="128", labels={"topology.kubernetes.io/zone": f"{ns}-z3"})
    slots = [f"kpe-{name}-{i}" for i in range(4)]
    try:
        with stand_in_kubelet(api, (ns, PLACEHOLDERS)):
            started = time.monotonic()
            kpe = cluster.start_kpe(extra=("--gate-resync-s", "1", "--lease-name", f"kpe-{name}"))
            cluster.start_scheduler(kpe)
            placed = wait_until(
                lambda: (found := [placeholder(api, s) for s in slots]) and all(p and p["spec"].get("nodeName") for p in found) and found,
                60, "kube-scheduler to place the four placeholders",
            )
            nodes = sorted(p["spec"]["nodeName"] for p in placed)
            assert nodes == [f"{ns}-big", f"{ns}-big", f"{ns}-small", f"{ns}-small"], nodes
            print(f"\n[e2e reservations] kpe started to 4 placeholders placed by the template's nodeSelector and zone spread {time.monotonic() - started:.2f}s: {nodes}")
    finally:
        for pod in api.pods(PLACEHOLDERS):
            if pod["metadata"].get("labels", {}).get("kpe.dev/reservation") == name:
                api.delete(f"/api/v1/namespaces/{PLACEHOLDERS}/pods/{pod['metadata']['name']}", grace=0)
