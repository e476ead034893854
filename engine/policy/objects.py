"""Policies kept in the cluster as Kubernetes objects (``--policy-source cluster``): a
SchedulingPolicy or Reservation as the API server returns it → the same ``Document`` a
file's YAML gives, so one pipeline (schema, typed CEL compile, the whole set or nothing)
judges both, and a file that ``kpe check`` passes can be ``kubectl apply``'d as it is.

What the API server adds is left out: metadata but the name (uid, resourceVersion,
generation, managedFields, the annotations tools write), and ``status``, which is kpe's
own answer. Labels and annotations are for people and tools, so editing them is no change
of the set. An object has no lines: its errors name ``schedulingpolicy/NAME`` (or
``reservation/NAME``) as their file, with the field path, and no line or column.

``check_object`` is ``kpe check`` of one object, for the validating webhook: the same
document, the same pipeline (schema, typed CEL compile, cost), nothing across the set.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from engine.errors import Location, PolicyError, PolicyLoadError
from engine.policy.compiler import CompileDeadline, CompileOverdue, CostLimits
from engine.policy.counts import count_specs
from engine.policy.documents import Document
from engine.policy.loader import ALLOW_EMPTY_HINT, API_GROUP, compile_documents, generation_of
from engine.policy.model import SYSTEM_NAMESPACES, PolicySet
from engine.policy.params import ClusterParams
from engine.policy.reads import pod_projection

API_VERSION = "kpe.dev/v1alpha1"
KINDS = ("SchedulingPolicy", "Reservation")


@dataclass(frozen=True, order=True)
class ObjectKey:
    """One object of a kind (both kinds are cluster-scoped: the name is unique per kind)."""

    kind: str
    name: str

    @property
    def file(self) -> str:
        """What its errors name as their file: what ``kubectl get`` takes (``schedulingpolicy/NAME``)."""
        return f"{self.kind.lower()}/{self.name}"


@dataclass(frozen=True)
class PolicyObject:
    """What kpe keeps of one object: the document it compiles, and the ``metadata.generation``
    (the API server's count of spec changes) that document is, which status reports back."""

    key: ObjectKey
    generation: int
    uid: str
    data: Mapping[str, Any]

    def document(self) -> Document:
        return Document(file=self.key.file, index=0, data=_thaw(self.data))


def convert(obj: Mapping[str, Any]) -> PolicyObject:
    """An object from the API server as kpe compiles it (the watch's objects are JSON)."""
    meta = obj.get("metadata") or {}
    kind = str(obj.get("kind") or "")
    name = str(meta.get("name") or "")
    data: dict[str, Any] = {"apiVersion": obj.get("apiVersion", API_VERSION), "kind": kind, "metadata": {"name": name}}
    if "spec" in obj:
        data["spec"] = obj["spec"]
    return PolicyObject(ObjectKey(kind, name), int(meta.get("generation") or 0), str(meta.get("uid") or ""), data)


def _thaw(value: Any) -> Any:
    """A copy the compiler may hold on to: objects stay as the watch delivered them."""
    if isinstance(value, Mapping):
        return {k: _thaw(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_thaw(v) for v in value]
    return value


def empty_cluster_error() -> PolicyError:
    """KPE402 for the cluster source: as for files, an empty set is refused unless asked for."""
    return PolicyError(
        "KPE402",
        "no SchedulingPolicy or Reservation in the cluster: with an empty set every node passes every pod; "
        f"create one, or pass {ALLOW_EMPTY_HINT} if an empty set is what you want",
        Location("cluster"),
    )


def load_objects(
    objects: Iterable[PolicyObject], *, allow_empty: bool = False, cost_limits: CostLimits | None = None,
    excluded_namespaces: Iterable[str] = SYSTEM_NAMESPACES, cluster_params: ClusterParams | None = None,
) -> PolicySet:
    """The set of ``objects``, compiled as files are (``engine.policy.loader.load``); raises
    ``PolicyLoadError`` with every problem, each naming its object. Objects are compiled in
    kind and name order, so which of two clashing objects is refused does not depend on the
    order the API server listed them in."""
    ordered = sorted(objects, key=lambda o: o.key)
    policies, errors = compile_documents([o.document() for o in ordered], cost_limits, cluster_params=cluster_params)
    if not errors and not policies and not allow_empty:
        errors.append(empty_cluster_error())
    if errors:
        raise PolicyLoadError(errors)
    by_name = tuple(sorted(policies, key=lambda p: p.name))
    return PolicySet(
        by_name,
        generation_of(by_name),
        tuple(o.key.file for o in ordered),
        pod_projection=pod_projection(by_name),
        excluded_namespaces=frozenset(excluded_namespaces),
        counts=count_specs(by_name),
    )


# -- one object, as the validating webhook checks it ---------------------------------------


def object_name(obj: Mapping[str, Any]) -> str:
    """``Kind/name`` for messages; what is missing stays visible as ``?``."""
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    return f"{obj.get('kind') or '?'}/{name if isinstance(name, str) and name else '?'}"


@dataclass(frozen=True)
class ObjectCheck:
    """What ``kpe check`` would say of the object: its errors (none: it loads) and warnings."""

    errors: list[PolicyError] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors

    def message(self) -> str:
        """The errors, one a line: ``field.path: KPE### message``."""
        return "\n".join(admission_text(e) for e in self.errors)


def admission_text(error: PolicyError) -> str:
    """One error as a refusal names it: the field path first, which is where ``kubectl``
    users look, then the code and the message (no file or line: the object came as JSON)."""
    return (f"{error.path}: " if error.path else "") + f"{error.code} {error.message}"


def check_object(obj: Mapping[str, Any], *, cost_limits: CostLimits | None = None, deadline: CompileDeadline | None = None) -> ObjectCheck:
    """Check one SchedulingPolicy or Reservation on its own (``kpe check`` of that one file),
    as ``--policy-source cluster`` would compile it (``convert``). An object whose expressions
    take longer than ``deadline`` to check is refused (KPE309): the policy webhook answers
    within the API server's timeout whatever it is sent."""
    kind = obj.get("kind")
    api_version = obj.get("apiVersion")
    meta = obj.get("metadata")
    if kind not in KINDS or not isinstance(api_version, str) or not api_version.startswith(API_GROUP):
        found = f"kind {kind!r}, apiVersion {api_version!r}"
        return ObjectCheck([PolicyError("KPE103", f"expected a {KINDS[0]} or {KINDS[1]} of {API_GROUP.rstrip('/')}; got {found}")])
    if not isinstance(meta, Mapping) or not isinstance(meta.get("name"), str):
        return ObjectCheck([PolicyError("KPE200", "missing required field 'name'", path="metadata.name")])
    try:
        policies, errors = compile_documents([convert(obj).document()], cost_limits, deadline=deadline)
    except CompileOverdue as late:
        budget = late.deadline.budget
        message = (f"checking this object's expressions takes longer than the policy webhook may wait ({budget:g} s of the API server's "
                   "timeoutSeconds); split its rules into several policies (kpe check shows what a policy costs to load)")
        return ObjectCheck([PolicyError("KPE309", message, path="spec")])
    warnings = sorted((w for p in policies for w in p.warnings), key=PolicyError.sort_key)
    return ObjectCheck(sorted(errors, key=PolicyError.sort_key), [admission_text(w) for w in warnings])
