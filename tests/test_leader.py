"""Leader election through a coordination.k8s.io/v1 Lease on the fake API server."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from server.cluster.kube import KubeClient
from server.cluster.leader import LeaderElector

from .fakeapi import FakeApiServer


async def _two_candidates(kubeconfig: str, *, crash: bool) -> tuple[str, str, float, int, dict[str, object]]:
    clients = [await KubeClient.connect(kubeconfig=kubeconfig, required=True) for _ in range(2)]
    electors = [LeaderElector(c, namespace="kpe-system", name="gates", identity=f"replica-{i}", lease_duration_s=1.0) for i, c in enumerate(clients) if c]
    stops = [asyncio.Event(), asyncio.Event()]
    tasks = [asyncio.create_task(e.run(s)) for e, s in zip(electors, stops)]
    try:
        await asyncio.wait_for(asyncio.wait([asyncio.create_task(e.leading.wait()) for e in electors], return_when=asyncio.FIRST_COMPLETED), 10)
        await asyncio.sleep(0.5)
        leaders = [e for e in electors if e.is_leader]
        assert len(leaders) == 1, "exactly one leader"
        first = leaders[0]
        other = electors[1 - electors.index(first)]
        index = electors.index(first)
        stopped_at = time.monotonic()
        if crash:
            tasks[index].cancel()  # stops renewing without giving the lease up
        else:
            stops[index].set()
        await asyncio.wait_for(other.leading.wait(), 10)
        waited = time.monotonic() - stopped_at
        lease = await other.client.get_lease("kpe-system", "gates")
        return first.identity, other.identity, waited, other.transitions, lease["spec"]
    finally:
        for s in stops:
            s.set()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for c in clients:
            if c:
                await c.close()


def test_one_of_two_replicas_leads_and_the_other_takes_over_after_the_lease_expires(tmp_path: Path) -> None:
    with FakeApiServer() as api:
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
        first, second, waited, transitions, lease = asyncio.run(_two_candidates(kubeconfig, crash=True))
        assert first != second
        assert 0.5 < waited < 3.0  # not before the 1 s lease ran out, and soon after
        assert lease["holderIdentity"] == second and lease["leaseTransitions"] == transitions >= 1
        assert api.state.leases[0]["spec"]["holderIdentity"] == ""  # the new leader released it when it stopped


def test_a_leader_that_stops_cleanly_hands_over_at_once(tmp_path: Path) -> None:
    with FakeApiServer() as api:
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
        _, second, waited, _, lease = asyncio.run(_two_candidates(kubeconfig, crash=False))
        assert waited < 1.0  # released, so no need to wait for expiry
        assert lease["holderIdentity"] == second
