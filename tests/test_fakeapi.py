"""The fake kube-apiserver (tests/fakeapi) against the real server's captures in
tests/data/fixtures/kube-apiserver-wire/: same bodies, codes, headers and stream framing."""

from __future__ import annotations

import base64
import copy
import json
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from .fakeapi import ApiError, FakeApiServer, State
from .serving import serve

WIRE = Path(__file__).resolve().parent / "data" / "fixtures" / "kube-apiserver-wire"
NODES = "/api/v1/nodes"
PODS_DEMO = "/api/v1/namespaces/demo/pods"
LEASES = "/apis/coordination.k8s.io/v1/namespaces/kpe/leases"


def fixture(name: str) -> Any:
    return json.loads((WIRE / name).read_text())


def captured_stream() -> list[dict[str, Any]]:
    return [json.loads(line) for line in (WIRE / "nodes-watch-stream.jsonl").read_text().splitlines()]


def captured_nodes() -> list[dict[str, Any]]:
    """node-1, node-2 from the list capture and node-3 from the watch capture, as a client would create them."""
    listed = fixture("nodes-list-limit2.json")["items"]
    deleted = next(e["object"] for e in captured_stream() if e["type"] == "DELETED")
    nodes = []
    for node in [*listed, deleted]:
        node = copy.deepcopy(node)
        for key in ("uid", "resourceVersion", "creationTimestamp"):
            node["metadata"].pop(key, None)
        node.pop("kind", None)
        node.pop("apiVersion", None)
        nodes.append(node)
    return nodes


def without_server_fields(obj: Any) -> Any:
    """The object with the values only the server chooses (uid, versions, times) blanked."""
    obj = copy.deepcopy(obj)
    meta = obj.get("metadata") or {}
    for key in ("uid", "resourceVersion", "creationTimestamp"):
        if key in meta:
            meta[key] = "*"
    return obj


def pod(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "demo"},
            "spec": {"containers": [{"name": "c", "image": "trainer:1", "resources": {"requests": {"cpu": "1"}}}], **spec}}


def binding(name: str, node: str = "node-1", uid: str = "") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "demo"}
    if uid:
        meta["uid"] = uid
    return {"apiVersion": "v1", "kind": "Binding", "metadata": meta, "target": {"apiVersion": "v1", "kind": "Node", "name": node}}


@pytest.fixture(scope="module")
def server() -> Iterator[FakeApiServer]:
    with FakeApiServer() as running:
        yield running


@pytest.fixture
def api(server: FakeApiServer) -> Iterator[FakeApiServer]:
    """The module's server with an empty cluster; bookmarks only when a test sends them."""
    server.reset(bookmark_interval=3600)
    yield server
    server.state.end_watches()


@pytest.fixture
def client(api: FakeApiServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=api.url, timeout=5) as c:
        yield c


@pytest.fixture
def nodes(api: FakeApiServer) -> list[dict[str, Any]]:
    return [api.state.add_node(n) for n in captured_nodes()]


class Watch:
    """A watch stream read line by line in a thread, as a client sees it."""

    def __init__(self, client: httpx.Client, path: str, **params: Any) -> None:
        self.lines: list[bytes] = []
        self.error: Exception | None = None
        self.response: httpx.Response | None = None
        self._thread = threading.Thread(target=self._run, args=(client, path, params), daemon=True)
        self._thread.start()

    def _run(self, client: httpx.Client, path: str, params: dict[str, Any]) -> None:
        try:
            with client.stream("GET", path, params={"watch": "1", **params}) as response:
                self.response = response
                buffer = b""
                for chunk in response.iter_raw():
                    buffer += chunk
                    while b"\n" in buffer:
                        line, buffer = buffer.split(b"\n", 1)
                        self.lines.append(line)
        except Exception as exc:  # noqa: BLE001 - the test inspects it
            self.error = exc

    def wait_lines(self, n: int) -> None:
        deadline = time.monotonic() + 5
        while len(self.lines) < n:
            assert time.monotonic() < deadline, f"expected {n} watch lines, got {self.lines}"
            time.sleep(0.005)

    def join(self) -> list[dict[str, Any]]:
        self._thread.join(5)
        assert not self._thread.is_alive(), "the watch stream did not end"
        return [json.loads(line) for line in self.lines]


# --------------------------------------------------------------------- lists


