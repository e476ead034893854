"""kube-scheduler's taint, toleration, node selector and node affinity rules, for
the ``kube.*`` functions engine/cel/ext/kube.py makes of them (with what they
cost and read):

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

The same functions are kpe's TaintToleration and NodeAffinity checks in
engine/cluster/kubefilters.py.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

from engine.cel.errors import EvalError
from engine.cel.ext.kuberesources import _list, _map, _no_overload, _Obj, _object, _text
from engine.cel.types.values import INT64_MAX, INT64_MIN, type_name

# Taint effects the TaintToleration filter rejects a node for (PreferNoSchedule only scores).
FILTERED_EFFECTS: Final = frozenset(("NoSchedule", "NoExecute"))

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
