"""Reservations on the real control plane: kube-scheduler places kpe's placeholders (on the
template's nodes, spread as it says), an owner lands in the reserved slot of a full cluster
by preempting one, a non-owner of higher priority pending beside it does not take it (neither
the room the owner's preemption frees nor, later, the owner's place), and a finished owner
gives the slot back, with nobody taking the room before its placeholder returns. There is no
kubelet: a stand-in finalises pods that get a deletion timestamp, as a kubelet would once
their containers stop."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from .conftest import Cluster, Kpe
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
            # From 1.33 on, kube-scheduler's queueing hints leave the pending intruder alone when the owner binds
            # (nothing it was rejected for changed) until it has been unschedulable this long; 1.32 retried it at once.
            cluster.start_scheduler(kpe, flags=("--pod-max-in-unschedulable-pods-duration=2s",))
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
            # kube-scheduler moves such pods back to its queue every 30 s.
            wait_until(lambda: kpe.metric("kpe_preemption_rejections_total", policy=f"reservation.{name}", rule="placeholders") > vetoed, 45,
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
    # The third owner waits; when its slot's placeholder is bound again, kube-scheduler (from 1.33 at once, popping it
    # from the backoff queue) retries it, maybe before kpe's cache has seen that binding. kpe then touches it
    # (server.admission.requeue) once its cache shows the placeholder, so a retry finds the slot.
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


# -- under load and failover (issue 26) ------------------------------------------------------
# An independent watch keeps its own books of every pod of the scenario (node, labels,
# annotations, deletion) and, beside it, reads every kpe replica's GET /apis/v1/reservations
# and kpe_reservation_slots all along: no non-owner is ever shown as a slot's user, and no slot
# holds room on two nodes (a bound placeholder and an owner using the slot elsewhere).

SELECTOR_ONLY = """apiVersion: kpe.dev/v1alpha1
kind: Reservation
metadata: {{name: {name}}}
spec:
  slots: {slots}
  owners: {{podSelector: {{matchLabels: {{team: a}}}}}}
  template:
    resources: {{requests: {{cpu: "2"}}}}