def test_a_list_with_limit_2_returns_the_captured_page_with_a_continue_token(api: FakeApiServer, client: httpx.Client, nodes: Any) -> None:
    want = fixture("nodes-list-limit2.json")
    r = client.get(NODES, params={"limit": 2})
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/json"
    page = r.json()
    assert list(page) == list(want)
    assert (page["kind"], page["apiVersion"]) == ("NodeList", "v1")
    assert list(page["metadata"]) == ["resourceVersion", "continue", "remainingItemCount"]
    assert page["metadata"]["remainingItemCount"] == 1
    assert page["metadata"]["resourceVersion"] == api.state.resource_version
    assert [without_server_fields(i) for i in page["items"]] == [without_server_fields(i) for i in want["items"]]
    ours = json.loads(base64.urlsafe_b64decode(page["metadata"]["continue"] + "=="))
    theirs = json.loads(base64.urlsafe_b64decode(want["metadata"]["continue"] + "=="))
    assert list(ours) == list(theirs) == ["v", "rv", "start"]
    assert ours == {**theirs, "rv": int(page["metadata"]["resourceVersion"])}


def test_the_continue_token_returns_the_second_page_at_the_same_resource_version(api: FakeApiServer, client: httpx.Client, nodes: Any) -> None:
    first = client.get(NODES, params={"limit": 2}).json()
    api.state.add_node({"metadata": {"name": "node-0"}})  # after the snapshot: not in this list
    api.state.delete("nodes", "node-3")
    second = client.get(NODES, params={"limit": 2, "continue": first["metadata"]["continue"]}).json()
    assert second["metadata"] == {"resourceVersion": first["metadata"]["resourceVersion"]}
    assert [i["metadata"]["name"] for i in second["items"]] == ["node-3"]


def test_a_curl_client_gets_the_list_indented_exactly_as_captured(api: FakeApiServer, client: httpx.Client, nodes: Any) -> None:
    want_text = (WIRE / "nodes-list-limit2.json").read_text()
    r = client.get(NODES, params={"limit": 2}, headers={"User-Agent": "curl/8.5.0"})
    assert r.text.endswith("}\n")
    ours = r.text.rstrip("\n")
    for key in ("uid", "resourceVersion", "creationTimestamp", "continue"):
        pattern = re.compile(rf'"{key}": "[^"]*"')
        ours, want_text = pattern.sub(f'"{key}": "*"', ours), pattern.sub(f'"{key}": "*"', want_text)
    assert ours == want_text


def test_a_list_at_a_compacted_resource_version_answers_the_captured_410(api: FakeApiServer, client: httpx.Client, nodes: Any) -> None:
    old = client.get(NODES).json()["metadata"]["resourceVersion"]
    api.state.update("nodes", "node-1", merge={"metadata": {"labels": {"pool": "gpu"}}})
    api.state.compact()
    for params in ({"limit": 500, "resourceVersion": old}, {"resourceVersion": old, "resourceVersionMatch": "Exact"}):
        r = client.get(NODES, params=params)
        assert r.status_code == 410
        assert r.json() == fixture("list-expired-410.json")
    # NotOlderThan (the default without limit) is served from the watch cache: the current state, no 410
    assert client.get(NODES, params={"resourceVersion": old}).json()["metadata"]["resourceVersion"] == api.state.resource_version


def test_a_continue_token_from_before_a_compaction_is_410_with_a_fresh_token(api: FakeApiServer, client: httpx.Client, nodes: Any) -> None:
    first = client.get(NODES, params={"limit": 1}).json()
    api.state.update("nodes", "node-2", merge={"metadata": {"labels": {"pool": "gpu"}}})
    api.state.compact()
    r = client.get(NODES, params={"limit": 1, "continue": first["metadata"]["continue"]})
    assert r.status_code == 410
    assert r.json()["reason"] == "Expired"
    assert r.json()["message"].startswith("The provided continue parameter is too old")
    rest = client.get(NODES, params={"limit": 5, "continue": r.json()["metadata"]["continue"]}).json()
    assert [i["metadata"]["name"] for i in rest["items"]] == ["node-2", "node-3"]
    assert rest["items"][0]["metadata"]["labels"]["pool"] == "gpu"


