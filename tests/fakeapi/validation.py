"""What kube-apiserver defaults, admits and validates for the kinds the fake serves."""

from __future__ import annotations

import copy
import re
from decimal import Decimal
from typing import Any

from .wire import EVENTS_V1, LEASES, PODS, ApiError, FieldError, Obj, Resource, bad_request, invalid_object, status

# ------------------------------------------------------------------- names

_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_SUBDOMAIN_MSG = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
                  "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
                  "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")


def name_errors(name: str) -> list[FieldError]:
    if not name:
        return [FieldError("metadata.name", "Required", "name or generateName is required")]
    errs = []
    if len(name) > 253:
        errs.append(FieldError("metadata.name", "Invalid", "must be no more than 253 characters", name))
    if not _DNS1123_SUBDOMAIN.match(name):
        errs.append(FieldError("metadata.name", "Invalid", _SUBDOMAIN_MSG, name))
    return errs


def meta_update_errors(new: Obj, old: Obj) -> list[FieldError]:
    """ValidateObjectMetaUpdate: the identity fields are immutable."""
    errs = []
    nm, om = new.get("metadata") or {}, old.get("metadata") or {}
    for key in ("name", "namespace", "uid", "creationTimestamp"):
        if nm.get(key) != om.get(key):
            errs.append(FieldError(f"metadata.{key}", "Invalid", "field is immutable", nm.get(key)))
    return errs


# ---------------------------------------------------------------- quantities

