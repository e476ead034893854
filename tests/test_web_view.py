"""The web view's pages (server.introspection.web) rendered from recorded state: a snapshot
with kpe's recorded gates, decisions and reservation slots, decided with
tests/data/web/policies.yaml (``kpe view --snapshot``'s source). The texts a person reads
are checked exactly; the browser and the live kpe are tests/e2e/test_web_view.py's."""

from __future__ import annotations

import asyncio
import copy
import html
import threading
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from starlette.applications import Starlette
from starlette.testclient import TestClient

from engine.cluster.anonymise import Anonymiser
from engine.cluster.snapshot import Snapshot
from engine.policy.loader import load
from engine.reports.diagnosis.view import headline
from server.cli.view import app_for
from server.introspection import views, web
from server.introspection.offline import SnapshotSource

HERE = Path(__file__).parent
POLICIES = HERE / "data" / "web" / "policies.yaml"
CASES = yaml.safe_load((HERE / "cases" / "web_pending.yaml").read_text())
TAKEN = "2026-12-02T12:00:00Z"


def node(name: str, zone: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"zone": zone, **labels}},
            "status": {"allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def pod(namespace: str, name: str, created: str, *, team: str = "", node: str = "", gates: tuple[str, ...] = (),
        scheduled: tuple[str, str] | None = None, cpu: str = "500m") -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "app", "resources": {"requests": {"cpu": cpu}}}]}
    if node:
        spec["nodeName"] = node
    if gates:
        spec["schedulingGates"] = [{"name": g} for g in gates]
    status: dict[str, Any] = {"phase": "Running" if node else "Pending"}
    if scheduled:
        status["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": scheduled[0], "message": scheduled[1]}]
    return {"metadata": {"namespace": namespace, "name": name, "uid": f"uid-{namespace}-{name}", "creationTimestamp": created,
                         "labels": {"team": team} if team else {}},
            "spec": spec, "status": status}


UNSCHEDULABLE = ("0/4 nodes are available: 1 drain/not-draining: node is draining <now>, 2 Insufficient cpu, "
                 "1 pools/dedicated-pool: node pool is dedicated to team ml. preemption: 0/4 nodes are available: "
                 "4 No preemption victims found for incoming pod.")


def recorded() -> Snapshot:
    """Four nodes (one of team ml's pool, one draining) and the pods of an incident: kpe's
    records (gates, a filter decision, slots) as ``kpe snapshot --server`` saves them."""
    nodes = [node("a-1", "a"), node("a-2", "a", pool="ml"), node("b-1", "b"), node("b-2", "b", drain="yes")]
    pods = [
        pod("web", "web-0", "2026-12-02T09:00:00Z", team="web", node="a-1"),
        pod("web", "web-1", "2026-12-02T11:58:30Z", team="web"),
        pod("shop", "cart-1", "2026-12-02T11:00:00Z", team="shop", scheduled=("Unschedulable", UNSCHEDULABLE), cpu="6"),
        pod("shop", "cart-2", "2026-12-02T11:30:00Z", team="shop"),
        pod("shop", "cart-3", "2026-12-02T10:00:00Z", scheduled=("Unschedulable", "0/4 nodes are available: 4 Insufficient memory.")),
        pod("batch", "job-2", "2026-12-02T08:00:00Z", gates=("kpe.dev/batch-quota",)),
        pod("other", "x-1", "2026-12-02T11:59:50Z", gates=("example.com/wait",)),
    ]
    kpe = {
        "generation": "3097705a6696",
        "gated": [{"namespace": "batch", "name": "job-2", "gates": [{"gate": "kpe.dev/batch-quota", "policy": "batch-quota", "message": "waiting for the batch quota"}]}],
        "decisions": [
            {"seq": 9, "time": 1764676800.0, "verb": "prioritize", "pod": "web/web-1", "generation": "3097705a6696", "policies": ["zones"],
             "scores": [{"Host": "a-1", "Score": 100}, {"Host": "b-1", "Score": 20}]},
            {"seq": 8, "time": 1764676790.0, "verb": "bind", "pod": "web/web-0", "generation": "3097705a6696", "node": "a-1", "error": ""},
            {"seq": 7, "time": 1764676780.0, "verb": "filter", "pod": "shop/cart-2", "generation": "3097705a6696", "policies": ["drain", "pools"],
             "passed": 0, "failed": {"a-1": "pools/dedicated-pool: x"}, "rejections": {"pools/dedicated-pool": 3, "drain/not-draining": 1}},
        ],
        "reservations": {"source": "leader", "reservations": [
            {"name": "web-room", "policy": "reservation.web-room", "mode": "Enforce", "slots": 2, "free": 1, "used": 1, "slotStates": [
                {"slot": 0, "state": "free", "node": "b-1", "pod": "kpe-system/kpe-reservation-web-room-0"},
                {"slot": 1, "state": "used", "node": "a-1", "pod": "web/web-0"},
            ]},
        ]},
    }
    return Snapshot(nodes=nodes, pods=pods, taken_at=TAKEN, source="recorded", kpe=kpe)


