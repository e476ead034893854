"""How kube-apiserver puts objects and Status errors on the wire.

Bodies are Go's ``encoding/json`` output: compact, HTML characters escaped,
non-ASCII left as UTF-8, struct fields in declaration order, a trailing
newline (json.Encoder); indented by two spaces for ``?pretty=true`` and for
curl/Wget user agents, as the real server does.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

Obj = dict[str, Any]

# ---------------------------------------------------------------- resources


@dataclass(frozen=True)
class Resource:
    plural: str
    kind: str
    group: str  # "" for the core group
    version: str
    namespaced: bool
    etcd: str  # etcd key prefix, as kube-apiserver stores it
    field_labels: tuple[str, ...] = ("metadata.name", "metadata.namespace")
    # the zero value of the Go struct (what a BOOKMARK carries besides metadata)
    zero: Obj = field(default_factory=dict)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> str:
        """GroupResource.String(): "pods", "leases.coordination.k8s.io"."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def group_kind(self) -> str:
        """GroupKind.String(): "Pod", "Lease.coordination.k8s.io"."""
        return f"{self.kind}.{self.group}" if self.group else self.kind

    def etcd_key(self, namespace: str, name: str) -> str:
        return f"{self.etcd}{namespace}/{name}" if self.namespaced else f"{self.etcd}{name}"


_NODE_INFO = ("machineID", "systemUUID", "bootID", "kernelVersion", "osImage", "containerRuntimeVersion",
              "kubeletVersion", "kubeProxyVersion", "operatingSystem", "architecture")
NODE_STATUS_ZERO: Obj = {"daemonEndpoints": {"kubeletEndpoint": {"Port": 0}}, "nodeInfo": {k: "" for k in _NODE_INFO}}

NODES = Resource("nodes", "Node", "", "v1", False, "/registry/minions/",
                 ("metadata.name", "spec.unschedulable"),
                 {"spec": {}, "status": NODE_STATUS_ZERO})
PODS = Resource("pods", "Pod", "", "v1", True, "/registry/pods/",
                ("metadata.name", "metadata.namespace", "spec.nodeName", "spec.restartPolicy", "spec.schedulerName",
                 "spec.serviceAccountName", "spec.hostNetwork", "status.phase", "status.podIP", "status.podIPs",
                 "status.nominatedNodeName"),
                {"spec": {"containers": None}, "status": {}})
EVENTS = Resource("events", "Event", "", "v1", True, "/registry/events/",
                  ("metadata.name", "metadata.namespace", "involvedObject.kind", "involvedObject.namespace",
                   "involvedObject.name", "involvedObject.uid", "involvedObject.apiVersion",
                   "involvedObject.resourceVersion", "involvedObject.fieldPath", "reason", "reportingComponent",
                   "source", "type"),
                  {"involvedObject": {}, "source": {}, "firstTimestamp": None, "lastTimestamp": None,
                   "eventTime": None, "reportingComponent": "", "reportingInstance": ""})
EVENTS_V1 = Resource("events", "Event", "events.k8s.io", "v1", True, "/registry/events/",
                     ("metadata.name", "metadata.namespace"),
                     {"eventTime": None, "regarding": {}, "deprecatedSource": {},
                      "deprecatedFirstTimestamp": None, "deprecatedLastTimestamp": None})
LEASES = Resource("leases", "Lease", "coordination.k8s.io", "v1", True, "/registry/leases/",
                  ("metadata.name", "metadata.namespace"), {"spec": {}})

NAMESPACES = Resource("namespaces", "Namespace", "", "v1", False, "/registry/namespaces/",
                      ("metadata.name", "status.phase"), {"spec": {}, "status": {}})
CONFIGMAPS = Resource("configmaps", "ConfigMap", "", "v1", True, "/registry/configmaps/",
                      ("metadata.name", "metadata.namespace"), {})
# kpe's own kinds (deploy/crds/): cluster-scoped custom resources with a status subresource,
# whose metadata.generation counts spec changes.
SCHEDULINGPOLICIES = Resource("schedulingpolicies", "SchedulingPolicy", "kpe.dev", "v1alpha1", False,
                              "/registry/kpe.dev/schedulingpolicies/", ("metadata.name",), {})
RESERVATIONS = Resource("reservations", "Reservation", "kpe.dev", "v1alpha1", False, "/registry/kpe.dev/reservations/",
                        ("metadata.name",), {})
CUSTOM = (SCHEDULINGPOLICIES, RESERVATIONS)

