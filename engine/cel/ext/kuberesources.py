"""``kube.podRequests`` and ``kube.nodeFree``: the resources kube-scheduler counts
for a pod and the capacity it finds free on a node. engine/cel/ext/kube.py makes
them CEL functions (with what they cost and read); the rules they follow are here:

``kube.podRequests(pod)``, ``kube.podRequests(pod, name)``
    k8s.io/component-helpers/resource ``PodRequests`` with the options
    kube-scheduler 1.37 counts a pod with (framework.PodInfo.CalculateResource:
    pod-level resources and a running pod's status counted): the sum of the
    regular containers and the restartable init containers (sidecars), or the
    largest need of one init container while it runs (its request plus the
    sidecars started before it) where that is more; for a running pod, what an
    in-place resize holds; pod-level ``spec.resources.requests`` (cpu, memory,
    ``hugepages-*``) replace the containers' figure for the resources they
    name; ``spec.overhead`` on top (status and pod-level resources: below).
    The API server's defaulting is applied first (a container limit without a
    request requests the limit; pod-level requests defaulted; every request,
    limit, overhead and status quantity rounded up to milli-units,
    ``SetDefaults_ResourceList``: ``1n`` is ``1m``; a ``null`` quantity is 0,
    as Quantity's UnmarshalJSON reads it), so a pod written by hand gives what
    the API would store. The real requests: not the scheduler's non-zero
    defaults for scoring (100m CPU, 200Mi memory).
In-place resize (KEP-1287, GA 1.35; pod-level, KEP-5419, beta 1.36)
    Counted for a pod bound to a node (``spec.nodeName``), as the scheduler's NodeInfo
    counts the pods on a node; the pod being placed counts by its spec alone
    (noderesources' computePodResourceRequest), whatever its status says, so its status
    never makes two pending replicas differ (the equivalence cache's fingerprint).
    A running pod may hold more than its spec asks while a resize is under way: per
    resource the scheduler counts the most of the spec, what the kubelet allocated
    (``status.containerStatuses[].allocatedResources``) and what it actuated
    (``...resources.requests``, else the allocated). Where the kubelet reports the pod's
    own ``status.allocatedResources`` and ``status.resources.requests``, those stand for
    the containers' aggregate. While the last resize is infeasible (the
    ``PodResizePending`` condition with reason ``Infeasible``) the spec is not counted: a
    container without a status then counts nothing. The deprecated ``status.resize`` is
    read by nothing.
Pod-level resources (``spec.resources``, GA 1.37)
    The API server defaults a pod-level request that is not set once the pod sets any
    pod-level request or limit (DefaultPodLevelResources): cpu and memory from the
    containers' aggregate (of their spec), else the pod-level limit; huge pages from the
    pod-level limit, else the containers' aggregate. Those requests replace the
    containers' figure; while the status reports pod-level resources, the most of them
    and the spec's (the status's alone while the resize is infeasible).
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

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

from engine.cel.errors import EvalError, no_such_overload
from engine.cel.ext.quantity import DECIMAL_SI, Quantity, _add, _negated, parse_quantity, round_up, scaled_value
from engine.cel.interpreter.runtime import Unbound
from engine.cel.types.values import INT64_MAX, INT64_MIN, type_name

ZERO: Final = Quantity(0, 0, False, DECIMAL_SI)

# The API server rounds every request, limit and overhead up to this scale (SetDefaults_ResourceList).
_API_SCALE: Final = -3


_Obj = Mapping[str, Any]

# Pod-level resources (spec.resources) as of Kubernetes 1.37: cpu, memory and huge pages.
_POD_LEVEL: Final = frozenset(("cpu", "memory"))
_HUGEPAGES_PREFIX: Final = "hugepages-"


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


# -- in-place resize and pod-level resources (the module's docstring says the rules) ----------
# These read the JSON and choose; the quantities are parsed by the callers below, so a pod
# whose status says nothing of a resize costs one look at its conditions and container statuses.


def is_pod_level_resource(name: str) -> bool:
    """Whether ``spec.resources`` may set this resource (Kubernetes 1.37: cpu, memory, huge pages)."""
    return name in _POD_LEVEL or name.startswith(_HUGEPAGES_PREFIX)


class _Resize:
    """What a pod's status says of a resize: whether the last one is infeasible, each
    container's status by name (containers first, then init containers, the first of a
    name: findContainerStatus), and the pod-level status lists (raw; None when absent)."""

    __slots__ = ("allocated", "actuated", "infeasible", "pod_resources", "statuses")

    def __init__(self, *, infeasible: bool, statuses: dict[Any, _Obj], allocated: Any, actuated: Any, pod_resources: bool) -> None:
        self.infeasible = infeasible
        self.statuses = statuses
        self.allocated = allocated
        self.actuated = actuated
        self.pod_resources = pod_resources

    def pod_lists(self) -> bool:
        """Whether the pod-level status lists stand for the containers' aggregate (both reported)."""
        return self.allocated is not None and self.actuated is not None

    def container_list(self, name: Any, actuated: bool) -> tuple[Any, str] | None:
        """The raw list a container counts in the allocated (or actuated) aggregate, with
        its field for messages; None where its spec counts (nothing, while infeasible)."""
        cs = self.statuses.get(name)
        if cs is None:
            return None
        if actuated:
            running = _requests_of(cs)
            if running is not None:
                return running, ".resources.requests"
        allocated = cs.get("allocatedResources")
        return None if allocated is None else (allocated, ".allocatedResources")