def test_resource_version_0_is_served_whole_and_resource_version_match_needs_a_version(client: httpx.Client, nodes: Any) -> None:
    assert len(client.get(NODES, params={"limit": 1, "resourceVersion": "0"}).json()["items"]) == 3
    r = client.get(NODES, params={"resourceVersionMatch": "Exact"})
    assert r.status_code == 422
    assert r.json()["message"] == ('ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: Forbidden: '
                                   "resourceVersionMatch is forbidden unless resourceVersion is provided")


def test_label_and_field_selectors_filter_lists(api: FakeApiServer, client: httpx.Client, nodes: Any) -> None:
    names = lambda r: [i["metadata"]["name"] for i in r.json()["items"]]  # noqa: E731
    assert names(client.get(NODES, params={"labelSelector": "gpu=true"})) == ["node-3"]
    assert names(client.get(NODES, params={"labelSelector": "topology.kubernetes.io/zone in (zone-0),gpu!=true"})) == ["node-2"]
    assert names(client.get(NODES, params={"fieldSelector": "metadata.name!=node-1"})) == ["node-2", "node-3"]
    api.state.add_pod(pod("a", nodeName="node-1"))
    api.state.add_pod(pod("b"))
    assert names(client.get("/api/v1/pods", params={"fieldSelector": "spec.nodeName="})) == ["b"]
    r = client.get("/api/v1/pods", params={"fieldSelector": "spec.bogus=x"})
    assert (r.status_code, r.json()["message"]) == (400, "field label not supported: spec.bogus")


# --------------------------------------------------------------------- watch


def test_a_watch_sees_modified_deleted_and_bookmark_lines_shaped_like_the_capture(api: FakeApiServer, client: httpx.Client, nodes: Any) -> None:
    rv = client.get(NODES, params={"limit": 2}).json()["metadata"]["resourceVersion"]
    watch = Watch(client, NODES, resourceVersion=rv, allowWatchBookmarks="true")
    api.state.wait_for_watches(1, "nodes")
    api.state.update("nodes", "node-2", merge={"metadata": {"labels": {"pool": "gpu"}}})
    api.state.delete("nodes", "node-3")
    api.state.send_bookmarks()
    api.state.send_bookmarks()
    api.state.end_watches()
    got, want = watch.join(), captured_stream()
    assert watch.response is not None and watch.response.status_code == 200
    assert watch.response.headers["content-type"] == "application/json"
    assert watch.response.headers["transfer-encoding"] == "chunked"
    assert [e["type"] for e in got] == [e["type"] for e in want] == ["MODIFIED", "DELETED", "BOOKMARK", "BOOKMARK"]
    for line in watch.lines:  # one compact JSON object per line, like the capture
        assert line == json.dumps(json.loads(line), separators=(",", ":"), ensure_ascii=False).encode()
    for ours, theirs in zip(got[:2], want[:2]):
        theirs["object"]["metadata"]["managedFields"] = theirs["object"]["metadata"]["managedFields"][:1]  # no kubectl-label entry
        assert list(ours) == ["type", "object"]
        assert without_server_fields(ours["object"]) == without_server_fields(theirs["object"])
    versions = [int(e["object"]["metadata"]["resourceVersion"]) for e in got]
    assert int(rv) < versions[0] < versions[1] == versions[2] == versions[3]
    for ours, theirs in zip(got[2:], want[2:]):
        theirs["object"]["metadata"]["resourceVersion"] = ours["object"]["metadata"]["resourceVersion"]
        assert ours == theirs


def test_bookmarks_arrive_periodically_once_the_cluster_moves_past_the_watch_start(api: FakeApiServer, client: httpx.Client) -> None:
    state = api.reset(bookmark_interval=0.02)
    watch = Watch(client, "/api/v1/pods", resourceVersion=state.resource_version, allowWatchBookmarks="true")
    state.wait_for_watches(1)
    state.add_node({"metadata": {"name": "elsewhere"}})  # another resource moves the revision on
    watch.wait_lines(3)
    state.end_watches()
    events = watch.join()
    assert {e["type"] for e in events} == {"BOOKMARK"}
    assert events[0]["object"] == {"kind": "Pod", "apiVersion": "v1", "spec": {"containers": None}, "status": {},
                                   "metadata": {"resourceVersion": state.resource_version, "creationTimestamp": None}}


def test_a_watch_ends_cleanly_after_its_timeout_seconds(api: FakeApiServer, client: httpx.Client) -> None:
    watch = Watch(client, NODES, resourceVersion=api.state.resource_version, timeoutSeconds="1")
    assert watch.join() == []
    assert watch.error is None and api.state.watch_count() == 0