RESOURCES: dict[str, Resource] = {r.key: r for r in (NODES, PODS, EVENTS, EVENTS_V1, LEASES, NAMESPACES, CONFIGMAPS, *CUSTOM)}
ALIASES = {"node": "nodes", "pod": "pods", "event": "events", "lease": "leases.coordination.k8s.io", "namespace": "namespaces",
           "configmap": "configmaps", "schedulingpolicies": "schedulingpolicies.kpe.dev", "reservations": "reservations.kpe.dev",
           "leases": "leases.coordination.k8s.io", "events.k8s.io": "events.events.k8s.io"}


def resource(name: str) -> Resource:
    key = ALIASES.get(name, name)
    try:
        return RESOURCES[key]
    except KeyError:
        raise KeyError(f"the fake API server has no resource {name!r}; it knows {sorted(RESOURCES)}") from None


def by_path(group: str, version: str, plural: str) -> Resource | None:
    for r in RESOURCES.values():
        if r.group == group and r.version == version and r.plural == plural:
            return r
    return None


# ---------------------------------------------------------- field ordering

_META_ORDER = ("name", "generateName", "namespace", "selfLink", "uid", "resourceVersion", "generation",
               "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "labels", "annotations",
               "ownerReferences", "finalizers", "managedFields")
_TOP_ORDER = ("kind", "apiVersion", "metadata", "spec", "status")
_EVENT_ORDER = ("kind", "apiVersion", "metadata", "involvedObject", "reason", "message", "source", "firstTimestamp",
                "lastTimestamp", "count", "type", "eventTime", "series", "action", "related", "reportingComponent",
                "reportingInstance")
_EVENT_V1_ORDER = ("kind", "apiVersion", "metadata", "eventTime", "series", "reportingController", "reportingInstance",
                   "action", "reason", "regarding", "related", "note", "type", "deprecatedSource",
                   "deprecatedFirstTimestamp", "deprecatedLastTimestamp", "deprecatedCount")
_POD_SPEC_ORDER = ("volumes", "initContainers", "containers", "ephemeralContainers", "restartPolicy",
                   "terminationGracePeriodSeconds", "activeDeadlineSeconds", "dnsPolicy", "nodeSelector",
                   "serviceAccountName", "serviceAccount", "automountServiceAccountToken", "nodeName", "hostNetwork",
                   "hostPID", "hostIPC", "shareProcessNamespace", "securityContext", "imagePullSecrets", "hostname",
                   "subdomain", "affinity", "schedulerName", "tolerations", "hostAliases", "priorityClassName",
                   "priority", "dnsConfig", "readinessGates", "runtimeClassName", "enableServiceLinks",
                   "preemptionPolicy", "overhead", "topologySpreadConstraints", "setHostnameAsFQDN", "os",
                   "hostUsers", "schedulingGates", "resourceClaims")
_POD_STATUS_ORDER = ("phase", "conditions", "message", "reason", "nominatedNodeName", "hostIP", "hostIPs", "podIP",
                     "podIPs", "startTime", "initContainerStatuses", "containerStatuses", "qosClass",
                     "ephemeralContainerStatuses")
_CONTAINER_ORDER = ("name", "image", "command", "args", "workingDir", "ports", "envFrom", "env", "resources",
                    "resizePolicy", "restartPolicy", "volumeMounts", "volumeDevices", "livenessProbe",
                    "readinessProbe", "startupProbe", "lifecycle", "terminationMessagePath",
                    "terminationMessagePolicy", "imagePullPolicy", "securityContext", "stdin", "stdinOnce", "tty")
_NODE_SPEC_ORDER = ("podCIDR", "podCIDRs", "providerID", "unschedulable", "taints", "configSource", "externalID")
_NODE_STATUS_ORDER = ("capacity", "allocatable", "phase", "conditions", "addresses", "daemonEndpoints", "nodeInfo",
                      "images", "volumesInUse", "volumesAttached", "config")
_LEASE_SPEC_ORDER = ("holderIdentity", "leaseDurationSeconds", "acquireTime", "renewTime", "leaseTransitions",
                     "strategy", "preferredHolder")
_STATUS_ORDER = ("kind", "apiVersion", "metadata", "status", "message", "reason", "details", "code")
_DETAILS_ORDER = ("name", "group", "kind", "uid", "causes", "retryAfterSeconds")
_CONDITION_ORDER = ("type", "status", "lastProbeTime", "lastHeartbeatTime", "lastTransitionTime", "reason", "message")


def _ordered(d: Obj, order: tuple[str, ...]) -> Obj:
    out = {k: d[k] for k in order if k in d}
    out.update((k, v) for k, v in d.items() if k not in out)
    return out