def _resize_of(status: Any, spec: _Obj, fn: str) -> _Resize | None:
    """The resize the status shows, or None where counting the status gives the spec's
    figure (a pending pod; a running pod whose status reports no resources, or just
    what its containers' spec asks: every running pod not being resized)."""
    status = _map(status, fn, "status")
    infeasible = False
    for condition in _list(status.get("conditions"), fn, "status.conditions"):
        if type(condition) is dict and condition.get("type") == "PodResizePending":
            infeasible = condition.get("reason") == "Infeasible"
            break
    statuses: dict[Any, _Obj] = {}
    reported = False
    for key in ("containerStatuses", "initContainerStatuses"):
        for cs in _list(status.get(key), fn, f"status.{key}"):
            if type(cs) is dict:
                statuses.setdefault(cs.get("name"), cs)
                reported = reported or cs.get("allocatedResources") is not None or _requests_of(cs) is not None
    pod_resources = status.get("resources") is not None
    if not (infeasible or pod_resources) and (not reported or _as_specified(spec, statuses)):
        return None
    return _Resize(infeasible=infeasible, statuses=statuses, allocated=status.get("allocatedResources"),
                   actuated=_requests_of(status), pod_resources=pod_resources)


def _as_specified(spec: _Obj, statuses: dict[Any, _Obj]) -> bool:
    """Whether every container status reports the container's requests as written (the
    API server's defaulting makes them explicit): the status then counts as the spec."""
    for key in ("containers", "initContainers"):
        containers = spec.get(key)
        if type(containers) is not list:
            if containers:
                return False
            continue
        for container in containers:
            if type(container) is not dict:
                return False
            cs = statuses.get(container.get("name"))
            if cs is None:
                continue
            resources = container.get("resources")
            asked = resources.get("requests") if type(resources) is dict else None
            if cs.get("allocatedResources") not in (None, asked) or _requests_of(cs) not in (None, asked):
                return False
    return True


def _requests_of(status: _Obj) -> Any:
    """``resources.requests`` of a status (None where either is absent, as Go's nil)."""
    resources = status.get("resources")
    return resources.get("requests") if type(resources) is dict else None


def _most(into: dict[str, Quantity], *lists: Mapping[str, Quantity]) -> dict[str, Quantity]:
    """``into`` raised, per resource, to the most of ``lists`` (component-helpers' max)."""
    for lst in lists:
        for name, q in lst.items():
            _at_least(into, name, q)
    return into


def _pod_level_requests(requests: Mapping[str, Quantity], limits: Mapping[str, Quantity],
                        explicit: _Obj, containers: Mapping[str, Quantity]) -> dict[str, Quantity]:
    """The pod-level requests after the API server's defaulting (the module's docstring):
    ``requests`` and ``limits`` parsed, ``explicit`` the requests as written, ``containers``
    the containers' aggregate from their spec. Only pod-level resources."""
    chosen = {name: q for name, q in requests.items() if is_pod_level_resource(name)}
    for name, q in containers.items():
        if name not in explicit and (name in _POD_LEVEL or (name.startswith(_HUGEPAGES_PREFIX) and name not in limits)):
            chosen[name] = q
    for name, q in limits.items():
        if name not in chosen and is_pod_level_resource(name):
            chosen[name] = q
    return chosen


# -- requests of a pod ---------------------------------------------------------------------


_RequestsOf = Callable[[Any, str, int], tuple[dict[str, Quantity], bool]]


