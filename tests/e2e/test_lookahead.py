"""kube-scheduler's prioritize after kpe's filter, answered from the answer kpe worked out
ahead (``server.verbs.lookahead``): the real scheduler's bytes are the ones kpe expects, and the
placements follow scores that change with every bind."""

from __future__ import annotations

from functools import partial

from .conftest import Cluster, Kpe
from .controlplane import wait_until

# Never -d (the filter: kube-scheduler calls prioritize after it); up to two pods on -b, then
# -c, not -a. Every score depends on nodeInfo, so an answer worked out ahead that missed a bind
# would send the third pod to -b.
POLICY = """
apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {{name: fill-b-then-c}}
spec:
  match:
    namespaces: [{ns}]
  filters:
  - name: not-d
    expression: "!node.metadata.name.endsWith('-d')"
    message: closed
  scores:
  - name: b-then-c
    expression: >-
      node.metadata.name.endsWith('-b') ? (nodeInfo.pods.size() < 2 ? 100 : 0)
      : (node.metadata.name.endsWith('-c') ? 50 : 0)
"""


def cached_pods_are(kpe: Kpe, node: str, count: int) -> bool:
    return bool(kpe.http.get(f"/apis/v1/nodes/{node}").json()["nodeInfo"]["podCount"] == count)


def test_kube_scheduler_s_prioritize_is_the_one_kpe_expected_and_its_answers_follow_every_bind(cluster: Cluster) -> None:
    ns = cluster.namespace
    cluster.write_policy("fill.yaml", POLICY.format(ns=ns))
    for suffix in "abcd":
        cluster.node(f"{ns}-{suffix}")
    kpe = cluster.start_kpe()
    cluster.start_scheduler(kpe, node_cache_capable=True)

    bound: dict[str, str] = {}
    for i in range(4):
        # One at a time, each bound, and the bind in kpe's cache, before the next: every pod's
        # scores depend on the binds before it.
        cluster.api.pod(ns, f"p-{i}")
        bound = cluster.wait_bound([f"p-{j}" for j in range(i + 1)])
        node = bound[f"p-{i}"]
        wait_until(partial(cached_pods_are, kpe, node, list(bound.values()).count(node)), 10, "kpe's cache to see the bind")
    assert [bound[f"p-{i}"] for i in range(4)] == [f"{ns}-b", f"{ns}-b", f"{ns}-c", f"{ns}-c"]
    answered = kpe.metric("kpe_prioritize_ahead_total", outcome="answered")
    rescored = kpe.metric("kpe_prioritize_ahead_total", outcome="rescored")
    # Every prioritize kube-scheduler sent was the body kpe expected, byte for byte; nearly
    # all were answered from the answer worked out ahead (a bind seen late is scored again).
    assert answered + rescored == kpe.metric("kpe_requests_total", verb="prioritize", code="200") == 4
    assert answered >= 1
    print(f"\n[e2e lookahead] answered {answered:.0f}, rescored {rescored:.0f}")
