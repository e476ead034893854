"""The web view in a real browser, against kpe on the real API server and kube-scheduler:
pods pending on several policies (a pool rule, a drain rule, kube-scheduler's own node
selector, a gate kpe holds) and a reservation's placeholder. Headless Chromium (Debian's
``chromium`` and ``chromium-driver``, driven by Selenium) opens each page, follows the
links between them, and the pod's page says what ``kpe explain pod`` says for that pod."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .conftest import Cluster
from .controlplane import kpe_executable, wait_until

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
PLACEHOLDERS = "kpe-system"
INSTALL = "apt-get install -y chromium chromium-driver (Debian), then pip install -e '.[test]' for selenium"

POLICIES = """apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {{name: pools}}
spec:
  match: {{namespaces: [{ns}]}}
  filters:
  - name: dedicated-pool
    expression: "node.metadata.?labels[?'e2e-pool'].orValue('') in ['', pod.metadata.?labels[?'team'].orValue('')]"
    messageExpression: "'node pool is dedicated to team %s'.format([node.metadata.labels['e2e-pool']])"
---
apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {{name: drain}}
spec:
  match: {{namespaces: [{ns}]}}
  filters:
  - name: not-draining
    expression: "!('e2e-drain' in node.metadata.?labels.orValue({{}}))"
    message: node is draining
---
apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {{name: batch-quota}}
spec:
  match: {{namespaces: [{ns}], podSelector: {{matchLabels: {{queue: batch}}}}}}
  admission:
    gate: kpe.dev/e2e-batch-quota
    expression: "false"
    message: waiting for the batch quota
---
apiVersion: kpe.dev/v1alpha1
kind: Reservation
metadata: {{name: {room}}}
spec:
  slots: 1
  owners: {{namespaces: [{ns}], podSelector: {{matchLabels: {{tier: reserved}}}}}}
  template:
    resources: {{requests: {{cpu: "1"}}}}
"""


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not (shutil.which(CHROMIUM) and shutil.which(CHROMEDRIVER)):
        pytest.skip(f"no headless browser: {INSTALL}")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.options import Options
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.skip(f"selenium is not installed: {INSTALL}")
    options = Options()
    options.binary_location = CHROMIUM
    # The introspection listener's certificate is the test CA's; the browser is only reading.
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,1000",
                 "--ignore-certificate-errors"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def cells(driver: Any, table: int = 0) -> list[list[str]]:
    """The text of each cell of the page's ``table``-th table, as the browser renders it."""
    from selenium.webdriver.common.by import By

    rows = driver.find_elements(By.TAG_NAME, "table")[table].find_elements(By.TAG_NAME, "tr")
    return [[c.text for c in row.find_elements(By.XPATH, "./td|./th")] for row in rows]


def click(driver: Any, text: str) -> None:
    from selenium.webdriver.common.by import By

    driver.find_element(By.LINK_TEXT, text).click()


def test_the_web_view_shows_why_pods_wait_as_kpe_explain_does(cluster: Cluster, browser: Any, tmp_path: Path) -> None:
    ns, api = cluster.namespace, cluster.api
    room = "w" + ns[-6:]  # placeholders live in one namespace for every scenario of the plane
    api.priority_class("kpe-placeholder", -10)
    cluster.write_policy("web.yaml", POLICIES.format(ns=ns, room=room))
    try:
        look(cluster, browser, tmp_path, room)
    finally:
        for pod in api.pods(PLACEHOLDERS):
            if pod["metadata"].get("labels", {}).get("kpe.dev/reservation") == room:
                api.delete(f"/api/v1/namespaces/{PLACEHOLDERS}/pods/{pod['metadata']['name']}", grace=0)


