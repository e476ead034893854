"""deploy/argocd/health.lua, the Argo CD health check of kpe's kinds, run by a Lua interpreter
on the statuses kpe writes (server/cluster/policystatus.py). Argo CD runs gopher-lua (Lua 5.1);
the script uses nothing newer. Skipped without a `lua` on the machine."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from engine.policy.objects import convert

from server.cluster.policystatus import desired_status
from server.reload.store import PolicyStore

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "deploy" / "argocd" / "health.lua"
LUA = next((found for name in ("lua5.1", "luajit", "lua", "lua5.4", "lua5.3") if (found := shutil.which(name))), None)


def lua_value(value: Any) -> str:
    """A JSON value as a Lua table constructor, as Argo CD hands the object to the script."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"[{json.dumps(k)}] = {lua_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "{" + ", ".join(lua_value(v) for v in value) + "}"
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "nil"
    return json.dumps(value)


def health(obj: dict[str, Any]) -> tuple[str, str]:
    if LUA is None:
        pytest.skip("no Lua interpreter (apt-get install lua5.4) to run deploy/argocd/health.lua")
    program = f"obj = {lua_value(obj)}\nlocal hs = (function()\n{SCRIPT.read_text()}\nend)()\nio.write(hs.status, '\\n', hs.message)\n"
    out = subprocess.run([LUA, "-"], input=program, capture_output=True, text=True, timeout=30, check=True).stdout
    state, _, message = out.partition("\n")
    return state, message


POLICY = {"apiVersion": "kpe.dev/v1alpha1", "kind": "SchedulingPolicy", "metadata": {"name": "pool", "generation": 2},
          "spec": {"filters": [{"name": "pool", "expression": "true"}]}}


class Objects:
    def __init__(self, *objects: dict[str, Any]) -> None:
        self.objects = [convert(o) for o in objects]

    def snapshot(self) -> tuple[Any, ...]:
        return tuple(self.objects)


def with_status(obj: dict[str, Any], source: Objects, store: PolicyStore) -> dict[str, Any]:
    assert store.last is not None
    status = desired_status(convert(obj), None, outcome=store.last, served=store.served_objects, serving=store.current, now=0)
    return {**obj, "status": status}


def test_an_object_kpe_serves_is_healthy_and_one_it_has_not_loaded_yet_is_progressing() -> None:
    source = Objects(POLICY)
    store = PolicyStore("", objects=source)
    store.load_initial()
    served = with_status(POLICY, source, store)
    assert health(served) == ("Healthy", f"served in policy set generation {store.current.generation}")
    edited = {**served, "metadata": {**served["metadata"], "generation": 3}}
    assert health(edited) == ("Progressing", "waiting for kpe to load generation 3")
    assert health(POLICY) == ("Progressing", "waiting for kpe to load it")


def test_an_object_kpe_refuses_is_degraded_with_kpe_s_reason() -> None:
    broken = {**POLICY, "spec": {"filters": [{"name": "pool", "expression": "nodee"}]}}
    source = Objects(POLICY)
    store = PolicyStore("", objects=source)
    store.load_initial()
    source.objects = [convert(broken)]
    store.reload()
    state, message = health(with_status(broken, source, store))
    assert state == "Degraded"
    assert message.startswith("refused: spec.filters[0].expression: undeclared reference to 'nodee'")
