"""Reservations: capacity held by placeholder pods, used only by the reservation's owners.

A ``kind: Reservation`` document names how many slots to hold, what one slot
holds (a pod template: requests, node selector and affinity, tolerations,
topology spread), which pods own it (a policy's ``match``) and whether owners
must run in a slot (``Required``) or go there first (``Preferred``). kpe keeps
one low-priority placeholder pod per free slot (``engine.reservations.slots`` decides,
``server.reservations.controller`` acts); kube-scheduler places placeholders like any
pod, so the capacity is held in its own books.

The decisions on owners reuse the policy machinery: each reservation compiles
to a policy named ``reservation.<name>`` matching its owners, with a filter
(``Required``: only nodes holding a free slot of it, or the node the pod was
nominated to after preempting one) or a score (``Preferred``). The preemption
rules (``preemption_veto``) are applied by ``engine.decisions.preemption``: nobody but
an owner may evict a placeholder or an owner in one of the reservation's slots,
and an owner of a ``Required`` reservation may evict only its placeholders.
Room of a slot that neither its placeholder nor its owner holds at the moment
is kept from non-owners by ``engine.reservations.heldroom``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from engine.cluster.nodeinfo import pod_name
from engine.policy.compiler import CostLimits, compile_policy
from engine.policy.documents import Document, format_path
from engine.errors import PolicyError
from engine.policy.model import POLICY_PREFIX as POLICY_PREFIX
from engine.policy.model import Policy
from engine.policy.model import Reservation as Reservation
from engine.policy.schema import validate

KIND = "Reservation"
SCHEMA = "reservation-v1alpha1.json"
RESERVATION_LABEL = "kpe.dev/reservation"  # on placeholders: the reservation's name
SLOT_LABEL = "kpe.dev/slot"  # on placeholders: the slot's index
MANAGED_BY = ("app.kubernetes.io/managed-by", "kpe")
TEMPLATE_ANNOTATION = "kpe.dev/template"  # on placeholders: hash of the template they were made from
CLAIM_ANNOTATION = "kpe.dev/reservation-slot"  # on owners: "<reservation>/<slot>" they use
RULE = "reserved-slot"
DEFAULT_WEIGHT = 5

_HOLDS = (
    f"p.metadata.?labels[?'{RESERVATION_LABEL}'].orValue('') == '{{name}}' && !has(p.metadata.deletionTimestamp)"
)
FILTER = "nodeInfo.pods.exists(p, " + _HOLDS + ") || pod.?status.?nominatedNodeName.orValue('') == node.metadata.name"
SCORE = "nodeInfo.pods.exists(p, " + _HOLDS + ") ? 100 : 0"


def reservation_of(pod: Mapping[str, Any]) -> str:
    """The reservation a placeholder holds a slot of; "" for any other pod."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    value = labels.get(RESERVATION_LABEL) if isinstance(labels, dict) else None
    return value if isinstance(value, str) else ""


def compile_reservation(doc: Document, cost_limits: CostLimits | None = None) -> tuple[Policy | None, list[PolicyError]]:
    """A schema-checked Reservation document as the policy deciding for its owners
    (``policy.reservation`` holds the reservation itself)."""
    data = doc.data
    meta = data.get("metadata") if isinstance(data, dict) else None
    name = str(meta["name"]) if isinstance(meta, dict) and isinstance(meta.get("name"), str) else ""
    errors = validate(doc, policy=name, schema=SCHEMA)
    if errors:
        return None, errors
    spec = data["spec"]
    required = spec.get("mode", "Required") == "Required"
    owners = dict(spec.get("owners") or {})
    # Placeholders never own a slot, whatever the owners' selector says.
    selector = dict(owners.get("podSelector") or {})
    selector["matchExpressions"] = [*(selector.get("matchExpressions") or []), {"key": RESERVATION_LABEL, "operator": "DoesNotExist"}]
    owners["podSelector"] = selector
    rule_spec: dict[str, Any] = {"mode": "Enforce", "failurePolicy": "Fail" if required else "Ignore", "match": owners}
    if required:
        rule_spec["filters"] = [
            {"name": RULE, "expression": FILTER.format(name=name), "message": f"no free slot of reservation {name} on this node", "unresolvable": True}
        ]
    else:
        rule_spec["scores"] = [{"name": RULE, "expression": SCORE.format(name=name), "weight": int(spec.get("weight", DEFAULT_WEIGHT))}]
    policy_doc = Document(
        file=doc.file,
        index=doc.index,
        data={"apiVersion": data["apiVersion"], "kind": "SchedulingPolicy", "metadata": {"name": POLICY_PREFIX + name}, "spec": rule_spec},
        positions=_moved(doc.positions),
        key_positions=_moved(doc.key_positions),
        lines=doc.lines,
    )
    policy, policy_errors = compile_policy(policy_doc, cost_limits)
    errors = [replace(e, policy=name, path=e.path.replace("spec.match", "spec.owners", 1)) for e in policy_errors]
    errors += _bad_quantities(doc, name)
    if policy is None or errors:
        return None, errors
    template = spec.get("template") or {}
    reservation = Reservation(
        name=name,
        file=doc.file,
        slots=int(spec["slots"]),
        required=required,
        return_slots=bool(spec.get("returnSlots", True)),
        template=template,
        template_hash=hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()[:10],
    )
    return replace(policy, source=data, reservation=reservation), []


