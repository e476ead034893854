"""What kpe's node and pod cache keeps of an object (``server.cluster.cache``).

Every object is trimmed as it enters (``trim``, page by page while listing, so
a first list never holds the untrimmed cluster): ``metadata.managedFields`` is
dropped, as kube-scheduler drops it, and every string value is interned (but
UIDs, resourceVersions and a bound pod's name, which no other object repeats), so
the label values, namespaces, node and image names, timestamps and the like
that thousands of pods repeat are one object each.

Bound pods' equal parts (labels, containers and their resources, conditions,
container statuses: what replicas of one Deployment have alike) are then made
one object each (``_interned``), as the strings are; so no part of a cached
pod may be changed in place.

Pods bound to a node and not gated are also *projected* as they enter: cut to
the served policy set's ``pod_projection`` (``engine.cluster.projection``), the fields
its expressions can read of other pods plus ``KPE_READS``, what kpe itself
reads of them. Pending and gated pods (the subjects of decisions) and nodes
stay whole; so does every pod when a policy reads other pods whole. What
reads cached pods, and what it reads of them (keep ``KPE_READS`` in step):

- ``engine.cluster.nodeinfo`` (the ``nodeInfo`` views, ``_place`` here):
  ``spec.nodeName``, ``status.phase``, and for ``requested`` what
  ``kube.podRequests`` declares it reads (container and init container
  ``resources``, init containers' ``restartPolicy``, pod-level ``resources``,
  ``spec.overhead``); ``pod_key``: ``metadata.uid``, ``namespace``, ``name``;
  a relist (``replace``): ``metadata.resourceVersion`` where the pod has one, and
  a bound pod's projection, which keeps none, as a whole.
- policies, through ``nodeInfo.pods`` (filters, scores, messages, node-scoped
  variables, preemption), ``victim``/``victims`` (``server.verbs.handlers``'s preempt
  verb resolves victims by UID with ``pod_by_uid``; it answers their
  ``metadata.uid``; ``engine.decisions.preemption`` names them by namespace and name and
  rebuilds ``nodeInfo`` without them with ``engine.cluster.nodeinfo``), and ``pods`` and
  ``admitted`` (admission: ``server.admission.webhook``, the admit verb, the gate
  controller, ``/apis/v1/explain``): the projection's analysed part.
- ``engine.decisions.admission`` (``admitted``, ``held_by_kpe``; here for ``gated``):
  ``metadata.annotations['kpe.dev/gates']``, ``spec.schedulingGates``,
  ``spec.nodeName``, ``status.phase``.
- ``server.admission.gates`` (``pods()``, ``nodes()``): the above; the pods it decides
  and orders (``creationTimestamp``) are gated, so whole; its check that the
  cache caught up with a release reads ``metadata.resourceVersion`` (a released
  pod seen bound has none, and has caught up: nothing holds it back).
- ``server.admission.requeue`` (``pod_by_uid``): ``spec.nodeName``.
- ``engine.cluster.kubefilters`` (``/apis/v1/explain?pod=``, kube-scheduler's preemption dry
  run over ``nodeInfo.pods``): ``spec.priority``, ``status.startTime``,
  ``metadata.deletionTimestamp``, the requests above.
- ``server.introspection.endpoints`` (``node_info``, ``pods()``): ``/apis/v1/nodes/{name}``
  lists ``metadata.namespace``/``name``; explain as the verbs.
- ``server.reservations.controller`` / ``engine.reservations.slots`` (``pods()``): the reservation
  labels and annotations, ``status.nominatedNodeName``, ``deletionTimestamp``,
  ``creationTimestamp``, ``spec.nodeName``, ``status.phase``; whether a bound
  pod owns a reservation it judges by namespace only, then on the pod read
  whole from the API server before it claims a slot.
- Match conditions (``engine.policy.selectors``, ``engine.decisions.evaluation.matching_scopes``:
  namespaces, labels, resources, expression) otherwise read only the pod being
  decided, which comes from the request or is a gated pod: never a projected one.
- ``on_event`` subscribers get the object as kept: ``server.admission.requeue`` reads a
  placeholder's ``metadata.labels['kpe.dev/reservation']``, ``uid``, ``deletionTimestamp`` and
  ``spec.nodeName``.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any

import orjson

from engine.cluster.keptjson import dumps_kept
from engine.cluster.projection import EVERYTHING, Projection

Obj = dict[str, Any]


def trim(obj: Obj, projection: Projection = EVERYTHING) -> Obj:
    """What the cache keeps of a node or pod: without ``metadata.managedFields`` (the API
    server's field ownership bookkeeping, for server-side apply: nothing in kpe reads it,
    and kube-scheduler drops it from its own cache), a pod bound to a node and not gated
    cut to ``projection`` (a new object; see the module docstring), and string values
    interned (UIDs, resourceVersions and a bound pod's name excepted), so equal values
    across objects are one object. Nothing a decision reads
    changes. Returns the object kept: ``obj`` itself, changed in place, unless projected."""
    if type(obj) is not dict:
        return obj  # not an object: left for the caller to judge
    meta = obj.get("metadata")
    if type(meta) is dict:
        meta.pop("managedFields", None)
    bound = is_projected(obj)
    if bound and not projection.whole:
        with contextlib.suppress(RecursionError):  # deeper than the stack: kept whole
            obj = projection.apply(obj)
    # Pods and nodes are schema-validated by the API server and nest a few dozen levels at
    # most; an object deeper than the interpreter's stack is only left partly interned.
    with contextlib.suppress(RecursionError):
        _interned(obj, PARTS if bound else NOT_SHARED)
        status = obj.get("status")
        if bound and type(status) is dict and "startTime" not in status:
            # Shared whole too before the pod starts: the pods a scheduler bound and no kubelet
            # runs yet keep equal statuses (two dicts a pod otherwise). Not once it has started:
            # a start time is most often the pod's own, and the table's entry (its JSON as the
            # key) would cost more than it saves, 5.7 MiB more for 20,000 running pods.
            obj["status"] = _shared(status)
    return obj


def is_projected(pod: Obj) -> bool:
    """Whether the cache keeps only the projection of ``pod``: bound to a node, no scheduling
    gates. Pending and gated pods are the subjects of decisions (the gate controller's and the
    webhook's admission; a pod's own fields are read in full) and stay whole."""
    spec = pod.get("spec")
    return type(spec) is dict and bool(spec.get("nodeName")) and not spec.get("schedulingGates")


_intern = sys.intern

# ``_interned``'s ``share``: where equal parts become one object. A bound pod shares what lies
# inside its ``metadata``, ``spec`` and ``status`` (two levels down), and its ``status`` whole
# until it has started (``trim``); never its ``metadata`` or ``spec`` (its name, its node) or itself.
PARTS = 2
NOT_SHARED = -1

# Strings no other object repeats, so interning them only grows the interpreter's table of
# interned strings (3.7 MiB more for 20,000 bound pods, in process): an object's UID and
# resourceVersion wherever they are, and a bound pod's name (its metadata is one of the dicts
# one level down); a node's name stays interned (every pod on it names it).
_IDS = frozenset({"uid", "resourceVersion"})
_OWN = _IDS | {"name"}

# Equal parts of bound pods, one object each: a key (the part's JSON) to the part kept.
_SHARED: dict[bytes, Any] = {}
# Entries no pod holds any more are dropped when the table has doubled since the last sweep
# (and has at least SWEEP_FLOOR entries).
SWEEP_FLOOR = 4096
_sweep_at = SWEEP_FLOOR


def _interned(value: Any, share: int) -> Any:
    """Intern the string values (not keys: orjson already shares the short ones) under
    ``value``, a dict or list; interned strings are freed like any other once the cache lets
    go of them. With ``share`` 0, return the equal part an earlier bound pod had instead of
    ``value``, as ``sys.intern`` does for strings (its children first); ``share`` levels
    further down with a positive one, never with ``NOT_SHARED``. Replicas of a Deployment
    differ in their name, UID and a few timestamps; what they share (labels as projected,
    containers and their resources, conditions, container statuses) is most of what a
    projected pod holds, and 20,000 bound pods would hold it 20,000 times (five conditions
    alone are five dicts a pod). Shared parts are never changed in place, as no part of a
    cached pod ever is. One walk does both: it runs on every watch event."""
    below = share - 1 if share > 0 else share
    if type(value) is dict:
        own = _OWN if share == 1 else _IDS
        for key, item in value.items():
            kind = type(item)
            if kind is str:
                if key not in own:
                    value[key] = _intern(item)
            elif kind is dict or kind is list:
                value[key] = _interned(item, below)
    else:
        for index, item in enumerate(value):
            kind = type(item)
            if kind is str:
                value[index] = _intern(item)
            elif kind is dict or kind is list:
                value[index] = _interned(item, below)
    return value if share != 0 else _shared(value)


def _shared(value: Any) -> Any:
    """The equal part kept before, or ``value``, kept from now on (its children shared first)."""
    try:
        key = dumps_kept(value)  # equal JSON, keys in the same order: equal parts
    except orjson.JSONEncodeError:  # an integer beyond 64 bits: kept as it is
        return value
    kept = _SHARED.setdefault(key, value)
    if kept is value and len(_SHARED) > _sweep_at:
        _sweep()
    return kept


def _sweep() -> None:
    """Forget the parts only the table holds (their pods are gone or changed), so the table
    follows the cluster instead of growing with every part ever seen."""
    global _sweep_at
    for key in reversed(list(_SHARED)):  # a part after its children: they are let go first
        part = _SHARED.get(key)
        # The table's reference, ``part`` and getrefcount's argument: nothing else holds it.
        if part is not None and sys.getrefcount(part) <= 3:
            _SHARED.pop(key, None)
    _sweep_at = max(SWEEP_FLOOR, 2 * len(_SHARED))
