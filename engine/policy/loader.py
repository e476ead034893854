"""The loading pipeline: files → YAML with positions → JSON Schema → CEL compile
→ an immutable ``PolicySet``. All errors of a load are collected and reported
together, sorted by location; a load with any error produces no set."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path

from engine.policy.compiler import CompileDeadline, CostLimits, compile_policy
from engine.policy.params import ClusterParams, compile_with_params
from engine.policy.documents import Document, load_documents
from engine.errors import Location, PolicyError, PolicyLoadError
from engine.policy.counts import count_specs
from engine.policy.reads import pod_projection
from engine.policy.model import SYSTEM_NAMESPACES, Policy, PolicySet
from engine.policy.schema import TOO_LONG, validate

POLICY_KIND = "SchedulingPolicy"
RESERVATION_KIND = "Reservation"  # engine.policy.reservation
# Other kpe kinds may share a directory with policies (tests next to what they test).
OTHER_KINDS = frozenset(("PolicyTest",))
API_GROUP = "kpe.dev/"


def foreign(data: object) -> str:
    """What a document is when it is another tool's Kubernetes object ("" when it may be
    kpe's): a policy folder often holds a kustomization.yaml or other policy engines'
    objects beside kpe's, and those are skipped and listed rather than refused."""
    if not isinstance(data, dict):
        return ""
    api_version, kind = data.get("apiVersion"), data.get("kind")
    if isinstance(api_version, str) and isinstance(kind, str) and api_version and kind and not api_version.startswith(API_GROUP):
        return f"{kind} ({api_version})"
    return ""
SUFFIXES = (".yaml", ".yml")


def discover(paths: Iterable[str | os.PathLike[str]]) -> tuple[list[Path], list[PolicyError]]:
    """The policy files under ``paths``, each once, in a stable order.

    Directories are walked recursively; names starting with a dot are skipped,
    which is what makes a Kubernetes ConfigMap mount (``..data`` →
    ``..2026_11_21_...``, with ``name.yaml`` → ``..data/name.yaml``) load each
    file once.
    """
    files: list[Path] = []
    errors: list[PolicyError] = []
    seen: set[str] = set()
    for raw in paths:
        path = Path(raw)
        if path.is_file():
            candidates = [path]
        elif path.is_dir():
            candidates = []
            for root, dirs, names in os.walk(path, followlinks=True):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                candidates += [Path(root) / n for n in sorted(names) if n.endswith(SUFFIXES) and not n.startswith(".")]
        else:
            errors.append(PolicyError("KPE100", "no such file or directory", Location(str(path))))
            continue
        for file in candidates:
            real = os.path.realpath(file)
            if real not in seen:
                seen.add(real)
                files.append(file)
    return files, errors


def load_files(files: Iterable[Path]) -> tuple[list[Document], list[PolicyError]]:
    docs: list[Document] = []
    errors: list[PolicyError] = []
    for file in files:
        try:
            text = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            errors.append(PolicyError("KPE100", f"cannot read file: {exc}", Location(str(file))))
            continue
        file_docs, file_errors = load_documents(text, str(file))
        docs += file_docs
        errors += file_errors
    return docs, errors


def compile_documents(
    docs: Iterable[Document], cost_limits: CostLimits | None = None, skipped: list[str] | None = None, cluster_params: ClusterParams | None = None,
    *, deadline: CompileDeadline | None = None,
) -> tuple[list[Policy], list[PolicyError]]:
    """Compile kpe's documents; another tool's object is left out, and named in ``skipped``
    (``file:line: Kind (apiVersion)``) when a list is given. ``cluster_params``: the ConfigMaps
    that ``paramsFrom`` names (``engine.policy.params``; None: policies use their defaults).
    Past ``deadline`` (the policy webhook's), ``engine.policy.compiler.CompileOverdue``."""
    policies: list[Policy] = []
    errors: list[PolicyError] = []
    first_seen: dict[str, Location] = {}
    gates: dict[str, tuple[str, Location]] = {}
    for doc in docs:
        data = doc.data
        other = foreign(data)
        if other:
            if skipped is not None:
                where = doc.location(())
                skipped.append(f"{where.file}:{where.line}: {other}")
            continue
        if not isinstance(data, dict):
            errors.append(PolicyError("KPE103", "document is not a mapping; expected a SchedulingPolicy", doc.location(())))
            continue
        if data.get("kind") in OTHER_KINDS:
            continue
        meta = data.get("metadata")
        name = str(meta["name"]) if isinstance(meta, dict) and isinstance(meta.get("name"), str) else ""
        if data.get("kind") == RESERVATION_KIND:
            policy, reservation_errors = _compile_reservation(doc, name, first_seen, cost_limits)
            errors += reservation_errors
            policies += [policy] if policy is not None else []
            continue
        schema_errors = validate(doc, policy=name)
        if schema_errors:
            # A value over its length limit is refused, not compiled: a 7 MB expression took a minute and a half.
            oversized = any(TOO_LONG in e.message for e in schema_errors)
            errors += schema_errors + ([] if oversized else _compile_despite_schema_errors(doc, cost_limits, deadline=deadline))
            continue
        if name in first_seen:
            errors.append(
                PolicyError(
                    "KPE400",
                    f"duplicate policy name {name!r}; first defined at {first_seen[name]}",
                    doc.location(("metadata", "name")),
                    policy=name,
                    path="metadata.name",
                )
            )
            continue
        first_seen[name] = doc.location(("metadata", "name"))
        policy, policy_errors = compile_with_params(doc, cost_limits, cluster_params, deadline=deadline)
        errors += policy_errors
        if policy is not None and policy.admission is not None:
            clash = _gate_clash(doc, policy.name, policy.admission.gate, gates)
            if clash is not None:
                errors.append(clash)
                continue
        if policy is not None:
            policies.append(policy)
    return policies, errors