"""
CLAIM = "kpe.dev/reservation-slot"


class Books:
    """The scenario's own view of the cluster, from a watch of its own on every pod."""

    def __init__(self, api: Api, namespace: str, reservation: str) -> None:
        self.api, self.namespace, self.reservation = api, namespace, reservation
        self.pods: dict[str, dict[str, Any]] = {}  # namespace/name -> the pod as last seen
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.created: list[tuple[float, str, str]] = []  # (when, placeholder name, uid) of each placeholder seen new
        self.deleted: list[tuple[float, str]] = []  # (when, namespace/name) of each pod seen gone or terminating
        self.synced = threading.Event()
        self.thread = threading.Thread(target=self._run, name="e2e-books", daemon=True)

    def mine(self, pod: dict[str, Any]) -> bool:
        meta = pod["metadata"]
        return bool(meta["namespace"] == self.namespace or (meta["namespace"] == PLACEHOLDERS and meta.get("labels", {}).get("kpe.dev/reservation") == self.reservation))

    def _run(self) -> None:
        client = httpx.Client(base_url=self.api.url, headers=dict(self.api.http.headers), verify=False, timeout=httpx.Timeout(10.0, read=None))
        try:
            while not self.stop.is_set():
                listed = client.get("/api/v1/pods").json()
                with self.lock:
                    self.pods = {f"{p['metadata']['namespace']}/{p['metadata']['name']}": p for p in listed["items"] if self.mine(p)}
                self.synced.set()
                params = {"watch": "1", "resourceVersion": listed["metadata"]["resourceVersion"], "allowWatchBookmarks": "true", "timeoutSeconds": "60"}
                with client.stream("GET", "/api/v1/pods", params=params) as stream:
                    for line in stream.iter_lines():
                        if self.stop.is_set():
                            return
                        if line:
                            self._event(json.loads(line))
        except (httpx.HTTPError, json.JSONDecodeError):
            if not self.stop.is_set():
                raise
        finally:
            client.close()

    def _event(self, event: dict[str, Any]) -> None:
        pod = event["object"]
        if event["type"] not in ("ADDED", "MODIFIED", "DELETED") or not self.mine(pod):
            return
        key = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
        now = time.monotonic()
        with self.lock:
            before = self.pods.get(key)
            if event["type"] == "DELETED":
                self.pods.pop(key, None)
                if before is not None and not before["metadata"].get("deletionTimestamp"):
                    self.deleted.append((now, key))
            else:
                self.pods[key] = pod
                if pod["metadata"].get("deletionTimestamp") and not (before or {}).get("metadata", {}).get("deletionTimestamp"):
                    self.deleted.append((now, key))
            if pod["metadata"]["namespace"] == PLACEHOLDERS and (before is None or before["metadata"]["uid"] != pod["metadata"]["uid"]) and event["type"] == "ADDED":
                self.created.append((now, pod["metadata"]["name"], pod["metadata"]["uid"]))

    def __enter__(self) -> Books:
        self.thread.start()
        assert self.synced.wait(15), "the books' first list"
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()

    # -- what the books say -------------------------------------------------
    def snapshot(self) -> dict[str, dict[str, Any]]:
        with self.lock:
            return dict(self.pods)

    @staticmethod
    def is_owner(pod: dict[str, Any]) -> bool:
        labels = pod["metadata"].get("labels") or {}
        return bool(labels.get("team") == "a" and "kpe.dev/reservation" not in labels)

    @staticmethod
    def alive(pod: dict[str, Any]) -> bool:
        return not pod["metadata"].get("deletionTimestamp") and pod.get("status", {}).get("phase") not in ("Succeeded", "Failed")

    def holding(self) -> dict[str, set[str]]:
        """slot -> the nodes where a pod holds its room now: its bound placeholder, the owner carrying its claim."""
        held: dict[str, set[str]] = {}
        for key, pod in self.snapshot().items():
            node = pod["spec"].get("nodeName")
            if not node or not self.alive(pod):
                continue
            meta = pod["metadata"]
            if meta["namespace"] == PLACEHOLDERS:
                held.setdefault(f"{self.reservation}/{meta['labels'].get('kpe.dev/slot')}", set()).add(node)
            elif (meta.get("annotations") or {}).get(CLAIM, "").startswith(self.reservation + "/"):
                held.setdefault(meta["annotations"][CLAIM], set()).add(node)
        return held

    def room_holders(self) -> int:
        """Bound placeholders plus running owners: with a Required reservation, every running owner is in a slot's room."""
        return sum(1 for pod in self.snapshot().values() if pod["spec"].get("nodeName") and self.alive(pod)
                   and (pod["metadata"]["namespace"] == PLACEHOLDERS or self.is_owner(pod)))


