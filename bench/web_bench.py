"""How long the web view's pages take on a large cluster, and what loading them does to
the verbs' latency, on a real kube-apiserver and kube-scheduler.

    python bench/web_bench.py                                   # 5,000 nodes, 2,000 pending pods
    python bench/web_bench.py --nodes 1000 --screenshots docs/images --screenshot-tag 1000

Nodes are heterogeneous.py's (zones, sizes, tainted GPU and arm64 pools, nodes dedicated
to a team, a few in maintenance). kpe serves the shipped policies (``kpe serve`` over
plain HTTP, ``--cluster on``, the controllers a deployment runs) and kube-scheduler calls it
(node names). Then ``--pending`` pods are created that no node will take, in three kinds
as a busy cluster has them: a third asks more CPU than any node has (kube-scheduler's own
reason), a third selects the pool of a team it is not in (kpe's ``team-node-pools``), a
third belongs to a team whose app is already at its zone cap or asks a GPU count no node
has. Once kube-scheduler has tried each at least once, each page is loaded
``--loads`` times with a query no load asked before, so kpe builds it each time (HTML, as a
browser asks, and the same URL's JSON), then once more at once with the same URL (kpe
answers a page built less than a second ago again), each timed from the request to the
last byte; the pod page is the second pending pod's.

Side by side, the verbs: ``--filters`` filter requests (a pending pod, 420 node names as
kube-scheduler sends them) are timed with nothing else asked of kpe, then again while
another process loads the pending page back to back (kpe answers a page built less than a
second ago again), then while it loads a pending page never asked before on every load
(``?load=N``: each one built, the worst a client can do), and while it loads such a page
every second (a person clicking through an incident); the table shows all four.

``--screenshots DIR`` saves the pending page and a pod's page as PNGs from headless
Chromium (Debian's ``chromium`` and ``chromium-driver``, through Selenium), named with
``--screenshot-tag``, for docs/guides/web-view.md.
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import orjson

import realcluster as rc
import heterogeneous


def pending_pod(i: int) -> dict[str, Any]:
    """Pending pod ``i``: heterogeneous.py's, made to fit no node in one of three ways."""
    pod = heterogeneous.pod(i, 9)
    spec, labels = pod["spec"], pod["metadata"]["labels"]
    kind = i % 3
    if kind == 0:
        spec["containers"][0]["resources"]["requests"]["cpu"] = "1000"
    elif kind == 1:
        owner = heterogeneous.DEDICATED[i % len(heterogeneous.DEDICATED)]
        spec["nodeSelector"] = {"node.kpe.dev/team": owner}
        labels["team"] = heterogeneous.DEDICATED[(i + 1) % len(heterogeneous.DEDICATED)]
    else:
        spec["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "64"
        spec["containers"][0]["resources"].setdefault("limits", {})["nvidia.com/gpu"] = "64"
        spec["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    return pod


def timed(client: httpx.Client, path: str, *, json_: bool) -> tuple[float, int, int]:
    headers = {"accept": "application/json"} if json_ else {"accept": "text/html,application/xhtml+xml"}
    t0 = time.perf_counter()
    response = client.get(path, headers=headers)
    body = response.content
    return time.perf_counter() - t0, response.status_code, len(body)


def filters(client: httpx.Client, pod: dict[str, Any], names: list[str], count: int) -> list[float]:
    """Seconds per filter request, ``count`` of them, windows of 420 names round the cluster."""
    out = []
    for i in range(count):
        start = (i * 420) % len(names)
        window = (names[start:] + names[:start])[:420]
        body = orjson.dumps({"Pod": pod, "NodeNames": window})
        t0 = time.perf_counter()
        answer = client.post("/scheduler/filter", content=body, headers={"content-type": "application/json"})
        out.append(time.perf_counter() - t0)
        assert answer.status_code == 200, answer.text
    return out


def load_pages(url: str, kind: str, stop: Any, loads: Any) -> None:
    """A second process's loop (so its work is not the timing process's): the pending page
    back to back, the same URL (``same``) or one never asked before each time (``new``), or
    a page never asked before every second (``person``: someone clicking through an incident)."""
    with httpx.Client(base_url=url, timeout=120) as other:
        while not stop.is_set():
            other.get("/ui/pending" if kind == "same" else f"/ui/pending?load=beside-{loads.value}")
            with loads.get_lock():
                loads.value += 1
            if kind == "person":
                stop.wait(1.0)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def screenshots(url: str, pod_path: str, directory: Path, tag: str) -> list[Path]:
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = "/usr/bin/chromium"
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,1100"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    saved = []
    try:
        directory.mkdir(parents=True, exist_ok=True)
        for page, path in (("pending", "/ui/pending"), ("pod", pod_path)):
            driver.get(url + path)
            out = directory / f"web-{page}-{tag}.png"
            driver.save_screenshot(str(out))
            saved.append(out)
    finally:
        driver.quit()
    return saved


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--pending", type=int, default=2000)
    ap.add_argument("--loads", type=int, default=5, help="times each page is loaded (default 5)")
    ap.add_argument("--filters", type=int, default=200, help="filter requests timed alone and beside page loads (default 200)")
    ap.add_argument("--screenshots", metavar="DIR", help="save PNGs of the pending page and a pod's page here")
    ap.add_argument("--screenshot-tag", default="", help="added to the PNGs' names (default: the node count)")
    args = ap.parse_args()
    rc.skip_without_binaries()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kpe-web-bench-") as tmp, rc.control_plane(Path(tmp)) as plane:
        workdir = Path(tmp)
        for ns in heterogeneous.namespaces():
            plane.api.namespace(ns)
        names, t_nodes = rc.create_nodes(plane, args.nodes, 16, shape="heterogeneous")
        print(f"{args.nodes:,} nodes created in {t_nodes:.0f} s", flush=True)
        kpe, _ = rc.start_kpe(plane, workdir)
        scheduler = rc.start_scheduler(rc.scheduler_config(plane, kpe.url + "/scheduler"), workdir)
        pods = [pending_pod(i) for i in range(args.pending)]
        t_pods = rc.run_many(plane, [("POST", f"/api/v1/namespaces/{p['metadata']['namespace']}/pods", p) for p in pods], 16)
        print(f"{args.pending:,} pending pods created in {t_pods:.0f} s", flush=True)
        client = httpx.Client(base_url=kpe.url, timeout=120)

        def tried() -> int:
            answer = client.get("/apis/v1/pending", headers={"accept": "application/json"}).json()
            return sum(1 for p in answer.get("pods") or [] if p.get("podScheduled") or p.get("lastFilter"))

        rc.wait_until(lambda: tried() >= args.pending, 1800, "kube-scheduler to try every pending pod", interval=2)
        print(f"every pending pod tried once, {time.monotonic() - started:.0f} s in", flush=True)
        first = pods[1]["metadata"]
        pod_path = f"/ui/pods/{first['namespace']}/{first['name']}"
        pages = [("pending", "/ui/pending"), ("pending, every pod listed", "/ui/pending?all=1"), ("a pod", pod_path),
                 ("policies", "/ui/policies"), ("reservations", "/ui/reservations"), ("decisions", "/ui/decisions")]
        timed(client, "/ui/policies", json_=False)  # the first page imports Jinja2 and loads the templates
        rows = []
        for title, path in pages:
            for json_ in (False, True):
                # Built: a query no load asked before, so kpe builds the page; kept: the same URL again
                # at once, answered from the page built (Pages keeps one a second).
                built = [timed(client, f"{path}{'&' if '?' in path else '?'}load={json_}-{i}", json_=json_) for i in range(args.loads)]
                kept = [timed(client, path, json_=json_) for _ in range(2)][1:]
                seconds = [r[0] for r in built]
                rows.append((title, path, "JSON" if json_ else "HTML", built[-1][1], built[-1][2], statistics.median(seconds), max(seconds),
                             kept[0][0]))

        # The verbs, alone and while the pending page is loaded over and over.
        subject = pending_pod(args.pending + 1)
        subject["metadata"]["uid"] = "web-bench-subject"
        alone = filters(client, subject, names, args.filters)

        def beside_loads(kind: str) -> tuple[list[float], int]:
            """The filters again, while another process loads pending pages back to back."""
            stop, loads = multiprocessing.Event(), multiprocessing.Value("i", 0)
            loader = multiprocessing.Process(target=load_pages, args=(kpe.url, kind, stop, loads), daemon=True)
            loader.start()
            while loads.value == 0:
                time.sleep(0.01)
            timed_filters = filters(client, subject, names, args.filters)
            stop.set()
            loader.join(120)
            return timed_filters, loads.value

        # The same page over and over (people watching it: kpe builds it at most once a second),
        # then a page never asked before on every load (each one built: the worst a client can do).
        beside_same, loads_same = beside_loads("same")
        beside_new, loads_new = beside_loads("new")
        beside_person, loads_person = beside_loads("person")
        saved = screenshots(kpe.url, pod_path, Path(args.screenshots), args.screenshot_tag or str(args.nodes)) if args.screenshots else []
        client.close()
        scheduler.stop()
        kpe.stop()

    print()
    print(f"real kube-apiserver ({plane.binaries.version}), {args.nodes:,} nodes, {args.pending:,} pending pods, kpe serving the shipped policies; "
          f"each page loaded {args.loads} times")
    print()
    print("| page | URL | as | status | bytes | built: median | built: max | asked again within a second |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for title, path, kind, status, size, median, worst, again in rows:
        print(f"| {title} | `{path}` | {kind} | {status} | {size:,} | {median * 1000:.0f} ms | {worst * 1000:.0f} ms | {again * 1000:.0f} ms |")
    print()
    print(f"filter requests (420 node names), {args.filters} each, timed from the request to the answer:")
    print()
    print("| while | pending pages loaded | p50 | p99 |")
    print("| --- | --- | --- | --- |")
    for title, seconds, loads in (("nothing else is asked of kpe", alone, 0),
                                  ("a pending page never built before is loaded every second", beside_person, loads_person),
                                  ("the pending page is loaded back to back", beside_same, loads_same),
                                  ("a pending page never built before is loaded back to back", beside_new, loads_new)):
        print(f"| {title} | {loads} | {percentile(seconds, 0.5) * 1000:.1f} ms | {percentile(seconds, 0.99) * 1000:.1f} ms |")
    for path in saved:
        print(f"saved {path}")
    print(f"total {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