def test_a_watch_from_a_compacted_resource_version_gets_a_410_error_event(api: FakeApiServer, client: httpx.Client, nodes: Any) -> None:
    old = api.state.resource_version
    api.state.update("nodes", "node-1", merge={"metadata": {"labels": {"x": "y"}}})
    compacted = api.state.compact()
    events = Watch(client, NODES, resourceVersion=old).join()
    assert [e["type"] for e in events] == ["ERROR"]
    want = fixture("list-expired-410.json")
    assert events[0]["object"] == {**want, "message": f"too old resource version: {old} ({compacted})"}


def test_a_watch_without_a_version_starts_with_the_current_objects_as_added(api: FakeApiServer, client: httpx.Client, nodes: Any) -> None:
    watch = Watch(client, NODES)
    api.state.wait_for_watches(1)
    api.state.end_watches()
    events = watch.join()
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "node-1"), ("ADDED", "node-2"), ("ADDED", "node-3")]


def test_a_pod_leaving_a_watched_selection_is_delivered_as_deleted(api: FakeApiServer, client: httpx.Client) -> None:
    api.state.add_pod(pod("p"))
    rv = api.state.resource_version
    watch = Watch(client, "/api/v1/pods", resourceVersion=rv, fieldSelector="spec.nodeName=")
    api.state.wait_for_watches(1)
    assert client.post(f"{PODS_DEMO}/p/binding", json=binding("p")).status_code == 201
    api.state.end_watches()
    events = watch.join()
    assert [e["type"] for e in events] == ["DELETED"]
    assert events[0]["object"]["spec"].get("nodeName") is None  # the last state that matched...
    assert int(events[0]["object"]["metadata"]["resourceVersion"]) == int(rv) + 1  # ...at the binding's revision


def test_dropping_watches_breaks_the_connection_mid_stream(api: FakeApiServer, client: httpx.Client, nodes: Any) -> None:
    watch = Watch(client, NODES, resourceVersion=api.state.resource_version)
    api.state.wait_for_watches(1)
    api.state.update("nodes", "node-1", merge={"metadata": {"labels": {"x": "y"}}})
    assert api.state.drop_watches() == 1
    assert [e["type"] for e in watch.join()] == ["MODIFIED"]
    assert isinstance(watch.error, httpx.RemoteProtocolError)
    assert api.state.watch_count() == 0


def test_scripted_failures_answer_with_a_status_then_the_server_recovers(api: FakeApiServer, client: httpx.Client, nodes: Any) -> None:
    api.state.fail_next(2, 503, path=NODES)
    for _ in range(2):
        r = client.get(NODES)
        assert (r.status_code, r.json()["reason"], r.headers["retry-after"]) == (503, "ServiceUnavailable", "1")
    assert client.get(NODES).status_code == 200
    api.state.fail_next(1, 500)
    r = client.get(NODES, params={"watch": "true"})
    assert (r.status_code, r.json()["reason"]) == (500, "InternalError")


# --------------------------------------------------------------------- binding


def test_binding_a_pod_that_is_being_deleted_gives_the_captured_409_body(api: FakeApiServer, client: httpx.Client) -> None:
    api.state.add_pod(pod("plain"))
    api.state.delete("pods", "plain", "demo", grace_seconds=30)
    r = client.post(f"{PODS_DEMO}/plain/binding", json=binding("plain"))
    assert r.status_code == 409
    assert r.json() == fixture("binding-conflict-409.json")


def test_a_second_binding_is_a_409_conflict_shaped_like_the_capture(api: FakeApiServer, client: httpx.Client) -> None:
    uid = api.state.add_pod(pod("plain"))["metadata"]["uid"]
    r = client.post(f"{PODS_DEMO}/plain/binding", json=binding("plain", uid=uid))
    assert (r.status_code, r.json()) == (201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201})
    bound = api.state.get_pod("demo", "plain")
    assert bound is not None and bound["spec"]["nodeName"] == "node-1"
    assert bound["status"]["conditions"][0]["type"] == "PodScheduled"
    r = client.post(f"{PODS_DEMO}/plain/binding", json=binding("plain", node="node-2"))
    assert r.status_code == 409
    assert r.json() == {**fixture("binding-conflict-409.json"),
                        "message": 'Operation cannot be fulfilled on pods/binding "plain": pod plain is already assigned to node "node-1"'}