class Checker:
    """Reads every replica's slots and metric against the books, all along the scenario."""

    def __init__(self, books: Books, kpes: list[Kpe], *, slots: int, tolerance_s: float = 1.0) -> None:
        self.books, self.kpes, self.slots, self.tolerance = books, kpes, slots, tolerance_s
        self.violations: list[str] = []
        self.reads = 0
        self.used_seen = 0
        self.most_holders = 0
        self._since: dict[str, float] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="e2e-checker", daemon=True)

    def _note(self, key: str, bad: bool, text: str) -> None:
        if not bad:
            self._since.pop(key, None)
            return
        first = self._since.setdefault(key, time.monotonic())
        if time.monotonic() - first > self.tolerance and text not in self.violations:
            self.violations.append(text)

    def _run(self) -> None:
        while not self.stop.is_set():
            pods = self.books.snapshot()
            for kpe in self.kpes:
                if not kpe.process.alive():
                    continue
                try:
                    answer = kpe.http.get("/apis/v1/reservations", timeout=5).json()
                    used_metric = kpe.metric("kpe_reservation_slots", reservation=self.books.reservation, state="used")
                except httpx.HTTPError:
                    continue
                self.reads += 1
                for reservation in answer.get("reservations", []):
                    for slot in reservation.get("slotStates") or []:
                        if slot["state"] != "used":
                            continue
                        self.used_seen += 1
                        pod = pods.get(slot["pod"] or "")
                        if pod is not None and not self.books.is_owner(pod):
                            self.violations.append(f"{kpe.process.name} ({answer.get('source')}) shows {slot['pod']}, not an owner, using slot {slot['slot']}")
                # The metric is the last pass's: an owner that just ended may count until the next pass.
                owners = sum(1 for p in pods.values() if self.books.is_owner(p) and self.books.alive(p))
                self._note("metric:" + kpe.process.name, used_metric > owners,
                           f"{kpe.process.name}: kpe_reservation_slots used={used_metric:.0f} with {owners} owner(s) in the cluster")
            for slot, nodes in self.books.holding().items():
                self._note("two:" + slot, len(nodes) > 1, f"slot {slot} holds room on {sorted(nodes)}")
            holders = self.books.room_holders()
            self.most_holders = max(self.most_holders, holders)
            self._note("holders", holders > self.slots, f"{holders} pods hold the room of {self.slots} slots")
            self.stop.wait(0.1)

    def __enter__(self) -> Checker:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(10)


def leading(kpes: list[Kpe]) -> tuple[Kpe, Kpe]:
    def which() -> Kpe | None:
        for kpe in kpes:
            with contextlib.suppress(httpx.HTTPError):
                if kpe.http.get("/apis/v1/reservations").json().get("leader"):
                    return kpe
        return None

    leader = wait_until(which, 30, "a replica to lead")
    return leader, next(k for k in kpes if k is not leader)


def fill(api: Api, ns: str, nodes: list[str], placed: list[dict[str, Any]], *, cpu: int = 4, leave: int = 1) -> None:
    """Fill every node (bound directly, priority nobody may preempt for) so that only ``leave``
    CPU is free beside the placeholders: an owner (2 CPU) fits only by preempting one."""
    on = {n: sum(2 for p in placed if p["spec"]["nodeName"] == n) for n in nodes}
    for node in nodes:
        for i in range(cpu - on[node] - leave):
            api.pod(ns, f"fill-{node[-1]}-{i}", cpu="1", priority_class="e2e-high", node=node)


def clean_placeholders(api: Api, name: str) -> None:
    for pod in api.pods(PLACEHOLDERS):
        if pod["metadata"].get("labels", {}).get("kpe.dev/reservation") == name:
            api.delete(f"/api/v1/namespaces/{PLACEHOLDERS}/pods/{pod['metadata']['name']}", grace=0)


