"""The reservation controller against the fake API server: kpe keeps one placeholder per
free slot, an owner that preempted one takes its slot, a finished owner gives it back, a
placeholder deleted by someone else comes back, a reload that shrinks the reservation
deletes placeholders and nothing else. The test plays kube-scheduler (binds, evicts)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from server.app import create_app
from server.settings import Settings

from .fakeapi import FakeApiServer
from .gatecluster import wait_for
from .serving import serve

RESERVATION = """apiVersion: kpe.dev/v1alpha1
kind: Reservation
metadata: {name: train}
spec:
  slots: SLOTS
  owners: {namespaces: [ml], podSelector: {matchLabels: {team: ml}}}
  template:
    resources: {requests: {cpu: "1"}}
    nodeSelector: {pool: gpu}
"""
NS = "kpe-system"


@contextlib.contextmanager
def cluster(tmp_path: Path, slots: int = 2, *, text: str = RESERVATION) -> Iterator[tuple[FakeApiServer, str, Path]]:
    policy = tmp_path / "policies" / "reservation.yaml"
    policy.parent.mkdir()
    policy.write_text(text.replace("SLOTS", str(slots)))
    with FakeApiServer(bookmark_interval=0.2, priority_classes={"kpe-placeholder": -100}) as api:
        for name in ("node-1", "node-2"):
            api.state.add_node({"metadata": {"name": name, "labels": {"pool": "gpu"}}, "status": {"allocatable": {"cpu": "4", "pods": "110"}}})
        api.state.add_pod({"metadata": {"name": "bystander", "namespace": "web"}, "spec": {"nodeName": "node-1", "containers": [{"name": "c", "image": "x"}]}})
        with serve(create_app(settings_for(api, tmp_path, policy))) as url:
            wait_for(lambda: httpx.get(url + "/readyz").status_code == 200)
            yield api, url, policy


def settings_for(api: FakeApiServer, tmp_path: Path, policy: Path) -> Settings:
    return Settings(
        policies=str(policy.parent),
        kubeconfig=api.write_kubeconfig(tmp_path / "kubeconfig"),
        cluster="on",
        controllers="gates,reservations,requeue",
        lease_duration_s=2,
        gate_resync_s=1,
        gate_debounce_ms=50,
        reload_debounce_ms=50,
        reservation_grace_s=0.5,
        placeholder_image="pause:test",
    )


def placeholders(api: FakeApiServer) -> dict[str, dict[str, Any]]:
    return {p["metadata"]["name"]: p for p in api.state.objects("pods", NS) if not p["metadata"].get("deletionTimestamp")}


def slots(url: str) -> list[tuple[str, str | None, str | None]]:
    answer = httpx.get(url + "/apis/v1/reservations").json()
    return [(s["state"], s["node"], s["pod"]) for s in answer["reservations"][0]["slotStates"]]


def owner(api: FakeApiServer, name: str, **status: Any) -> dict[str, Any]:
    pod = {"metadata": {"name": name, "namespace": "ml", "labels": {"team": "ml"}}, "spec": {"containers": [{"name": "c", "image": "trainer"}]}, "status": {"phase": "Pending", **status}}
    return api.state.add_pod(pod)


def test_placeholders_hold_the_slots_and_an_owner_that_preempted_one_takes_it_until_it_ends(tmp_path: Path) -> None:
    with cluster(tmp_path) as (api, url, _):
        wait_for(lambda: sorted(placeholders(api)) == ["kpe-train-0", "kpe-train-1"])
        made = placeholders(api)["kpe-train-0"]
        assert made["metadata"]["labels"]["kpe.dev/reservation"] == "train"
        assert made["spec"]["priorityClassName"] == "kpe-placeholder" and made["spec"]["terminationGracePeriodSeconds"] == 0
        assert made["spec"]["nodeSelector"] == {"pool": "gpu"} and made["spec"]["containers"][0]["image"] == "pause:test"
        api.state.bind(NS, "kpe-train-0", "node-1")
        api.state.bind(NS, "kpe-train-1", "node-2")
        wait_for(lambda: slots(url) == [("free", "node-1", "kpe-system/kpe-train-0"), ("free", "node-2", "kpe-system/kpe-train-1")])

        # kube-scheduler evicts kpe-train-0 for the owner, then nominates the owner to node-1.
        api.state.delete("pods", "kpe-train-0", NS)
        owner(api, "trainer", nominatedNodeName="node-1")
        wait_for(lambda: (api.state.get_pod("ml", "trainer") or {})["metadata"].get("annotations", {}).get("kpe.dev/reservation-slot") == "train/0")
        # The Event is posted once the claim's patch has been answered: a moment after the annotation shows.
        wait_for(lambda: any(e["reason"] == "ReservedSlotTaken" for e in api.state.events))
        taken = [e for e in api.state.events if e["reason"] == "ReservedSlotTaken"]
        assert taken[0]["message"] == "uses slot 0 of reservation train on node node-1"
        api.state.bind("ml", "trainer", "node-1")
        wait_for(lambda: slots(url)[0] == ("used", "node-1", "ml/trainer"))
        assert "kpe-train-0" not in placeholders(api)  # no placeholder for a used slot, grace or not

        api.state.update("pods", "trainer", "ml", merge={"status": {"phase": "Succeeded"}})
        wait_for(lambda: "kpe-train-0" in placeholders(api))
        back = placeholders(api)["kpe-train-0"]
        [near] = back["spec"]["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
        assert near["preference"]["matchExpressions"][0]["values"] == ["node-1"]
        wait_for(lambda: any(e["reason"] == "ReservedSlotReturned" for e in api.state.events))
        metrics = httpx.get(url + "/metrics").text
        assert 'kpe_reservation_claims_total{reservation="train"} 1.0' in metrics
        assert 'kpe_reservation_slots{reservation="train",state="free"} 1.0' in metrics


def test_an_owner_bound_beside_a_free_placeholder_takes_its_slot(tmp_path: Path) -> None:
    with cluster(tmp_path, slots=1) as (api, url, _):
        wait_for(lambda: "kpe-train-0" in placeholders(api))
        api.state.bind(NS, "kpe-train-0", "node-2")
        wait_for(lambda: slots(url) == [("free", "node-2", "kpe-system/kpe-train-0")])
        owner(api, "beside")
        api.state.bind("ml", "beside", "node-2")
        wait_for(lambda: "kpe-train-0" not in placeholders(api))
        wait_for(lambda: slots(url) == [("used", "node-2", "ml/beside")])


def test_a_placeholder_deleted_by_someone_else_comes_back_and_a_shrinking_reload_deletes_only_placeholders(tmp_path: Path) -> None:
    with cluster(tmp_path) as (api, url, policy):
        wait_for(lambda: sorted(placeholders(api)) == ["kpe-train-0", "kpe-train-1"])
        api.state.bind(NS, "kpe-train-1", "node-2")
        wait_for(lambda: slots(url)[1][0] == "free")
        first = placeholders(api)["kpe-train-1"]["metadata"]["uid"]
        api.state.delete("pods", "kpe-train-1", NS)
        wait_for(lambda: "kpe-train-1" in placeholders(api))
        assert placeholders(api)["kpe-train-1"]["metadata"]["uid"] != first

        policy.write_text(RESERVATION.replace("SLOTS", "0"))
        wait_for(lambda: not placeholders(api))
        deleted = {r.path.rsplit("/", 1)[-1] for r in api.state.requests_to("DELETE", "/api/v1/")}
        assert deleted == {"kpe-train-0", "kpe-train-1"}
        assert api.state.get_pod("web", "bystander") is not None
        policy.unlink()
        (policy.parent / "other.yaml").write_text("apiVersion: kpe.dev/v1alpha1\nkind: SchedulingPolicy\nmetadata: {name: other}\nspec: {scores: [{name: s, expression: '1'}]}\n")
        wait_for(lambda: httpx.get(url + "/apis/v1/reservations").json()["reservations"] == [])


def test_a_slot_that_is_not_returned_stays_used_up_when_the_leader_changes(tmp_path: Path) -> None:
    policy = tmp_path / "policies" / "reservation.yaml"
    policy.parent.mkdir()
    policy.write_text(RESERVATION.replace("SLOTS", "1").replace("  owners:", "  returnSlots: false\n  owners:"))
    with FakeApiServer(bookmark_interval=0.2, priority_classes={"kpe-placeholder": -100}) as api:
        api.state.add_node({"metadata": {"name": "node-1", "labels": {"pool": "gpu"}}, "status": {"allocatable": {"cpu": "4", "pods": "110"}}})
        with serve(create_app(settings_for(api, tmp_path, policy))) as url:
            wait_for(lambda: "kpe-train-0" in placeholders(api))
            api.state.bind(NS, "kpe-train-0", "node-1")
            wait_for(lambda: slots(url) == [("free", "node-1", "kpe-system/kpe-train-0")])
            api.state.delete("pods", "kpe-train-0", NS)
            owner(api, "trainer", nominatedNodeName="node-1")
            wait_for(lambda: (api.state.get_pod("ml", "trainer") or {})["metadata"].get("annotations", {}).get("kpe.dev/reservation-slot") == "train/0")
            api.state.delete("pods", "trainer", "ml")
            wait_for(lambda: slots(url) == [("consumed", "node-1", None)])
            record = lambda: (api.state.get_lease("kpe-system", "kpe-gate-controller-reservations") or {}).get("metadata", {})  # noqa: E731
            wait_for(lambda: record().get("annotations", {}).get("kpe.dev/consumed-slots") == "train/0")
        # Another kpe leads now: it reads the record and gives the slot no placeholder.
        with serve(create_app(settings_for(api, tmp_path, policy))) as other:
            wait_for(lambda: httpx.get(other + "/apis/v1/gated").json()["leader"] is True, timeout=30)
            wait_for(lambda: slots(other) == [("consumed", "", None)] or slots(other) == [("consumed", None, None)])
            time.sleep(1.5)  # several passes, past the grace period
            assert "kpe-train-0" not in placeholders(api)


def intruder_filtered(url: str, cpu: str = "4") -> dict[str, Any]:
    pod = {"metadata": {"name": "intruder", "namespace": "web", "uid": "uid-intruder"}, "spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu}}}]}}
    answer: dict[str, Any] = httpx.post(url + "/scheduler/filter", json={"Pod": pod, "NodeNames": ["node-1", "node-2"]}).json()
    return answer


def test_the_filter_verb_keeps_a_non_owner_out_of_the_room_an_owner_s_preemption_freed_until_the_owner_binds(tmp_path: Path) -> None:
    with cluster(tmp_path) as (api, url, _):
        wait_for(lambda: sorted(placeholders(api)) == ["kpe-train-0", "kpe-train-1"])
        api.state.bind(NS, "kpe-train-0", "node-1")
        api.state.bind(NS, "kpe-train-1", "node-2")
        wait_for(lambda: slots(url)[0][0] == slots(url)[1][0] == "free")
        # Placeholders placed (each holds 1 of 4 CPUs): the room beside them is anyone's.
        assert intruder_filtered(url, cpu="3")["NodeNames"] == ["node-1", "node-2"]
        api.state.delete("pods", "kpe-train-0", NS)
        owner(api, "trainer", nominatedNodeName="node-1")
        # The 4 CPUs node-1 shows free are 3 plus the slot's 1, which is the nominated owner's.
        wait_for(lambda: "ml/trainer" in (intruder_filtered(url).get("FailedAndUnresolvableNodes") or {}).get("node-1", ""))
        answer = intruder_filtered(url)
        assert answer["FailedAndUnresolvableNodes"]["node-1"] == (
            "reservation.train/reserved-room: slot 0 of reservation train keeps room on this node for its owner ml/trainer; without it: Insufficient cpu"
        )
        assert intruder_filtered(url, cpu="3")["NodeNames"] == ["node-1", "node-2"]
        # kpe explain pod says so, from this replica's controller.
        api.state.add_pod({"metadata": {"name": "intruder", "namespace": "web"}, "spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "4"}}}]}, "status": {"phase": "Pending"}})
        wait_for(lambda: httpx.get(url + "/apis/v1/explain", params={"pod": "web/intruder"}).status_code == 200)
        text = httpx.get(url + "/apis/v1/explain", params={"pod": "web/intruder"}).json()["text"].splitlines()
        start = text.index("reservation train (Required): this pod is not an owner")
        assert text[start + 1:start + 4] == [
            "  slot 0: used on node-1 by ml/trainer",
            "  slot 1: free on node-2 (kpe-system/kpe-train-1)",
            "  kept off node-1: the room it needs there is reserved for its owner ml/trainer",
        ]
        api.state.bind("ml", "trainer", "node-1")
        wait_for(lambda: slots(url)[0] == ("used", "node-1", "ml/trainer"))
        assert "node-1" in intruder_filtered(url)["NodeNames"]  # the owner (asking for no CPU) holds the slot now


def test_placeholders_and_owners_get_an_event_for_every_change_of_a_slot(tmp_path: Path) -> None:
    with cluster(tmp_path, slots=2) as (api, url, policy):
        wait_for(lambda: sorted(placeholders(api)) == ["kpe-train-0", "kpe-train-1"])
        api.state.bind(NS, "kpe-train-0", "node-1")
        api.state.bind(NS, "kpe-train-1", "node-2")
        wait_for(lambda: slots(url)[0][0] == slots(url)[1][0] == "free")
        api.state.delete("pods", "kpe-train-0", NS)  # by someone else: back after the grace period
        wait_for(lambda: "kpe-train-0" in placeholders(api))
        api.state.bind(NS, "kpe-train-0", "node-1")
        owner(api, "beside")
        api.state.bind("ml", "beside", "node-1")
        wait_for(lambda: "kpe-train-0" not in placeholders(api))
        policy.write_text(RESERVATION.replace("SLOTS", "1"))
        wait_for(lambda: "kpe-train-1" not in placeholders(api))
        wait_for(lambda: any(e["reason"] == "ReservedSlotRemoved" for e in api.state.events))
        seen = sorted((e["involvedObject"]["namespace"] + "/" + e["involvedObject"]["name"], e["reason"], e["message"]) for e in api.state.events)
        assert seen == [
            ("kpe-system/kpe-train-0", "ReservedSlotHeld", "holds slot 0 of reservation train"),
            ("kpe-system/kpe-train-0", "ReservedSlotRestored", "holds slot 0 of reservation train again (placeholder deleted) (preferring node node-1, where the slot was)"),
            ("kpe-system/kpe-train-0", "ReservedSlotTaken", "placeholder of slot 0 of reservation train deleted: its slot is used by ml/beside"),
            ("kpe-system/kpe-train-1", "ReservedSlotHeld", "holds slot 1 of reservation train"),
            ("kpe-system/kpe-train-1", "ReservedSlotRemoved", "placeholder of slot 1 of reservation train deleted: reservation train has 1 slots now"),
            ("ml/beside", "ReservedSlotTaken", "uses slot 0 of reservation train on node node-1"),
        ]
        assert all(e["source"] == {"component": "kpe"} and e["type"] == "Normal" for e in api.state.events)


def test_a_replica_that_does_not_lead_keeps_non_owners_out_of_room_in_transit_too(tmp_path: Path) -> None:
    policy = tmp_path / "policies" / "reservation.yaml"
    policy.parent.mkdir()
    policy.write_text(RESERVATION.replace("SLOTS", "1"))
    with FakeApiServer(bookmark_interval=0.2, priority_classes={"kpe-placeholder": -100}) as api:
        for name in ("node-1", "node-2"):
            api.state.add_node({"metadata": {"name": name, "labels": {"pool": "gpu"}}, "status": {"allocatable": {"cpu": "4", "pods": "110"}}})
        with serve(create_app(settings_for(api, tmp_path, policy))) as first, serve(create_app(settings_for(api, tmp_path, policy))) as second:
            wait_for(lambda: "kpe-train-0" in placeholders(api))
            api.state.bind(NS, "kpe-train-0", "node-1")
            wait_for(lambda: any(httpx.get(u + "/apis/v1/gated").json()["leader"] for u in (first, second)))
            follower = second if httpx.get(first + "/apis/v1/gated").json()["leader"] else first
            assert httpx.get(follower + "/apis/v1/gated").json()["leader"] is False
            # The placeholder is evicted and the leader is not told first: the follower saw where it was.
            wait_for(lambda: slots(follower) == [("free", "node-1", "kpe-system/kpe-train-0")])
            time.sleep(0.3)  # a look after the placeholder's binding
            api.state.delete("pods", "kpe-train-0", NS)
            wait_for(lambda: "node-1" in (intruder_filtered(follower).get("FailedAndUnresolvableNodes") or {}))
            assert intruder_filtered(follower)["NodeNames"] == ["node-2"]


SELECTOR_ONLY = RESERVATION.replace("owners: {namespaces: [ml], podSelector: {matchLabels: {team: ml}}}", "owners: {podSelector: {matchLabels: {team: ml}}}")


def answer(url: str) -> dict[str, Any]:
    found: dict[str, Any] = httpx.get(url + "/apis/v1/reservations").json()
    return found


def gauge(url: str, state: str) -> float | None:
    for line in httpx.get(url + "/metrics").text.splitlines():
        if line.startswith(f'kpe_reservation_slots{{reservation="train",state="{state}"}} '):
            return float(line.rpartition(" ")[2])
    return None


def leader_and_follower(first: str, second: str) -> tuple[str, str]:
    wait_for(lambda: any(httpx.get(u + "/apis/v1/gated").json()["leader"] for u in (first, second)), timeout=30)
    return (first, second) if httpx.get(first + "/apis/v1/gated").json()["leader"] else (second, first)


def test_a_neighbour_that_does_not_own_the_reservation_is_never_shown_as_a_slot_s_user_by_the_leader_or_a_follower(tmp_path: Path) -> None:
    policy = tmp_path / "policies" / "reservation.yaml"
    policy.parent.mkdir()
    policy.write_text(SELECTOR_ONLY.replace("SLOTS", "1"))
    with FakeApiServer(bookmark_interval=0.2, priority_classes={"kpe-placeholder": -100}) as api:
        api.state.add_node({"metadata": {"name": "node-1", "labels": {"pool": "gpu"}}, "status": {"allocatable": {"cpu": "4", "pods": "110"}}})
        with serve(create_app(settings_for(api, tmp_path, policy))) as first, serve(create_app(settings_for(api, tmp_path, policy))) as second:
            wait_for(lambda: "kpe-train-0" in placeholders(api))
            api.state.bind(NS, "kpe-train-0", "node-1")
            leader, follower = leader_and_follower(first, second)
            wait_for(lambda: slots(leader) == slots(follower) == [("free", "node-1", "kpe-system/kpe-train-0")])
            held = placeholders(api)["kpe-train-0"]["metadata"]["uid"]
            # Neighbours in any namespace: only the owners' labels make an owner, and the cache cuts labels of bound pods.
            for name in ("web-0", "web-1"):
                api.state.add_pod({"metadata": {"name": name, "namespace": "web", "labels": {"team": "web"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}})
                api.state.bind("web", name, "node-1")
            seen: set[tuple[str, str | None, str | None]] = set()
            until = time.monotonic() + 1.5
            while time.monotonic() < until:
                for url in (leader, follower):
                    seen.update(slots(url))
                assert gauge(leader, "used") == 0.0, f"kpe_reservation_slots used: {gauge(leader, 'used')}"
                time.sleep(0.05)
            assert seen == {("free", "node-1", "kpe-system/kpe-train-0")}
            assert placeholders(api)["kpe-train-0"]["metadata"]["uid"] == held
            assert not any(e["reason"] == "ReservedSlotTaken" for e in api.state.events)
            assert (answer(leader)["source"], answer(follower)["source"]) == ("leader", "recorded")
            assert answer(follower)["sourceNote"] == (
                "this replica does not lead: the slots as the leader recorded them in the cluster "
                "(its placeholders and the owners' kpe.dev/reservation-slot annotations)"
            )
            assert gauge(follower, "used") is None and gauge(follower, "free") is None

            # An owner in the same namespace, by its labels, takes the slot; the follower shows it once recorded.
            api.state.add_pod({"metadata": {"name": "trainer", "namespace": "web", "labels": {"team": "ml"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}})
            api.state.bind("web", "trainer", "node-1")
            wait_for(lambda: slots(leader) == slots(follower) == [("used", "node-1", "web/trainer")])
            assert "kpe-train-0" not in placeholders(api)


def test_the_grace_period_is_kept_for_a_placeholder_deleted_after_non_owners_ran_beside_it(tmp_path: Path, caplog: Any) -> None:
    caplog.set_level("INFO", logger="kpe.reservations")
    with cluster(tmp_path, slots=1, text=SELECTOR_ONLY) as (api, url, _):
        wait_for(lambda: "kpe-train-0" in placeholders(api))
        api.state.bind(NS, "kpe-train-0", "node-1")
        wait_for(lambda: slots(url) == [("free", "node-1", "kpe-system/kpe-train-0")])
        api.state.add_pod({"metadata": {"name": "web-0", "namespace": "web", "labels": {"team": "web"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}})
        api.state.bind("web", "web-0", "node-1")
        time.sleep(1.2)  # several passes with the non-owners (web-0 and the bystander) beside the placeholder
        api.state.delete("pods", "kpe-train-0", NS)
        deleted = time.monotonic()
        wait_for(lambda: "kpe-train-0" in placeholders(api))
        back = time.monotonic() - deleted
        assert back >= 0.45, f"the placeholder came back after {back:.2f}s, within the grace period of 0.5s"
        # The Event is posted once the create has been answered: a moment after the placeholder shows.
        wait_for(lambda: any(e["reason"] == "ReservedSlotRestored" for e in api.state.events))
        restored = [e["message"] for e in api.state.events if e["reason"] == "ReservedSlotRestored"]
        assert restored == ["holds slot 0 of reservation train again (placeholder deleted) (preferring node node-1, where the slot was)"]
        assert "created placeholder kpe-system/kpe-train-0: placeholder deleted" in caplog.messages
        assert not [m for m in caplog.messages if "placeholder replaced" in m]


def test_a_new_leader_recognises_an_owner_running_in_a_slot_s_room_without_the_annotation_before_it_creates_any_placeholder(tmp_path: Path, caplog: Any) -> None:
    caplog.set_level("INFO", logger="kpe.reservations")
    policy = tmp_path / "policies" / "reservation.yaml"
    policy.parent.mkdir()
    policy.write_text(RESERVATION.replace("SLOTS", "1"))
    with FakeApiServer(bookmark_interval=0.2, priority_classes={"kpe-placeholder": -100}) as api:
        api.state.add_node({"metadata": {"name": "node-1", "labels": {"pool": "gpu"}}, "status": {"allocatable": {"cpu": "4", "pods": "110"}}})
        with contextlib.ExitStack() as stack:
            running = [serve(create_app(settings_for(api, tmp_path, policy))) for _ in range(2)]
            first, second = (stack.enter_context(r) for r in running)
            wait_for(lambda: "kpe-train-0" in placeholders(api))
            api.state.bind(NS, "kpe-train-0", "node-1")
            leader, follower = leader_and_follower(first, second)
            wait_for(lambda: slots(follower) == [("free", "node-1", "kpe-system/kpe-train-0")])
            time.sleep(0.3)
            running[(first, second).index(leader)].__exit__(None, None, None)  # the leader is gone (its Lease not released)
            # kube-scheduler evicts the placeholder for an owner and binds it there; nobody annotates it.
            api.state.delete("pods", "kpe-train-0", NS)
            owner(api, "trainer")
            api.state.bind("ml", "trainer", "node-1")
            creates = len(api.state.requests_to("POST", f"/api/v1/namespaces/{NS}/pods"))
            wait_for(lambda: httpx.get(follower + "/apis/v1/gated").json()["leader"] is True, timeout=30)
            wait_for(lambda: (api.state.get_pod("ml", "trainer") or {})["metadata"].get("annotations", {}).get("kpe.dev/reservation-slot") == "train/0")
            time.sleep(1.0)  # past the grace period
            assert len(api.state.requests_to("POST", f"/api/v1/namespaces/{NS}/pods")) == creates, "the new leader created a placeholder for a slot in use"
            assert "kpe-train-0" not in placeholders(api)
            assert slots(follower) == [("used", "node-1", "ml/trainer")]
            assert "ml/trainer took slot train/0 on node-1" in caplog.messages
