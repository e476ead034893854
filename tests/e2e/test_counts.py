"""A burst under a policy that counts pods across nodes (``counts``, docs/guides/counts.md),
through the real kube-scheduler: the shipped ``app-zone-cap`` (at most two pods of an app in a
zone), 30 pods of three apps created at once over three zones of two nodes each. kube-scheduler
binds in the background while it filters the next pods, so kpe must count the pods it passed
and has not seen bound in every zone they may land in (engine.equivalence.inflight). Sampled
every 100 ms, no zone ever holds a third pod of an app, and every zone ends with two of each.

``KPE_E2E_IN_FLIGHT_S=0`` runs kpe without counting pods in flight (``--in-flight-s 0``), which
is how this test was shown to fail without it.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

from .conftest import Cluster
from .controlplane import wait_until

ZONES = ("zone-a", "zone-b", "zone-c")
APPS = ("web", "api", "worker")
PER_APP = 10
CAP = 2  # the shipped policy's maxPerZone


def test_a_burst_never_puts_a_third_pod_of_an_app_in_a_zone(cluster: Cluster) -> None:
    cluster.copy_shipped("app-zone-cap.yaml")
    zone_of = {}
    for zone in ZONES:
        for i in range(2):
            name = f"{cluster.namespace}-{zone}-{i}"
            cluster.node(name, cpu="64", pods="250", labels={"topology.kubernetes.io/zone": zone})
            zone_of[name] = zone
    in_flight = os.environ.get("KPE_E2E_IN_FLIGHT_S")
    kpe = cluster.start_kpe(extra=("--in-flight-s", in_flight) if in_flight else ())
    cluster.start_scheduler(kpe)

    app_of = {f"{app}-{i:02d}": app for app in APPS for i in range(PER_APP)}

    def per_zone() -> Counter[tuple[str, str]]:
        return Counter((zone_of[node], app_of[name]) for name, node in cluster.bound().items() if name in app_of)

    seen: set[str] = set()
    samples = [0]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            seen.update(f"{zone}: {n} pods of {app}" for (zone, app), n in per_zone().items() if n > CAP)
            samples[0] += 1
            done.wait(0.1)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()

    def create(name: str) -> None:
        cluster.api.pod(cluster.namespace, name, cpu="10m", labels={"app": app_of[name], "kpe.dev/spread": "zone"})

    started = time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(create, app_of))
    try:
        wait_until(lambda: sum(per_zone().values()) >= CAP * len(ZONES) * len(APPS), 120, "two pods of every app in every zone", interval=0.5)
        time.sleep(2)  # the pods left pending stay so while kube-scheduler tries them again
    finally:
        done.set()
        sampler.join()
    counted = per_zone()
    seen.update(f"{zone}: {n} pods of {app}" for (zone, app), n in counted.items() if n > CAP)
    print(f"\n{len(app_of)} pods, {sum(counted.values())} bound in {time.monotonic() - started:.1f} s, {samples[0]} samples, {len(seen)} violations")
    assert not seen, f"{len(seen)} violations in {samples[0]} samples: " + "; ".join(sorted(seen))
    assert counted == {(zone, app): CAP for zone in ZONES for app in APPS}
    assert samples[0] >= 5
