"""Parameters kept in the cluster (``spec.paramsFrom``): a ConfigMap's data over a policy's
declared ``params``, as ValidatingAdmissionPolicy takes its parameters from an object.

The rule, in docs/policy-format.md and docs/guides/namespaces-and-params.md:

- Each key of the ConfigMap's ``data`` overrides the ``params`` key of that name; its value is
  parsed as YAML (``"3"`` is the int 3, ``"[a, b]"`` a list, ``"{team-a: 4}"`` a map, ``"x"``
  the string x). Keys the policy does not declare are added as they parse.
- A value must be of the type its declared default has (an int for an int, a list for a list;
  a double takes an int too; a null default takes anything), and the policy must compile with
  the values: types and cost are checked against the values served, not only the defaults.
- Missing or malformed (not YAML, another type, does not compile): ``parameterNotFoundAction``
  decides. ``Deny`` (the default): every expression that reads ``params`` fails with an error
  naming the ConfigMap, and the policy's failurePolicy decides, as for any error. ``UseDefaults``:
  the declared ``params``.

Which ConfigMaps exist is the caller's: kpe's server watches them (``server.cluster.configmaps``),
``kpe test`` takes them from a case. Without any (``kpe check``), policies use their defaults.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from engine.errors import PolicyError
from engine.policy.compiler import CompileDeadline, CostLimits, compile_policy
from engine.policy.documents import Document
from engine.policy.model import Policy

Ref = tuple[str, str]  # (namespace, name)


@dataclass(frozen=True)
class Unreadable:
    """A ConfigMap kpe could not read (a 403 where its RBAC does not reach): not the same
    problem as one that does not exist, and not fixed the same way."""

    why: str


ClusterParams = Mapping[Ref, "Mapping[str, str] | Unreadable | None"]
"""The ConfigMaps' data by (namespace, name); a ConfigMap not there (or None) does not exist."""

DENY, USE_DEFAULTS = "Deny", "UseDefaults"


def params_ref(spec: Mapping[str, Any]) -> tuple[Ref, str] | None:
    """The ConfigMap a policy spec names and its ``parameterNotFoundAction``."""
    source = spec.get("paramsFrom")
    if not isinstance(source, Mapping):
        return None
    config_map = source.get("configMap") or {}
    return (str(config_map.get("namespace", "")), str(config_map.get("name", ""))), str(source.get("parameterNotFoundAction", DENY))


def merged(defaults: Mapping[str, Any], ref: Ref, data: Mapping[str, str] | Unreadable | None) -> tuple[dict[str, Any], str]:
    """``params`` from the defaults and the ConfigMap's data, and what is wrong ("" when nothing)."""
    where = f"params: ConfigMap {ref[0]}/{ref[1]}"
    if data is None:
        return dict(defaults), f"{where} not found"
    if isinstance(data, Unreadable):
        return dict(defaults), f"{where} cannot be read ({data.why})"
    out = dict(defaults)
    for key in sorted(data):
        text = data[key]
        try:
            value = yaml.safe_load(text) if isinstance(text, str) else text
        except yaml.YAMLError as exc:
            problem = str(exc).splitlines()[0]
            return dict(defaults), f"{where}: key {key!r} is not YAML ({problem})"
        if key in defaults and not _same_type(defaults[key], value):
            return dict(defaults), f"{where}: key {key!r} is {_kind(value)}, but params.{key} is declared {_kind(defaults[key])}"
        out[key] = value
    return out, ""


def _same_type(default: Any, value: Any) -> bool:
    if default is None:
        return True
    if isinstance(default, bool) or isinstance(value, bool):
        return isinstance(default, bool) and isinstance(value, bool)
    if isinstance(default, float):
        return isinstance(value, (int, float))
    for kind in (int, str, list, dict):
        if isinstance(default, kind):
            return isinstance(value, kind)
    return True


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    names = {bool: "a bool", int: "an int", float: "a double", str: "a string", list: "a list", dict: "a map"}
    return names.get(type(value), type(value).__name__)


def compile_with_params(
    doc: Document, cost_limits: CostLimits | None, cluster_params: ClusterParams | None, *, deadline: CompileDeadline | None = None
) -> tuple[Policy | None, list[PolicyError]]:
    """Compile a schema-valid policy document with its ``params`` from the cluster: the
    ConfigMap's values when they are sound, else the defaults with ``params_error`` set
    (``Deny``) or not (``UseDefaults``). Without ``cluster_params``, with the defaults. Only a
    policy that does not compile with its defaults has errors."""
    found = params_ref(doc.data["spec"])
    if found is None:
        return compile_policy(doc, cost_limits, deadline=deadline)
    ref, action = found
    problem = ""
    if cluster_params is not None:
        spec = doc.data["spec"]
        values, problem = merged(spec.get("params") or {}, ref, cluster_params.get(ref))
        if not problem:
            served = dataclasses.replace(doc, data={**doc.data, "spec": {**spec, "params": values}})
            policy, errors = compile_policy(served, cost_limits, deadline=deadline)
            if policy is not None:
                return dataclasses.replace(policy, params_from=ref), []
            problem = f"params: ConfigMap {ref[0]}/{ref[1]}: its values do not compile: {errors[0].message}"
    policy, errors = compile_policy(doc, cost_limits, deadline=deadline)
    if policy is None:
        return None, errors
    return dataclasses.replace(policy, params_from=ref, params_error=problem if action == DENY else "", params_problem=problem), []
