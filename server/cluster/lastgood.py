"""The last good policy set, kept in the cluster (``--policy-source cluster``): the objects of
the set kpe serves, written by the Lease's leader to a ConfigMap in kpe's namespace, and read
by a replica whose first load of the cluster's objects is refused.

Why: the policy webhook is ``failurePolicy: Ignore`` (kpe down must not block ``kubectl
apply``), so an object that does not compile can be stored while no kpe runs. A replica that
starts then cannot load the cluster's set, and with nothing to serve it would fail every pod
kube-scheduler sends it (the extender is ``ignorable: false``). With the objects of the last
set served it keeps every policy's protection at the version that was served
(``PolicyStore.fall_back``). The specs themselves are kept, not a digest: a digest would say
the set changed, not what to serve.

The ConfigMap holds ``objects.json``: the set's generation and, per object, its kind, name,
``metadata.generation`` and spec. A set whose JSON would pass ``INLINE_LIMIT`` is kept gzipped
in ``binaryData`` (a ConfigMap holds at most 1 MiB). Only the leader writes, only when
``--controllers`` has ``status`` (the deployment asked kpe to write for its objects), only a
set that a load took whole (never a fallback), and only when it differs from what is kept.
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import logging
from typing import TYPE_CHECKING, Any

import orjson

from engine.policy.objects import PolicyObject, convert

from server.cluster.kube import ApiError, KubeClient
from server.cluster.leader import run_passes

if TYPE_CHECKING:
    from server.reload.store import PolicyStore

log = logging.getLogger("kpe.policies")

Obj = dict[str, Any]
NAME = "kpe-last-good-policies"
KEY, GZIPPED = "objects.json", "objects.json.gz"
INLINE_LIMIT = 512 * 1024  # plain JSON up to here, readable in `kubectl get -o yaml`; gzipped past it
RESYNC_S = 60.0


def encode(objects: tuple[PolicyObject, ...], generation: str) -> Obj:
    """The ConfigMap's ``data`` or ``binaryData`` for ``objects`` (the set of ``generation``)."""
    entries = [{"kind": o.key.kind, "name": o.key.name, "generation": o.generation, "spec": o.data.get("spec")}
               for o in sorted(objects, key=lambda o: o.key)]
    text = orjson.dumps({"generation": generation, "objects": entries}, option=orjson.OPT_SORT_KEYS)
    if len(text) <= INLINE_LIMIT:
        return {"data": {KEY: text.decode()}}
    return {"binaryData": {GZIPPED: base64.b64encode(gzip.compress(text, mtime=0)).decode()}}


def decode(configmap: Obj) -> tuple[PolicyObject, ...]:
    """The objects kept in ``configmap``; raises ``ValueError`` when it holds none readable."""
    data, binary = configmap.get("data") or {}, configmap.get("binaryData") or {}
    try:
        if KEY in data:
            kept = orjson.loads(data[KEY])
        elif GZIPPED in binary:
            kept = orjson.loads(gzip.decompress(base64.b64decode(binary[GZIPPED])))
        else:
            raise ValueError(f"neither {KEY} nor {GZIPPED} in it")
        return tuple(
            convert({"apiVersion": "kpe.dev/v1alpha1", "kind": e["kind"], "metadata": {"name": e["name"], "generation": e["generation"]},
                     "spec": e["spec"]})
            for e in kept["objects"]
        )
    except (KeyError, TypeError, OSError, orjson.JSONDecodeError) as exc:
        raise ValueError(f"unreadable: {exc}") from None


async def read(client: KubeClient, namespace: str) -> tuple[PolicyObject, ...] | None:
    """The last good set kept in ``namespace``; None when there is none or it cannot be read
    (said in the log: the caller falls back further)."""
    try:
        configmap = await client.get_configmap(namespace, NAME)
    except ApiError as exc:
        if exc.status == 404:
            log.warning("no last good policy set kept in the cluster (configmap %s/%s)", namespace, NAME)
        else:
            log.error("the last good policy set could not be read (configmap %s/%s: %s): grant get on it "
                      "(deploy/cluster-policies/rbac.yaml)", namespace, NAME, exc)
        return None
    try:
        return decode(configmap)
    except ValueError as exc:
        log.error("the last good policy set in configmap %s/%s is %s", namespace, NAME, exc)
        return None


class LastGoodKeeper:
    """Writes the set the store serves to the ConfigMap while ``leading``: after every swap and
    every ``resync_s`` (a ConfigMap someone deleted is written again)."""

    def __init__(self, client: KubeClient, store: PolicyStore, *, namespace: str, resync_s: float = RESYNC_S) -> None:
        self.client = client
        self.store = store
        self.namespace = namespace
        self.resync_s = resync_s
        self.kept: Obj | None = None  # what the ConfigMap held when last read or written (its content)
        self.version = ""  # and its resourceVersion
        self.writes = {"written": 0, "conflict": 0, "forbidden": 0, "failed": 0}

    async def run(self, stop: asyncio.Event, leading: asyncio.Event) -> None:
        await run_passes(stop, leading, synced=None, changed=asyncio.Event(), reloaded=self.store.subscribe(), reconcile=self.keep,
                         follow=lambda: None, name="last good policy set", wait_s=self.resync_s, settle_s=0)

    async def keep(self) -> bool:
        """Write the set serving if it is whole (no fallback) and differs from what is kept;
        whether it wrote."""
        store = self.store
        if not store.ready or store.degraded is not None:
            return False
        content = encode(store.served_specs, store.current.generation)
        body: Obj = {"apiVersion": "v1", "kind": "ConfigMap",
                     "metadata": {"name": NAME, "namespace": self.namespace, "labels": {"app.kubernetes.io/managed-by": "kpe"}}, **content}
        try:
            if self.kept != content:
                await self._read()  # someone else's write (another leader before us), or a deletion
            if self.kept == content:
                return False
            if self.version:
                body["metadata"]["resourceVersion"] = self.version
                answer = await self.client.replace_configmap(self.namespace, NAME, body)
            else:
                answer = await self.client.create_configmap(self.namespace, body)
        except ApiError as exc:
            self.kept, self.version = None, ""  # read again next pass
            if exc.status == 409:
                self.writes["conflict"] += 1
            elif exc.status in (401, 403):
                self.writes["forbidden"] += 1
                log.error("kpe may not keep the last good policy set (configmap %s/%s: %s %s): grant get, create and update on it "
                          "(deploy/cluster-policies/rbac.yaml); a replica that starts while a policy is broken has nothing to fall back to",
                          self.namespace, NAME, exc.status, exc.reason)
            else:
                self.writes["failed"] += 1
                log.warning("the last good policy set was not kept: %s", exc)
            return False
        self.kept, self.version = content, str((answer.get("metadata") or {}).get("resourceVersion") or "")
        self.writes["written"] += 1
        log.info("last good policy set kept in configmap %s/%s", self.namespace, NAME, extra={"generation": store.current.generation})
        return True

    async def _read(self) -> None:
        try:
            configmap = await self.client.get_configmap(self.namespace, NAME)
        except ApiError as exc:
            if exc.status != 404:
                raise
            self.kept, self.version = None, ""
            return
        self.kept = {part: configmap[part] for part in ("data", "binaryData") if configmap.get(part)}
        self.version = str((configmap.get("metadata") or {}).get("resourceVersion") or "")
