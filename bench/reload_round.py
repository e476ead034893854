"""``scheduler_bench.py --reload-round``: what the first minute after a policy reload and after a
kpe restart costs against the steady state, read from kpe's own latency histogram.

One kpe serves a copy of the shipped policies through four rounds of pods, kube-scheduler
restarted for each as in the other rounds:

1. warm-up: the classes fill (not measured);
2. steady: the same pods again, every class warm;
3. after a reload: one policy's file edited (its first filter's message), kpe reloads it (its
   ``kpe_policy_generation_info`` changes), and the pods are created at once;
4. after a restart: kpe stopped and started again (an empty cache of classes) while the previous
   round's pods are still placed, as a kpe restarted in a running cluster finds its workloads'
   pods; they are deleted once its /readyz answers, and the pods created as soon as they are gone.

Each round's filter and prioritize latencies are the difference of two scrapes of
``kpe_request_duration_seconds`` (a fresh process after the restart: its whole histogram), and
p50 and p99 are interpolated within the buckets as Prometheus' ``histogram_quantile`` does. A
round lasts as long as the scheduler takes to place its pods (shorter than a minute at these
sizes), so its requests are the first minute's.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

import realcluster as rc

_BUCKET = re.compile(r'^kpe_request_duration_seconds_bucket\{(?P<labels>[^}]*)\} (?P<value>\S+)$', re.M)
_GENERATION = re.compile(r'^kpe_policy_generation_info\{generation="(?P<generation>[^"]*)"\} 1\.0$', re.M)


def buckets(url: str, verb: str) -> dict[float, float]:
    """kpe's cumulative latency buckets for ``verb``: upper bound (inf for +Inf) -> count."""
    text = httpx.get(url + "/metrics", timeout=15).text
    out: dict[float, float] = {}
    for m in _BUCKET.finditer(text):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m["labels"]))
        if labels.get("verb") == verb:
            out[float(labels["le"])] = float(m["value"])  # float("+Inf") is inf
    return out


def generation(url: str) -> str:
    found = _GENERATION.search(httpx.get(url + "/metrics", timeout=15).text)
    return found["generation"] if found else ""


def quantile(q: float, cumulative: dict[float, float]) -> float:
    """``histogram_quantile(q)`` over cumulative buckets: linear within the bucket the rank falls
    in, the highest finite bound when it falls in +Inf; nan without observations."""
    bounds = sorted(cumulative)
    total = cumulative[bounds[-1]] if bounds else 0.0
    if not total:
        return float("nan")
    rank = q * total
    lower, below = 0.0, 0.0
    for upper in bounds:
        count = cumulative[upper]
        if count >= rank:
            if upper == float("inf"):
                return lower
            return lower + (upper - lower) * (rank - below) / (count - below) if count > below else upper
        lower, below = upper, count
    return lower


def delta(after: dict[float, float], before: dict[float, float]) -> dict[float, float]:
    return {le: n - before.get(le, 0.0) for le, n in after.items()}


@dataclass
class Phase:
    name: str
    filter: dict[float, float]
    prioritize: dict[float, float]
    rate: float
    seconds: float
    hits: float
    misses: float
    note: str = ""


def edit_policy(path: Path, round_: int) -> str:
    """Change the message of the policy file's first filter (a change of content that changes no
    decision); returns what was changed."""
    doc = yaml.safe_load(path.read_text())
    rule = doc["spec"]["filters"][0]
    rule["message"] = f"{rule.get('message', 'rejected')} (edited {round_})"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return f"{doc['metadata']['name']}/{rule['name']} message"


RoundFn = Callable[[dict[str, Any], int, dict[str, float], int], tuple[float, float]]
"""Runs one round of pods with a kube-scheduler configuration: (config, round number, CPU seconds
out, the extender's pid) -> (pods/s, seconds the creates took)."""