def pod_requests(pod: Any, *, strict: bool = True, fn: str = "kube.podRequests") -> dict[str, Quantity]:
    """The pod's effective requests per resource, as kube-scheduler 1.37 computes them
    (``PodRequests`` with the options of framework.PodInfo.CalculateResource; see the
    module's docstring). ``strict=False`` skips malformed quantities and containers
    instead of raising (kpe's cache sums every pod it sees)."""
    pod = _map(pod, fn, "pod")
    spec = pod.get("spec")
    if type(spec) is not dict:
        spec = _map(spec, fn, "spec")

    def spec_of(container: Any, kind: str, index: int) -> tuple[dict[str, Quantity], bool]:
        return _container_requests(container, fn, kind, index, strict)

    containers = _aggregate(spec, spec_of, fn, strict)
    status = pod.get("status")
    resize = None
    if status and spec.get("nodeName"):  # the scheduler counts the pod it places by its spec alone
        try:
            resize = _resize_of(status, spec, fn)
        except EvalError:
            if strict:
                raise
    total = containers if resize is None else _with_status(spec, containers, resize, fn, strict)
    pod_level = spec.get("resources")
    if pod_level:
        try:
            _apply_pod_level(total, containers, _map(pod_level, fn, "spec.resources"), resize, fn, strict)
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


def _aggregate(spec: _Obj, each: _RequestsOf, fn: str, strict: bool) -> dict[str, Quantity]:
    """The containers' requests (``each`` container's) summed as AggregateContainerRequests does."""
    total: dict[str, Quantity] = {}
    containers = spec.get("containers")
    if containers:
        for i, container in enumerate(_list(containers, fn, "spec.containers")):
            try:
                requests, _ = each(container, "spec.containers", i)
            except EvalError:
                if strict:
                    raise
                continue
            for name, q in requests.items():
                found = total.get(name)
                total[name] = q if found is None else _add(found, q)
    init_containers = spec.get("initContainers")
    if init_containers:
        _add_init_containers(total, _list(init_containers, fn, "spec.initContainers"), each, strict)
    return total


def _add_init_containers(total: dict[str, Quantity], init_containers: Iterable[Any], each: _RequestsOf, strict: bool) -> None:
    """Init containers run one at a time, before the regular ones; a restartable one
    (a sidecar) keeps running once started, so it adds to the regular containers and
    to every init container after it. Per resource, the pod needs the larger of the
    regular containers with all sidecars and the most one init container needs while
    it runs (its request plus the sidecars started before it)."""
    sidecars: dict[str, Quantity] = {}
    peak: dict[str, Quantity] = {}
    for i, container in enumerate(init_containers):
        try:
            requests, sidecar = each(container, "spec.initContainers", i)
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


def _with_status(spec: _Obj, containers: dict[str, Quantity], resize: _Resize, fn: str, strict: bool) -> dict[str, Quantity]:
    """AggregateContainerRequests with UseStatusResources (the module's docstring)."""
    if resize.pod_lists():
        allocated = _resource_list(resize.allocated, fn, "status.allocatedResources", strict)
        actuated = _resource_list(resize.actuated, fn, "status.resources.requests", strict)
    else:
        def allocated_of(container: Any, kind: str, index: int) -> tuple[dict[str, Quantity], bool]:
            return _status_requests(container, kind, index, resize, False, fn, strict)

        def actuated_of(container: Any, kind: str, index: int) -> tuple[dict[str, Quantity], bool]:
            return _status_requests(container, kind, index, resize, True, fn, strict)

        allocated = _aggregate(spec, allocated_of, fn, strict)
        actuated = _aggregate(spec, actuated_of, fn, strict)
    return _most({} if resize.infeasible else dict(containers), actuated, allocated)


def _status_requests(container: Any, kind: str, index: int, resize: _Resize, actuated: bool, fn: str, strict: bool) -> tuple[dict[str, Quantity], bool]:
    """One container's allocated (or actuated) requests; without a status, its spec's."""
    requests, sidecar = _container_requests(container, fn, kind, index, strict)
    found = resize.container_list(container.get("name"), actuated)
    if found is None:
        return ({} if resize.infeasible else requests), sidecar
    raw, field = found
    return _resource_list(raw, fn, f"status of {kind}[{index}]{field}", strict), sidecar


def _apply_pod_level(total: dict[str, Quantity], containers: dict[str, Quantity], pod_level: _Obj,
                     resize: _Resize | None, fn: str, strict: bool) -> None:
    """Pod-level requests, defaulted as the API server does, replace the containers'
    figure for the resources they name (the module's docstring)."""
    raw_requests = _map(pod_level.get("requests"), fn, "spec.resources.requests")
    raw_limits = _map(pod_level.get("limits"), fn, "spec.resources.limits")
    if not raw_requests and not raw_limits:
        return
    chosen = _pod_level_requests(_resource_list(raw_requests, fn, "spec.resources.requests", strict),
                                 _resource_list(raw_limits, fn, "spec.resources.limits", strict), raw_requests, containers)
    if chosen and resize is not None and resize.pod_resources:
        effective = _most({} if resize.infeasible else chosen,
                          _resource_list(resize.actuated, fn, "status.resources.requests", strict),
                          _resource_list(resize.allocated, fn, "status.allocatedResources", strict))
        chosen = {name: q for name, q in effective.items() if is_pod_level_resource(name)}
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
