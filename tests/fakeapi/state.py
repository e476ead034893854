"""The fake cluster: objects, their history (for list-at-version, watch resume
and 410 after compaction), open watches, scripted faults and a request log.

Every method is thread-safe: tests call them from the test thread while the
server runs them from its event loop thread. Objects handed out are copies.
"""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
import random
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from . import lists, validation
from .records import Change, Fault, Interlude, Key, MutatingWebhook, Request, go_bool, now_rfc3339
from .selectors import selector
from .watch import Watcher, bookmark_line
from .wire import (
    CUSTOM, NODE_STATUS_ZERO, NODES, OPTIMISTIC_LOCK, PODS, Obj, Resource, already_exists, bad_request, canonical, conflict,
    dumps, expired, generic, invalid_object, not_found, precondition_error, resource,
)

__all__ = ["State", "Change", "Request", "Watcher", "MutatingWebhook"]


class State:
    """The fake cluster. Tests drive it directly; the server serves it."""

    def __init__(self, *, bookmark_interval: float = 60.0, start_rv: int = 100, pod_defaults: bool = True,
                 graceful_pod_deletion: bool = True, priority_classes: dict[str, int] | None = None,
                 clock: Callable[[], dt.datetime] | None = None) -> None:
        self.lock = threading.RLock()
        self.bookmark_interval = bookmark_interval
        self.watch_chunk_bytes = 0  # > 0: watch streams are cut into chunks of this size (fault injection)
        self.pod_defaults = pod_defaults
        self.graceful_pod_deletion = graceful_pod_deletion
        self.priority_classes = {"system-cluster-critical": 2000000000, "system-node-critical": 2000001000,
                                 **(priority_classes or {})}
        self.clock = clock or (lambda: dt.datetime.now(dt.timezone.utc))
        self.token: str | None = None  # when set, requests need "Authorization: Bearer <token>"
        self.webhooks: list[MutatingWebhook] = []
        self.requests: list[Request] = []
        self._rv = start_rv
        self._compacted = 0
        self._objects: dict[str, dict[Key, Obj]] = {}
        self._log: list[Change] = []
        self._watchers: set[Watcher] = set()
        self._faults: list[Fault] = []
        self._cuts: list[Fault] = []
        self._interludes: list[Interlude] = []
        self._refusals: dict[Key, list[str]] = {}

    # ------------------------------------------------------------ versions

    @property
    def resource_version(self) -> str:
        """The newest revision (what a list now would carry)."""
        with self.lock:
            return str(self._rv)

    @property
    def revision(self) -> int:
        return self._rv

    @property
    def compacted(self) -> int:
        return self._compacted

    @property
    def compacted_version(self) -> str:
        with self.lock:
            return str(self._compacted)

    def compact(self, rv: str | int | None = None) -> str:
        """Forget history up to ``rv`` (default: now), as etcd compaction does: lists at older versions and
        watches from them get 410 Expired."""
        with self.lock:
            self._compacted = self._rv if rv is None else int(rv)
            self._log = [c for c in self._log if c.rv > self._compacted]
            return str(self._compacted)

    # ------------------------------------------------------------ writing

    def _store(self, res: Resource) -> dict[Key, Obj]:
        return self._objects.setdefault(res.key, {})

    def _commit(self, res: Resource, key: Key, type_: str, obj: Obj, prev: Obj | None) -> Obj:
        self._rv += 1
        obj = canonical(copy.deepcopy(obj))
        obj["metadata"]["resourceVersion"] = str(self._rv)
        if type_ == "DELETED":
            self._store(res).pop(key, None)
        else:
            self._store(res)[key] = obj
        ch = Change(self._rv, res, key, type_, obj, prev)
        self._log.append(ch)
        for w in list(self._watchers):
            if w.res is res:
                w.offer(ch)
        return copy.deepcopy(obj)

    def _stamp(self, res: Resource, obj: Obj, namespace: str) -> Obj:
        """System fields of a new object."""
        obj = copy.deepcopy(obj)
        obj["kind"], obj["apiVersion"] = res.kind, res.api_version
        meta = obj.setdefault("metadata", {})
        if res.namespaced:
            meta["namespace"] = namespace or meta.get("namespace") or "default"
        else:
            meta.pop("namespace", None)
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + "".join(random.choices("bcdfghjklmnpqrstvwxz2456789", k=5))
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now_rfc3339(self.clock)
        for k in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"):
            meta.pop(k, None)
        if res in CUSTOM:
            meta["generation"] = 1
        if res is NODES:
            obj.setdefault("spec", {})
            st = obj.setdefault("status", {})
            st.setdefault("daemonEndpoints", copy.deepcopy(NODE_STATUS_ZERO["daemonEndpoints"]))
            st["nodeInfo"] = {**NODE_STATUS_ZERO["nodeInfo"], **(st.get("nodeInfo") or {})}
        return obj

    def prepare_create(self, res: Resource, namespace: str, obj: Obj, *, admission: bool) -> Obj:
        """Defaulting and built-in admission (what a mutating webhook then sees)."""
        obj = copy.deepcopy(obj)
        obj["kind"], obj["apiVersion"] = res.kind, res.api_version
        meta = obj.setdefault("metadata", {})
        if res.namespaced:
            meta["namespace"] = namespace
        meta["creationTimestamp"] = None
        if res is PODS and self.pod_defaults:
            validation.default_pod(obj)
            obj.setdefault("status", {})  # the zero PodStatus, as the captured AdmissionReview shows
            if admission:
                validation.admit_pod_priority(obj, self.priority_classes)
            elif obj["spec"].get("priorityClassName") in self.priority_classes:
                obj["spec"]["priority"] = self.priority_classes[obj["spec"]["priorityClassName"]]
        return obj

    def create(self, res: Resource | str, obj: Obj, namespace: str = "", *, validate: bool = True, keep_status: bool = False) -> Obj:
        """Store a new object (ADDED). The HTTP POST path and the test helpers meet here."""
        res = resource(res) if isinstance(res, str) else res
        with self.lock:
            ns = namespace or (obj.get("metadata") or {}).get("namespace") or ("default" if res.namespaced else "")
            given_status = obj.get("status") if keep_status else None
            obj = self._stamp(res, obj, ns)
            if res is PODS and self.pod_defaults:
                validation.pod_status_on_create(obj, given_status)
            if validate:
                validation.create_errors(obj, res)
            key = (ns if res.namespaced else "", obj["metadata"]["name"])
            if key in self._store(res):
                raise already_exists(res, key[1])
            return self._commit(res, key, "ADDED", obj, None)

    def _current(self, res: Resource, namespace: str, name: str) -> Obj:
        obj = self._store(res).get((namespace if res.namespaced else "", name))
        if obj is None:
            raise not_found(res, name)
        return obj

    def replace(self, res: Resource | str, new: Obj, namespace: str = "", *, validate: bool = True,
                subresource: str = "", expect_uid: str | None = None) -> Obj:
        """PUT semantics: optimistic concurrency on metadata.resourceVersion (409 when stale), immutable
        identity fields, status kept from the old object unless ``subresource == "status"``. A write that
        changes nothing keeps the old resourceVersion and emits no event, as etcd3's GuaranteedUpdate."""
        res = resource(res) if isinstance(res, str) else res
        with self.lock:
            meta = new.get("metadata") or {}
            name = meta.get("name", "")
            ns = (namespace or meta.get("namespace") or "default") if res.namespaced else ""
            old = self._current(res, ns, name)
            rv = meta.get("resourceVersion")
            if rv and rv != old["metadata"]["resourceVersion"]:
                raise conflict(res, name, OPTIMISTIC_LOCK)
            if expect_uid and expect_uid != old["metadata"]["uid"]:
                raise conflict(res, name, precondition_error(res, ns, name, f"Precondition failed: UID in precondition: {expect_uid}, UID in object meta: {old['metadata']['uid']}"))
            new = copy.deepcopy(new)
            new["kind"], new["apiVersion"] = res.kind, res.api_version
            nm = new.setdefault("metadata", {})
            if res.namespaced:
                nm.setdefault("namespace", ns)
            # rest.BeforeUpdate: creation time and deletion marks come from the stored object, a missing uid too
            for k in ("creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "uid"):
                if k in old["metadata"] and (k != "uid" or not nm.get("uid")):
                    nm[k] = old["metadata"][k]
            nm["resourceVersion"] = old["metadata"]["resourceVersion"]
            if res in CUSTOM:
                # The status subresource writes status only; the object writes the rest, and a
                # spec change moves metadata.generation, as for any custom resource.
                kept = "spec" if subresource == "status" else "status"
                new.pop(kept, None)
                if kept in old:
                    new[kept] = copy.deepcopy(old[kept])
                nm["generation"] = int(old["metadata"].get("generation") or 1) + (new.get("spec") != old.get("spec"))
            if res in (PODS, NODES) and validate:
                if subresource == "status":
                    new["spec"] = copy.deepcopy(old.get("spec"))
                    nm.update({k: old["metadata"][k] for k in ("labels", "annotations", "finalizers", "ownerReferences") if k in old["metadata"]})
                elif "status" in old:
                    new["status"] = copy.deepcopy(old["status"])
            if res is PODS and self.pod_defaults and validate:
                validation.default_pod(new)
            if res is NODES:
                st = new.setdefault("status", {})
                st.setdefault("daemonEndpoints", copy.deepcopy(NODE_STATUS_ZERO["daemonEndpoints"]))
                st["nodeInfo"] = {**NODE_STATUS_ZERO["nodeInfo"], **(st.get("nodeInfo") or {})}
                new.setdefault("spec", {})
            if validate:
                validation.update_errors(new, old, res)
            if new == old:
                return copy.deepcopy(old)
            out = self._commit(res, (ns, name), "MODIFIED", new, old)
            if nm.get("deletionTimestamp") and not nm.get("finalizers") and nm.get("deletionGracePeriodSeconds") == 0:
                stored = self._store(res)[(ns, name)]
                self._commit(res, (ns, name), "DELETED", stored, stored)  # the last finalizer went away
            return out

    def delete_object(self, res: Resource | str, name: str, namespace: str = "", *, grace_seconds: int | None = None,
                      preconditions: Obj | None = None) -> tuple[Obj, bool]:
        """DELETE semantics; (the object as it is now, whether it is gone). Pods on a node and objects
        with finalizers get a deletionTimestamp (MODIFIED) instead of disappearing."""
        res = resource(res) if isinstance(res, str) else res
        with self.lock:
            ns = (namespace or "default") if res.namespaced else ""
            old = self._current(res, ns, name)
            pre = preconditions or {}
            for field_, label in (("uid", "UID"), ("resourceVersion", "ResourceVersion")):
                want = pre.get(field_)
                if want and want != old["metadata"].get(field_):
                    raise conflict(res, name, precondition_error(res, ns, name, f"Precondition failed: {label} in precondition: {want}, {label} in object meta: {old['metadata'].get(field_)}"))
            grace = 0
            if res is PODS and self.graceful_pod_deletion and (old.get("spec") or {}).get("nodeName") \
                    and (old.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                grace = grace_seconds if grace_seconds is not None else int(old["spec"].get("terminationGracePeriodSeconds", 30))
            meta = old["metadata"]
            if grace > 0 or meta.get("finalizers"):
                if meta.get("deletionTimestamp"):
                    return copy.deepcopy(old), False
                new = copy.deepcopy(old)
                when = self.clock() + dt.timedelta(seconds=grace)
                new["metadata"]["deletionTimestamp"] = when.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
                new["metadata"]["deletionGracePeriodSeconds"] = grace
                return self._commit(res, (ns, name), "MODIFIED", new, old), False
            return self._commit(res, (ns, name), "DELETED", old, old), True

    # ------------------------------------------------------------ pods/binding

    def bind(self, namespace: str, name: str, node: str, *, uid: str = "", resource_version: str = "",
             annotations: dict[str, str] | None = None) -> Obj:
        """What POST pods/{name}/binding does; raises the API's 404/409 as ApiError."""
        with self.lock:
            pod = self._current(PODS, namespace, name)
            meta = pod["metadata"]
            for want, have, label in ((uid, meta["uid"], "UID"), (resource_version, meta["resourceVersion"], "ResourceVersion")):
                if want and want != have:
                    raise conflict(PODS, name, precondition_error(PODS, namespace, name, f"Precondition failed: {label} in precondition: {want}, {label} in object meta: {have}"))
            refusals = self._refusals.get((namespace, name))
            if refusals:
                raise conflict(PODS, name, refusals.pop(0), subresource="binding")
            spec = pod.get("spec") or {}
            if meta.get("deletionTimestamp"):
                raise conflict(PODS, name, f"pod {name} is being deleted, cannot be assigned to a host", subresource="binding")
            if spec.get("nodeName"):
                raise conflict(PODS, name, f'pod {name} is already assigned to node "{spec["nodeName"]}"', subresource="binding")
            if spec.get("schedulingGates"):
                raise conflict(PODS, name, f"pod {name} has non-empty .spec.schedulingGates", subresource="binding")
            new = copy.deepcopy(pod)
            new["spec"]["nodeName"] = node
            if annotations:
                new["metadata"].setdefault("annotations", {}).update(annotations)
            st = new.setdefault("status", {})
            conds = st.setdefault("conditions", [])
            old_cond = next((c for c in conds if c.get("type") == "PodScheduled"), None)
            cond = {"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                    "lastTransitionTime": old_cond["lastTransitionTime"] if old_cond and old_cond.get("status") == "True"
                    else now_rfc3339(self.clock)}
            st["conditions"] = [cond if c is old_cond else c for c in conds] if old_cond else conds + [cond]
            return self._commit(PODS, (namespace, name), "MODIFIED", new, pod)

    def refuse_binding(self, namespace: str, name: str, message: str | None = None, *, times: int = 1) -> None:
        """Make the next ``times`` bindings of this pod fail with 409 Conflict (default message: the captured
        "pod NAME is being deleted, cannot be assigned to a host")."""
        msg = message or f"pod {name} is being deleted, cannot be assigned to a host"
        with self.lock:
            self._refusals.setdefault((namespace, name), []).extend([msg] * times)

    # ------------------------------------------------------------ reading

    def snapshot(self, res: Resource, rv: int) -> dict[Key, Obj]:
        objs = dict(self._store(res))
        for ch in reversed(self._log):
            if ch.rv <= rv:
                break
            if ch.res is not res:
                continue
            if ch.type == "ADDED":
                objs.pop(ch.key, None)
            elif ch.prev is not None:
                objs[ch.key] = ch.prev
        return objs

    def list_response(self, res: Resource, namespace: str | None, params: dict[str, str]) -> Obj:
        """GET on a collection, with kube-apiserver's resourceVersion/limit/continue semantics (1.25)."""
        return lists.list_response(self, res, namespace, params)

    def get(self, res: Resource | str, name: str, namespace: str = "") -> Obj | None:
        res = resource(res) if isinstance(res, str) else res
        with self.lock:
            obj = self._store(res).get(((namespace or "default") if res.namespaced else "", name))
            return copy.deepcopy(obj) if obj is not None else None

    def objects(self, res: Resource | str, namespace: str | None = None) -> list[Obj]:
        res = resource(res) if isinstance(res, str) else res
        with self.lock:
            return [copy.deepcopy(o) for k, o in sorted(self._store(res).items()) if namespace is None or k[0] == namespace]

    # ------------------------------------------------------------ watches

    def open_watch(self, res: Resource, namespace: str | None, params: dict[str, str], loop: asyncio.AbstractEventLoop) -> Watcher:
        pred, _ = selector(params, res)
        bookmarks = go_bool(params.get("allowWatchBookmarks", "false"))
        w = Watcher(res, namespace, pred, bookmarks, loop)
        rv_param = params.get("resourceVersion", "")
        if rv_param not in ("", "0") and not rv_param.isdigit():
            raise bad_request(f'invalid resource version "{rv_param}": strconv.ParseUint: parsing "{rv_param}": invalid syntax')
        with self.lock:
            if rv_param in ("", "0"):
                w.start_rv = self._rv
                for k, obj in sorted(self._store(res).items()):
                    if (namespace is None or k[0] == namespace) and pred(obj):
                        w.push("data", dumps({"type": "ADDED", "object": canonical(obj)}))
            else:
                w.start_rv = int(rv_param)
                if w.start_rv < self._compacted:
                    st = expired(f"too old resource version: {w.start_rv} ({self._compacted})")
                    w.push("data", dumps({"type": "ERROR", "object": st}))
                    w.push("end")
                    return w
                for ch in self._log:
                    if ch.rv > w.start_rv and ch.res is res:
                        w.offer(ch)
            self._watchers.add(w)
        return w

    def close_watch(self, w: Watcher) -> None:
        with self.lock:
            self._watchers.discard(w)

    def bookmark(self, w: Watcher) -> None:
        """Queue a BOOKMARK at the newest revision, if it is past where the watch started (the watch cache
        sends none otherwise)."""
        with self.lock:
            if not w.bookmarks or self._rv <= w.start_rv or w not in self._watchers:
                return
            w.push("data", bookmark_line(w.res, self._rv))

    def send_bookmarks(self) -> None:
        """Send a BOOKMARK on every open watch that asked for them, now."""
        with self.lock:
            for w in list(self._watchers):
                self.bookmark(w)

    def drop_watches(self) -> int:
        """Break every open watch connection (no clean end of the chunked stream). Returns how many."""
        return self._close_all("drop")

    def end_watches(self) -> int:
        """End every open watch cleanly, as when its timeoutSeconds runs out."""
        return self._close_all("end")

    def _close_all(self, how: str) -> int:
        with self.lock:
            ws = list(self._watchers)
            self._watchers.clear()
        for w in ws:
            w.push(how)
        return len(ws)

    def watch_count(self, res: Resource | str | None = None) -> int:
        r = resource(res) if isinstance(res, str) else res
        with self.lock:
            return sum(1 for w in self._watchers if r is None or w.res is r)

    def wait_for_watches(self, n: int = 1, res: Resource | str | None = None, timeout: float = 5.0) -> None:
        deadline = time.monotonic() + timeout
        while self.watch_count(res) < n:
            if time.monotonic() > deadline:
                raise TimeoutError(f"expected {n} open watch(es) on {res or 'anything'}, have {self.watch_count(res)}")
            time.sleep(0.005)

    # ------------------------------------------------------------ faults, log

    def fail_next(self, n: int = 1, status: int = 500, *, method: str | None = None, path: str | None = None,
                  message: str | None = None, body: Obj | None = None, watch: bool | None = None) -> None:
        """Answer the next ``n`` requests (optionally only those with this method / path prefix, and only
        watches with ``watch=True`` or only other requests with ``watch=False``) with HTTP ``status`` and a
        Status body like the real server's for that code (429/503 add Retry-After: 1)."""
        with self.lock:
            self._faults.append(Fault(n, status, method, path, message, body, watch))

    def cut_next(self, n: int = 1, *, method: str | None = None, path: str | None = None) -> None:
        """Answer the next ``n`` requests (optionally only those with this method / path prefix) with half an
        answer: the request is served (a write lands), then the status line, the headers with the whole body's
        Content-Length and half the body are sent, and the connection closes, as a server dying mid-answer does.
        A watch gets its 200 and half an event."""
        with self.lock:
            self._cuts.append(Fault(n, 200, method, path, None, None))

    def take_cut(self, method: str, path: str) -> bool:
        with self.lock:
            for f in self._cuts:
                if f.remaining > 0 and (f.method is None or f.method == method) and (f.path is None or path.startswith(f.path)):
                    f.remaining -= 1
                    return True
            self._cuts = [f for f in self._cuts if f.remaining > 0]
        return False

    def clear_faults(self) -> None:
        """Forget every scripted fault (and cut) not yet used up: the outage is over."""
        with self.lock:
            self._faults = []
            self._cuts = []

    def take_fault(self, method: str, path: str, *, watching: bool = False) -> Obj | None:
        with self.lock:
            for f in self._faults:
                if f.remaining > 0 and (f.method is None or f.method == method) and (f.path is None or path.startswith(f.path)) \
                        and (f.watch is None or f.watch == watching):
                    f.remaining -= 1
                    return f.body or generic(f.code, f.message)
            self._faults = [f for f in self._faults if f.remaining > 0]
        return None

    def before_next(self, change: Callable[[State], Any], *, method: str | None = None, path: str | None = None) -> None:
        """Run ``change(state)`` once, just before the next request (optionally only those with this method / path
        prefix) is served: another client's write landing between a controller's read and its write, on cue."""
        with self.lock:
            self._interludes.append(Interlude(change, method, path))

    def take_interlude(self, method: str, path: str) -> Callable[[State], Any] | None:
        with self.lock:
            for i, staged in enumerate(self._interludes):
                if (staged.method is None or staged.method == method) and (staged.path is None or path.startswith(staged.path)):
                    del self._interludes[i]
                    return staged.change
        return None

    def record(self, req: Request) -> None:
        with self.lock:
            self.requests.append(req)

    def requests_to(self, method: str | None = None, path: str = "") -> list[Request]:
        with self.lock:
            return [r for r in self.requests if (method is None or r.method == method) and r.path.startswith(path)]

    # ------------------------------------------------------------ test helpers

    def add_node(self, obj: Obj) -> Obj:
        return self.create(NODES, obj, keep_status=True)

    def add_pod(self, obj: Obj, namespace: str = "") -> Obj:
        """Create a pod as the API would (defaults, Pending status) but keep any status the test gives."""
        ns = namespace or (obj.get("metadata") or {}).get("namespace") or "default"
        return self.create(PODS, self.prepare_create(PODS, ns, obj, admission=False), ns, keep_status=True)

    def add(self, res: str, obj: Obj, namespace: str = "") -> Obj:
        return self.create(res, obj, namespace, keep_status=True)

    def update(self, res: str, name: str, namespace: str = "", *, mutate: Callable[[Obj], Any] | None = None,
               merge: Obj | None = None) -> Obj:
        """Change an object as another controller would (no validation, except that no client can add a
        scheduling gate after creation): ``mutate(obj)`` edits a copy in place, ``merge`` is a JSON merge patch.
        Bumps resourceVersion and emits MODIFIED if anything changed."""
        from .patch import apply_merge_patch
        r = resource(res)
        with self.lock:
            obj = self._current(r, (namespace or "default") if r.namespaced else "", name)
            new = copy.deepcopy(obj)
            if merge is not None:
                new = apply_merge_patch(new, merge)
            if mutate is not None:
                mutate(new)
            new["metadata"]["resourceVersion"] = obj["metadata"]["resourceVersion"]
            if r is PODS:
                errors = validation.scheduling_gate_errors(new, obj)
                if errors:
                    raise invalid_object(r, name, errors)
            return self.replace(r, new, namespace, validate=False)

    def delete(self, res: str, name: str, namespace: str = "", *, grace_seconds: int | None = None) -> Obj:
        """Delete now (DELETED with the last state), or with ``grace_seconds`` only mark it deleting
        (deletionTimestamp, MODIFIED), as a kubectl delete of a running pod does."""
        r = resource(res)
        with self.lock:
            ns = (namespace or "default") if r.namespaced else ""
            old = self._current(r, ns, name)
            if grace_seconds:
                new = copy.deepcopy(old)
                when = self.clock() + dt.timedelta(seconds=grace_seconds)
                new["metadata"]["deletionTimestamp"] = when.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
                new["metadata"]["deletionGracePeriodSeconds"] = grace_seconds
                return self._commit(r, (ns, name), "MODIFIED", new, old)
            return self._commit(r, (ns, name), "DELETED", old, old)

    def get_pod(self, namespace: str, name: str) -> Obj | None:
        return self.get(PODS, name, namespace)

    def get_node(self, name: str) -> Obj | None:
        return self.get(NODES, name)

    def get_lease(self, namespace: str, name: str) -> Obj | None:
        return self.get("leases", name, namespace)

    @property
    def events(self) -> list[Obj]:
        """Every Event created (core/v1 and events.k8s.io/v1), oldest first."""
        with self.lock:
            evs = [o for r in ("events", "events.events.k8s.io") for o in self._store(resource(r)).values()]
            return [copy.deepcopy(e) for e in sorted(evs, key=lambda e: int(e["metadata"]["resourceVersion"]))]

    @property
    def leases(self) -> list[Obj]:
        return self.objects("leases")

    def add_mutating_webhook(self, name: str, url: str, **options: Any) -> MutatingWebhook:
        """Call ``url`` with an AdmissionReview (as in the capture) on every pod CREATE and apply its JSONPatch."""
        hook = MutatingWebhook(name, url, **options)
        with self.lock:
            self.webhooks.append(hook)
        return hook


