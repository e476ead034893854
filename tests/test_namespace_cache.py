"""The namespaces kpe's cache watches for ``namespaceObject`` (server/cluster/namespaces.py):
only once a served policy reads it, cut to what a policy decides by, kept current by the
watch, and listed before a reloaded set that reads it serves."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.fakeapi import FakeApiServer
from tests.test_cache import api, cache_on, eventually, kubeconfig, list_requests, node, run  # noqa: F401 - fixtures
from tests.test_cache_projection import COUNTS, store_with

READS_NAMESPACE = """
apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: exempt}
spec:
  filters:
  - name: opted-in
    expression: "namespaceObject != null && namespaceObject.metadata.?annotations[?'kpe.dev/allow-gpu-nodes'].orValue('') == 'true'"
"""


def namespace(name: str, **annotations: str) -> dict[str, object]:
    return {
        "metadata": {"name": name, "labels": {"team": name}, "annotations": annotations, "finalizers": ["example.com/keep"]},
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    }


def test_a_cache_whose_policies_never_read_namespace_object_never_lists_namespaces(api: FakeApiServer, kubeconfig: str, tmp_path: Path) -> None:
    store = store_with(tmp_path, COUNTS)
    api.state.add_node(node("node-1"))
    api.state.add("namespaces", namespace("shop"))

    async def body() -> None:
        async with cache_on(kubeconfig, policies=store) as (_, cache):
            await asyncio.sleep(0.2)
            assert cache.namespaces.view() is None and cache.connected
        assert api.state.requests_to("GET", "/api/v1/namespaces") == []

    run(body)


def test_namespaces_are_kept_as_name_labels_annotations_and_phase_and_follow_the_watch(api: FakeApiServer, kubeconfig: str, tmp_path: Path) -> None:
    store = store_with(tmp_path, READS_NAMESPACE)
    api.state.add_node(node("node-1"))
    api.state.add("namespaces", namespace("shop", note="x"))

    async def body() -> None:
        async with cache_on(kubeconfig, policies=store) as (_, cache):
            await asyncio.wait_for(cache.namespaces.listed.wait(), 3)
            assert cache.namespaces.view() == {
                "shop": {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop", "labels": {"team": "shop"}, "annotations": {"note": "x"}},
                         "status": {"phase": "Active"}},
            }
            before = cache.namespaces.view()["shop"]  # type: ignore[index]
            api.state.update("namespaces", "shop", merge={"metadata": {"annotations": {"kpe.dev/allow-gpu-nodes": "true"}}})
            await eventually(lambda: "kpe.dev/allow-gpu-nodes" in cache.namespaces.by_name["shop"]["metadata"]["annotations"], what="the annotation")
            assert cache.namespaces.by_name["shop"] is not before, "a changed namespace is a new object (the equivalence cache compares objects)"
            api.state.add("namespaces", namespace("ml"))
            await eventually(lambda: "ml" in cache.namespaces.by_name, what="the new namespace")
            api.state.delete("namespaces", "ml")
            await eventually(lambda: "ml" not in cache.namespaces.by_name, what="the deleted namespace gone")
            assert cache.connected
        assert len(list_requests(api.state, "/api/v1/namespaces")) == 1

    run(body)


def test_a_reload_to_a_set_reading_namespace_object_serves_only_once_namespaces_are_listed(api: FakeApiServer, kubeconfig: str, tmp_path: Path) -> None:
    store = store_with(tmp_path, COUNTS)
    old = store.current
    api.state.add_node(node("node-1"))
    api.state.add("namespaces", namespace("shop"))

    async def body() -> None:
        async with cache_on(kubeconfig, policies=store) as (_, cache):
            api.state.fail_next(2, 500, method="GET", path="/api/v1/namespaces")
            (tmp_path / "policies.yaml").write_text(READS_NAMESPACE)
            reload = asyncio.create_task(asyncio.to_thread(store.reload))
            seen: list[tuple[bool, bool]] = []  # (the new set serves, the namespaces are listed)
            while not reload.done():
                seen.append((store.current is not old, cache.namespaces.view() is not None))
                await asyncio.sleep(0.002)
            assert (await reload).ok and store.current is not old
            assert (False, False) in seen, "the reload waited for the namespaces, the old set serving"
            assert all(listed for new_set, listed in seen if new_set), "the new set never served before the namespaces were listed"
            assert "shop" in (cache.namespaces.view() or {})

    run(body, timeout=15)
