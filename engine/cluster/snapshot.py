"""A cluster snapshot: what kpe's decisions need from a live cluster, in one file,
so ``kpe diff`` (and a CI job without cluster credentials) can replay them.

    {"apiVersion": "kpe.dev/v1alpha1", "kind": "ClusterSnapshot",
     "metadata": {"takenAt": "2026-11-21T12:00:00Z", "source": "...", "anonymised": false},
     "nodes": [Node, ...], "pods": [Pod, ...], "namespaces": [Namespace, ...],
     "kpe": {"generation": "...", "policies": [...], "gated": [...]}}     # optional

Objects are the API's JSON, trimmed as they enter (``trim``): ``metadata.managedFields``
and the ``kubectl.kubernetes.io/last-applied-configuration`` annotation go (kube-scheduler
drops the first too, and no decision reads either). Finished pods (Succeeded, Failed)
are left out unless asked for: they hold no node resources and are no scheduling subject.
Namespaces (``namespaceObject``) are kept as kpe's cache keeps them (name, labels,
annotations, phase: ``engine.cluster.projection.namespace_view``); a snapshot without
them (older, or taken without the right to list namespaces) decides with null.
``kpe`` is what a running kpe reported when the snapshot was taken (the serving
generation, its policies, the pods its gates hold), when it was asked.

Files are JSON (YAML is read too: a snapshot edited by hand, a fixture), gzip-compressed
when the name ends in ``.gz``. ``engine.cluster.anonymise`` hashes names before writing.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from engine.cluster.nodeinfo import TERMINAL_PHASES
from engine.cluster.projection import namespace_view

API_VERSION = "kpe.dev/v1alpha1"
KIND = "ClusterSnapshot"
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


class SnapshotError(ValueError):
    """A snapshot file that cannot be read, or is not a snapshot."""


@dataclass
class Snapshot:
    nodes: list[dict[str, Any]]
    pods: list[dict[str, Any]]
    taken_at: str = ""
    source: str = ""
    anonymised: bool = False
    kpe: dict[str, Any] | None = None
    namespaces: list[dict[str, Any]] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)  # metadata fields this version does not know

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": {**self.extra, "takenAt": self.taken_at, "source": self.source, "anonymised": self.anonymised},
            "nodes": self.nodes,
            "pods": self.pods,
            "namespaces": self.namespaces,
        }
        if self.kpe is not None:
            data["kpe"] = self.kpe
        return data

    @classmethod
    def from_dict(cls, data: Any, origin: str = "snapshot") -> Snapshot:
        if not isinstance(data, dict) or data.get("kind") != KIND:
            raise SnapshotError(f"{origin} is not a kpe cluster snapshot (kind: {KIND}); make one with kpe snapshot")
        if data.get("apiVersion") != API_VERSION:
            raise SnapshotError(f"{origin}: apiVersion {data.get('apiVersion')!r} is not {API_VERSION}")
        meta = data.get("metadata") or {}
        lists: dict[str, list[dict[str, Any]]] = {}
        for key in ("nodes", "pods", "namespaces"):
            items = data.get(key) or []
            if not isinstance(items, list) or not all(isinstance(o, dict) for o in items):
                raise SnapshotError(f"{origin}: {key} must be a list of objects")
            lists[key] = items
        kpe = data.get("kpe")
        if kpe is not None and not isinstance(kpe, dict):
            raise SnapshotError(f"{origin}: kpe must be an object")
        known = {"takenAt", "source", "anonymised"}
        return cls(
            nodes=lists["nodes"],
            pods=lists["pods"],
            taken_at=str(meta.get("takenAt") or ""),
            source=str(meta.get("source") or ""),
            anonymised=bool(meta.get("anonymised")),
            kpe=kpe,
            namespaces=[namespace_view(n) for n in lists["namespaces"]],
            extra={k: v for k, v in meta.items() if k not in known} if isinstance(meta, dict) else {},
        )


def trim(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The object without what no decision reads: managedFields, the last-applied annotation."""
    out = dict(obj)
    meta = out.get("metadata")
    if isinstance(meta, dict):
        meta = {k: v for k, v in meta.items() if k != "managedFields"}
        annotations = meta.get("annotations")
        if isinstance(annotations, dict) and LAST_APPLIED in annotations:
            meta["annotations"] = {k: v for k, v in annotations.items() if k != LAST_APPLIED}
        out["metadata"] = meta
    return out


def is_finished(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in TERMINAL_PHASES


def write(snapshot: Snapshot, path: str | Path) -> int:
    """Write ``snapshot`` as JSON (gzip for ``*.gz``); returns the bytes written."""
    text = json.dumps(snapshot.to_dict(), separators=(",", ":"), sort_keys=False).encode() + b"\n"
    data = gzip.compress(text, mtime=0) if str(path).endswith(".gz") else text
    Path(path).write_bytes(data)
    return len(data)


def read(path: str | Path) -> Snapshot:
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise SnapshotError(f"cannot read {path}: {exc.strerror}") from None
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as exc:
            raise SnapshotError(f"{path}: broken gzip data: {exc}") from None
    try:
        data = json.loads(raw)
    except ValueError:
        try:
            data = yaml.safe_load(raw)
        except yaml.YAMLError as exc:
            raise SnapshotError(f"{path} is not valid JSON or YAML: {exc}") from None
    return Snapshot.from_dict(data, str(path))


__all__ = ["API_VERSION", "KIND", "Snapshot", "SnapshotError", "is_finished", "read", "trim", "write"]
