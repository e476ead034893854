"""One kpe object as the Kubernetes API holds it, checked as ``kpe check`` checks a file.

The API server hands kpe a SchedulingPolicy or Reservation (the validating webhook's
AdmissionReview) with what the server added to it: a uid, a resourceVersion, timestamps,
managedFields, a status. kpe's schemas describe what people write, so the object is first
cut back to that (``document_of``), then runs the same pipeline as a policy file: schema,
CEL compile with types, cost (``engine.policy.loader.compile_documents``). Checks across a
set (two policies with one name or one gate) are not made here: one object cannot break
them alone, and the set that holds it reports them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from engine.errors import PolicyError
from engine.policy.compiler import CostLimits
from engine.policy.documents import Document
from engine.policy.loader import API_GROUP, POLICY_KIND, RESERVATION_KIND, compile_documents

KINDS = (POLICY_KIND, RESERVATION_KIND)
# What people write in metadata (the schemas' metadata); the rest is the API server's.
WRITTEN_METADATA = ("name", "labels", "annotations")


def document_of(obj: Mapping[str, Any], *, source: str = "") -> Document:
    """``obj`` without what the API server adds to an object: metadata other than its name,
    labels and annotations, and ``status``. ``source`` names it in locations
    (``SchedulingPolicy/spread``); kpe's schemas refuse anything else left in."""
    data: dict[str, Any] = {key: value for key, value in obj.items() if key != "status"}
    meta = obj.get("metadata")
    if isinstance(meta, Mapping):
        data["metadata"] = {key: meta[key] for key in WRITTEN_METADATA if key in meta}
    return Document(file=source or object_name(obj), index=0, data=data)


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
        """The errors on one line each one a line: ``field.path: KPE### message``."""
        return "\n".join(admission_text(e) for e in self.errors)


def admission_text(error: PolicyError) -> str:
    """One error as a refusal names it: the field path first, which is where ``kubectl``
    users look, then the code and the message (no file or line: the object came as JSON)."""
    return (f"{error.path}: " if error.path else "") + f"{error.code} {error.message}"


def check_object(obj: Mapping[str, Any], *, cost_limits: CostLimits | None = None) -> ObjectCheck:
    """Check one SchedulingPolicy or Reservation on its own (``kpe check`` of that one file)."""
    kind = obj.get("kind")
    api_version = obj.get("apiVersion")
    if kind not in KINDS or not isinstance(api_version, str) or not api_version.startswith(API_GROUP):
        found = f"kind {kind!r}, apiVersion {api_version!r}"
        return ObjectCheck([PolicyError("KPE103", f"expected a {POLICY_KIND} or {RESERVATION_KIND} of {API_GROUP.rstrip('/')}; got {found}")])
    doc = document_of(obj)
    _, errors = compile_documents([doc], cost_limits)
    return ObjectCheck(sorted(errors, key=PolicyError.sort_key))