_SUFFIX = {"": 1, "m": Decimal("0.001"), "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
           "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}


def quantity(text: Any) -> Decimal:
    m = re.match(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$", str(text).strip())
    if not m or m.group(2) not in _SUFFIX:
        return Decimal(0)
    return Decimal(m.group(1)) * Decimal(_SUFFIX[m.group(2)])


def _qos(spec: Obj) -> str:
    containers = [c for c in (spec.get("containers") or []) + (spec.get("initContainers") or []) if isinstance(c, dict)]
    any_set, guaranteed = False, True
    for c in containers:
        res = c.get("resources") or {}
        req, lim = res.get("requests") or {}, res.get("limits") or {}
        for name in ("cpu", "memory"):
            if name in req or name in lim:
                any_set = True
            if name not in lim or quantity(req.get(name, lim.get(name))) != quantity(lim[name]):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


# ------------------------------------------------------------- pod defaults

_DEFAULT_TOLERATIONS = [
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
]


def _default_container(c: Obj) -> None:
    res = c.setdefault("resources", {})
    limits = res.get("limits") or {}
    if limits:
        requests = res.setdefault("requests", {})
        for k, v in limits.items():
            requests.setdefault(k, v)
    c.setdefault("terminationMessagePath", "/dev/termination-log")
    c.setdefault("terminationMessagePolicy", "File")
    if "imagePullPolicy" not in c:
        image = str(c.get("image") or "")
        tail = image.rsplit("/", 1)[-1]
        tagged = ":" in tail or "@" in image
        c["imagePullPolicy"] = "Always" if not tagged or image.endswith(":latest") else "IfNotPresent"


def default_pod(pod: Obj) -> Obj:
    """Scheme defaulting plus the default admission plugins (DefaultTolerationSeconds, Priority), as far as they
    show in the captured AdmissionReview object."""
    spec = pod.setdefault("spec", {})
    for key in ("initContainers", "containers"):
        for c in spec.get(key) or []:
            if isinstance(c, dict):
                _default_container(c)
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    tolerations = spec.get("tolerations") or []
    for default in _DEFAULT_TOLERATIONS:
        if not any(isinstance(t, dict) and t.get("effect") in ("NoExecute", None, "")
                   and (t.get("key") == default["key"] or (t.get("operator") == "Exists" and not t.get("key")))
                   for t in tolerations):
            tolerations = tolerations + [dict(default)]
    spec["tolerations"] = tolerations
    if not spec.get("priorityClassName"):
        spec.setdefault("priority", 0)  # with a class name, the Priority admission plugin sets it
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    return pod


def admit_pod_priority(pod: Obj, classes: dict[str, int]) -> None:
    """The Priority admission plugin: priority comes from priorityClassName, which must exist."""
    spec = pod.setdefault("spec", {})
    name = spec.get("priorityClassName")
    if not name:
        return
    name_ = (pod.get("metadata") or {}).get("name", "")
    if name not in classes:
        raise ApiError(status(403, "Forbidden", f'pods "{name_}" is forbidden: no PriorityClass with name {name} was found',
                              {"name": name_, "kind": "pods"}))
    if "priority" in spec and spec["priority"] != classes[name]:
        raise ApiError(status(403, "Forbidden",
                              f'pods "{name_}" is forbidden: the integer value of priority ({spec["priority"]}) must not be '
                              f'provided in pod spec; priority admission controller computed {classes[name]} from the given '
                              f'PriorityClass name', {"name": name_, "kind": "pods"}))
    spec["priority"] = classes[name]


def pod_status_on_create(pod: Obj, keep: Obj | None = None) -> None:
    """PrepareForCreate: status is reset to Pending plus the QoS class."""
    fresh: Obj = {"phase": "Pending", "qosClass": _qos(pod.get("spec") or {})}
    if keep:
        fresh.update(keep)
    pod["status"] = fresh


# ------------------------------------------------------------- pod updates

_POD_UPDATE_MSG = ("pod updates may not change fields other than `spec.containers[*].image`,"
                   "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to "
                   "existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was "
                   "previously negative)")


def _gate_names(spec: Obj) -> list[str]:
    return [g.get("name") for g in spec.get("schedulingGates") or [] if isinstance(g, dict)]


def scheduling_gate_errors(new: Obj, old: Obj) -> list[FieldError]:
    """Scheduling gates can only be removed after creation (KEP-3521)."""
    old_gates = set(_gate_names(old.get("spec") or {}))
    return [FieldError(f"spec.schedulingGates[{i}].name", "Forbidden", f"only deletion is allowed, but found new scheduling gate '{gate}'")
            for i, gate in enumerate(_gate_names(new.get("spec") or {})) if gate not in old_gates]


def pod_update_errors(new: Obj, old: Obj) -> list[FieldError]:
    """ValidatePodUpdate, for the parts a scheduler extender can trip over."""
    errs = meta_update_errors(new, old) + scheduling_gate_errors(new, old)
    ns, os_ = new.get("spec") or {}, old.get("spec") or {}
    old_gates = set(_gate_names(os_))
    for i, t in enumerate(os_.get("tolerations") or []):
        if t not in (ns.get("tolerations") or []):
            errs.append(FieldError("spec.tolerations", "Forbidden", "existing toleration can not be modified except its tolerationSeconds"))
            break
    munged = copy.deepcopy(ns)
    for key in ("containers", "initContainers"):
        for i, c in enumerate(munged.get(key) or []):
            olds = os_.get(key) or []
            if i < len(olds) and isinstance(c, dict) and isinstance(olds[i], dict):
                c["image"] = olds[i].get("image")
    for key in ("activeDeadlineSeconds", "tolerations", "schedulingGates", "terminationGracePeriodSeconds"):
        munged.pop(key, None)
        if key in os_:
            munged[key] = os_[key]
    if old_gates:  # a gated pod may get a narrower nodeSelector (additions only) and node affinity
        new_sel, old_sel = ns.get("nodeSelector") or {}, os_.get("nodeSelector") or {}
        if any(new_sel.get(k) != v for k, v in old_sel.items()):
            errs.append(FieldError("spec.nodeSelector", "Invalid",
                                   "only additions to spec.nodeSelector are allowed (no mutations or deletions)", new_sel))
        for key in ("nodeSelector", "affinity"):
            munged.pop(key, None)
            if key in os_:
                munged[key] = os_[key]
    if munged != os_:
        changed = sorted(k for k in set(munged) | set(os_) if munged.get(k) != os_.get(k))
        errs.append(FieldError("spec", "Forbidden", _POD_UPDATE_MSG + "\n  (fields changed: " + ", ".join(changed) + ")"))
    return errs


# ------------------------------------------------------------------ leases

_MICRO = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}(Z|[+-]\d{2}:\d{2})$")
_RFC3339_MICRO = "2006-01-02T15:04:05.000000Z07:00"


def microtime_error(value: Any) -> str | None:
    """metav1.MicroTime accepts exactly RFC3339 with six fractional digits (Go's time.Parse)."""
    if value is None or (isinstance(value, str) and _MICRO.match(value)):
        return None
    if not isinstance(value, str):
        return f"json: cannot unmarshal {type(value).__name__} into Go value of type string"
    m = re.match(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}", value)
    rest = value[m.end():] if m else value
    elem = ".000000" if m else "2006"
    return f'parsing time "{value}" as "{_RFC3339_MICRO}": cannot parse "{rest}" as "{elem}"'


def lease_errors(lease: Obj) -> list[FieldError]:
    spec = lease.get("spec") or {}
    errs = []
    d = spec.get("leaseDurationSeconds")
    if d is not None and d <= 0:
        errs.append(FieldError("spec.leaseDurationSeconds", "Invalid", "must be greater than 0", d))
    t = spec.get("leaseTransitions")
    if t is not None and t < 0:
        errs.append(FieldError("spec.leaseTransitions", "Invalid", "must be greater than or equal to 0", t))
    return errs


# ------------------------------------------------------------------ events

def event_errors(ev: Obj, res: Resource) -> list[FieldError]:
    """ValidateEventCreate: legacy rules for core/v1, strict ones for events.k8s.io/v1."""
    errs: list[FieldError] = []
    ns = (ev.get("metadata") or {}).get("namespace", "")
    if res is EVENTS_V1:
        if not ev.get("eventTime"):
            errs.append(FieldError("eventTime", "Required"))
        if ev.get("type") not in ("Normal", "Warning"):
            errs.append(FieldError("type", "Invalid", f"has invalid value: {ev.get('type') or ''}", ""))
        for key in ("reportingController", "reportingInstance", "action", "reason"):
            if not ev.get(key):
                errs.append(FieldError(key, "Required"))
        regarding_ns = (ev.get("regarding") or {}).get("namespace", "")
        if not regarding_ns and ns not in ("default", "kube-system"):
            errs.append(FieldError("involvedObject.namespace", "Invalid", "does not match event.namespace", regarding_ns))
        if len(ev.get("note") or "") > 1024:
            errs.append(FieldError("note", "Invalid", "can have at most 1024 characters", ""))
        return errs
    inv_ns = (ev.get("involvedObject") or {}).get("namespace", "")
    if not ev.get("eventTime"):
        if (inv_ns and ns != inv_ns) or (not inv_ns and ns not in ("", "default")):
            errs.append(FieldError("involvedObject.namespace", "Invalid", "does not match event.namespace", inv_ns))
    else:
        if not inv_ns and ns not in ("default", "kube-system"):
            errs.append(FieldError("involvedObject.namespace", "Invalid", "does not match event.namespace", inv_ns))
        for key in ("reportingComponent", "reportingInstance", "action", "reason"):
            if not ev.get(key):
                errs.append(FieldError(key, "Required"))
    if len(ev.get("message") or "") > 1024 and ev.get("eventTime"):
        errs.append(FieldError("message", "Invalid", "can have at most 1024 characters", ""))
    return errs


# ------------------------------------------------------------------ all kinds

def create_errors(obj: Obj, res: Resource) -> None:
    """Raise the 400/422 a create of ``obj`` gets."""
    meta = obj.get("metadata") or {}
    errs = name_errors(meta.get("name", ""))
    if res is LEASES:
        for key in ("acquireTime", "renewTime"):
            problem = microtime_error((obj.get("spec") or {}).get(key))
            if problem:
                raise bad_request(f'Lease in version "v1" cannot be handled as a Lease: {problem}')
        errs += lease_errors(obj)
    elif res.kind == "Event":
        errs += event_errors(obj, res)
    elif res is PODS:
        if not (obj.get("spec") or {}).get("containers"):
            errs.append(FieldError("spec.containers", "Required"))
    if errs:
        raise invalid_object(res, meta.get("name", ""), errs)


def update_errors(new: Obj, old: Obj, res: Resource) -> None:
    name = (new.get("metadata") or {}).get("name", "")
    if res is LEASES:
        for key in ("acquireTime", "renewTime"):
            problem = microtime_error((new.get("spec") or {}).get(key))
            if problem:
                raise bad_request(f'Lease in version "v1" cannot be handled as a Lease: {problem}')
        errs = meta_update_errors(new, old) + lease_errors(new)
    elif res is PODS:
        errs = pod_update_errors(new, old)
    else:
        errs = meta_update_errors(new, old)
    if errs:
        raise invalid_object(res, name, errs)