def test_a_test_can_make_the_next_binding_conflict_and_missing_pods_are_404(api: FakeApiServer, client: httpx.Client) -> None:
    api.state.add_pod(pod("plain"))
    api.state.refuse_binding("demo", "plain")
    assert client.post(f"{PODS_DEMO}/plain/binding", json=binding("plain")).json() == fixture("binding-conflict-409.json")
    assert client.post(f"{PODS_DEMO}/plain/binding", json=binding("plain")).status_code == 201
    r = client.post(f"{PODS_DEMO}/ghost/binding", json=binding("ghost"))
    assert (r.status_code, r.json()["message"], r.json()["details"]) == (404, 'pods "ghost" not found', {"name": "ghost", "kind": "pods"})


def test_a_gated_pod_cannot_be_bound(api: FakeApiServer, client: httpx.Client) -> None:
    api.state.add_pod(pod("gated", schedulingGates=[{"name": "kpe.dev/quota"}]))
    r = client.post(f"{PODS_DEMO}/gated/binding", json=binding("gated"))
    assert (r.status_code, r.json()["message"]) == (409, 'Operation cannot be fulfilled on pods/binding "gated": pod gated has non-empty .spec.schedulingGates')


# --------------------------------------------------------------------- patch


def jsonpatch(client: httpx.Client, name: str, ops: list[dict[str, Any]]) -> httpx.Response:
    return client.patch(f"{PODS_DEMO}/{name}", content=json.dumps(ops), headers={"Content-Type": "application/json-patch+json"})


def test_a_failing_jsonpatch_test_op_gives_the_captured_422_body(api: FakeApiServer, client: httpx.Client) -> None:
    api.state.add_pod(pod("gated", schedulingGates=[{"name": "kpe.dev/quota"}]))
    before = api.state.resource_version
    r = jsonpatch(client, "gated", [{"op": "test", "path": "/metadata/resourceVersion", "value": "1"},
                                    {"op": "remove", "path": "/spec/schedulingGates"}])
    assert r.status_code == 422
    assert r.json() == fixture("jsonpatch-test-failed.json")
    assert api.state.resource_version == before


def test_removing_a_scheduling_gate_bumps_the_version_and_is_watched_as_modified(api: FakeApiServer, client: httpx.Client) -> None:
    created = api.state.add_pod(pod("gated", schedulingGates=[{"name": "a"}, {"name": "b"}]))
    rv = created["metadata"]["resourceVersion"]
    watch = Watch(client, PODS_DEMO, resourceVersion=rv)
    api.state.wait_for_watches(1)
    r = jsonpatch(client, "gated", [{"op": "test", "path": "/metadata/resourceVersion", "value": rv},
                                    {"op": "remove", "path": "/spec/schedulingGates/0"}])
    assert r.status_code == 200
    assert r.json()["spec"]["schedulingGates"] == [{"name": "b"}]
    assert int(r.json()["metadata"]["resourceVersion"]) > int(rv)
    api.state.end_watches()
    assert [(e["type"], e["object"]["spec"]["schedulingGates"]) for e in watch.join()] == [("MODIFIED", [{"name": "b"}])]


def test_adding_a_scheduling_gate_after_creation_is_refused(api: FakeApiServer, client: httpx.Client) -> None:
    api.state.add_pod(pod("gated", schedulingGates=[{"name": "a"}]))
    r = jsonpatch(client, "gated", [{"op": "add", "path": "/spec/schedulingGates/-", "value": {"name": "x"}}])
    assert r.status_code == 422
    assert r.json() == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "Pod \"gated\" is invalid: spec.schedulingGates[1].name: Forbidden: only deletion is allowed, but found new scheduling gate 'x'",
        "reason": "Invalid",
        "details": {"name": "gated", "kind": "Pod", "causes": [{
            "reason": "FieldValueForbidden", "message": "Forbidden: only deletion is allowed, but found new scheduling gate 'x'",
            "field": "spec.schedulingGates[1].name"}]},
        "code": 422}
    api.state.add_pod(pod("free"))
    r = jsonpatch(client, "free", [{"op": "add", "path": "/spec/schedulingGates", "value": [{"name": "x"}]}])
    assert r.status_code == 422 and "found new scheduling gate 'x'" in r.json()["message"]


