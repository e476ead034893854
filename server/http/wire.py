"""The extender wire format as kube-scheduler speaks it (k8s.io/kube-scheduler/extender/v1).

Go decodes JSON keys case-insensitively, so kpe accepts any case on input and
always answers with the Go field names (PascalCase). Decoding checks types and
raises ``WireError`` with a message that says which field is wrong; the
server turns that into a 400.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

import orjson


class WireError(ValueError):
    """A request body kpe cannot use; the message names the field."""


def field_ci(obj: Mapping[str, Any], name: str) -> Any:
    """``obj[name]`` matched as Go does: the exact key first, then any case."""
    if name in obj:
        return obj[name]
    lowered = name.lower()
    for key, value in obj.items():
        if isinstance(key, str) and key.lower() == lowered:
            return value
    return None


def _object(value: Any, where: str, *, required: bool = True) -> dict[str, Any] | None:
    if value is None:
        if required:
            raise WireError(f"{where} is missing")
        return None
    if not isinstance(value, dict):
        raise WireError(f"{where} must be an object, not {_kind(value)}")
    return value


def _kind(value: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", int: "a number", float: "a number"}.get(type(value), "null")


def _body(body: Any, verb: str) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise WireError(f"{verb} request body must be a JSON object, not {_kind(body)}")
    return body


def decode_pod(body: Mapping[str, Any]) -> dict[str, Any]:
    """The ``Pod`` of a request body, checked to have the shape the engine reads (see ``check_pod``)."""
    return _pod(body)


def _pod(body: Mapping[str, Any]) -> dict[str, Any]:
    pod = _object(field_ci(body, "Pod"), "Pod")
    assert pod is not None
    check_pod(pod, "Pod")
    return pod


# -- shapes ------------------------------------------------------------------------
# The engine (matching, nodeInfo, victims, admission) and CEL read these fields of a
# pod or node directly; a wrong type there is the caller's bug, so it is a 400 that
# names the field rather than an exception deep in a policy. Fields kpe never reads
# are not checked. ``null`` is accepted wherever the field is optional, as Go does.


def _type_name(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "bool", int: "int", float: "number"}.get(type(value), "null")


def _key(where: str, key: str) -> str:
    return f"{where}[{key!r}]" if not key.isidentifier() else f"{where}.{key}"


def _mapping(obj: Mapping[str, Any], key: str, where: str) -> dict[str, Any] | None:
    value = obj.get(key)
    if value is None:
        return None
    if type(value) is not dict:
        raise WireError(f"{where}.{key} must be an object, got {_type_name(value)}")
    return value


def _values_of(obj: Mapping[str, Any], key: str, where: str, allowed: set[type], values: str, value: str) -> None:
    """``obj[key]`` is null or an object whose values' types are all ``allowed``; the errors
    call the object "an object of ``values``" and a wrong value "a ``value``"."""
    found = obj.get(key)
    if found is None:
        return
    if type(found) is not dict:
        raise WireError(f"{where}.{key} must be an object of {values}, got {_type_name(found)}")
    # set(map(type, ...)) checks a node's labels in C; this runs for every node of a request.
    if not set(map(type, found.values())) <= allowed:
        bad = next(k for k, v in found.items() if type(v) not in allowed)
        raise WireError(f"{_key(where + '.' + key, str(bad))} must be a {value}, got {_type_name(found[bad])}")


def _strings(obj: Mapping[str, Any], key: str, where: str) -> None:
    """``obj[key]`` is null or an object whose values are all strings (labels, annotations)."""
    _values_of(obj, key, where, {str}, "strings", "string")


_QUANTITY_TYPES = {str, int, float}


def _quantities(obj: Mapping[str, Any], key: str, where: str) -> None:
    """``obj[key]`` is null or an object of quantities (strings, or numbers as Go's resource.Quantity also reads)."""
    _values_of(obj, key, where, _QUANTITY_TYPES, "quantities", "quantity string")


def _string(obj: Mapping[str, Any], key: str, where: str) -> None:
    value = obj.get(key)
    if value is not None and type(value) is not str:
        raise WireError(f"{where}.{key} must be a string, got {_type_name(value)}")


def _objects(obj: Mapping[str, Any], key: str, where: str) -> list[dict[str, Any]]:
    value = obj.get(key)
    if value is None:
        return []
    if type(value) is not list:
        raise WireError(f"{where}.{key} must be an array, got {_type_name(value)}")
    for i, item in enumerate(value):
        if type(item) is not dict:
            raise WireError(f"{where}.{key}[{i}] must be an object, got {_type_name(item)}")
    return value


def _metadata(obj: Mapping[str, Any], where: str) -> None:
    meta = _mapping(obj, "metadata", where)
    if meta is None:
        return
    where += ".metadata"
    for key in ("name", "namespace", "uid"):
        _string(meta, key, where)
    _strings(meta, "labels", where)
    _strings(meta, "annotations", where)


def check_pod(pod: Mapping[str, Any], where: str) -> None:
    """Raise ``WireError`` naming the first field of ``pod`` (at ``where``) whose type the engine cannot read."""
    _metadata(pod, where)
    spec = _mapping(pod, "spec", where)
    if spec is not None:
        at = where + ".spec"
        _string(spec, "nodeName", at)
        for key in ("containers", "initContainers"):
            for i, container in enumerate(_objects(spec, key, at)):
                resources = _mapping(container, "resources", f"{at}.{key}[{i}]")
                if resources is not None:
                    _quantities(resources, "requests", f"{at}.{key}[{i}].resources")
                    _quantities(resources, "limits", f"{at}.{key}[{i}].resources")
        _quantities(spec, "overhead", at)
        _objects(spec, "schedulingGates", at)
    status = _mapping(pod, "status", where)
    if status is not None:
        _string(status, "phase", where + ".status")


def _plain_node(node: Mapping[str, Any]) -> bool:
    """The common case, quickly (a whole-node request can hold 5,000 nodes): True if
    ``check_node`` has nothing to say; False leaves the telling to it."""
    meta = node.get("metadata")
    if meta is not None:
        if type(meta) is not dict:
            return False
        for key in ("labels", "annotations"):
            value = meta.get(key)
            if value is not None and (type(value) is not dict or not set(map(type, value.values())) <= {str}):
                return False
        for key in ("namespace", "uid"):
            value = meta.get(key)
            if value is not None and type(value) is not str:
                return False
    spec = node.get("spec")
    if spec is not None:
        if type(spec) is not dict:
            return False
        taints = spec.get("taints")
        if taints is not None and (type(taints) is not list or not set(map(type, taints)) <= {dict}):
            return False
    status = node.get("status")
    if status is not None:
        if type(status) is not dict:
            return False
        for key in ("allocatable", "capacity"):
            value = status.get(key)
            if value is not None and (type(value) is not dict or not set(map(type, value.values())) <= _QUANTITY_TYPES):
                return False
    return True


def check_node(node: Mapping[str, Any], where: str) -> None:
    """Like ``check_pod``, for a node: labels, taints, allocatable and capacity."""
    if _plain_node(node):
        return
    _metadata(node, where)
    spec = _mapping(node, "spec", where)
    if spec is not None:
        _objects(spec, "taints", where + ".spec")
    status = _mapping(node, "status", where)
    if status is not None:
        _quantities(status, "allocatable", where + ".status")
        _quantities(status, "capacity", where + ".status")


@dataclass
class ExtenderArgs:
    """Filter and prioritize input: whole ``nodes`` or, with nodeCacheCapable, ``node_names``."""

    pod: dict[str, Any]
    nodes: list[dict[str, Any]] | None
    node_names: list[str] | None
    node_list_meta: dict[str, Any]
    # ``nodes`` with each one ``decode_extender_args``' ``known`` recognised replaced by its copy.
    known_nodes: list[dict[str, Any]] | None = None


def decode_extender_args(body: Any, verb: str, *, known: Callable[[list[Any]], list[dict[str, Any] | None]] | None = None,
                         own_names: Callable[[list[str]], list[str]] | None = None) -> ExtenderArgs:
    """``known(nodes)``, when given, returns for each node kpe's own copy of it at the same
    version (None where it has none): such a node is not checked, since its copy is what
    gets evaluated. ``own_names(names)``, when given, returns kpe's own string of each name
    it knows (``ClusterCache.own_names``)."""
    body = _body(body, verb)
    pod = _pod(body)
    raw_nodes = field_ci(body, "Nodes")
    raw_names = field_ci(body, "NodeNames")
    nodes = known_nodes = None
    meta: dict[str, Any] = {}
    if raw_nodes is not None:
        node_list = _object(raw_nodes, "Nodes")
        assert node_list is not None
        items = node_list.get("items")
        if items is None:
            items = []
        if not isinstance(items, list):
            raise WireError(f"Nodes.items must be an array, not {_kind(items)}")
        copies = known(items) if known is not None else [None] * len(items)
        swapped: list[dict[str, Any]] = [] if None in copies else cast(list[dict[str, Any]], copies)
        for i, node in enumerate(items if not swapped else ()):
            node_meta = node.get("metadata") if isinstance(node, dict) else None
            if not isinstance(node_meta, dict) or not isinstance(node_meta.get("name"), str):
                raise WireError(f"Nodes.items[{i}] must be a node object with metadata.name")
            copy = copies[i]
            if copy is None and not _plain_node(node):
                check_node(node, f"Nodes.items[{i}] ({node_meta['name']})")
            swapped.append(copy if copy is not None else node)
        nodes = items
        known_nodes = swapped
        list_meta = node_list.get("metadata")
        meta = list_meta if isinstance(list_meta, dict) else {}
    names = None
    if raw_names is not None:
        # set(map(type, ...)) checks a 5,000-name list in C; a genexpr would cost more than the filter.
        if not isinstance(raw_names, list) or not set(map(type, raw_names)) <= {str}:
            raise WireError("NodeNames must be an array of strings")
        # The cache's own strings: what outlives the request (nodes in flight, remembered
        # answers) holds no copy of a name.
        names = own_names(raw_names) if own_names is not None else raw_names
    if nodes is None and names is None:
        raise WireError(f"{verb} request has neither Nodes nor NodeNames")
    return ExtenderArgs(pod, nodes, names, meta, known_nodes)


@dataclass
class PreemptionArgs:
    pod: dict[str, Any]
    # node name -> victim pods (whole objects), or victim UIDs with nodeCacheCapable
    victims: dict[str, list[dict[str, Any]]] | None
    meta_victims: dict[str, list[str]] | None
    pdb_violations: dict[str, int]


def decode_preemption_args(body: Any) -> PreemptionArgs:
    body = _body(body, "preempt")
    pod = _pod(body)
    victims: dict[str, list[dict[str, Any]]] | None = None
    meta: dict[str, list[str]] | None = None
    pdb: dict[str, int] = {}
    raw = field_ci(body, "NodeNameToVictims")
    if raw is not None:
        table = _object(raw, "NodeNameToVictims")
        assert table is not None
        victims = {}
        for node, entry in table.items():
            entry = _object(entry, f"NodeNameToVictims[{node}]")
            assert entry is not None
            pods = field_ci(entry, "Pods") or []
            if not isinstance(pods, list) or not all(isinstance(p, dict) for p in pods):
                raise WireError(f"NodeNameToVictims[{node}].Pods must be an array of pods")
            for i, victim in enumerate(pods):
                check_pod(victim, f"NodeNameToVictims[{node}].Pods[{i}]")
            victims[node] = pods
            pdb[node] = _int(field_ci(entry, "NumPDBViolations"), f"NodeNameToVictims[{node}].NumPDBViolations")
    raw_meta = field_ci(body, "NodeNameToMetaVictims")
    if raw_meta is not None:
        table = _object(raw_meta, "NodeNameToMetaVictims")
        assert table is not None
        meta = {}
        for node, entry in table.items():
            entry = _object(entry, f"NodeNameToMetaVictims[{node}]")
            assert entry is not None
            pods = field_ci(entry, "Pods") or []
            if not isinstance(pods, list):
                raise WireError(f"NodeNameToMetaVictims[{node}].Pods must be an array")
            uids = []
            for i, p in enumerate(pods):
                uid = field_ci(p, "UID") if isinstance(p, dict) else None
                if not isinstance(uid, str):
                    raise WireError(f"NodeNameToMetaVictims[{node}].Pods[{i}].UID must be a string")
                uids.append(uid)
            meta[node] = uids
            pdb[node] = _int(field_ci(entry, "NumPDBViolations"), f"NodeNameToMetaVictims[{node}].NumPDBViolations")
    if victims is None and meta is None:
        raise WireError("preempt request has neither NodeNameToVictims nor NodeNameToMetaVictims")
    return PreemptionArgs(pod, victims, meta, pdb)


def _int(value: Any, where: str) -> int:
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        raise WireError(f"{where} must be an integer")
    return value


@dataclass
class BindingArgs:
    pod_name: str
    pod_namespace: str
    pod_uid: str
    node: str


def decode_binding_args(body: Any) -> BindingArgs:
    body = _body(body, "bind")
    values = {}
    for name in ("PodName", "PodNamespace", "PodUID", "Node"):
        value = field_ci(body, name)
        if not isinstance(value, str) or not value:
            raise WireError(f"{name} must be a non-empty string")
        values[name] = value
    return BindingArgs(values["PodName"], values["PodNamespace"], values["PodUID"], values["Node"])


# -- answers -----------------------------------------------------------------------


def filter_result(
    *,
    nodes: list[dict[str, Any]] | None,
    node_names: list[str] | None,
    list_meta: Mapping[str, Any],
    failed: dict[str, str],
    unresolvable: dict[str, str],
    error: str = "",
) -> dict[str, Any]:
    """ExtenderFilterResult: the passing nodes in the form they came in (the
    mappings are serialized as given, not copied: thousands of entries)."""
    return {
        "Nodes": {"metadata": dict(list_meta), "items": nodes} if nodes is not None else None,
        "NodeNames": node_names,
        "FailedNodes": failed,
        "FailedAndUnresolvableNodes": unresolvable,
        "Error": error,
    }


def host_priority_list(scores: Mapping[str, int], order: list[str]) -> list[dict[str, Any]]:
    return [{"Host": name, "Score": int(scores.get(name, 0))} for name in order]


class HostPriorityEntries:
    """A HostPriority of a prioritize answer, encoded in two pieces: the node's prefix (kept
    with each remembered node) and its score's suffix, the comma between entries included, so
    an answer is remembered pieces joined (``host_priority_json``) with nothing encoded per node."""

    suffixes = tuple(b"%d}," % score for score in range(11))  # MaxExtenderPriority is 10

    def prefix(self, name: str) -> bytes:
        return b'{"Host":' + orjson.dumps(name) + b',"Score":'


host_priority = HostPriorityEntries()


def host_priority_json(pieces: list[bytes]) -> bytes:
    """A HostPriorityList from ``host_priority``'s pieces, in order (the last comma left out)."""
    return b"[" + b"".join(pieces)[:-1] + b"]"


def preemption_result(victims: Mapping[str, list[str]], pdb: Mapping[str, int]) -> dict[str, Any]:
    """ExtenderPreemptionResult: always UIDs (MetaVictims), whatever the request held."""
    return {
        "NodeNameToMetaVictims": {
            node: {"Pods": [{"UID": uid} for uid in uids], "NumPDBViolations": pdb.get(node, 0)} for node, uids in victims.items()
        }
    }