@pytest.fixture
def source() -> SnapshotSource:
    return SnapshotSource(recorded(), load([POLICIES]), path="incident.json")


@pytest.fixture
def client(source: SnapshotSource) -> TestClient:
    return TestClient(app_for(source))


class Tables(HTMLParser):
    """The text of every table cell of a page, table by table, row by row."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[list[list[str]]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1][-1].append(" ".join("".join(self._cell).split()))
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def tables(html: str) -> list[list[list[str]]]:
    parser = Tables()
    parser.feed(html)
    return parser.tables


@pytest.mark.parametrize("case", CASES["cases"], ids=[c["name"] for c in CASES["cases"]])
def test_a_pending_pod_is_grouped_by_what_keeps_it(case: dict[str, Any]) -> None:
    title, kind, policy, _ = views.cause(case["pod"], CASES["policies"])
    assert [title, kind, policy] == case["group"]


def test_the_pending_page_groups_pods_by_what_keeps_them_largest_group_first(client: TestClient) -> None:
    page = client.get("/ui/pending")
    assert page.status_code == 200
    summary = tables(page.text)[0]
    assert summary == [
        ["kept by", "kind", "pods", "longest wait", ""],
        ["batch-quota: gate kpe.dev/batch-quota", "gate", "1", "4h 0m", ""],
        ["drain/not-draining", "kpe filter", "1", "1h 0m", ""],
        ["gates not kpe's: example.com/wait", "gate", "1", "10s", ""],
        ["kube-scheduler: Insufficient memory", "kube-scheduler", "1", "2h 0m", ""],
        ["passed kpe's filter, not bound yet", "waiting", "1", "1m 30s", ""],
        ["pools/dedicated-pool", "kpe filter", "1", "30m 0s", ""],
    ]
    assert "<h1>Pending pods: 6</h1>" in page.text
    rows = {t[1][0]: t[1] for t in tables(page.text)[1:]}
    assert rows["shop/cart-2"] == ["shop/cart-2", "30m 0s", "kpe's last filter passed no node: 3 pools/dedicated-pool, 1 drain/not-draining"]
    assert rows["batch/job-2"] == ["batch/job-2", "4h 0m", "waiting for the batch quota"]
    assert rows["web/web-1"] == ["web/web-1", "1m 30s", "kpe's last filter passed 2 nodes"]  # decided on the snapshot
    # kube-scheduler's text is the cluster's, shown as text, never as markup.
    assert "node is draining &lt;now&gt;" in page.text and "<now>" not in page.text
    assert 'href="/ui/pods/shop/cart-2"' in page.text and 'href="/ui/decisions?policy=pools"' in page.text


def test_a_large_group_lists_its_longest_waiting_pods_and_counts_the_rest(source: SnapshotSource) -> None:
    snapshot = recorded()
    snapshot.pods += [pod("shop", f"burst-{i:03d}", f"2026-12-02T11:{i % 60:02d}:00Z", scheduled=("Unschedulable", "0/4 nodes are available: 4 Insufficient memory."))
                      for i in range(150)]
    client = TestClient(app_for(SnapshotSource(snapshot, source.policy_set, path="incident.json")))
    page = client.get("/ui/pending").text
    group = next(t for t in tables(page)[1:] if len(t) > 50)
    assert len(group) == 1 + views.SHOWN_PODS
    assert group[1] == ["shop/cart-3", "2h 0m", "0/4 nodes are available: 4 Insufficient memory."]
    assert "and 51 more" in page
    every = client.get("/ui/pending?all=1").text
    assert len(next(t for t in tables(every)[1:] if len(t) > 50)) == 1 + 151


def test_a_pods_page_groups_its_nodes_by_verdict_and_shows_the_best_scores(client: TestClient, source: SnapshotSource) -> None:
    page = client.get("/ui/pods/web/web-1")
    assert page.status_code == 200
    verdicts, scores = tables(page.text)[0], tables(page.text)[1]
    assert verdicts == [
        ["nodes", "", "verdict", "nodes (first 8)"],
        ["2", "", "feasible: kpe's policies and kube-scheduler's filters pass", "a-1, b-1"],
        ["1", "", "drain/not-draining: node is draining <now>", "b-2"],
        ["1", "", "pools/dedicated-pool: node pool is dedicated to team ml", "a-2"],
    ]
    assert scores == [["node", "score", "zones/prefer-a x2"], ["a-1", "10", "100.0"], ["b-1", "0", "20.0"]]
    # The summary is kpe explain's, line for line.
    _, data = asyncio.run(source.pod("web", "web-1"))
    shown = html.unescape(page.text)
    for line in headline(data):
        assert f">{line}</div>" in shown
    assert "<h2>4 nodes by verdict</h2>" in page.text


def test_each_page_answers_its_document_as_json_when_asked(client: TestClient, source: SnapshotSource) -> None:
    json_ = {"accept": "application/json"}
    assert client.get("/ui/policies", headers=json_).json() == asyncio.run(source.policies())[1]
    assert client.get("/ui/pending", headers=json_).json() == asyncio.run(source.pending())[1]
    assert client.get("/ui/reservations", headers=json_).json() == asyncio.run(source.reservations())[1]
    pod_doc = client.get("/ui/pods/shop/cart-2", headers=json_).json()
    assert pod_doc["pod"] == "shop/cart-2" and pod_doc["feasibleNodes"] == ["a-1", "b-1"]
    decisions = client.get("/ui/decisions?verb=filter", headers=json_).json()
    assert [d["seq"] for d in decisions["decisions"]] == [7]
    # A browser asks for HTML first: it gets the page.
    assert client.get("/ui/pending", headers={"accept": "text/html,application/xhtml+xml,application/json;q=0.9"}).text.startswith("<!doctype html>")


def test_decisions_filter_by_policy_pod_and_verb(client: TestClient) -> None:
    def seqs(query: str) -> list[str]:
        return [row[0] for row in tables(client.get(f"/ui/decisions{query}").text)[0][1:]]

    assert seqs("") == ["9", "8", "7"]
    assert seqs("?policy=pools") == ["7"]
    assert seqs("?policy=zones") == ["9"]
    assert seqs("?pod=web/web-0") == ["8"]
    assert seqs("?verb=prioritize") == ["9"]
    row = tables(client.get("/ui/decisions?verb=filter").text)[0][1]
    assert row[2:] == ["filter", "shop/cart-2", "drain, pools", "passed 0; rejected: 3 pools/dedicated-pool, 1 drain/not-draining"]


def test_the_reservations_page_shows_each_slot_and_who_uses_it(client: TestClient) -> None:
    page = client.get("/ui/reservations").text
    assert tables(page)[0] == [
        ["slot", "state", "node", "pod (placeholder or owner)"],
        ["0", "free", "b-1", "kpe-system/kpe-reservation-web-room-0"],
        ["1", "used", "a-1", "web/web-0"],
    ]
    assert "2 slots: 1 free, 1 used" in page and 'href="/ui/pods/web/web-0"' in page


def test_the_policies_page_lists_each_policy_with_its_mode_and_rules(client: TestClient) -> None:
    rows = tables(client.get("/ui/policies").text)[0]
    assert rows[0] == ["policy", "mode", "failure policy", "filters", "scores", "gate", "file", ""]
    assert ["zones", "Enforce", "Fail", "", "prefer-a x2", "", str(POLICIES), "decisions"] in rows
    assert ["batch-quota", "Enforce", "Fail", "", "", "kpe.dev/batch-quota", str(POLICIES), "decisions"] in rows


def test_the_view_changes_nothing_every_route_answers_get_only(client: TestClient) -> None:
    for path in ("/ui/", "/ui/pending", "/ui/policies", "/ui/reservations", "/ui/decisions", "/ui/pods/web/web-1"):
        for method in ("POST", "PUT", "PATCH", "DELETE"):
            assert client.request(method, path).status_code == 405, (method, path)
    assert client.get("/ui/", follow_redirects=False).headers["location"] == "/ui/pending"


def test_an_unknown_pod_is_a_404_page_that_says_so(client: TestClient) -> None:
    page = client.get("/ui/pods/shop/gone")
    assert page.status_code == 404
    assert "pod shop/gone is not in the snapshot" in page.text


def test_an_anonymised_snapshot_renders_without_the_names_it_hid(source: SnapshotSource) -> None:
    snapshot = recorded()
    anonymiser = Anonymiser(b"0123456789abcdef0123", [])
    anonymiser.learn_nodes(snapshot.nodes)
    hidden = Snapshot(nodes=[anonymiser.node(n) for n in snapshot.nodes], pods=[anonymiser.pod(p) for p in snapshot.pods], taken_at=TAKEN,
                      source="anonymised", anonymised=True, kpe=anonymiser.kpe_view(copy.deepcopy(snapshot.kpe or {})))
    client = TestClient(app_for(SnapshotSource(hidden, source.policy_set, path="incident.json")))
    pages = {path: client.get(path) for path in ("/ui/pending", "/ui/reservations", "/ui/decisions", "/ui/policies")}
    assert all(p.status_code == 200 for p in pages.values())
    text = "".join(p.text for p in pages.values())
    for secret in ("cart-2", "web-1", "job-2", "shop/", "a-1"):
        assert secret not in text, secret
    summary = tables(pages["/ui/pending"].text)[0]
    # The gates kept their policy; kube-scheduler's messages and the decisions are not in it, so
    # the other pods are decided on the snapshot.
    assert [row[:3] for row in summary[1:]] == [
        ["passed kpe's filter, not bound yet", "waiting", "4"],
        ["batch-quota: gate kpe.dev/batch-quota", "gate", "1"],
        ["gates not kpe's: example.com/wait", "gate", "1"],
    ]
    assert "the snapshot holds no decisions" in pages["/ui/decisions"].text


class Counting:
    """A source that counts the documents asked of it, and can make them wait."""

    def __init__(self, source: SnapshotSource, *, wait: asyncio.Event | None = None) -> None:
        self.source, self.wait, self.asked = source, wait, 0
        self.label = source.label

    def now(self) -> float:
        return self.source.now()

    async def policies(self) -> Any:
        return await self.source.policies()

    async def pending(self) -> Any:
        self.asked += 1
        if self.wait is not None:
            await self.wait.wait()
        return await self.source.pending()


def test_a_page_loaded_again_within_a_second_is_the_one_already_built(source: SnapshotSource) -> None:
    now = [100.0]
    counting = Counting(source)
    pages = web.Pages(clock=lambda: now[0])
    client = TestClient(Starlette(routes=web.routes(lambda request: counting, pages=pages)))  # type: ignore[arg-type, return-value]
    first = client.get("/ui/pending").text
    now[0] += 0.9
    assert client.get("/ui/pending").text == first and (counting.asked, pages.built) == (1, 1)
    client.get("/ui/pending", headers={"accept": "application/json"})  # a page's JSON is a page of its own
    assert pages.built == 2
    now[0] += 0.2  # 1.1 s after the first build: built again
    client.get("/ui/pending")
    assert (counting.asked, pages.built) == (3, 3)


def test_a_page_that_is_not_complete_is_never_kept(source: SnapshotSource) -> None:
    pages = web.Pages(clock=lambda: 100.0)
    client = TestClient(Starlette(routes=web.routes(lambda request: source, pages=pages)))
    assert [client.get("/ui/pods/shop/gone").status_code for _ in range(2)] == [404, 404]
    assert pages.built == 2


def test_people_loading_a_page_at_once_wait_for_one_build(source: SnapshotSource) -> None:
    async def scenario() -> tuple[list[int], int, int]:
        release = asyncio.Event()
        counting = Counting(source, wait=release)
        pages = web.Pages(clock=lambda: 100.0)
        app = Starlette(routes=web.routes(lambda request: counting, pages=pages))  # type: ignore[arg-type, return-value]
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://kpe") as http:
            loads = [asyncio.create_task(http.get("/ui/pending")) for _ in range(3)]
            while counting.asked == 0:
                await asyncio.sleep(0)
            await asyncio.sleep(0.01)
            asked_while_building = counting.asked  # the other two wait their turn, they do not build
            release.set()
            answers = await asyncio.gather(*loads)
        return [a.status_code for a in answers], asked_while_building, pages.built

    assert asyncio.run(scenario()) == ([200, 200, 200], 1, 1)


def test_a_page_is_rendered_off_the_event_loop_the_verbs_answer_on(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    grouped_on_loop: list[bool] = []
    real = views.pending_groups

    def recording(document: Any, names: Any) -> Any:
        try:
            asyncio.get_running_loop()
            grouped_on_loop.append(True)
        except RuntimeError:
            grouped_on_loop.append(False)
        return real(document, names)

    monkeypatch.setattr(views, "pending_groups", recording)
    assert client.get("/ui/pending").status_code == 200
    assert grouped_on_loop == [False]


def test_kpe_view_shows_the_pending_pods_decided_so_far_while_it_decides_the_rest(monkeypatch: pytest.MonkeyPatch) -> None:
    from engine.decisions.filtering import filter_nodes as real
    from server.introspection import offline

    release = threading.Event()

    def held_back(*args: Any, **kwargs: Any) -> Any:
        release.wait(30)
        return real(*args, **kwargs)

    monkeypatch.setattr(offline, "filter_nodes", held_back)
    source = SnapshotSource(recorded(), load([POLICIES]), path="incident.json", first_wait=0.0)
    client = TestClient(Starlette(routes=web.routes(lambda request: source, pages=web.Pages(fresh_for=0.0))))
    page = client.get("/ui/pending").text
    notice = "kpe view is still deciding the pending pods this snapshot recorded no filter decision for: 0 of 5 done, longest waiting first"
    assert notice in html.unescape(" ".join(page.split()))
    assert why(page, "web/web-1").startswith("no attempt recorded")
    release.set()
    source.first_wait = None  # the next page waits for every decision
    page = client.get("/ui/pending").text
    assert "still deciding" not in page and why(page, "web/web-1") == "kpe's last filter passed 2 nodes"


def why(page: str, pod: str) -> str:
    """The "why" cell of ``pod``'s row on the pending page."""
    return next(row[2] for table in tables(page)[1:] for row in table if row[0] == pod)