def _bad_quantities(doc: Document, name: str) -> list[PolicyError]:
    """KPE403: template quantities the API server would refuse (no placeholder could be made)."""
    from engine.cel.ext.quantity import parse_quantity

    errors: list[PolicyError] = []
    resources = ((doc.data["spec"].get("template") or {}).get("resources")) or {}
    for kind in ("requests", "limits"):
        for resource, value in (resources.get(kind) or {}).items():
            path = ("spec", "template", "resources", kind, resource)
            try:
                parse_quantity(str(value))
            except Exception as exc:  # noqa: BLE001 - EvalError carries Kubernetes' own message
                message = f"{resource}: {value!r} is not a quantity ({exc})"
                errors.append(PolicyError("KPE403", message, doc.location(path), policy=name, path=format_path(path)))
    return errors


def _moved(table: Mapping[tuple[str | int, ...], Any]) -> dict[tuple[str | int, ...], Any]:
    """Positions of ``spec.owners`` as ``spec.match``, so CEL errors point into the owners."""
    out = dict(table)
    for path, pos in table.items():
        if path[:2] == ("spec", "owners"):
            out[("spec", "match", *path[2:])] = pos
    return out


def preemption_veto(
    reservations: Sequence[Reservation], owned: frozenset[str], pod: Mapping[str, Any], victims: Sequence[Mapping[str, Any]]
) -> tuple[str, str] | None:
    """Why the reservations forbid evicting ``victims`` for ``pod`` (the policy to blame
    and the message), or None. ``owned``: names of the reservations the pod owns."""
    if not reservations:
        return None
    known = {r.name: r for r in reservations}
    for victim in victims:
        held = reservation_of(victim)
        if held and held not in owned:
            policy = POLICY_PREFIX + held
            return policy, f"{policy}/placeholders: {pod_name(victim)} holds a slot of reservation {held}, which only its owners may use"
        # An owner in its slot holds the reservation's room as its placeholder did: evicting
        # it for a non-owner would hand that room to someone else all the same.
        used = slot_of(victim)
        if used and used[0] in known and used[0] not in owned:
            policy = POLICY_PREFIX + used[0]
            return policy, f"{policy}/placeholders: {pod_name(victim)} uses slot {used[1]} of reservation {used[0]}, which only its owners may use"
    for name in sorted(owned):
        reservation = known.get(name)
        if reservation is None or not reservation.required:
            continue
        for victim in victims:
            if reservation_of(victim) not in owned:
                policy = reservation.policy
                return policy, f"{policy}/required: an owner of reservation {name} runs only in its slots, so it may evict only their placeholders, not {pod_name(victim)}"
    return None


def slot_of(pod: Mapping[str, Any]) -> tuple[str, int] | None:
    """The slot an owner took (its ``kpe.dev/reservation-slot`` annotation), or None."""
    value = ((pod.get("metadata") or {}).get("annotations") or {}).get(CLAIM_ANNOTATION)
    if not isinstance(value, str) or "/" not in value:
        return None
    name, _, index = value.rpartition("/")
    return (name, int(index)) if index.isdigit() and name else None



def placeholder_name(reservation: str, index: int) -> str:
    return f"kpe-{reservation}-{index}"


def placeholder_pod(reservation: Reservation, index: int, *, namespace: str, image: str, priority_class: str, near: str = "") -> dict[str, Any]:
    """The placeholder pod of one slot: the template's requests and constraints at the
    placeholders' priority, gone at once when evicted; ``near``: the node the slot was on
    (preferred, so a slot coming back returns where it was when it can)."""
    template = reservation.template
    labels = {RESERVATION_LABEL: reservation.name, SLOT_LABEL: str(index), MANAGED_BY[0]: MANAGED_BY[1]}
    resources = template.get("resources") or {}
    spec: dict[str, Any] = {
        "priorityClassName": priority_class,
        "terminationGracePeriodSeconds": 0,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "restartPolicy": "Always",
        "containers": [{"name": "placeholder", "image": image, "resources": resources}],
    }
    for key in ("nodeSelector", "tolerations", "schedulerName"):
        if template.get(key):
            spec[key] = template[key]
    affinity = json.loads(json.dumps(template.get("affinity") or {}))
    if near:
        node_affinity = affinity.setdefault("nodeAffinity", {})
        node_affinity.setdefault("preferredDuringSchedulingIgnoredDuringExecution", []).append(
            {"weight": 100, "preference": {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [near]}]}}
        )
    if affinity:
        spec["affinity"] = affinity
    spread = []
    for constraint in template.get("topologySpreadConstraints") or []:
        constraint = dict(constraint)
        constraint.setdefault("labelSelector", {"matchLabels": {RESERVATION_LABEL: reservation.name}})
        spread.append(constraint)
    if spread:
        spec["topologySpreadConstraints"] = spread
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": placeholder_name(reservation.name, index),
            "namespace": namespace,
            "labels": labels,
            "annotations": {TEMPLATE_ANNOTATION: reservation.template_hash},
        },
        "spec": spec,
    }