def test_non_owners_running_beside_a_placeholder_are_never_its_slot_s_users_and_its_grace_period_is_kept(cluster: Cluster) -> None:
    ns, api = cluster.namespace, cluster.api
    name = "g" + ns[-6:]
    slot = f"kpe-{name}-0"
    api.priority_class("kpe-placeholder", -10)
    cluster.write_policy("reservation.yaml", SELECTOR_ONLY.format(name=name, slots=1))
    cluster.node(f"{ns}-a", cpu="8")
    flags = ("--reservation-grace-s", "3", "--gate-resync-s", "1", "--lease-name", f"kpe-{name}", "--lease-duration-s", "3")
    try:
        with stand_in_kubelet(api, (ns, PLACEHOLDERS)), Books(api, ns, name) as books:
            kpes = [cluster.start_kpe(identity=identity, extra=flags) for identity in ("kpe-a", "kpe-b")]
            cluster.start_scheduler(kpes[0])
            with Checker(books, kpes, slots=1) as checker:
                held = wait_until(lambda: (p := placeholder(api, slot)) and p["spec"].get("nodeName") and p, 30, "the placeholder placed")
                # Non-owners (team b) in the owners' namespace, beside the placeholder, come and go.
                for i in range(4):
                    api.pod(ns, f"web-{i}", cpu="500m", priority_class="e2e-low", labels={"team": "b"})
                cluster.wait_bound([f"web-{i}" for i in range(4)])
                time.sleep(2.0)  # several passes of both replicas with the neighbours there
                for i in range(2):
                    api.delete(f"/api/v1/namespaces/{ns}/pods/web-{i}", grace=0)
                time.sleep(1.0)
                restored = kpes[0].metric("kpe_reservation_placeholders_total", reservation=name, action="created") + kpes[1].metric(
                    "kpe_reservation_placeholders_total", reservation=name, action="created")
                # An admin deletes the placeholder: it comes back after the grace period, not at once.
                api.delete(f"/api/v1/namespaces/{PLACEHOLDERS}/pods/{slot}", grace=0)
                deleted = time.monotonic()
                back = wait_until(lambda: (p := placeholder(api, slot)) and p["metadata"]["uid"] != held["metadata"]["uid"] and p, 30, "the placeholder to come back")
                after = time.monotonic() - deleted
                leader, follower = leading(kpes)
                states = [leader.http.get("/apis/v1/reservations").json(), follower.http.get("/apis/v1/reservations").json()]
                time.sleep(1.0)
            events = api.get(f"/api/v1/namespaces/{PLACEHOLDERS}/events")["items"]
            messages = [e["message"] for e in events if e["involvedObject"].get("uid") == back["metadata"]["uid"] and e.get("reportingComponent") == "kpe"]
            assert after >= 2.8, f"the placeholder came back {after:.2f}s after it was deleted, within the grace period (3 s)"
            assert messages == ["holds slot 0 of reservation " + name + " again (placeholder deleted) (preferring node " + held["spec"]["nodeName"] + ", where the slot was)"]
            assert [s["source"] for s in states] == ["leader", "recorded"]
            assert not checker.violations, checker.violations
            print(f"\n[e2e reservations] non-owners beside the placeholder: {checker.reads} status/metric reads of 2 replicas, "
                  f"{checker.used_seen} used slot(s) shown, 0 non-owners among them; placeholder deleted by an admin back after {after:.2f}s "
                  f"(grace 3 s), {restored:.0f} placeholder(s) created before")
    finally:
        clean_placeholders(api, name)


SEEDS = [int(s) for s in os.environ.get("KPE_E2E_RESERVATION_SEEDS", "26").split(",")]