POOLS = """apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: pools}
spec:
  filters:
  - name: dedicated-pool
    expression: "node.metadata.?labels[?'pool'].orValue('') in ['', pod.metadata.?labels[?'team'].orValue('')]"
    message: %s
"""
DRAIN = """apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: drain}
spec:
  mode: Audit
  filters:
  - name: not-draining
    expression: "!('drain' in node.metadata.?labels.orValue({}))"
    message: node is draining
"""
ZONES = """apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: zones}
spec:
  scores:
  - name: prefer-a
    expression: "node.metadata.?labels[?'zone'].orValue('') == 'a' ? 100 : 20"
"""


def test_a_running_kpes_policies_page_says_what_each_reload_changed_and_what_each_policy_rejected(tmp_path: Path) -> None:
    from server.app import create_app
    from server.settings import Settings

    folder = tmp_path / "policies"
    folder.mkdir()
    (folder / "set.yaml").write_text((POOLS % "dedicated") + "---\n" + DRAIN)
    app = create_app(Settings(policies=str(folder), cluster="off"))
    with TestClient(app) as client:
        store = app.state.kpe.store
        store.sleep = lambda seconds: None  # the files hold still: no wait between looks
        first = store.current.generation
        nodes = [node("a-1", "a"), node("a-2", "a", pool="ml"), node("b-2", "b", drain="yes")]
        web_pod = pod("web", "web-1", "2026-12-02T11:58:30Z", team="web")
        assert client.post("/scheduler/filter", json={"Pod": web_pod, "Nodes": {"items": nodes}}).status_code == 200
        (folder / "set.yaml").write_text((POOLS % "pool taken") + "---\n" + ZONES)  # pools changed, drain removed, zones added
        assert store.reload().ok
        second = store.current.generation
        (folder / "set.yaml").write_text(POOLS % "x" + "  - name: broken\n    expression: \"node.nope ==\"\n")
        assert not store.reload().ok
        page = client.get("/ui/policies").text
    history = tables(page)[0]
    assert [row[1:] for row in history] == [
        ["outcome", "generation", "what changed"],
        ["refused", f"still {second}", "1 error in pools"],
        ["served", f"{first} → {second}", "added: zones; changed: pools; removed: drain;"],
    ]
    policies = {row[0]: row for row in tables(page)[1][1:]}
    # Counted since kpe started, across the reloads: pools rejected a-2 for team web once.
    assert policies["pools"][-3:] == ["1", "0", "0"]
    assert policies["zones"][-3:] == ["0", "0", "0"]


def test_the_collector_waits_while_a_page_is_built_and_runs_again_afterwards(source: SnapshotSource, monkeypatch: pytest.MonkeyPatch) -> None:
    import gc

    collecting: list[bool] = []
    real = views.pending_groups

    def recording(document: Any, names: Any) -> Any:
        collecting.append(gc.isenabled())
        return real(document, names)

    monkeypatch.setattr(views, "pending_groups", recording)
    client = TestClient(Starlette(routes=web.routes(lambda request: source, pages=web.Pages(fresh_for=0.0))))
    assert gc.isenabled()
    assert client.get("/ui/pending").status_code == 200
    assert client.get("/ui/pods/shop/gone").status_code == 404  # a page that fails too
    assert collecting == [False] and gc.isenabled()


def test_a_kpe_nobody_looks_at_never_imports_jinja2() -> None:
    import subprocess
    import sys

    code = ("import sys\nfrom server.app import create_app\nfrom server.settings import Settings\n"
            "create_app(Settings(policies='policies', cluster='off'), connect=False)\nprint('jinja2' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=Path(__file__).resolve().parent.parent, check=True)
    assert out.stdout.strip() == "False"