def _gate_clash(doc: Document, name: str, gate: str, gates: dict[str, tuple[str, Location]]) -> PolicyError | None:
    """KPE404: a scheduling gate is one policy's. Two policies that put the same gate on a
    pod would each lift it when only its own expression is true, so the pod would wait for
    whichever the set happened to index last."""
    written = isinstance(doc.data.get("spec", {}).get("admission", {}).get("gate"), str)
    path = ("spec", "admission", "gate") if written else ("spec", "admission")
    if gate not in gates:
        gates[gate] = (name, doc.location(path))
        return None
    owner, where = gates[gate]
    message = f"scheduling gate {gate!r} is also the gate of policy {owner!r} ({where}); each policy needs a gate of its own"
    return PolicyError("KPE404", message, doc.location(path), policy=name, path=".".join(path))


def _compile_reservation(
    doc: Document, name: str, first_seen: dict[str, Location], cost_limits: CostLimits | None
) -> tuple[Policy | None, list[PolicyError]]:
    """A Reservation document (``engine.policy.reservation``): its owners' policy, named
    ``reservation.<name>`` (unique like a policy name; no policy name has a dot)."""
    from engine.policy.reservation import POLICY_PREFIX, compile_reservation

    key = POLICY_PREFIX + name
    if name and key in first_seen:
        message = f"duplicate reservation name {name!r}; first defined at {first_seen[key]}"
        return None, [PolicyError("KPE400", message, doc.location(("metadata", "name")), policy=name, path="metadata.name")]
    policy, errors = compile_reservation(doc, cost_limits)
    if policy is not None:
        first_seen[key] = doc.location(("metadata", "name"))
    return policy, errors


def _compile_despite_schema_errors(doc: Document, cost_limits: CostLimits | None = None, *, deadline: CompileDeadline | None = None) -> list[PolicyError]:
    """CEL errors of a document that also broke the schema, so one run shows them all;
    nothing if its shape is too broken to walk."""
    try:
        _, errors = compile_policy(doc, cost_limits, deadline=deadline)
    except (KeyError, TypeError, AttributeError, IndexError, ValueError):
        return []
    return [e for e in errors if e.code.startswith(("KPE3", "KPE4"))]


def generation_of(policies: Iterable[Policy]) -> str:
    """A content hash: the same policies give the same generation anywhere."""
    # A policy's params from a ConfigMap are in its generation: their change is a reload.
    canonical = json.dumps(
        [[p.source, p.params] if p.params_from else p.source for p in sorted(policies, key=lambda p: p.name)]
        + [f"{p.name}: {p.params_error}" for p in policies if p.params_error],
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(canonical.encode()).hexdigest()[:12]


ALLOW_EMPTY_HINT = "--allow-empty-policies (KPE_ALLOW_EMPTY_POLICIES=true for kpe serve)"


def empty_set_error(paths: Iterable[str | os.PathLike[str]], files: int) -> PolicyError:
    """KPE402: nothing to enforce. With no policy every node passes every pod, which is
    far more often a wrong path or a ConfigMap emptied by mistake than a wish."""
    names = [str(p) for p in paths]
    where = Location(names[0]) if len(names) == 1 else Location()
    read = f"{files} file{'s' if files != 1 else ''} read"
    return PolicyError(
        "KPE402",
        f"no policies found in {', '.join(names) or 'no path'} ({read}): with an empty set every node passes every pod; "
        f"add a SchedulingPolicy, or pass {ALLOW_EMPTY_HINT} if an empty set is what you want",
        where,
    )


def load(
    paths: Iterable[str | os.PathLike[str]], *, allow_empty: bool = False, cost_limits: CostLimits | None = None, excluded_namespaces: Iterable[str] = SYSTEM_NAMESPACES,
    cluster_params: ClusterParams | None = None,
) -> PolicySet:
    """Load every policy under ``paths``; raises ``PolicyLoadError`` with all problems found.
    A load that finds no policy at all is refused (KPE402) unless ``allow_empty``; an
    expression whose estimated cost is over ``cost_limits`` (default ``CostLimits()``) is KPE306."""
    paths = list(paths)
    files, errors = discover(paths)
    docs, read_errors = load_files(files)
    skipped: list[str] = []
    policies, compile_errors = compile_documents(docs, cost_limits, skipped, cluster_params)
    errors += read_errors + compile_errors
    if not errors and not policies and not allow_empty:
        errors.append(empty_set_error(paths, len(files)))
    if errors:
        raise PolicyLoadError(errors)
    ordered = tuple(sorted(policies, key=lambda p: p.name))
    policy_set = PolicySet(
        ordered,
        generation_of(ordered),
        tuple(str(f) for f in files),
        pod_projection=pod_projection(ordered),
        excluded_namespaces=frozenset(excluded_namespaces),
        skipped=tuple(skipped),
        counts=count_specs(ordered),
    )
    return policy_set


def load_text(
    text: str, *, file: str = "<inline>", cost_limits: CostLimits | None = None, excluded_namespaces: Iterable[str] = SYSTEM_NAMESPACES,
    cluster_params: ClusterParams | None = None,
) -> PolicySet:
    """Load policies from YAML text (tests, tools)."""
    docs, errors = load_documents(text, file)
    policies, compile_errors = compile_documents(docs, cost_limits, cluster_params=cluster_params)
    errors += compile_errors
    if errors:
        raise PolicyLoadError(errors)
    ordered = tuple(sorted(policies, key=lambda p: p.name))
    policy_set = PolicySet(ordered, generation_of(ordered), (file,), pod_projection=pod_projection(ordered), excluded_namespaces=frozenset(excluded_namespaces),
                           counts=count_specs(ordered))
    return policy_set
