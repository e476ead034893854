"""The pod a workload's controller would create, so ``kpe explain --pod`` and
PolicyTest fixtures can take the Deployments, StatefulSets, Jobs and CronJobs
users keep in Git, not only Pods.

Policies match and judge pods: their namespace, labels, annotations and spec.
A Deployment's own labels are not its pods' labels, and its ``kind`` is not
``Pod``, so evaluating the workload as if it were a pod matches the wrong
policies and passes everything. This module builds the pod instead, as
Kubernetes' controllers do (``pkg/controller/controller_utils.go``
``GetPodFromTemplate`` and each kind's controller, Kubernetes 1.37): namespace
from the workload; labels, annotations, finalizers and spec from the pod
template; plus what the controller adds: the controller's ``ownerReferences``,
StatefulSet's name, hostname, identity labels and claims, DaemonSet's
tolerations and labels, Job's labels, finalizer and index. CronJob goes
through the Job its controller would create.

What the cluster would make up at run time cannot be known from a file, so
kpe puts documented stand-ins there (docs/workloads.md): ``00000`` for the
five random characters of a generated name, ``00000000`` for a CronJob's
scheduled minute, a hash of the template computed by kpe for
``pod-template-hash`` and ``controller-revision-hash`` (Kubernetes hashes its
Go structures, which kpe cannot reproduce), and UIDs derived from kind,
namespace and name when the file carries none. A DaemonSet pod gets no
node affinity: the controller pins each pod to one node, so kpe's verdict on
each node is that of the pod the DaemonSet would make for that node.

Pure: no I/O and no imports of kpe; a refusal is a ``WorkloadError`` whose
message names what was given.
"""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Mapping
from typing import Any

WORKLOADS: dict[str, str] = {
    "Deployment": "apps/v1",
    "ReplicaSet": "apps/v1",
    "StatefulSet": "apps/v1",
    "DaemonSet": "apps/v1",
    "Job": "batch/v1",
    "CronJob": "batch/v1",
}
"""The kinds kpe expands, with the one apiVersion it reads each in."""

ACCEPTED = "Pod, " + ", ".join(WORKLOADS)

RANDOM_SUFFIX = "00000"
"""Stands for the five random characters the API server appends to a ``generateName``."""

CRONJOB_MINUTE = "00000000"
"""Stands for the scheduled time (minutes since the epoch) in a CronJob's Job name."""

MAX_GENERATED_PREFIX = 58
"""``names.MaxGeneratedNameLength``: a generateName longer than this is cut before the suffix."""

_SAFE = "bcdfghjklmnpqrstvwxz2456789"  # k8s.io/apimachinery/pkg/util/rand alphanums

DAEMON_TOLERATIONS: tuple[dict[str, str], ...] = (
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/pid-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
)
"""What the DaemonSet controller adds to every daemon pod (``AddOrUpdateDaemonPodTolerations``)."""

HOST_NETWORK_TOLERATION = {"key": "node.kubernetes.io/network-unavailable", "operator": "Exists", "effect": "NoSchedule"}


class WorkloadError(ValueError):
    """The object is not a pod and not a workload kpe can expand; the message names it."""


def describe(obj: Mapping[str, Any]) -> str:
    """``Deployment shop/api``: the object's kind and name as messages name it."""
    kind = obj.get("kind") or "object without a kind"
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    name = meta.get("name")
    if not name:
        return str(kind)
    namespace = meta.get("namespace")
    return f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}"


def is_workload(obj: Mapping[str, Any]) -> bool:
    return obj.get("kind") in WORKLOADS