def test_a_test_helper_update_cannot_add_a_scheduling_gate_either(api: FakeApiServer) -> None:
    api.state.add_pod(pod("gated", schedulingGates=[{"name": "a"}]))
    with pytest.raises(ApiError, match="only deletion is allowed, but found new scheduling gate 'x'"):
        api.state.update("pods", "gated", "demo", mutate=lambda p: p["spec"]["schedulingGates"].append({"name": "x"}))
    assert api.state.update("pods", "gated", "demo", merge={"spec": {"schedulingGates": None}})["spec"].get("schedulingGates") is None


def test_a_write_staged_before_a_patch_lands_first_so_the_patch_test_op_fails_with_the_captured_422(
        api: FakeApiServer, client: httpx.Client) -> None:
    api.state.add_pod(pod("gated", schedulingGates=[{"name": "a"}, {"name": "b"}]))
    api.state.add_pod(pod("other"))
    staged: list[State] = []

    def drop_a(state: State) -> None:
        staged.append(state)
        state.update("pods", "gated", "demo", merge={"spec": {"schedulingGates": [{"name": "b"}]}})

    def gates() -> Any:
        return (api.state.get_pod("demo", "gated") or {})["spec"]["schedulingGates"]

    api.state.before_next(drop_a, method="PATCH", path=f"{PODS_DEMO}/gated")
    # Only the staged request's method and path set it off.
    assert client.get(f"{PODS_DEMO}/gated").json()["spec"]["schedulingGates"] == [{"name": "a"}, {"name": "b"}]
    assert jsonpatch(client, "other", [{"op": "replace", "path": "/spec/schedulerName", "value": "default-scheduler"}]).status_code == 200
    stale: list[dict[str, Any]] = [{"op": "test", "path": "/spec/schedulingGates", "value": [{"name": "a"}, {"name": "b"}]},
                                   {"op": "replace", "path": "/spec/schedulingGates", "value": [{"name": "a"}]}]
    r = jsonpatch(client, "gated", stale)
    assert (r.status_code, r.json()) == (422, fixture("jsonpatch-test-failed.json"))
    assert staged == [api.state] and gates() == [{"name": "b"}]
    fresh: list[dict[str, Any]] = [{"op": "test", "path": "/spec/schedulingGates", "value": [{"name": "b"}]},
                                   {"op": "replace", "path": "/spec/schedulingGates", "value": []}]
    assert jsonpatch(client, "gated", fresh).status_code == 200
    assert len(staged) == 1 and gates() == []


def test_a_patch_that_changes_nothing_keeps_the_resource_version(api: FakeApiServer, client: httpx.Client) -> None:
    rv = api.state.add_pod(pod("p"))["metadata"]["resourceVersion"]
    r = jsonpatch(client, "p", [{"op": "replace", "path": "/spec/schedulerName", "value": "default-scheduler"}])
    assert r.json()["metadata"]["resourceVersion"] == rv == api.state.resource_version


# --------------------------------------------------------------------- leases, events


def lease(holder: str, rv: str = "") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "kpe", "namespace": "kpe"}
    if rv:
        meta["resourceVersion"] = rv
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta,
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15, "acquireTime": "2026-11-21T16:19:01.000000Z",
                     "renewTime": "2026-11-21T16:19:01.000000Z", "leaseTransitions": 0}}


def test_a_lease_update_with_a_stale_resource_version_is_409(api: FakeApiServer, client: httpx.Client) -> None:
    created = client.post(LEASES, json=lease("a"))
    assert created.status_code == 201
    rv = created.json()["metadata"]["resourceVersion"]
    assert client.put(f"{LEASES}/kpe", json=lease("b", rv)).status_code == 200
    r = client.put(f"{LEASES}/kpe", json=lease("c", rv))
    assert r.status_code == 409
    assert r.json() == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": 'Operation cannot be fulfilled on leases.coordination.k8s.io "kpe": the object has been modified; '
                   "please apply your changes to the latest version and try again",
        "reason": "Conflict", "details": {"name": "kpe", "group": "coordination.k8s.io", "kind": "leases"}, "code": 409}
    held = api.state.get_lease("kpe", "kpe")
    assert held is not None and held["spec"]["holderIdentity"] == "b"
    again = client.post(LEASES, json=lease("d"))
    assert (again.status_code, again.json()["reason"]) == (409, "AlreadyExists")