@pytest.mark.parametrize("seed", SEEDS)
def test_in_a_busy_cluster_thirty_owners_in_a_row_each_end_in_their_slot_and_no_slot_ever_holds_room_on_two_nodes(cluster: Cluster, seed: int) -> None:
    ns, api = cluster.namespace, cluster.api
    name = "b" + ns[-6:]
    rng = random.Random(seed)
    slots, owners_total = 3, 30
    api.priority_class("kpe-placeholder", -10)
    cluster.write_policy("reservation.yaml", SELECTOR_ONLY.format(name=name, slots=slots))
    nodes = [f"{ns}-{n}" for n in "abcd"]
    for node in nodes:
        cluster.node(node, cpu="4")
    flags = ("--reservation-grace-s", "2", "--gate-resync-s", "1", "--lease-name", f"kpe-{name}", "--lease-duration-s", "3")
    started = time.monotonic()
    try:
        with stand_in_kubelet(api, (ns, PLACEHOLDERS)), Books(api, ns, name) as books:
            kpes = [cluster.start_kpe(identity=identity, extra=flags) for identity in ("kpe-a", "kpe-b")]
            cluster.start_scheduler(kpes[0])
            placed = wait_until(lambda: (found := [placeholder(api, f"kpe-{name}-{i}") for i in range(slots)]) and all(p and p["spec"].get("nodeName") for p in found) and found,
                                60, "the placeholders placed")
            fill(api, ns, nodes, [p for p in placed if p])
            with Checker(books, kpes, slots=slots) as checker:
                landed: list[float] = []
                claimed: list[float] = []
                wrong: list[str] = []
                churn = 0
                made = 0
                running: dict[str, float] = {}
                while made < owners_total or running:
                    # Non-owners (team b) come and go in the room left beside the placeholders.
                    if rng.random() < 0.5:
                        api.pod(ns, f"web-{churn}", cpu="500m", priority_class="e2e-low", labels={"team": "b"})
                        if churn >= 2:
                            api.delete(f"/api/v1/namespaces/{ns}/pods/web-{churn - 2}", grace=0)
                        churn += 1
                    while made < owners_total and len(running) < rng.randint(1, slots):
                        owner = f"owner-{made}"
                        api.pod(ns, owner, cpu="2", priority_class="e2e-low", labels={"team": "a"})
                        running[owner] = time.monotonic()
                        made += 1
                    bound = cluster.bound()
                    for owner, since in list(running.items()):
                        if owner not in bound:
                            if time.monotonic() - since > 40:
                                raise AssertionError(f"{owner} not bound after 40 s\n" + cluster.scheduler_log())
                            continue
                        landed.append(time.monotonic() - since)
                        pod = wait_until(lambda: (p := api.get_pod(ns, owner)) and p["metadata"].get("annotations", {}).get(CLAIM) and p, 15, f"{owner}'s claim")  # noqa: B023
                        claimed.append(time.monotonic() - since)
                        index = int(pod["metadata"]["annotations"][CLAIM].rpartition("/")[2])
                        if not 0 <= index < slots:
                            wrong.append(f"{owner}: {pod['metadata']['annotations'][CLAIM]}")
                        # It ends (done, or deleted) after a moment; its slot comes back.
                        time.sleep(rng.uniform(0.0, 0.3))
                        if rng.random() < 0.5:
                            api.patch(f"/api/v1/namespaces/{ns}/pods/{owner}/status", {"status": {"phase": "Succeeded"}})
                        else:
                            api.delete(f"/api/v1/namespaces/{ns}/pods/{owner}", grace=0)
                        del running[owner]
                    time.sleep(0.1)
                wait_until(lambda: all((p := placeholder(api, f"kpe-{name}-{i}")) and p["spec"].get("nodeName") for i in range(slots)), 30, "every slot free again")
                time.sleep(1.0)
            created = sum(k.metric("kpe_reservation_placeholders_total", reservation=name, action="created") for k in kpes)
            claims = sum(k.metric("kpe_reservation_claims_total", reservation=name) for k in kpes)
            reasons: dict[str, int] = {}
            for event in api.get(f"/api/v1/namespaces/{PLACEHOLDERS}/events")["items"]:
                if event.get("reportingComponent") == "kpe" and event["involvedObject"]["name"].startswith(f"kpe-{name}-"):
                    why = event["reason"] + (" (" + event["message"].split("(")[1].split(")")[0] + ")" if event["reason"] == "ReservedSlotRestored" else "")
                    reasons[why] = reasons.get(why, 0) + 1
            assert not wrong, wrong
            assert not checker.violations, checker.violations
            assert claims == owners_total, f"{claims:.0f} claims for {owners_total} owners"
            landed.sort()
            claimed.sort()
            print(f"\n[e2e reservations] seed {seed}: {owners_total} owners in a row through {slots} slots of a full cluster, {churn} non-owners churned beside; "
                  f"all {owners_total} in their slot; bound after median {landed[len(landed) // 2]:.2f}s (max {landed[-1]:.2f}s), claim recorded after "
                  f"median {claimed[len(claimed) // 2]:.2f}s (max {claimed[-1]:.2f}s); {created:.0f} placeholders created, {claims:.0f} claims; "
                  f"placeholder Events {dict(sorted(reasons.items()))}; at most {checker.most_holders} pods held the {slots} slots' room; {checker.reads} status/metric reads, {checker.used_seen} used slots shown, "
                  f"0 violations; {time.monotonic() - started:.0f}s")
    finally:
        clean_placeholders(api, name)


