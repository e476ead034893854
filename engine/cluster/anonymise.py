"""Anonymising a cluster snapshot (``kpe snapshot --anonymise``): names hashed, the
rest of what decisions read kept, so the snapshot can leave the cluster (a CI job,
an issue) and ``kpe diff`` still decides as it would on the real objects.

Hashed, consistently within a snapshot and across snapshots taken with the same
salt (HMAC-SHA256, 10 hex digits): node names (``node-…``), pod names (``pod-…``),
namespaces (``ns-…``), owner names (``owner-…``); wherever they appear
(``spec.nodeName``, ``status.nominatedNodeName``, label values equal to the name
such as ``kubernetes.io/hostname``, node affinity ``matchFields`` on
``metadata.name``, pod affinity ``namespaces``).

Kept as they are, because policies decide on them: label keys and values, taints,
tolerations, resources, priorities, images, node affinity, owner kinds, timestamps,
UIDs, and the namespaces Kubernetes itself creates. A namespace or node name that
appears in the policy files (``match.namespaces``, ``params``, string literals) is
kept too, or the policies would no longer match it (``kpe snapshot --keep-names-from``),
and so is any name given with ``--keep-name``.

Dropped, because they can hold secrets or addresses and no shipped policy reads
them: annotations (but ``kpe.dev/*`` and keys named in the policy files),
containers' ``env``, ``envFrom``, ``command``, ``args``, probes, mounts and the
rest but name, image, resources, ports, restart policy and security context;
volume sources (the kind is kept: ``{"name": …, "persistentVolumeClaim": {}}``);
service accounts, pull secrets, hostnames; pod and node addresses, container
statuses, condition messages, node provider IDs, CIDRs, machine and boot IDs;
the gate messages of kpe's view.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Iterable, Mapping
from typing import Any

SYSTEM_NAMESPACES = frozenset(("default", "kube-system", "kube-public", "kube-node-lease"))
KPE_ANNOTATIONS = "kpe.dev/"
CONTAINER_FIELDS = ("name", "image", "imagePullPolicy", "resources", "restartPolicy", "ports", "securityContext")
POD_SPEC_DROPPED = ("hostname", "subdomain", "serviceAccount", "serviceAccountName", "imagePullSecrets", "ephemeralContainers")
NODE_INFO_DROPPED = ("machineID", "systemUUID", "bootID")
_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]*")
_PREFIX = {"node": "node", "pod": "pod", "namespace": "ns", "owner": "owner"}


def words_in(texts: Iterable[str]) -> set[str]:
    """Every name-like word of ``texts`` (policy files): the names to keep."""
    found: set[str] = set()
    for text in texts:
        found.update(_WORD.findall(text))
    return found


class Anonymiser:
    def __init__(self, salt: bytes, keep: Iterable[str] = (), *, words: Iterable[str] = ()) -> None:
        """``keep``: names kept whatever they name; ``words``: the words of the policy files,
        kept where they are namespaces, node names or annotation keys."""
        self._salt = salt
        self.keep = set(keep)
        self.words = set(words)
        self._nodes: dict[str, str] = {}

    def name(self, kind: str, value: str) -> str:
        if not value or value in self.keep or (kind in ("namespace", "node") and value in self.words):
            return value
        if kind == "namespace" and value in SYSTEM_NAMESPACES:
            return value
        digest = hmac.new(self._salt, f"{kind}\0{value}".encode(), hashlib.sha256).hexdigest()[:10]
        return f"{_PREFIX[kind]}-{digest}"

    def learn_nodes(self, nodes: Iterable[Mapping[str, Any]]) -> None:
        """Node names (and hostname labels) first: pods and labels refer to them."""
        for node in nodes:
            meta = node.get("metadata") or {}
            name = str(meta.get("name") or "")
            self._nodes[name] = self.name("node", name)
            host = (meta.get("labels") or {}).get("kubernetes.io/hostname")
            if isinstance(host, str):
                self._nodes.setdefault(host, self.name("node", host))

    def _node(self, value: Any) -> Any:
        return self._nodes.get(value) or self.name("node", value) if isinstance(value, str) and value else value

    def _labels(self, labels: Any, own: str = "", hashed: str = "") -> Any:
        if not isinstance(labels, dict):
            return labels
        out = {}
        for key, value in labels.items():
            if isinstance(value, str) and value in self._nodes:
                value = self._nodes[value]
            elif own and value == own:
                value = hashed
            out[key] = value
        return out

    def _annotations(self, annotations: Any) -> Any:
        if not isinstance(annotations, dict):
            return annotations
        kept = {k: v for k, v in annotations.items() if k.startswith(KPE_ANNOTATIONS) or k in self.keep or k in self.words}
        return kept or None

    def namespace(self, namespace: Mapping[str, Any]) -> dict[str, Any]:
        """A Namespace as ``namespaceObject`` holds it, named as its pods' namespace is."""
        meta = dict(namespace.get("metadata") or {})
        meta["name"] = self.name("namespace", str(meta.get("name") or ""))
        meta["annotations"] = self._annotations(meta.get("annotations"))
        return {**namespace, "metadata": _compact(meta)}

    def node(self, node: Mapping[str, Any]) -> dict[str, Any]:
        out = dict(node)
        meta = dict(out.get("metadata") or {})
        name = str(meta.get("name") or "")
        meta["name"] = self._node(name)
        meta["labels"] = self._labels(meta.get("labels"))
        meta["annotations"] = self._annotations(meta.get("annotations"))
        out["metadata"] = _compact(meta)
        spec = {k: v for k, v in (out.get("spec") or {}).items() if k in ("taints", "unschedulable")}
        out["spec"] = spec
        status = dict(out.get("status") or {})
        for key in ("addresses", "daemonEndpoints", "volumesAttached", "volumesInUse", "config"):
            status.pop(key, None)
        if isinstance(status.get("nodeInfo"), dict):
            status["nodeInfo"] = {k: v for k, v in status["nodeInfo"].items() if k not in NODE_INFO_DROPPED}
        status["conditions"] = _conditions(status.get("conditions"))
        out["status"] = _compact(status)
        return out

    def pod(self, pod: Mapping[str, Any]) -> dict[str, Any]:
        out = dict(pod)
        meta = dict(out.get("metadata") or {})
        name = str(meta.get("name") or "")
        hashed = self.name("pod", name)
        meta["name"] = hashed
        meta["namespace"] = self.name("namespace", str(meta.get("namespace") or "default"))
        meta.pop("generateName", None)
        meta["labels"] = self._labels(meta.get("labels"), name, hashed)
        meta["annotations"] = self._annotations(meta.get("annotations"))
        if isinstance(meta.get("ownerReferences"), list):
            meta["ownerReferences"] = [
                {**{k: v for k, v in ref.items() if k in ("apiVersion", "kind", "uid", "controller")}, "name": self.name("owner", str(ref.get("name") or ""))}
                for ref in meta["ownerReferences"] if isinstance(ref, dict)
            ]
        out["metadata"] = _compact(meta)
        out["spec"] = self._pod_spec(out.get("spec") or {})
        status = {k: v for k, v in (out.get("status") or {}).items() if k in ("phase", "conditions", "qosClass", "startTime", "nominatedNodeName", "reason")}
        status["conditions"] = _conditions(status.get("conditions"))
        if status.get("nominatedNodeName"):
            status["nominatedNodeName"] = self._node(status["nominatedNodeName"])
        out["status"] = _compact(status)
        return out

    def _pod_spec(self, spec: Mapping[str, Any]) -> dict[str, Any]:
        out = {k: v for k, v in spec.items() if k not in POD_SPEC_DROPPED}
        for key in ("containers", "initContainers"):
            if isinstance(out.get(key), list):
                out[key] = [{k: v for k, v in c.items() if k in CONTAINER_FIELDS} for c in out[key] if isinstance(c, dict)]
        if isinstance(out.get("volumes"), list):
            out["volumes"] = [{k: ({} if k != "name" else v) for k, v in vol.items()} for vol in out["volumes"] if isinstance(vol, dict)]
        if out.get("nodeName"):
            out["nodeName"] = self._node(out["nodeName"])
        if isinstance(out.get("affinity"), dict):
            out["affinity"] = self._affinity(out["affinity"])
        return out

    def _affinity(self, affinity: Any) -> Any:
        """Node names in matchFields and namespaces in pod (anti-)affinity terms."""
        if isinstance(affinity, dict):
            if affinity.get("key") == "metadata.name" and isinstance(affinity.get("values"), list):
                return {**affinity, "values": [self._node(v) for v in affinity["values"]]}
            out = {}
            for key, value in affinity.items():
                if key == "namespaces" and isinstance(value, list):
                    out[key] = [self.name("namespace", v) if isinstance(v, str) else v for v in value]
                else:
                    out[key] = self._affinity(value)
            return out
        if isinstance(affinity, list):
            return [self._affinity(v) for v in affinity]
        return affinity

    def kpe_view(self, view: Mapping[str, Any]) -> dict[str, Any]:
        out = dict(view)
        gated = []
        for held in view.get("gated") or []:
            gated.append({
                "namespace": self.name("namespace", str(held.get("namespace") or "")),
                "name": self.name("pod", str(held.get("name") or "")),
                "gates": [{"gate": g.get("gate"), "policy": g.get("policy")} for g in held.get("gates") or []],
            })
        out["gated"] = gated
        # The decision log's messages and node maps name nodes and pods in free text: left out.
        out.pop("decisions", None)
        reservations = view.get("reservations")
        if isinstance(reservations, Mapping):
            out["reservations"] = {**reservations, "reservations": [
                {**r, "slotStates": [{**s, "node": self._node(s.get("node")), "pod": self._pod_ref(s.get("pod"))} for s in r.get("slotStates") or []]}
                for r in reservations.get("reservations") or [] if isinstance(r, Mapping)
            ]}
        return out

    def _pod_ref(self, ref: Any) -> Any:
        """A ``namespace/name`` reference to a pod, hashed as the pod's own names are."""
        if not isinstance(ref, str) or "/" not in ref:
            return ref
        namespace, _, name = ref.partition("/")
        return f"{self.name('namespace', namespace)}/{self.name('pod', name)}"


def _conditions(conditions: Any) -> Any:
    if not isinstance(conditions, list):
        return conditions
    return [{k: v for k, v in c.items() if k != "message"} for c in conditions if isinstance(c, dict)]


def _compact(obj: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if v is not None}


__all__ = ["SYSTEM_NAMESPACES", "Anonymiser", "words_in"]