def test_a_lease_time_without_six_fractional_digits_is_a_bad_request(client: httpx.Client) -> None:
    body = lease("a")
    body["spec"]["renewTime"] = "2026-11-21T16:19:01Z"
    r = client.post(LEASES, json=body)
    assert r.status_code == 400
    assert r.json()["message"] == ('Lease in version "v1" cannot be handled as a Lease: parsing time "2026-11-21T16:19:01Z" '
                                   'as "2006-01-02T15:04:05.000000Z07:00": cannot parse "Z" as ".000000"')


def test_events_from_both_apis_are_recorded(api: FakeApiServer, client: httpx.Client) -> None:
    core = {"metadata": {"name": "p.1", "namespace": "demo"}, "involvedObject": {"kind": "Pod", "namespace": "demo", "name": "p"},
            "reason": "Gated", "message": "waiting", "type": "Normal", "source": {"component": "kpe"}}
    assert client.post("/api/v1/namespaces/demo/events", json=core).status_code == 201
    new = {"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"generateName": "p."},
           "eventTime": "2026-11-21T16:19:01.000000Z", "reportingController": "kpe.dev/extender", "reportingInstance": "kpe-0",
           "action": "Binding", "reason": "Bound", "note": "bound to node-1", "type": "Normal",
           "regarding": {"kind": "Pod", "namespace": "demo", "name": "p"}}
    assert client.post("/apis/events.k8s.io/v1/namespaces/demo/events", json=new).status_code == 201
    assert [e["reason"] for e in api.state.events] == ["Gated", "Bound"]
    bad = client.post("/api/v1/namespaces/demo/events", json={**core, "involvedObject": {"namespace": "other"}})
    assert bad.status_code == 422 and "does not match event.namespace" in bad.json()["message"]


def test_the_request_log_shows_what_the_client_sent(api: FakeApiServer, client: httpx.Client) -> None:
    api.state.add_pod(pod("p"))
    client.post(f"{PODS_DEMO}/p/binding", json=binding("p"))
    (sent,) = api.state.requests_to("POST", "/api/v1/namespaces/demo/pods/p/binding")
    assert sent.json() == binding("p")
    assert sent.headers["content-type"] == "application/json"


# --------------------------------------------------------------------- admission


def test_pod_create_calls_the_mutating_webhook_with_a_review_shaped_like_the_capture(api: FakeApiServer, client: httpx.Client) -> None:
    captured = fixture("mutating-admission-review-pod-create.json")
    seen: list[tuple[str, dict[str, str], dict[str, Any]]] = []

    async def webhook(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = (await receive())["body"]
        review = json.loads(body)
        seen.append((scope["path"] + "?" + scope["query_string"].decode(), {k.decode(): v.decode() for k, v in scope["headers"]}, review))
        answer = dict(captured["response"])
        answer["response"] = {**answer["response"], "uid": review["request"]["uid"]}
        data = json.dumps(answer).encode()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": data})

    with serve(webhook) as url:
        api.state.add_mutating_webhook("kpe.example.com", url + "/mutate-pods")
        trainer = pod("trainer")
        trainer["metadata"].update({"namespace": "gated", "labels": {"team": "ml"}, "annotations": {"a": "b"}})
        trainer["spec"]["containers"] = [{"name": "c", "image": "trainer", "resources": {"requests": {"cpu": "1"}}}]
        r = client.post("/api/v1/namespaces/gated/pods", json=trainer, params={"fieldManager": "kubectl-client-side-apply", "fieldValidation": "Strict"})
    assert r.status_code == 201, r.text
    assert r.json()["metadata"]["annotations"]["kpe-captured"] == "yes"  # the captured JSONPatch, applied
    (path, headers, review), want = seen[0], captured["request"]
    assert path == captured["path"]
    for key in ("User-Agent", "Accept", "Content-Type"):
        assert headers[key.lower()] == captured["headers"][key]
    ours, theirs = review["request"], want["request"]
    theirs["object"]["metadata"].pop("managedFields")
    theirs["object"]["metadata"]["annotations"] = {"a": "b"}
    assert {**ours, "uid": "*"} == {**theirs, "uid": "*"}
    assert list(ours["object"]["spec"]) == list(theirs["object"]["spec"])
