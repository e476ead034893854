"""``kube.podRequests`` and ``kube.nodeFree``: the resources kube-scheduler counts
for a pod and the capacity it finds free on a node. engine/cel/ext/kube.py makes
them CEL functions (with what they cost and read); the rules they follow are here:

``kube.podRequests(pod)``, ``kube.podRequests(pod, name)``
    k8s.io/component-helpers/resource ``PodRequests`` with Kubernetes 1.34
    defaults: the sum of the regular containers and the restartable init
    containers (sidecars), or the largest need of one init container while it
    runs (its request plus the sidecars started before it) where that is more;
    pod-level ``spec.resources.requests`` (cpu, memory, ``hugepages-*``) replace
    the containers' figure for the resources they name; ``spec.overhead`` on
    top. The API server's defaulting is applied first (a container or
    pod-level limit without a request requests the limit; every request,
    limit and overhead rounded up to milli-units, ``SetDefaults_ResourceList``:
    ``1n`` is ``1m``; a ``null`` quantity is 0, as Quantity's UnmarshalJSON reads
    it), so a pod written by hand gives what the API would store. The real requests: not the scheduler's
    non-zero defaults for scoring (100m CPU, 200Mi memory), and not the
    resources of an in-place resize reported in the pod's status.
``kube.nodeFree(node, nodeInfo, name)``
    ``status.allocatable[name]`` minus ``nodeInfo.requested[name]`` (for
    ``pods``: minus ``nodeInfo.podCount``, as the scheduler counts pods), in the
    scheduler's integer units (its framework.Resource, pkg/scheduler/framework/types.go):
    cpu in milli-units (``MilliValue()``), everything else in whole units
    (``Value()``), each rounded up. ``nodeInfo.requested`` sums each pod's
    request so rounded (engine/cluster/nodeinfo.py), as NodeInfo.update does.

``pod_requests`` is also what ``nodeInfo.requested`` sums (engine/cluster/nodeinfo.py),
leniently: there a malformed quantity of a pod already running is skipped. It and
``node_free`` are also kpe's NodeResourcesFit check (engine/cluster/kubefilters.py).

The readers of Kubernetes JSON at the top (``_map``, ``_list``, ``_text``,
``_object``, ``_no_overload``) serve engine/cel/ext/kubescheduling.py too, which
imports them from here, so every ``kube.*`` function reports a malformed object
the same way (kube.py states how).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from engine.cel.errors import EvalError, no_such_overload
from engine.cel.ext.quantity import DECIMAL_SI, Quantity, _add, _negated, parse_quantity, round_up, scaled_value
from engine.cel.interpreter.runtime import Unbound
from engine.cel.types.values import INT64_MAX, INT64_MIN, type_name

ZERO: Final = Quantity(0, 0, False, DECIMAL_SI)

# The API server rounds every request, limit and overhead up to this scale (SetDefaults_ResourceList).
_API_SCALE: Final = -3

# Pod-level resources (spec.resources) as of Kubernetes 1.34: cpu, memory and huge pages.
_POD_LEVEL: Final = frozenset(("cpu", "memory"))
_HUGEPAGES_PREFIX: Final = "hugepages-"

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
    elif value is None:
        return ZERO  # JSON null: Quantity.UnmarshalJSON leaves the zero Quantity
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
                out[name] = round_up(parse_quantity(value), _API_SCALE)
                continue
            except EvalError:
                pass
        try:
            out[name] = round_up(_quantity(value, fn, f"{_place(where, index, field)}[{name!r}]"), _API_SCALE)
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


# -- free capacity ---------------------------------------------------------------------------


def scheduler_units(name: str, q: Quantity) -> int:
    """A quantity as kube-scheduler's framework.Resource holds it: cpu in milli-units
    (``MilliValue()``), any other resource in whole units (``Value()``), rounded up."""
    return scaled_value(q, -3 if name == "cpu" else 0)


def scheduler_quantity(name: str, q: Quantity) -> Quantity:
    """``scheduler_units`` as a Quantity (``1.5`` cpu stays ``1500m``; ``0.3Gi`` is ``322122548``)."""
    exponent = -3 if name == "cpu" else 0
    if q.exponent >= exponent and not q.is_dec:
        return q
    return Quantity(scheduler_units(name, q), exponent, False, q.format)


def node_free(node: _Obj, node_info: _Obj, name: str, fn: str = "kube.nodeFree") -> Quantity:
    """Allocatable minus requested in the scheduler's units (``scheduler_units``): may be
    negative on an overcommitted node. Evaluated for every node of a request: the usual
    shapes take the short way."""
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
    exponent = -3 if name == "cpu" else 0
    left = scheduler_units(name, have) - scheduler_units(name, used)
    return Quantity(left, exponent, not INT64_MIN <= left <= INT64_MAX, have.format if have.mantissa else used.format)


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