def test_a_leader_killed_while_an_owner_arrives_leaves_no_placeholder_for_the_slot_the_owner_runs_in(cluster: Cluster) -> None:
    ns, api = cluster.namespace, cluster.api
    name = "k" + ns[-6:]
    slot = f"kpe-{name}-0"
    api.priority_class("kpe-placeholder", -10)
    cluster.write_policy("reservation.yaml", SELECTOR_ONLY.format(name=name, slots=1))
    nodes = [f"{ns}-a", f"{ns}-b"]
    for node in nodes:
        cluster.node(node, cpu="4")
    flags = ("--reservation-grace-s", "2", "--gate-resync-s", "1", "--lease-name", f"kpe-{name}", "--lease-duration-s", "3")
    try:
        with stand_in_kubelet(api, (ns, PLACEHOLDERS)), Books(api, ns, name) as books:
            kpes = [cluster.start_kpe(identity=identity, extra=flags) for identity in ("kpe-a", "kpe-b")]
            leader, follower = leading(kpes)
            cluster.start_scheduler(follower)  # kube-scheduler asks the replica that survives
            held = wait_until(lambda: (p := placeholder(api, slot)) and p["spec"].get("nodeName") and p, 30, "the placeholder placed")
            reserved = held["spec"]["nodeName"]
            fill(api, ns, nodes, [held])
            time.sleep(1.5)  # the follower's looks have seen where the slot is
            with Checker(books, kpes, slots=1) as checker:
                api.pod(ns, "owner", cpu="2", priority_class="e2e-low", labels={"team": "a"})
                created = time.monotonic()
                # kube-scheduler evicts the placeholder for the owner: the leader dies right then.
                wait_until(lambda: any(key == f"{PLACEHOLDERS}/{slot}" for _, key in books.deleted), 30, "the owner's preemption to evict the placeholder")
                os.kill(leader.process.popen.pid, signal.SIGKILL)
                killed = time.monotonic()
                before = len(books.created)
                assert cluster.wait_bound(["owner"], 30)["owner"] == reserved
                bound_at = time.monotonic()
                annotated_by_old = (api.get_pod(ns, "owner")["metadata"].get("annotations") or {}).get(CLAIM)
                wait_until(lambda: follower.http.get("/apis/v1/reservations").json()["leader"], 30, "the other replica to lead")
                took_over = time.monotonic()
                pod = wait_until(lambda: (p := api.get_pod(ns, "owner")) and p["metadata"].get("annotations", {}).get(CLAIM) and p, 15, "the owner's claim")
                recorded = time.monotonic()
                time.sleep(3.0)  # past the grace period under the new leader
                made_after = books.created[before:]
                state = follower.http.get("/apis/v1/reservations").json()
            assert pod["metadata"]["annotations"][CLAIM] == f"{name}/0"
            assert not made_after, f"placeholders created while the owner ran in the slot's room: {made_after}"
            assert placeholder(api, slot) is None
            assert [(s["state"], s["node"], s["pod"]) for s in state["reservations"][0]["slotStates"]] == [("used", reserved, f"{ns}/owner")]
            assert state["source"] == "leader"
            assert not checker.violations, checker.violations
            print(f"\n[e2e reservations] leader SIGKILLed {killed - created:.2f}s after the owner was created (its placeholder evicted); owner bound "
                  f"{bound_at - killed:.2f}s later {'with' if annotated_by_old else 'without'} the old leader's claim; new leader after "
                  f"{took_over - killed:.2f}s recorded the owner's slot {recorded - took_over:.2f}s later; 0 placeholders created in the "
                  f"{time.monotonic() - killed:.1f}s after the kill")
    finally:
        clean_placeholders(api, name)