def run(plane: rc.ControlPlane, workdir: Path, *, pods: int, policy: str, one_round: RoundFn,
        configure: Callable[[str, Path], dict[str, Any]], delete: Callable[[], float], first_round: int,
        reload_timeout: float = 60) -> list[Phase]:
    """The four rounds above; ``configure(kpe_url, policies)`` is kube-scheduler's configuration for a kpe,
    ``delete()`` removes the round's pods."""
    policies = workdir / "reload-policies"
    policies.mkdir()
    for shipped in rc.POLICIES.glob("*.yaml"):
        (policies / shipped.name).write_bytes(shipped.read_bytes())
    kpe, _ = rc.start_kpe(plane, workdir, name="kpe-reload", policies=policies)
    phases: list[Phase] = []
    round_ = first_round
    try:
        for name in ("warm-up", "steady", "after reload", "after restart"):
            note = ""
            if name == "after reload":
                old = generation(kpe.url)
                note = edit_policy(policies / f"{policy}.yaml", round_)
                t0 = time.monotonic()
                rc.wait_until(lambda: generation(kpe.url) not in ("", old), reload_timeout, "kpe to reload the edited policy", interval=0.05)
                note += f", reloaded {time.monotonic() - t0:.1f} s after the edit"
            elif name == "after restart":
                kpe.stop()
                kpe, ready = rc.start_kpe(plane, workdir, name="kpe-restarted", policies=policies)
                deleted = delete()  # the previous round's pods, placed when kpe stopped
                note = f"ready {ready:.1f} s after start, the previous round's pods deleted in {deleted:.1f} s"
            config = configure(kpe.url, policies)
            before = {verb: buckets(kpe.url, verb) for verb in ("filter", "prioritize")}
            stats = rc.metrics(kpe.url)
            hits0 = stats("kpe_equivalence_cache_nodes_total", verb="filter", result="hit")
            misses0 = stats("kpe_equivalence_cache_nodes_total", verb="filter", result="miss")
            round_ += 1
            rate, _ = one_round(config, round_, {}, kpe.process.popen.pid)
            seconds = pods / rate  # from the first create to the last binding
            after = {verb: buckets(kpe.url, verb) for verb in ("filter", "prioritize")}
            stats = rc.metrics(kpe.url)
            phases.append(Phase(
                name, delta(after["filter"], before["filter"]), delta(after["prioritize"], before["prioritize"]), rate, seconds,
                stats("kpe_equivalence_cache_nodes_total", verb="filter", result="hit") - hits0,
                stats("kpe_equivalence_cache_nodes_total", verb="filter", result="miss") - misses0, note))
            # The pods of the round before a restart stay placed through it (deleted after it).
            deleted = delete() if name != "after reload" else 0.0
            print(f"  reload round: {name:13}: {rate:7.1f} pods/s   ({note + '; ' if note else ''}deleted in {deleted:.1f} s)", flush=True)
    finally:
        kpe.stop()
    return phases


def table(phases: list[Phase]) -> list[str]:
    """The printed table: per measured phase and verb, p50 and p99 and their ratio to the steady state's."""
    steady = next(p for p in phases if p.name == "steady")
    lines = [
        "| phase | verb | requests | p50 ms | p99 ms | p99 / steady p99 | filter cache hits | pods/s | first create to last binding, s |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for phase in phases:
        if phase.name == "warm-up":
            continue
        for verb in ("filter", "prioritize"):
            hist = getattr(phase, verb)
            ref = getattr(steady, verb)
            n = hist.get(float("inf"), 0.0)
            p99 = quantile(0.99, hist)
            looked = phase.hits + phase.misses
            hits = f"{100 * phase.hits / looked:.1f}% of {looked:,.0f}" if verb == "filter" and looked else ""
            lines.append(f"| {phase.name} | {verb} | {n:,.0f} | {1000 * quantile(0.5, hist):.2f} | {1000 * p99:.2f} | "
                         f"{p99 / quantile(0.99, ref):.2f}x | {hits} | {phase.rate:.1f} | {phase.seconds:.1f} |")
    return lines