def look(cluster: Cluster, browser: Any, tmp_path: Path, room: str) -> None:
    from selenium.webdriver.common.by import By

    ns, api = cluster.namespace, cluster.api
    cluster.node(f"{ns}-pool-1", cpu="4", labels={"e2e-pool": "a"})
    cluster.node(f"{ns}-pool-2", cpu="4", labels={"e2e-pool": "a"})
    cluster.node(f"{ns}-drain", cpu="4", labels={"e2e-drain": "yes"})
    cluster.node(f"{ns}-shared", cpu="4")
    for i in range(4):  # the shared node is full
        api.pod(ns, f"b-{i}", cpu="1", priority_class="e2e-high", labels={"team": "b"}, node=f"{ns}-shared")
    kpe = cluster.start_kpe(extra=("--gate-resync-s", "1", "--lease-name", f"kpe-{ns}"))
    cluster.register_webhook(kpe)
    cluster.start_scheduler(kpe)
    api.pod(ns, "b-new", cpu="2", priority_class="e2e-low", labels={"team": "b"})  # the pools, the drain, the full node
    api.pod(ns, "lost", cpu="1", labels={"team": "c"}, extra={"nodeSelector": {"e2e-zone": "nowhere"}})  # kube-scheduler's own
    api.pod(ns, "job-1", cpu="1", labels={"queue": "batch"})  # held at kpe's gate

    def pending() -> dict[str, Any]:
        answer = kpe.http.get("/apis/v1/pending")
        return {f"{p['namespace']}/{p['name']}": p for p in answer.json()["pods"]} if answer.status_code == 200 else {}

    def explained() -> bool:
        pods = pending()
        b_new, lost = pods.get(f"{ns}/b-new") or {}, pods.get(f"{ns}/lost") or {}
        return bool(b_new.get("lastFilter") and (lost.get("podScheduled") or {}).get("reason") == "Unschedulable" and bool((pods.get(f"{ns}/job-1") or {}).get("heldBy")))

    wait_until(explained, 60, "kube-scheduler to try b-new and lost, and kpe to gate job-1")
    slot = wait_until(lambda: next((s for r in kpe.http.get("/apis/v1/reservations").json().get("reservations") or []
                                    for s in r.get("slotStates") or [] if s.get("node")), None), 60, "the reservation's placeholder to be placed")

    base = str(kpe.http.base_url).rstrip("/")
    browser.get(base + "/ui/")
    assert browser.current_url == base + "/ui/pending"
    summary = {row[0]: row[1:4] for row in cells(browser)[1:]}
    assert summary.get("pools/dedicated-pool", [])[:2] == ["kpe filter", "1"], summary
    assert summary.get("batch-quota: gate kpe.dev/e2e-batch-quota", [])[:2] == ["gate", "1"], summary
    assert summary["kube-scheduler: node(s) didn't match Pod's node affinity/selector"][:2] == ["kube-scheduler", "1"], summary
    browser.save_screenshot(str(tmp_path / "pending.png"))

    # The pod's page, from its group, says what kpe explain pod says.
    click(browser, f"{ns}/b-new")
    assert browser.current_url == f"{base}/ui/pods/{ns}/b-new"
    summary_lines = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "div.line")]
    done = subprocess.run([kpe_executable(), "explain", "pod", f"{ns}/b-new", "--server", base, "--ca-file", str(cluster.ca_file), "--limit", "0"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode in (0, 1), done.stderr
    cli_head = done.stdout.split("\n\n")[0].splitlines()
    assert cli_head[0].startswith(f"pod {ns}/b-new  (policy generation {kpe.generation()}")
    assert [line.strip() for line in cli_head[1:]] == [line.strip() for line in summary_lines[1:]]
    verdicts = {row[2]: row[0] for row in cells(browser)[1:]}
    assert verdicts == {
        "pools/dedicated-pool: node pool is dedicated to team a": "2",
        "drain/not-draining: node is draining": "1",
        "kube-scheduler: Insufficient cpu": "1",
    }, verdicts
    browser.save_screenshot(str(tmp_path / "pod.png"))

    # Its decisions, then every page by the header's links.
    click(browser, "this pod's decisions")
    rows = cells(browser)[1:]
    assert rows and {row[3] for row in rows} == {f"{ns}/b-new"} and "filter" in {row[2] for row in rows}, rows
    click(browser, "Policies")
    assert {row[0] for row in cells(browser)[1:]} >= {"pools", "drain", "batch-quota", f"reservation.{room}"}
    click(browser, "Reservations")
    assert cells(browser)[1][1:3] == [slot["state"], slot["node"]]
    click(browser, "Pending pods")
    assert browser.current_url == base + "/ui/pending"
