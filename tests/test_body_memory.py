"""What a request body costs kpe in memory, measured: the estimate made before parsing bounds
what parsing takes for every shape of JSON tried (the densest ones included), real requests
stay well inside the limits, and bodies parsed at once share one budget."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import orjson
import pytest

from server.app import create_app
from server.http.body import MAX_EXPANSION, estimate
from server.http.responses import HTTPProblem, parse_json
from server.settings import Settings

from .serving import serve
from .test_request_limits import POLICY, whole_node_request

ROOT = Path(__file__).resolve().parents[1]
WIRE = Path(__file__).parent / "data" / "fixtures"
LINUX = pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="reads the kernel's peak RSS of a process")
MiB = 1 << 20

# One value and its separator, repeated to the size asked for inside a top-level array.
UNITS: dict[str, bytes] = {
    "small ints": b"1,",
    "zeros": b"0,",
    "true": b"true,",
    "null": b"null,",
    "ints past the cached ones": b"257,",
    "negative ints": b"-257,",
    "floats": b"1.5,",
    "exponents": b"1e1,",
    "empty strings": b'"",',
    "one-letter strings": b'"a",',
    "latin-1 strings": '"é",'.encode(),
    "BMP strings": '"€",'.encode(),
    "astral strings": '"😀",'.encode(),
    "escapes": b'"\\n",',
    "empty objects": b"{},",
    "empty arrays": b"[],",
    "arrays of an array": b"[[]],",
    "arrays of an object": b"[{}],",
    "arrays of an int": b"[1],",
    "arrays of a string": b'["a"],',
    "pairs": b"[1,1],",
    "objects of a short key": b'{"a":1},',
    "objects of two keys": b'{"a":1,"b":1},',
    "objects of an empty key": b'{"":0},',
    "objects of an object": b'{"a":{}},',
    "objects of an array": b'{"a":[]},',
}


def repeated(unit: bytes) -> Callable[[int], bytes]:
    return lambda size: b"[" + unit * max(1, size // len(unit)) + unit[:-1] + b"]"


def nested(opening: bytes, closing: bytes, inner: bytes, depth: int) -> Callable[[int], bytes]:
    """Values nested ``depth`` deep (orjson refuses more than 1,024), as many as fit."""
    one = opening * depth + inner + closing * depth
    return lambda size: b"[" + b",".join([one] * max(1, size // (len(one) + 1))) + b"]"


def unique_keys(value: bytes) -> Callable[[int], bytes]:
    """One object of distinct short keys: none of them is in orjson's cache of keys."""
    return lambda size: b"{" + b",".join(b'"%x":%s' % (i, value) for i in range(size // (8 + len(value)))) + b"}"


def captured(name: str) -> Callable[[int], bytes]:
    """A request kube-scheduler sent, grown to the size asked for with more of what it holds."""

    def grow(size: int) -> bytes:
        request = json.loads((WIRE / "kube-scheduler-wire" / name).read_text())["request"]
        if request.get("Nodes"):
            items = request["Nodes"]["items"]
            count = size * len(items) // len(orjson.dumps(items))
            request["Nodes"]["items"] = [dict(items[i % len(items)], metadata=dict(items[i % len(items)]["metadata"], name=f"node-{i}")) for i in range(count)]
        elif request.get("NodeNameToVictims"):
            victims = next(iter(request["NodeNameToVictims"].values()))
            count = size // (len(orjson.dumps(victims)) + 16)
            request["NodeNameToVictims"] = {f"node-{i}": victims for i in range(count)}
        else:
            request["NodeNames"] = [f"node-{i}" for i in range(size // 12)]
        return orjson.dumps(request)

    return grow


SHAPES: dict[str, Callable[[int], bytes]] = {
    **{name: repeated(unit) for name, unit in UNITS.items()},
    "distinct keys": unique_keys(b"0"),
    "distinct keys of ints past the cached ones": unique_keys(b"1000"),
    **{f"arrays {d} deep": nested(b"[", b"]", b"", d) for d in (1000, 100, 10, 3)},
    **{f"arrays of an int {d} deep": nested(b"[", b"]", b"1", d) for d in (500, 5)},
    **{f"objects {d} deep": nested(b'{"a":', b"}", b"1", d) for d in (500, 50, 5)},
    **{f"arrays of objects {d} deep": nested(b'[{"a":', b"}]", b"1", d) for d in (500, 5)},
    "whole nodes (bench)": lambda size: orjson.dumps(whole_node_request(max(1, size // 4500))),
    "whole nodes (captured)": captured("0003-18081-filter.json"),
    "node names (captured)": captured("0003-18082-filter.json"),
    "victims (captured)": captured("0022-18081-preempt.json"),
}

MEASURE = """
import gc, os, sys, tracemalloc
from pathlib import Path
import orjson

raw = Path(sys.argv[1]).read_bytes()
gc.disable()  # as kpe's decode does
if sys.argv[2] == "traced":
    tracemalloc.start()
    value = orjson.loads(raw)
    print(tracemalloc.get_traced_memory()[1], flush=True)
else:
    def peak() -> int:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
        raise RuntimeError("no VmHWM")

    Path("/proc/self/clear_refs").write_text("5")  # the peak RSS starts again from here
    before = peak()
    value = orjson.loads(raw)
    print(peak() - before, flush=True)
os._exit(0)  # not millions of objects freed on the way out
"""
_measured: dict[tuple[str, int], dict[str, tuple[int, int]]] = {}


def measured(kind: str, size: int, tmp_path: Path) -> dict[str, tuple[int, int]]:
    """Each shape at ``size``: its length, and its peak RSS growth (``resident``) or tracemalloc's
    peak (``traced``) while orjson parses it in a fresh process."""
    if (kind, size) not in _measured:

        def one(name: str) -> tuple[int, int]:
            body = tmp_path / f"{list(SHAPES).index(name)}.json"
            body.write_bytes(SHAPES[name](size))
            done = subprocess.run([sys.executable, "-c", MEASURE, str(body), kind], capture_output=True, text=True, check=True, timeout=300)
            return body.stat().st_size, int(done.stdout)

        with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            _measured[kind, size] = dict(zip(SHAPES, pool.map(one, SHAPES)))
    return _measured[kind, size]


def over_estimate(kind: str, size: int, tmp_path: Path) -> list[str]:
    out = []
    for name, (length, cost) in measured(kind, size, tmp_path).items():
        found = estimate(SHAPES[name](size))
        bound = found.parsed_bytes if kind == "resident" else found.allocated_bytes
        if bound < cost:
            out.append(f"{name}: {kind} {cost / length:.1f} times its size, estimated {bound / length:.1f}")
    return out


@LINUX
@pytest.mark.parametrize("size", [256 * 1024, MiB, 4 * MiB], ids=["256KiB", "1MiB", "4MiB"])
def test_parsing_never_grows_the_rss_past_the_estimate_for_any_shape_measured(size: int, tmp_path: Path) -> None:
    assert over_estimate("resident", size, tmp_path) == []


# Smaller: tracemalloc makes parsing millions of values slow, and what it counts grows with the
# size exactly (16 MiB bodies allocate as many times their size as 1 MiB ones, to the 0.1).
@pytest.mark.parametrize("size", [64 * 1024, 256 * 1024, 512 * 1024], ids=["64KiB", "256KiB", "512KiB"])
def test_parsing_never_allocates_past_the_estimate_for_any_shape_measured(size: int, tmp_path: Path) -> None:
    assert over_estimate("traced", size, tmp_path) == []


def wire_requests() -> Iterator[tuple[str, bytes]]:
    for path in sorted((WIRE / "kube-scheduler-wire").glob("*.json")):
        yield path.name, orjson.dumps(json.loads(path.read_text())["request"])
    review = json.loads((WIRE / "kube-apiserver-wire" / "mutating-admission-review-pod-create.json").read_text())
    yield "AdmissionReview", orjson.dumps(review["request"])


def test_real_requests_and_their_grown_copies_estimate_inside_the_limit_and_parse() -> None:
    bodies = dict(wire_requests())
    bodies.update({f"{name}, grown to 4 MiB": SHAPES[name](4 * MiB) for name in ("whole nodes (bench)", "whole nodes (captured)", "node names (captured)", "victims (captured)")})
    assert len(bodies) > 20
    for name, raw in bodies.items():
        assert estimate(raw).expansion < MAX_EXPANSION * 0.9, name  # room for requests denser than these
        assert parse_json(raw) == orjson.loads(raw), name


def test_a_body_of_small_ints_like_the_one_that_took_rss_past_the_limit_is_refused_before_parsing() -> None:
    raw = b'{"Pod":{},"NodeNames":[' + b"1," * (2 * MiB) + b"1]}"
    with pytest.raises(HTTPProblem) as refused:
        parse_json(raw)
    assert refused.value.status == 413


# -- bodies at once ---------------------------------------------------------------------


def slow_policies(tmp_path: Path) -> Path:
    path = tmp_path / "slow.yaml"
    path.write_text(POLICY.format(failure="Fail", xs=list(range(250))))
    return path


def nodes_body(count: int) -> bytes:
    return orjson.dumps(whole_node_request(count))


def test_a_body_that_alone_would_take_more_than_the_budget_is_refused_with_a_413(tmp_path: Path) -> None:
    raw = nodes_body(400)
    settings = Settings(policies=str(slow_policies(tmp_path)), cluster="off", body_memory_bytes=4 * len(raw))
    with serve(create_app(settings)) as url:
        refused = httpx.post(url + "/scheduler/filter", content=raw, headers={"Content-Type": "application/json"}, timeout=30)
        assert refused.status_code == 413
        assert refused.json()["Error"].endswith(f"over the {4 * len(raw) / MiB:.1f} MiB that request bodies being parsed and answered may take at once (--body-memory-bytes)")


def test_a_body_that_does_not_fit_beside_the_others_waits_for_them_then_gets_a_503_that_says_to_retry(tmp_path: Path) -> None:
    raw = nodes_body(400)
    charge = len(raw) + estimate(raw).parsed_bytes
    settings = Settings(policies=str(slow_policies(tmp_path)), cluster="off", request_deadline_s=2.0, body_timeout_s=0.5, body_memory_bytes=charge * 3 // 2)
    with serve(create_app(settings)) as url:
        first: list[httpx.Response] = []
        slow = threading.Thread(target=lambda: first.append(httpx.post(url + "/scheduler/filter", content=raw, timeout=60)))
        slow.start()
        time.sleep(0.5)  # the first is being evaluated (the slow policy, cut at its 2 s deadline)
        second = httpx.post(url + "/scheduler/filter", content=raw, timeout=60)
        slow.join()
        assert first[0].status_code == 200
        assert second.status_code == 503 and second.headers["retry-after"] == "1"
        assert second.json()["Error"].startswith("kpe is parsing or answering other request bodies: this one")
        assert second.json()["Error"].endswith("retry")
        small = httpx.post(url + "/scheduler/filter", json={"Pod": {}, "Nodes": {"items": [{"metadata": {"name": "n1"}}]}}, timeout=10)
        assert small.status_code == 200, "what the refused body was charged went back"


def peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def kpe_process(policies: Path, port: int, budget: int) -> subprocess.Popen[bytes]:
    # The budget as a KPE_* variable, so that a kpe without the setting still starts.
    env = dict(os.environ, KPE_BODY_MEMORY_BYTES=str(budget))
    command = [sys.executable, "-m", "server.cli", "serve", "--cluster", "off", "--policies", str(policies), "--port", str(port),
               "--request-deadline-s", "3", "--log-level", "error"]
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                return process
        except httpx.HTTPError:
            pass
        assert process.poll() is None and time.monotonic() < deadline, "kpe did not start"
        time.sleep(0.05)


def filter_at_once(url: str, bodies: list[bytes]) -> list[int]:
    statuses: list[int] = []

    def post(raw: bytes) -> None:
        statuses.append(httpx.post(url + "/scheduler/filter", content=raw, headers={"Content-Type": "application/json"}, timeout=120).status_code)

    threads = [threading.Thread(target=post, args=(raw,)) for raw in bodies]
    for i, thread in enumerate(threads):
        thread.start()
        time.sleep(0.8 if i == 0 else 0)  # the second arrives while the first is being evaluated
    for thread in threads:
        thread.join()
    return statuses


@LINUX
def test_two_large_bodies_sent_at_once_take_no_more_memory_than_the_budget_allows(tmp_path: Path) -> None:
    """Each body alone fits the budget, both together do not: the second waits until the first
    is answered. Without the budget, the second was parsed while the first, parsed, was being
    evaluated. The bound: kpe's peak RSS with one body, plus the second body's bytes, which
    it holds while it waits (twice over while they are read: the pieces, then joined), plus
    the first body's nodes as JSON, which whole-node mode keeps for the preempt verb
    (server/verbs/wholenodes.py)."""
    raw = nodes_body(3600)  # about 16 MiB of whole nodes
    charge = len(raw) + estimate(raw).parsed_bytes
    policies = slow_policies(tmp_path)
    peaks: dict[str, int] = {}
    for run, bodies in (("one", [raw]), ("two", [raw, raw])):
        port = free_port()
        process = kpe_process(policies, port, budget=charge * 3 // 2)
        try:
            baseline = peak_rss(process.pid)
            assert filter_at_once(f"http://127.0.0.1:{port}", bodies) == [200] * len(bodies)
            peaks[run] = peak_rss(process.pid) - baseline
        finally:
            process.terminate()
            process.wait(10)
    bound = peaks["one"] + 3 * len(raw)
    assert peaks["two"] <= bound, f"two bodies at once: {peaks['two'] / MiB:.0f} MiB over the baseline, bound {bound / MiB:.0f} MiB (one alone: {peaks['one'] / MiB:.0f} MiB)"
    assert peaks["one"] <= charge, f"one body: {peaks['one'] / MiB:.0f} MiB over the baseline, charged {charge / MiB:.0f} MiB"
