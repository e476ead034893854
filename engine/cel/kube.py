"""kpe's Kubernetes helpers: what kube-scheduler computes about pods and nodes, as
CEL functions under ``kube.`` (documented in docs/cel-functions.md, "Kubernetes helpers").

Policies used to spell these out by hand and got them wrong (a toleration's
effect and value ignored, GPUs summed over regular containers only). Each
function here follows the upstream code it names, case by case:

``kube.podRequests(pod)``, ``kube.podRequests(pod, name)``
    k8s.io/component-helpers/resource ``PodRequests`` with Kubernetes 1.34
    defaults: the sum of the regular containers and the restartable init
    containers (sidecars), or the largest need of one init container while it
    runs (its request plus the sidecars started before it) where that is more;
    pod-level ``spec.resources.requests`` (cpu, memory, ``hugepages-*``) replace
    the containers' figure for the resources they name; ``spec.overhead`` on
    top. The API server's defaulting is applied first (a container or
    pod-level limit without a request requests the limit), so a pod written by
    hand gives what the API would store. The real requests: not the scheduler's
    non-zero defaults for scoring (100m CPU, 200Mi memory), and not the
    resources of an in-place resize reported in the pod's status.
``kube.toleratesTaint(toleration, taint)``
    k8s.io/api/core/v1 ``Toleration.ToleratesTaint``.
``kube.podToleratesTaint(pod, taint)``
    any of the pod's tolerations tolerates the taint.
``kube.untoleratedTaints(pod, node)``, ``kube.podToleratesNodeTaints(pod, node)``
    the node's NoSchedule and NoExecute taints the pod does not tolerate, in
    the node's order (the TaintToleration filter rejects the node on the
    first; PreferNoSchedule taints only lower its score), and whether there
    are none.
``kube.nodeSelectorMatches(nodeSelector, node)``, ``kube.podNodeAffinityMatches(pod, node)``
    k8s.io/component-helpers/scheduling/corev1/nodeaffinity: a v1.NodeSelector
    (terms ORed), and the pod's ``nodeSelector`` AND its required node affinity
    (the NodeAffinity filter).
``kube.nodeFree(node, nodeInfo, name)``
    ``status.allocatable[name]`` minus ``nodeInfo.requested[name]`` (for
    ``pods``: minus ``nodeInfo.podCount``, as the scheduler counts pods).

Objects are the Kubernetes JSON (plain dicts). A missing field is its Go zero
value (no tolerations, no labels, an empty key). A value of a type the API
cannot hold (a list where a map belongs, a number as a label value) is an
evaluation error naming the function and the field; a value the API types allow
but the scheduler cannot parse (an unknown operator, a ``Gt`` bound that is not
an integer) does what it does in kube-scheduler (that selector term matches no
node).

``pod_requests`` is also what ``nodeInfo.requested`` sums (engine/nodeinfo.py),
leniently: there a malformed quantity of a pod already running is skipped.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

from .errors import EvalError, no_such_overload
from .quantity import DECIMAL_SI, Quantity, _add, _negated, parse_quantity
from .runtime import Unbound
from .values import INT64_MAX, INT64_MIN, type_name

ZERO: Final = Quantity(0, 0, False, DECIMAL_SI)

# Taint effects the TaintToleration filter rejects a node for (PreferNoSchedule only scores).
FILTERED_EFFECTS: Final = frozenset(("NoSchedule", "NoExecute"))

# Pod-level resources (spec.resources) as of Kubernetes 1.34: cpu, memory and huge pages.
_POD_LEVEL: Final = frozenset(("cpu", "memory"))
_HUGEPAGES_PREFIX: Final = "hugepages-"

_LABEL_OPERATORS: Final = frozenset(("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"))
_FIELD_OPERATORS: Final = frozenset(("In", "NotIn"))

# k8s.io/apimachinery/pkg/util/validation: qualified names (label keys) and label values.
_QUALIFIED_NAME: Final = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_DNS1123_SUBDOMAIN: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_QUALIFIED_NAME_MAX: Final = 63
_DNS1123_SUBDOMAIN_MAX: Final = 253
_LABEL_VALUE_MAX: Final = 63
# strconv.ParseInt(s, 10, 64): an optional sign and decimal digits, nothing else.
_GO_INT: Final = re.compile(r"[+-]?[0-9]+")

_Obj = Mapping[str, Any]


# -- reading Kubernetes JSON ----------------------------------------------------------


def _map(value: Any, fn: str, where: str) -> _Obj:
    if value is None:
        return {}
    if isinstance(value, dict):
        return value
    raise EvalError(f"{fn}: {where} must be a map, not {type_name(value)}")


def _list(value: Any, fn: str, where: str) -> list[Any] | tuple[Any, ...]:
    if value is None:
        return ()
    if type(value) is list or type(value) is tuple:
        return value
    raise EvalError(f"{fn}: {where} must be a list, not {type_name(value)}")


def _text(value: Any, fn: str, where: str) -> str:
    if value is None:
        return ""
    if type(value) is str:
        return value
    raise EvalError(f"{fn}: {where} must be a string, not {type_name(value)}")


def _object(value: Any, fn: str, *args: Any) -> _Obj:
    """A pod, node, toleration, taint or selector argument: a map, else no such overload."""
    if isinstance(value, dict):
        return value
    raise _no_overload(fn, *args)


def _no_overload(fn: str, *args: Any) -> EvalError:
    """No such overload; but a variable without a value (``nodeInfo`` where kpe runs without
    its cache) says so, as reading it anywhere else does."""
    for arg in args:
        if type(arg) is Unbound:
            arg._fail()
    return no_such_overload(fn, *args)


def _quantity(value: Any, fn: str, where: str) -> Quantity:
    """A quantity as the API holds it: a string, or a JSON number (Quantity's UnmarshalJSON
    takes both, and trims white space)."""
    if type(value) is str:
        try:
            return parse_quantity(value)
        except EvalError:
            text = value.strip()
    elif isinstance(value, Quantity):
        return value
    elif type(value) is int or type(value) is float:
        text = str(value)
    else:
        raise EvalError(f"{fn}: {where} must be a quantity (a string), not {type_name(value)}")
    try:
        return parse_quantity(text)
    except EvalError as exc:
        raise EvalError(f"{fn}: {where}: {exc.message}") from None


# -- requests --------------------------------------------------------------------------


def _plus(total: dict[str, Quantity], name: str, q: Quantity) -> None:
    found = total.get(name)
    total[name] = q if found is None else _add(found, q)


def _at_least(peak: dict[str, Quantity], name: str, q: Quantity) -> None:
    found = peak.get(name)
    if found is None or q.compare(found) > 0:
        peak[name] = q


def _resource_list(raw: Any, fn: str, where: str, strict: bool, index: int | None = None, field: str = "") -> dict[str, Quantity]:
    """A ResourceList (name to quantity) at ``where`` (``where[index].field`` when
    ``index`` is given: built only for an error message); ``strict=False`` leaves
    malformed entries out."""
    if not raw:
        return {}
    if type(raw) is not dict:
        raw = _map(raw, fn, _place(where, index, field))
    out: dict[str, Quantity] = {}
    for name, value in raw.items():
        if type(value) is str:
            try:
                out[name] = parse_quantity(value)
                continue
            except EvalError:
                pass
        try:
            out[name] = _quantity(value, fn, f"{_place(where, index, field)}[{name!r}]")
        except EvalError:
            if strict:
                raise
    return out


def _place(where: str, index: int | None, field: str) -> str:
    return where if index is None else f"{where}[{index}]{field}"


def _container_requests(container: Any, fn: str, kind: str, index: int, strict: bool) -> tuple[dict[str, Quantity], bool]:
    """A container's requests after the API's defaulting (a limit without a request
    requests the limit), and whether it is a restartable init container (a sidecar)."""
    if type(container) is not dict:
        container = _map(container, fn, f"{kind}[{index}]")
    resources = container.get("resources")
    sidecar = kind == "spec.initContainers" and container.get("restartPolicy") == "Always"
    if not resources:
        return {}, sidecar
    if type(resources) is not dict:
        resources = _map(resources, fn, f"{kind}[{index}].resources")
    raw_requests = resources.get("requests")
    requests = _resource_list(raw_requests, fn, kind, strict, index, ".resources.requests") if raw_requests else {}
    limits = resources.get("limits")
    if limits:
        for name, q in _resource_list(limits, fn, kind, strict, index, ".resources.limits").items():
            if not raw_requests or name not in raw_requests:
                requests[name] = q
    return requests, sidecar


def is_pod_level_resource(name: str) -> bool:
    """Whether ``spec.resources`` may set this resource (Kubernetes 1.34: cpu, memory, huge pages)."""
    return name in _POD_LEVEL or name.startswith(_HUGEPAGES_PREFIX)


def pod_requests(pod: Any, *, strict: bool = True, fn: str = "kube.podRequests") -> dict[str, Quantity]:
    """The pod's effective requests per resource, as kube-scheduler computes them
    (``PodRequests``; see the module's docstring). ``strict=False`` skips malformed
    quantities and containers instead of raising (kpe's cache sums every pod it sees)."""
    spec = _map(pod, fn, "pod").get("spec")
    if type(spec) is not dict:
        spec = _map(spec, fn, "spec")
    total: dict[str, Quantity] = {}
    containers = spec.get("containers")
    if containers:
        for i, container in enumerate(_list(containers, fn, "spec.containers")):
            try:
                requests, _ = _container_requests(container, fn, "spec.containers", i, strict)
            except EvalError:
                if strict:
                    raise
                continue
            for name, q in requests.items():
                found = total.get(name)
                total[name] = q if found is None else _add(found, q)
    init_containers = spec.get("initContainers")
    if init_containers:
        _add_init_containers(total, _list(init_containers, fn, "spec.initContainers"), fn, strict)
    pod_level = spec.get("resources")
    if pod_level:
        try:
            _apply_pod_level(total, _map(pod_level, fn, "spec.resources"), fn, strict)
        except EvalError:
            if strict:
                raise
    overhead = spec.get("overhead")
    if overhead:
        try:
            for name, q in _resource_list(overhead, fn, "spec.overhead", strict).items():
                _plus(total, name, q)
        except EvalError:
            if strict:
                raise
    return total


def _add_init_containers(total: dict[str, Quantity], init_containers: Iterable[Any], fn: str, strict: bool) -> None:
    """Init containers run one at a time, before the regular ones; a restartable one
    (a sidecar) keeps running once started, so it adds to the regular containers and
    to every init container after it. Per resource, the pod needs the larger of the
    regular containers with all sidecars and the most one init container needs while
    it runs (its request plus the sidecars started before it)."""
    sidecars: dict[str, Quantity] = {}
    peak: dict[str, Quantity] = {}
    for i, container in enumerate(init_containers):
        try:
            requests, sidecar = _container_requests(container, fn, "spec.initContainers", i, strict)
        except EvalError:
            if strict:
                raise
            continue
        if sidecar:
            for name, q in requests.items():
                _plus(total, name, q)
                _plus(sidecars, name, q)
            running = sidecars
        else:
            running = dict(requests)
            for name, q in sidecars.items():
                _plus(running, name, q)
        for name, q in running.items():
            _at_least(peak, name, q)
    for name, q in peak.items():
        _at_least(total, name, q)


def _apply_pod_level(total: dict[str, Quantity], pod_level: _Obj, fn: str, strict: bool) -> None:
    """Pod-level requests replace the containers' figure for the resources they name.
    The API defaults a pod-level request from a pod-level limit where no container
    requests that resource (where one does, it defaults to the containers' sum,
    which changes nothing here)."""
    raw_requests = _map(pod_level.get("requests"), fn, "spec.resources.requests")
    chosen = {
        name: q
        for name, q in _resource_list(raw_requests, fn, "spec.resources.requests", strict).items()
        if is_pod_level_resource(name)
    }
    for name, q in _resource_list(pod_level.get("limits"), fn, "spec.resources.limits", strict).items():
        if is_pod_level_resource(name) and name not in raw_requests and name not in total:
            chosen[name] = q
    total.update(chosen)


def pod_requests_fn(*args: Any) -> Any:
    """``kube.podRequests(pod)``: map of resource name to Quantity; ``kube.podRequests(pod, name)``:
    that resource's Quantity, zero when the pod does not request it."""
    if len(args) == 1 and isinstance(args[0], dict):
        return pod_requests(args[0])
    if len(args) == 2 and isinstance(args[0], dict) and type(args[1]) is str:
        return pod_requests(args[0]).get(args[1], ZERO)
    raise _no_overload("kube.podRequests", *args)


# -- taints and tolerations ----------------------------------------------------------


def tolerates(toleration: _Obj, taint: _Obj, fn: str) -> bool:
    """Toleration.ToleratesTaint: an empty effect matches every effect; an empty key
    every key (the API allows that only with Exists); operator "" is Equal, which
    compares values; Exists ignores the value; any other operator tolerates nothing."""
    effect = _field(toleration, "effect", fn, "toleration")
    if effect and effect != _field(taint, "effect", fn, "taint"):
        return False
    key = _field(toleration, "key", fn, "toleration")
    if key and key != _field(taint, "key", fn, "taint"):
        return False
    operator = _field(toleration, "operator", fn, "toleration")
    if operator == "Exists":
        return True
    if operator == "" or operator == "Equal":
        return _field(toleration, "value", fn, "toleration") == _field(taint, "value", fn, "taint")
    return False


def _field(obj: _Obj, name: str, fn: str, what: str) -> str:
    """A string field of a toleration or taint ("" when absent, as Go's zero value)."""
    value = obj.get(name)
    if type(value) is str:
        return value
    return _text(value, fn, f"{what}.{name}")


def _tolerations(pod: _Obj, fn: str) -> list[_Obj]:
    spec = pod.get("spec")
    if type(spec) is not dict:
        spec = _map(spec, fn, "pod.spec")
    raw = spec.get("tolerations")
    if not raw:
        return []
    if type(raw) is not list:
        raw = _list(raw, fn, "pod.spec.tolerations")
    return [t if type(t) is dict else _map(t, fn, f"pod.spec.tolerations[{i}]") for i, t in enumerate(raw)]


def _any_tolerates(tolerations: Iterable[_Obj], taint: _Obj, fn: str) -> bool:
    for toleration in tolerations:
        if tolerates(toleration, taint, fn):
            return True
    return False


def tolerates_taint_fn(*args: Any) -> bool:
    fn = "kube.toleratesTaint"
    if len(args) != 2:
        raise _no_overload(fn, *args)
    return tolerates(_object(args[0], fn, *args), _object(args[1], fn, *args), fn)


def pod_tolerates_taint_fn(*args: Any) -> bool:
    fn = "kube.podToleratesTaint"
    if len(args) != 2:
        raise _no_overload(fn, *args)
    pod, taint = _object(args[0], fn, *args), _object(args[1], fn, *args)
    return _any_tolerates(_tolerations(pod, fn), taint, fn)


def untolerated_taints(pod: _Obj, node: _Obj, fn: str) -> list[_Obj]:
    """The node's NoSchedule/NoExecute taints none of the pod's tolerations tolerates, in order.
    Evaluated for every node of a request: the usual shapes take the short way."""
    spec = node.get("spec")
    if type(spec) is not dict:
        spec = _map(spec, fn, "node.spec")
    taints = spec.get("taints")
    if not taints:
        return []
    if type(taints) is not list:
        taints = _list(taints, fn, "node.spec.taints")
    tolerations: list[_Obj] | None = None
    out: list[_Obj] = []
    for i, taint in enumerate(taints):
        if type(taint) is not dict:
            taint = _map(taint, fn, f"node.spec.taints[{i}]")
        if _field(taint, "effect", fn, "taint") not in FILTERED_EFFECTS:
            continue
        if tolerations is None:
            tolerations = _tolerations(pod, fn)
        if not _any_tolerates(tolerations, taint, fn):
            # A copy: the result is a new value, not part of the node (library.py's READS contract).
            out.append(dict(taint))
    return out


def untolerated_taints_fn(*args: Any) -> list[_Obj]:
    fn = "kube.untoleratedTaints"
    if len(args) != 2:
        raise _no_overload(fn, *args)
    return untolerated_taints(_object(args[0], fn, *args), _object(args[1], fn, *args), fn)


def pod_tolerates_node_taints_fn(*args: Any) -> bool:
    fn = "kube.podToleratesNodeTaints"
    if len(args) != 2:
        raise _no_overload(fn, *args)
    return not untolerated_taints(_object(args[0], fn, *args), _object(args[1], fn, *args), fn)


# -- node selectors and node affinity ------------------------------------------------------


def _is_qualified_name(key: str) -> bool:
    """validation.IsQualifiedName: [prefix/]name, prefix a DNS-1123 subdomain."""
    parts = key.split("/")
    if len(parts) > 2:
        return False
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix or len(prefix) > _DNS1123_SUBDOMAIN_MAX or not _DNS1123_SUBDOMAIN.fullmatch(prefix):
            return False
    name = parts[-1]
    return 0 < len(name) <= _QUALIFIED_NAME_MAX and _QUALIFIED_NAME.fullmatch(name) is not None


def _is_label_value(value: str) -> bool:
    return value == "" or (len(value) <= _LABEL_VALUE_MAX and _QUALIFIED_NAME.fullmatch(value) is not None)


def _go_int(text: str) -> int | None:
    """strconv.ParseInt(text, 10, 64), or None where it fails."""
    if not _GO_INT.fullmatch(text):
        return None
    value = int(text)
    return value if INT64_MIN <= value <= INT64_MAX else None


def _strings(raw: Any, fn: str, where: str) -> list[str]:
    return [_text(v, fn, f"{where}[{i}]") for i, v in enumerate(_list(raw, fn, where))]


def _label_requirement(expr: _Obj, fn: str, where: str) -> tuple[str, str, list[str]] | None:
    """(key, operator, values) of a matchExpressions entry, or None where labels.NewRequirement
    refuses it (a parse error: the term it is in matches no node)."""
    key = _text(expr.get("key"), fn, f"{where}.key")
    operator = _text(expr.get("operator"), fn, f"{where}.operator")
    values = _strings(expr.get("values"), fn, f"{where}.values")
    if operator not in _LABEL_OPERATORS or not _is_qualified_name(key):
        return None
    if operator in ("In", "NotIn") and not values:
        return None
    if operator in ("Exists", "DoesNotExist") and values:
        return None
    if operator in ("Gt", "Lt") and (len(values) != 1 or _go_int(values[0]) is None):
        return None
    if not all(_is_label_value(v) for v in values):
        return None
    return key, operator, values


def _label_matches(labels: Mapping[str, str], key: str, operator: str, values: list[str]) -> bool:
    """labels.Requirement.Matches."""
    if operator == "In":
        return key in labels and labels[key] in values
    if operator == "NotIn":
        return key not in labels or labels[key] not in values
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    if key not in labels:
        return False
    have = _go_int(labels[key])
    if have is None:
        return False
    bound = int(values[0])
    return have > bound if operator == "Gt" else have < bound


def _term_matches(term: _Obj, labels: Mapping[str, str], name: str, fn: str, where: str) -> bool:
    """One NodeSelectorTerm: its matchExpressions over the node's labels AND its
    matchFields over the node's fields (``metadata.name`` only; skipped for a node
    without a name, as upstream). A term with neither matches nothing; a term with
    an expression the scheduler cannot parse matches nothing."""
    expressions = _list(term.get("matchExpressions"), fn, f"{where}.matchExpressions")
    fields = _list(term.get("matchFields"), fn, f"{where}.matchFields")
    if not expressions and not fields:
        return False
    requirements = []
    for i, raw in enumerate(expressions):
        parsed = _label_requirement(_map(raw, fn, f"{where}.matchExpressions[{i}]"), fn, f"{where}.matchExpressions[{i}]")
        if parsed is None:
            return False
        requirements.append(parsed)
    field_checks: list[tuple[str, str, str]] = []
    for i, raw in enumerate(fields):
        entry = _map(raw, fn, f"{where}.matchFields[{i}]")
        key = _text(entry.get("key"), fn, f"{where}.matchFields[{i}].key")
        operator = _text(entry.get("operator"), fn, f"{where}.matchFields[{i}].operator")
        values = _strings(entry.get("values"), fn, f"{where}.matchFields[{i}].values")
        if operator not in _FIELD_OPERATORS or len(values) != 1:
            return False
        field_checks.append((key, operator, values[0]))
    if not all(_label_matches(labels, key, op, values) for key, op, values in requirements):
        return False
    if field_checks and name:
        node_fields = {"metadata.name": name}
        for key, operator, value in field_checks:
            equal = node_fields.get(key, "") == value
            if equal != (operator == "In"):
                return False
    return True


def _node_labels_and_name(node: _Obj, fn: str) -> tuple[dict[str, str], str]:
    meta = _map(node.get("metadata"), fn, "node.metadata")
    labels = _map(meta.get("labels"), fn, "node.metadata.labels")
    for key, value in labels.items():
        if type(value) is not str:
            raise EvalError(f"{fn}: node.metadata.labels[{key!r}] must be a string, not {type_name(value)}")
    return dict(labels), _text(meta.get("name"), fn, "node.metadata.name")


def node_selector_matches(selector: _Obj, node: _Obj, fn: str, where: str) -> bool:
    """A v1.NodeSelector: its terms ORed; no terms (or only empty ones) match nothing."""
    labels, name = _node_labels_and_name(node, fn)
    terms = _list(selector.get("nodeSelectorTerms"), fn, f"{where}.nodeSelectorTerms")
    return any(
        _term_matches(_map(term, fn, f"{where}.nodeSelectorTerms[{i}]"), labels, name, fn, f"{where}.nodeSelectorTerms[{i}]")
        for i, term in enumerate(terms)
    )


def pod_node_affinity_matches(pod: _Obj, node: _Obj, fn: str) -> bool:
    """GetRequiredNodeAffinity(pod).Match(node): spec.nodeSelector (every label equal)
    AND spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution,
    when present (present but with no terms: matches nothing)."""
    spec = _map(pod.get("spec"), fn, "pod.spec")
    wanted = _map(spec.get("nodeSelector"), fn, "pod.spec.nodeSelector")
    if wanted:
        labels, _ = _node_labels_and_name(node, fn)
        for key, value in wanted.items():
            if key not in labels or labels[key] != _text(value, fn, f"pod.spec.nodeSelector[{key!r}]"):
                return False
    affinity = _map(spec.get("affinity"), fn, "pod.spec.affinity")
    node_affinity = _map(affinity.get("nodeAffinity"), fn, "pod.spec.affinity.nodeAffinity")
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if required is None:
        return True
    where = "pod.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    return node_selector_matches(_map(required, fn, where), node, fn, where)


def node_selector_matches_fn(*args: Any) -> bool:
    fn = "kube.nodeSelectorMatches"
    if len(args) != 2:
        raise _no_overload(fn, *args)
    return node_selector_matches(_object(args[0], fn, *args), _object(args[1], fn, *args), fn, "nodeSelector")


def pod_node_affinity_matches_fn(*args: Any) -> bool:
    fn = "kube.podNodeAffinityMatches"
    if len(args) != 2:
        raise _no_overload(fn, *args)
    return pod_node_affinity_matches(_object(args[0], fn, *args), _object(args[1], fn, *args), fn)


# -- free capacity ---------------------------------------------------------------------------


def node_free(node: _Obj, node_info: _Obj, name: str, fn: str = "kube.nodeFree") -> Quantity:
    """Allocatable minus requested: may be negative on an overcommitted node. Evaluated
    for every node of a request: the usual shapes take the short way."""
    status = node.get("status")
    if type(status) is not dict:
        status = _map(status, fn, "node.status")
    allocatable = status.get("allocatable")
    if type(allocatable) is not dict:
        allocatable = _map(allocatable, fn, "node.status.allocatable")
    have = _resource(allocatable, name, fn, "node.status.allocatable")
    if name == "pods":
        count = node_info.get("podCount", 0)
        if type(count) is not int:
            raise EvalError(f"{fn}: nodeInfo.podCount must be an int, not {type_name(count)}")
        used = Quantity(count, 0, False, DECIMAL_SI)
    else:
        requested = node_info.get("requested")
        if type(requested) is not dict:
            requested = _map(requested, fn, "nodeInfo.requested")
        used = _resource(requested, name, fn, "nodeInfo.requested")
    if used.mantissa == 0:
        return have
    if not have.is_dec and not used.is_dec and have.exponent == used.exponent:
        left = have.mantissa - used.mantissa  # the common case: both in the same unit (m, or none)
        if INT64_MIN <= left <= INT64_MAX:
            return Quantity(left, have.exponent, False, have.format if have.mantissa else used.format)
    return _add(have, _negated(used))


def _resource(resources: _Obj, name: str, fn: str, where: str) -> Quantity:
    """One entry of a ResourceList, zero when absent."""
    value = resources.get(name)
    if value is None and name not in resources:
        return ZERO
    if type(value) is str:
        try:
            return parse_quantity(value)
        except EvalError:
            pass
    return _quantity(value, fn, f"{where}[{name!r}]")


def node_free_fn(*args: Any) -> Quantity:
    fn = "kube.nodeFree"
    if len(args) != 3 or type(args[2]) is not str:
        raise _no_overload(fn, *args)
    return node_free(_object(args[0], fn, *args), _object(args[1], fn, *args), args[2], fn)


# -- run-time budget ----------------------------------------------------------------------------
# Charged before the call (limits.py): one unit per container, toleration x taint pair and
# selector term or expression the call can visit, as a comprehension over them would be.


def _size_at(obj: Any, first: str, second: str = "") -> int:
    """The length of the list or map at ``obj[first][second]`` (0 for anything else)."""
    if type(obj) is not dict:
        return 0
    obj = obj.get(first)
    if second:
        if type(obj) is not dict:
            return 0
        obj = obj.get(second)
    return len(obj) if type(obj) in (list, tuple, dict) else 0


def _requests_cost(pod: Any = None, *_: Any) -> int:
    return _size_at(pod, "spec", "containers") + _size_at(pod, "spec", "initContainers")


def _pair_cost(pod: Any = None, node: Any = None, *_: Any) -> int:
    return _size_at(pod, "spec", "tolerations") * _size_at(node, "spec", "taints")


def _tolerations_cost(pod: Any = None, *_: Any) -> int:
    return _size_at(pod, "spec", "tolerations")


def _terms_cost(selector: Any) -> int:
    terms = selector.get("nodeSelectorTerms") if isinstance(selector, dict) else None
    if not isinstance(terms, (list, tuple)):
        return 0
    return sum(1 + _size_at(t, "matchExpressions") + _size_at(t, "matchFields") for t in terms)


def _selector_cost(selector: Any = None, *_: Any) -> int:
    return _terms_cost(selector)


def _affinity_cost(pod: Any = None, *_: Any) -> int:
    spec = pod.get("spec") if isinstance(pod, dict) else None
    if not isinstance(spec, dict):
        return 0
    affinity = spec.get("affinity")
    node_affinity = affinity.get("nodeAffinity") if isinstance(affinity, dict) else None
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") if isinstance(node_affinity, dict) else None
    return _size_at(spec, "nodeSelector") + _terms_cost(required)


# What each function reads of its arguments (library.py's READS contract: kpe's cache keeps
# only what policies read of the pods bound to nodes). Lists are transparent.
POD_REQUEST_READS: Final = (
    "spec.containers.resources.requests",
    "spec.containers.resources.limits",
    "spec.initContainers.resources.requests",
    "spec.initContainers.resources.limits",
    "spec.initContainers.restartPolicy",
    "spec.resources.requests",
    "spec.resources.limits",
    "spec.overhead",
)
_TOLERATION: Final = ("key", "operator", "value", "effect")
_POD_TOLERATIONS: Final = tuple(f"spec.tolerations.{f}" for f in _TOLERATION)
_TAINT: Final = ("key", "value", "effect")
_NODE_TAINTS: Final = tuple(f"spec.taints.{f}" for f in _TAINT)
_NODE_LABELS: Final = ("metadata.name", "metadata.labels")

READS: dict[str, tuple[tuple[str, ...] | None, ...]] = {
    "kube.podRequests": (POD_REQUEST_READS, None),
    "kube.toleratesTaint": (_TOLERATION, _TAINT),
    "kube.podToleratesTaint": (_POD_TOLERATIONS, _TAINT),
    "kube.untoleratedTaints": (_POD_TOLERATIONS, ("spec.taints",)),  # returns copies of whole taints
    "kube.podToleratesNodeTaints": (_POD_TOLERATIONS, _NODE_TAINTS),
    "kube.nodeSelectorMatches": (("nodeSelectorTerms",), _NODE_LABELS),
    "kube.podNodeAffinityMatches": (
        ("spec.nodeSelector", "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"),
        _NODE_LABELS,
    ),
    "kube.nodeFree": (("status.allocatable",), ("requested", "podCount"), None),
}

COSTS: dict[str, Callable[..., int]] = {
    "kube.podRequests": _requests_cost,
    "kube.podToleratesTaint": _tolerations_cost,
    "kube.untoleratedTaints": _pair_cost,
    "kube.podToleratesNodeTaints": _pair_cost,
    "kube.nodeSelectorMatches": _selector_cost,
    "kube.podNodeAffinityMatches": _affinity_cost,
}

FUNCTIONS: dict[str, Callable[..., Any]] = {
    "kube.podRequests": pod_requests_fn,
    "kube.toleratesTaint": tolerates_taint_fn,
    "kube.podToleratesTaint": pod_tolerates_taint_fn,
    "kube.untoleratedTaints": untolerated_taints_fn,
    "kube.podToleratesNodeTaints": pod_tolerates_node_taints_fn,
    "kube.nodeSelectorMatches": node_selector_matches_fn,
    "kube.podNodeAffinityMatches": pod_node_affinity_matches_fn,
    "kube.nodeFree": node_free_fn,
}

# kube.podRequests is left out: a map with one argument, a Quantity with two.
RESULT_TYPES: dict[str, str] = {
    "kube.toleratesTaint": "bool",
    "kube.podToleratesTaint": "bool",
    "kube.untoleratedTaints": "list",
    "kube.podToleratesNodeTaints": "bool",
    "kube.nodeSelectorMatches": "bool",
    "kube.podNodeAffinityMatches": "bool",
    "kube.nodeFree": "kubernetes.Quantity",
}
