"""The ConfigMaps paramsFrom names, watched by kpe's cache (server/cluster/configmaps.py) for
the policy store: listed before a set naming a new one serves, and a change, a deletion or a
ConfigMap created later is a reload whose generation serves the new values."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from server.reload.store import NoConfigMaps, PolicyStore
from tests.fakeapi import FakeApiServer
from tests.test_cache import api, cache_on, eventually, kubeconfig, node, run, watch_requests  # noqa: F401 - fixtures
from tests.test_cache_projection import COUNTS

CAPPED = """
apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: team-cap}
spec:
  paramsFrom:
    configMap: {namespace: kpe-system, name: team-caps}
  params: {defaultCap: 1}
  admission:
    expression: "admitted.size() < params.defaultCap"
"""


def config_map(cap: str, name: str = "team-caps") -> dict[str, object]:
    return {"metadata": {"name": name, "namespace": "kpe-system"}, "data": {"defaultCap": cap}}


def store_with(tmp_path: Path, text: str) -> PolicyStore:
    (tmp_path / "policies.yaml").write_text(text)
    store = PolicyStore(str(tmp_path), stable_interval_s=0.0, stable_checks=1)
    return store


def test_a_config_map_change_is_a_reload_serving_its_values(api: FakeApiServer, kubeconfig: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="kpe.policies")
    store = store_with(tmp_path, CAPPED)
    store.params = NoConfigMaps()  # as kpe serve: no ConfigMap known before the cache watches them
    store.load_initial()
    assert store.current.policies[0].params_error == "params: ConfigMap kpe-system/team-caps not found"
    api.state.add_node(node("node-1"))
    api.state.add("configmaps", {"metadata": {"name": "other", "namespace": "kpe-system"}, "data": {"big": "x" * 1000}}, "kpe-system")
    api.state.add("configmaps", config_map("3"), "kpe-system")

    def served() -> tuple[dict[str, object], str]:
        policy = store.current.policies[0]
        return policy.params, policy.params_error

    async def body() -> None:
        async with cache_on(kubeconfig, policies=store) as (_, cache):
            await eventually(lambda: served() == ({"defaultCap": 3}, ""), what="the ConfigMap's cap")
            assert cache.configmaps.data == {("kpe-system", "team-caps"): {"defaultCap": "3"}}, "only the named ConfigMap is kept"
            first = store.current.generation
            api.state.update("configmaps", "team-caps", "kpe-system", merge={"data": {"defaultCap": "5"}})
            await eventually(lambda: served() == ({"defaultCap": 5}, ""), what="the changed cap")
            assert store.current.generation != first
            api.state.delete("configmaps", "team-caps", "kpe-system")
            await eventually(lambda: served()[1] == "params: ConfigMap kpe-system/team-caps not found", what="Deny once it is deleted")
            assert [record.getMessage() for record in caplog.records if record.name == "kpe.policies" and "team-cap:" in record.getMessage()][-1] == (
                "policy team-cap: params: ConfigMap kpe-system/team-caps not found (parameterNotFoundAction Deny)")
            api.state.add("configmaps", config_map("3"), "kpe-system")
            await eventually(lambda: served() == ({"defaultCap": 3}, ""), what="the cap again")
            assert store.current.generation == first, "the same values, the same generation"
            assert cache.connected
        assert len(watch_requests(api.state, "/api/v1/namespaces/kpe-system/configmaps")) >= 1

    run(body, timeout=15)


def test_a_reload_naming_a_new_config_map_serves_only_with_its_values(api: FakeApiServer, kubeconfig: str, tmp_path: Path) -> None:
    store = store_with(tmp_path, COUNTS)
    store.load_initial()
    api.state.add_node(node("node-1"))
    api.state.add("configmaps", config_map("4"), "kpe-system")

    async def body() -> None:
        async with cache_on(kubeconfig, policies=store) as (_, cache):
            assert cache.configmaps.namespaces == {}, "no policy names a ConfigMap: none is watched"
            (tmp_path / "policies.yaml").write_text(CAPPED)
            outcome = await asyncio.to_thread(store.reload)
            assert outcome.ok
            policy = store.current.policies[0]
            assert (policy.params, policy.params_error) == ({"defaultCap": 4}, "")

    run(body, timeout=15)


def test_a_config_map_kpe_may_not_read_is_said_to_be_unreadable_not_missing_until_it_can_be_read(api: FakeApiServer, kubeconfig: str, tmp_path: Path) -> None:
    store = store_with(tmp_path, CAPPED)
    store.params = NoConfigMaps()
    store.load_initial()
    api.state.add_node(node("node-1"))
    api.state.add("configmaps", config_map("3"), "kpe-system")
    forbidden = 'configmaps is forbidden: User "system:serviceaccount:kpe-system:kpe" cannot list resource "configmaps" in the namespace "kpe-system"'
    api.state.fail_next(10_000, 403, path="/api/v1/namespaces/kpe-system/configmaps", message=forbidden)

    def problem() -> str:
        return store.current.policies[0].params_error

    async def body() -> None:
        async with cache_on(kubeconfig, policies=store) as (_, cache):
            await eventually(lambda: "cannot be read" in problem(), what="the policy to say why it has no params")
            assert problem() == f"params: ConfigMap kpe-system/team-caps cannot be read (configmaps: 403 Forbidden: {forbidden})"
            assert cache.configmaps.covers(frozenset({("kpe-system", "team-caps")})), "a reload does not wait for a namespace that answered 403"
            api.state.clear_faults()  # the RBAC is granted: the next list reads the ConfigMap
            await eventually(lambda: store.current.policies[0].params == {"defaultCap": 3} and problem() == "", what="the ConfigMap's values")

    run(body, timeout=20)