def canonical(obj: Obj) -> Obj:
    """The object with its fields in the order the Go structs declare them."""
    kind = obj.get("kind")
    api = obj.get("apiVersion")
    if kind == "Status":
        out = _ordered(obj, _STATUS_ORDER)
        if isinstance(out.get("details"), dict):
            out["details"] = _ordered(out["details"], _DETAILS_ORDER)
        return out
    if kind == "Event":
        out = _ordered(obj, _EVENT_V1_ORDER if api == "events.k8s.io/v1" else _EVENT_ORDER)
    else:
        out = _ordered(obj, _TOP_ORDER)
    if isinstance(out.get("metadata"), dict):
        out["metadata"] = _ordered(out["metadata"], _META_ORDER)
    spec, status = out.get("spec"), out.get("status")
    if kind == "Pod":
        if isinstance(spec, dict):
            spec = out["spec"] = _ordered(spec, _POD_SPEC_ORDER)
            for key in ("initContainers", "containers"):
                if isinstance(spec.get(key), list):
                    spec[key] = [_ordered(c, _CONTAINER_ORDER) if isinstance(c, dict) else c for c in spec[key]]
        if isinstance(status, dict):
            status = out["status"] = _ordered(status, _POD_STATUS_ORDER)
    elif kind == "Node":
        if isinstance(spec, dict):
            out["spec"] = _ordered(spec, _NODE_SPEC_ORDER)
        if isinstance(status, dict):
            status = out["status"] = _ordered(status, _NODE_STATUS_ORDER)
    elif kind == "Lease" and isinstance(spec, dict):
        out["spec"] = _ordered(spec, _LEASE_SPEC_ORDER)
    if isinstance(status, dict) and isinstance(status.get("conditions"), list):
        status["conditions"] = [_ordered(c, _CONDITION_ORDER) if isinstance(c, dict) else c for c in status["conditions"]]
    return out


def list_item(obj: Obj) -> Obj:
    """Items of a typed list carry no kind/apiVersion (see nodes-list-limit2.json)."""
    out = canonical(obj)
    out.pop("kind", None)
    out.pop("apiVersion", None)
    return out


# ------------------------------------------------------------------ encoding

_GO_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def _go_escape(text: str) -> str:
    # These characters can only occur inside JSON strings, so a plain replace is exact.
    for raw, esc in _GO_ESCAPES.items():
        if raw in text:
            text = text.replace(raw, esc)
    return text


def dumps(value: Any, *, pretty: bool = False) -> bytes:
    """Go's json.Encoder output (with the trailing newline)."""
    if pretty:
        text = json.dumps(value, ensure_ascii=False, indent=2)
    else:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return (_go_escape(text) + "\n").encode()


# --------------------------------------------------------------- Status

class ApiError(Exception):
    """An answer the API server gives as a Status object."""

    def __init__(self, status: Obj, headers: dict[str, str] | None = None) -> None:
        super().__init__(status.get("message", ""))
        self.status = status
        self.headers = headers or {}

    @property
    def code(self) -> int:
        return int(self.status["code"])


def status(code: int, reason: str, message: str, details: Obj | None = None) -> Obj:
    out: Obj = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message}
    if reason:
        out["reason"] = reason
    if details is not None:
        out["details"] = _ordered(details, _DETAILS_ORDER)
    out["code"] = code
    return out


def _gr_details(res: Resource, name: str, subresource_kind: str = "") -> Obj:
    d: Obj = {"name": name}
    if res.group:
        d["group"] = res.group
    d["kind"] = subresource_kind or res.plural
    return d


def not_found(res: Resource, name: str) -> ApiError:
    return ApiError(status(404, "NotFound", f'{res.key} "{name}" not found', _gr_details(res, name)))


def already_exists(res: Resource, name: str) -> ApiError:
    return ApiError(status(409, "AlreadyExists", f'{res.key} "{name}" already exists', _gr_details(res, name)))


def conflict(res: Resource, name: str, err: str, *, subresource: str = "") -> ApiError:
    qualified = f"{res.key}/{subresource}" if subresource else res.key
    details = _gr_details(res, name, f"{res.plural}/{subresource}" if subresource else "")
    return ApiError(status(409, "Conflict", f'Operation cannot be fulfilled on {qualified} "{name}": {err}', details))


OPTIMISTIC_LOCK = "the object has been modified; please apply your changes to the latest version and try again"