def pod_for(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The pod ``obj`` stands for: a Pod as it is (an object without a ``kind``,
    as PolicyTest fixtures write pods, is a pod too), a workload as the pod its
    controller would create. Anything else is a ``WorkloadError`` naming it."""
    kind = obj.get("kind")
    if kind is None or kind == "Pod":
        return copy.deepcopy(dict(obj))
    if kind not in WORKLOADS:
        raise WorkloadError(f"{describe(obj)} is not a pod or a workload kpe can expand (accepted: {ACCEPTED})")
    api = obj.get("apiVersion")
    if api is not None and api != WORKLOADS[str(kind)]:
        raise WorkloadError(f"{describe(obj)}: apiVersion {api} is not one kpe expands (expected {WORKLOADS[str(kind)]})")
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping) or not meta.get("name"):
        raise WorkloadError(f"{describe(obj)} has no metadata.name")
    if kind == "CronJob":
        return _cronjob(obj)
    template = _template(obj, ("spec", "template"))
    if kind == "Deployment":
        return _deployment(obj, template)
    if kind == "ReplicaSet":
        return _replicaset(obj, template)
    if kind == "StatefulSet":
        return _statefulset(obj, template)
    if kind == "DaemonSet":
        return _daemonset(obj, template)
    return _job(obj, template)


# -- what every controller does (GetPodFromTemplate) ------------------------------------


def _template(obj: Mapping[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
    value: Any = obj
    for key in path:
        value = value.get(key) if isinstance(value, Mapping) else None
    if not isinstance(value, Mapping) or not isinstance(value.get("spec"), Mapping):
        raise WorkloadError(f"{describe(obj)} has no pod template ({'.'.join(path)}.spec)")
    return copy.deepcopy(dict(value))


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def uid_of(kind: str, namespace: str, name: str, given: Any = None) -> str:
    """The object's UID when the file gives one, else one derived from kind, namespace
    and name, so the same file always makes the same pod."""
    return str(given) if given else str(uuid.uuid5(uuid.NAMESPACE_URL, f"kpe.dev/workload/{kind}/{namespace}/{name}"))


def template_hash(template: Mapping[str, Any], collision_count: Any = None) -> str:
    """A hash of a pod template in the form of Kubernetes' ``pod-template-hash``
    (FNV-1a 32, written in decimal and safe-encoded), over kpe's canonical JSON of the
    template: stable for a file, not the value the cluster computes."""
    data = json.dumps(template, sort_keys=True, separators=(",", ":"), default=str)
    if collision_count is not None:
        data += f"#{collision_count}"
    h = 0x811C9DC5
    for byte in data.encode("utf-8"):
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return "".join(_SAFE[ord(c) % len(_SAFE)] for c in str(h))


def _controller_ref(api_version: str, kind: str, name: str, uid: str) -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": kind, "name": name, "uid": uid, "controller": True, "blockOwnerDeletion": True}


def _generated(prefix: str) -> str:
    """The name the API server gives ``generateName: prefix``, with kpe's stand-in suffix."""
    return prefix[:MAX_GENERATED_PREFIX] + RANDOM_SUFFIX


def _pod(template: Mapping[str, Any], namespace: Any, generate_name: str, owner: dict[str, Any]) -> dict[str, Any]:
    """``GetPodFromTemplate``: labels, annotations, finalizers and spec of the template;
    the template's other metadata is not copied. Empty maps are left out, as the API
    server's JSON leaves them out."""
    tmeta = _meta(template)
    meta: dict[str, Any] = {"name": _generated(generate_name), "generateName": generate_name}
    if namespace:
        meta["namespace"] = namespace
    for key in ("labels", "annotations", "finalizers"):
        if tmeta.get(key):
            meta[key] = copy.deepcopy(tmeta[key])
    meta["ownerReferences"] = [owner]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": copy.deepcopy(template["spec"])}


def _set_label(pod: dict[str, Any], key: str, value: str) -> None:
    pod["metadata"].setdefault("labels", {})[key] = value


# -- each kind ------------------------------------------------------------------------


def _deployment(obj: Mapping[str, Any], template: dict[str, Any]) -> dict[str, Any]:
    """The Deployment controller makes a ReplicaSet ``<deployment>-<hash>`` whose
    template carries ``pod-template-hash: <hash>``; that ReplicaSet makes the pod."""
    meta = _meta(obj)
    status = obj.get("status")
    collisions = status.get("collisionCount") if isinstance(status, Mapping) else None
    digest = template_hash(template, collisions)
    if not isinstance(template.get("metadata"), dict):
        template["metadata"] = {}
    template["metadata"].setdefault("labels", {})["pod-template-hash"] = digest
    rs = f"{meta['name']}-{digest}"
    rs_meta: dict[str, Any] = {"name": rs, "uid": uid_of("ReplicaSet", str(meta.get("namespace", "")), rs)}
    if meta.get("namespace"):
        rs_meta["namespace"] = meta["namespace"]
    return _replicaset({"kind": "ReplicaSet", "metadata": rs_meta}, template)


def _replicaset(obj: Mapping[str, Any], template: dict[str, Any]) -> dict[str, Any]:
    meta = _meta(obj)
    name, namespace = str(meta["name"]), meta.get("namespace")
    owner = _controller_ref("apps/v1", "ReplicaSet", name, uid_of("ReplicaSet", str(namespace or ""), name, meta.get("uid")))
    return _pod(template, namespace, f"{name}-", owner)


def _statefulset(obj: Mapping[str, Any], template: dict[str, Any]) -> dict[str, Any]:
    """``newStatefulSetPod`` for the first ordinal: name ``<set>-<ordinal>``, hostname and
    subdomain, the identity labels, the revision label, a volume per claim template."""
    meta, spec = _meta(obj), obj.get("spec") or {}
    name, namespace = str(meta["name"]), meta.get("namespace")
    ordinals: Any = spec.get("ordinals")
    ordinal = int(ordinals.get("start") or 0) if isinstance(ordinals, Mapping) else 0
    owner = _controller_ref("apps/v1", "StatefulSet", name, uid_of("StatefulSet", str(namespace or ""), name, meta.get("uid")))
    pod = _pod(template, namespace, f"{name}-", owner)
    pod_name = f"{name}-{ordinal}"
    pod["metadata"]["name"] = pod_name
    _set_label(pod, "statefulset.kubernetes.io/pod-name", pod_name)
    _set_label(pod, "apps.kubernetes.io/pod-index", str(ordinal))
    _set_label(pod, "controller-revision-hash", f"{name}-{template_hash(template)}")
    pod["spec"]["hostname"] = pod_name
    if spec.get("serviceName"):
        pod["spec"]["subdomain"] = spec["serviceName"]
    claims = [c for c in spec.get("volumeClaimTemplates") or [] if isinstance(c, Mapping) and _meta(c).get("name")]
    if claims:
        names = [str(_meta(c)["name"]) for c in claims]
        volumes = [{"name": n, "persistentVolumeClaim": {"claimName": f"{n}-{name}-{ordinal}"}} for n in names]
        volumes += [v for v in pod["spec"].get("volumes") or [] if not (isinstance(v, Mapping) and v.get("name") in names)]
        pod["spec"]["volumes"] = volumes
    return pod


def _daemonset(obj: Mapping[str, Any], template: dict[str, Any]) -> dict[str, Any]:
    """``CreatePodTemplate``: the daemon tolerations and the revision and generation
    labels. The per-node affinity the controller adds is left out (see the module)."""
    meta = _meta(obj)
    name, namespace = str(meta["name"]), meta.get("namespace")
    owner = _controller_ref("apps/v1", "DaemonSet", name, uid_of("DaemonSet", str(namespace or ""), name, meta.get("uid")))
    pod = _pod(template, namespace, f"{name}-", owner)
    _set_label(pod, "controller-revision-hash", template_hash(template))
    _set_label(pod, "pod-template-generation", str(meta.get("generation") or 1))
    spec = pod["spec"]
    wanted = [*DAEMON_TOLERATIONS, *([HOST_NETWORK_TOLERATION] if spec.get("hostNetwork") else [])]
    tolerations = list(spec.get("tolerations") or [])
    for toleration in wanted:
        if not any(_same_toleration(t, toleration) for t in tolerations):
            tolerations.append(dict(toleration))
    spec["tolerations"] = tolerations
    return pod


def _same_toleration(a: Any, b: Mapping[str, str]) -> bool:
    """``Toleration.MatchToleration``: same key, operator, value and effect."""
    if not isinstance(a, Mapping):
        return False
    return all((a.get(k) or "") == (b.get(k) or "") for k in ("key", "operator", "value", "effect"))


def _job(obj: Mapping[str, Any], template: dict[str, Any]) -> dict[str, Any]:
    """The Job's pod: the labels the API server adds to the Job's template when it
    generates the selector (``job-name``, ``controller-uid`` and their
    ``batch.kubernetes.io/`` forms), the tracking finalizer, and for an Indexed Job the
    first index (label, annotation, hostname, generateName, ``JOB_COMPLETION_INDEX``)."""
    meta, spec = _meta(obj), obj.get("spec") or {}
    name, namespace = str(meta["name"]), meta.get("namespace")
    uid = uid_of("Job", str(namespace or ""), name, meta.get("uid"))
    if not isinstance(template.get("metadata"), dict):
        template["metadata"] = {}
    tmeta = template["metadata"]
    if not spec.get("manualSelector"):
        labels = tmeta.setdefault("labels", {})
        for key in ("job-name", "batch.kubernetes.io/job-name"):
            labels.setdefault(key, name)
        for key in ("controller-uid", "batch.kubernetes.io/controller-uid"):
            labels.setdefault(key, uid)
    finalizers = list(tmeta.get("finalizers") or [])
    if "batch.kubernetes.io/job-tracking" not in finalizers:
        finalizers.append("batch.kubernetes.io/job-tracking")
    tmeta["finalizers"] = finalizers
    generate_name = f"{name}-"
    indexed = spec.get("completionMode") == "Indexed"
    if indexed:
        index = "0"
        for group in ("initContainers", "containers"):
            for container in template["spec"].get(group) or []:
                if not isinstance(container, dict):
                    continue
                env = container.setdefault("env", [])
                if not any(isinstance(e, Mapping) and e.get("name") == "JOB_COMPLETION_INDEX" for e in env):
                    env.append({"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['batch.kubernetes.io/job-completion-index']"}}})
        tmeta.setdefault("annotations", {})["batch.kubernetes.io/job-completion-index"] = index
        tmeta.setdefault("labels", {})["batch.kubernetes.io/job-completion-index"] = index
        if spec.get("backoffLimitPerIndex") is not None:
            tmeta["annotations"]["batch.kubernetes.io/job-index-failure-count"] = "0"
        template["spec"]["hostname"] = f"{name}-{index}"
        suffix = f"-{index}-"
        generate_name = name + suffix
        if len(generate_name) > MAX_GENERATED_PREFIX:
            generate_name = generate_name[: MAX_GENERATED_PREFIX - len(suffix)] + suffix
    return _pod(template, namespace, generate_name, _controller_ref("batch/v1", "Job", name, uid))


def _cronjob(obj: Mapping[str, Any]) -> dict[str, Any]:
    """``getJobFromTemplate2``: a Job ``<cronjob>-<scheduled minute>`` from the job
    template, then that Job's pod."""
    meta = _meta(obj)
    template = _template(obj, ("spec", "jobTemplate", "spec", "template"))
    job_template = (obj.get("spec") or {}).get("jobTemplate") or {}
    name, namespace = f"{meta['name']}-{CRONJOB_MINUTE}", meta.get("namespace")
    job_meta: dict[str, Any] = {"name": name, "uid": uid_of("Job", str(namespace or ""), name)}
    if namespace:
        job_meta["namespace"] = namespace
    job = {"kind": "Job", "metadata": job_meta, "spec": job_template.get("spec") or {}}
    return _job(job, template)


__all__ = ["ACCEPTED", "WORKLOADS", "WorkloadError", "describe", "is_workload", "pod_for", "template_hash", "uid_of"]
