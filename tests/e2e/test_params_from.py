"""A team cap kept in a ConfigMap (``spec.paramsFrom``) on the real API server: kpe reads it
with the shipped RBAC (the kpe-params Role in kpe-system), holds the pods past the cap at its
gate, and when the ConfigMap is edited while they wait, the change is a reload that releases
them within 2 s."""

from __future__ import annotations

import time

from .conftest import Cluster
from .controlplane import wait_until

GATE = "kpe.dev/team-cap"

POLICY = """apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {{name: team-cap}}
spec:
  match:
    namespaces: [{namespace}]
    podSelector:
      matchExpressions:
      - {{key: team, operator: Exists}}
  paramsFrom:
    configMap: {{namespace: kpe-system, name: {config_map}}}
  params:
    defaultCap: 1
    caps: {{}}
  variables:
  - name: team
    expression: "pod.metadata.labels['team']"
  - name: cap
    expression: "params.caps[?variables.team].orValue(params.defaultCap)"
  admission:
    gate: {gate}
    expression: "admitted.filter(p, p.metadata.?labels[?'team'].orValue('') == variables.team).size() < variables.cap"
    messageExpression: "'team ' + variables.team + ' is at its cap of ' + string(variables.cap) + ' pods'"
"""


def gated(cluster: Cluster) -> list[str]:
    return sorted(p["metadata"]["name"] for p in cluster.api.pods(cluster.namespace) if any(g["name"] == GATE for g in p["spec"].get("schedulingGates") or []))


def test_pods_held_at_a_team_cap_from_a_config_map_are_released_within_2_s_of_its_change(cluster: Cluster) -> None:
    ns = cluster.namespace
    config_map = f"{ns}-caps"
    path = "/api/v1/namespaces/kpe-system/configmaps"
    cluster.api.apply(path, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": config_map}, "data": {"caps": "{alpha: 2}"}})
    try:
        cluster.write_policy("team-cap.yaml", POLICY.format(namespace=ns, config_map=config_map, gate=GATE))
        cluster.node(f"{ns}-n1")
        kpe = cluster.start_kpe()
        cluster.register_webhook(kpe)
        cluster.start_scheduler(None)
        for i in range(5):
            cluster.api.pod(ns, f"alpha-{i}", labels={"team": "alpha"})
        wait_until(lambda: len(cluster.bound()) == 2 and len(gated(cluster)) == 3, 30, "2 pods bound (the ConfigMap's cap), 3 held")
        time.sleep(1.0)  # another pass (resync, the binds' events) must not release more
        assert len(cluster.bound()) == 2 and gated(cluster) == ["alpha-2", "alpha-3", "alpha-4"]
        held = kpe.http.get("/apis/v1/gated").json()["pods"]
        assert "team alpha is at its cap of 2 pods" in str(held), held
        before = kpe.generation()

        cluster.api.patch(f"{path}/{config_map}", {"data": {"caps": "{alpha: 5}"}})
        changed = time.monotonic()
        wait_until(lambda: not gated(cluster), 10, "the held pods' gates to be lifted after the ConfigMap's change", interval=0.05)
        released = time.monotonic() - changed
        assert kpe.generation() != before, "the ConfigMap's change is a reload: the generation changes"
        cluster.wait_bound([f"alpha-{i}" for i in range(5)])
        print(f"\n[e2e paramsFrom] 3 held pods released {released:.2f} s after the ConfigMap's change")
        assert released < 2.0
    finally:
        cluster.api.delete(f"{path}/{config_map}")


FORBIDDEN = """apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {{name: pool-from-elsewhere}}
spec:
  match: {{namespaces: [{namespace}], podSelector: {{matchLabels: {{app: batch}}}}}}
  paramsFrom:
    configMap: {{namespace: {elsewhere}, name: pools}}
    parameterNotFoundAction: Deny
  params: {{pool: a}}
  filters:
  - name: pool
    expression: "node.metadata.?labels[?'pool'].orValue('') == params.pool"
    message: not in the batch pool
"""
POOL_A_ONLY = """apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {{name: web-pool}}
spec:
  match: {{namespaces: [{namespace}], podSelector: {{matchLabels: {{app: web}}}}}}
  filters:
  - name: pool
    expression: "node.metadata.?labels[?'pool'].orValue('') == 'a'"
    message: not in pool a
"""


def test_a_policy_whose_params_kpe_may_not_read_affects_only_its_own_pods_and_no_replica_goes_unready(cluster: Cluster) -> None:
    ns = cluster.namespace
    elsewhere = f"{ns}-team"[-63:]
    cluster.api.namespace(elsewhere)  # a namespace deploy/'s RBAC does not cover: its ConfigMaps answer 403
    cluster.write_policy("batch.yaml", FORBIDDEN.format(namespace=ns, elsewhere=elsewhere))
    cluster.write_policy("web.yaml", POOL_A_ONLY.format(namespace=ns))
    for pool in ("a", "b"):
        cluster.node(f"{ns}-{pool}", labels={"pool": pool})
    replicas = [cluster.start_kpe(identity=name) for name in ("kpe-a", "kpe-b")]  # start_kpe waits for each one's /readyz
    cluster.start_scheduler(replicas[0])
    # The other policies keep deciding, through node names (the cache answers them).
    cluster.api.pod(ns, "web-1", labels={"app": "web"})
    assert cluster.wait_bound(["web-1"])["web-1"] == f"{ns}-a"
    # The policy with no params: Deny, under its failurePolicy (Fail): no node for its pods.
    cluster.api.pod(ns, "batch-1", labels={"app": "batch"})
    decided = wait_until(lambda: replicas[0].http.get("/apis/v1/decisions", params={"pod": f"{ns}/batch-1"}).json()["decisions"], 30, "kpe to decide batch-1")
    assert "batch-1" not in cluster.bound()
    for kpe in replicas:
        ready = kpe.health.get("/readyz")
        assert ready.status_code == 200, ready.text
        assert f"policy params not read (namespace {elsewhere}: configmaps: 403" in ready.text, ready.text
    problem = next(p for p in replicas[0].http.get("/apis/v1/policies").json()["policies"] if p["name"] == "pool-from-elsewhere")
    print(f"\n[e2e paramsFrom forbidden] /readyz: {replicas[0].health.get('/readyz').text}\n  decision: {decided[0].get('reasons') or decided[0]}\n  policy: {problem}")
    # Said as it is: the ConfigMap may well exist; kpe may not read it (not "not found").
    assert problem["paramsFrom"]["problem"].startswith(f"params: ConfigMap {elsewhere}/pools cannot be read (configmaps: 403 Forbidden: "), problem