def precondition_error(res: Resource, namespace: str, name: str, detail: str) -> str:
    """storage.NewInvalidObjError as it reads inside a Conflict message."""
    return (f"StorageError: invalid object, Code: 4, Key: {res.etcd_key(namespace, name)}, "
            f"ResourceVersion: 0, AdditionalErrorMsg: {detail}")


@dataclass
class FieldError:
    """One field.Error: type is "Forbidden", "Required", "Invalid", "NotSupported"."""

    path: str
    type: str
    detail: str = ""
    value: Any = None
    supported: tuple[str, ...] = ()

    _CAUSES = {"Forbidden": "FieldValueForbidden", "Required": "FieldValueRequired", "Invalid": "FieldValueInvalid",
               "NotSupported": "FieldValueNotSupported", "Duplicate": "FieldValueDuplicate"}
    _TITLES = {"Forbidden": "Forbidden", "Required": "Required value", "Invalid": "Invalid value",
               "NotSupported": "Unsupported value", "Duplicate": "Duplicate value"}

    def body(self) -> str:
        s = self._TITLES[self.type]
        if self.type in ("Invalid", "NotSupported", "Duplicate"):
            s += ": " + _go_value(self.value)
        if self.type == "NotSupported":
            s += ": supported values: " + ", ".join(json.dumps(v) for v in self.supported)
        elif self.detail:
            s += ": " + self.detail
        return s

    def __str__(self) -> str:
        return f"{self.path}: {self.body()}"

    def cause(self) -> Obj:
        return {"reason": self._CAUSES[self.type], "message": self.body(), "field": self.path}


def _go_value(v: Any) -> str:
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return "null"
    if isinstance(v, (int, float)):
        return str(v)
    return json.dumps(v, separators=(",", ":"))


def invalid(group_kind: str, name: str, errors: list[FieldError], *, group: str = "", kind: str = "") -> ApiError:
    """errors.NewInvalid: 422 with one cause per field error."""
    agg = str(errors[0]) if len(errors) == 1 else "[" + ", ".join(str(e) for e in errors) + "]"
    details: Obj = {"name": name}
    if group:
        details["group"] = group
    details["kind"] = kind or group_kind.split(".", 1)[0]
    details["causes"] = [e.cause() for e in errors]
    return ApiError(status(422, "Invalid", f'{group_kind} "{name}" is invalid: {agg}', details))


def invalid_object(res: Resource, name: str, errors: list[FieldError]) -> ApiError:
    return invalid(res.group_kind, name, errors, group=res.group, kind=res.kind)


def bad_request(message: str) -> ApiError:
    return ApiError(status(400, "BadRequest", message))


def expired(message: str) -> Obj:
    return status(410, "Expired", message)


LIST_EXPIRED = "The resourceVersion for the provided list is too old."
CONTINUE_EXPIRED = ("The provided continue parameter is too old to display a consistent list result. You can start a "
                    "new list without the continue parameter, or use the continue token in this response to retrieve "
                    "the remainder of the results. Continuing with the provided token results in an inconsistent list "
                    "- objects that were created, modified, or deleted between the time the first chunk was returned "
                    "and now may show up in the list.")
JSONPATCH_FAILED = "the server rejected our request due to an error in our request"

_GENERIC = {
    400: ("BadRequest", "the server rejected our request for an unknown reason"),
    401: ("Unauthorized", "Unauthorized"),
    403: ("Forbidden", "forbidden"),
    404: ("NotFound", "the server could not find the requested resource"),
    405: ("MethodNotAllowed", "the server does not allow this method on the requested resource"),
    409: ("Conflict", "the server reported a conflict"),
    415: ("UnsupportedMediaType", "the server does not support this media type"),
    422: ("Invalid", JSONPATCH_FAILED),
    429: ("TooManyRequests", "the server has received too many requests and has asked us to try again later"),
    500: ("InternalError", "Internal error occurred: the fake API server was asked to fail this request"),
    503: ("ServiceUnavailable", "the server is currently unable to handle the request"),
    504: ("Timeout", "the server was unable to return a response in the time allotted, but may still be processing the request"),
}


def generic(code: int, message: str | None = None) -> Obj:
    reason, default = _GENERIC.get(code, ("", f"the server responded with the status code {code} but did not return more information"))
    details: Obj | None = {} if code in (404, 422) else None
    if code == 500:
        details = {"causes": [{"message": message or "the fake API server was asked to fail this request"}]}
        message = f"Internal error occurred: {message}" if message else default
    if code in (429, 503, 504):
        details = {"retryAfterSeconds": 1}
    return status(code, reason, message or default, details)
