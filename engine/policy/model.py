"""The compiled policy model: immutable, built once per load, shared by every request."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from engine import cel
from engine.cluster.counts import NO_SPECS, CountSpecs
from engine.cluster.projection import EVERYTHING, Projection
from engine.errors import Location, PolicyError
from engine.policy.selectors import LabelSelector

# What each kind of expression may read. Variables that read `node` or
# `nodeInfo` are node-scoped; every other variable is pod-scoped.
POD_SCOPE = ("pod", "namespaceObject", "params", "now", "dra")
NODE_SCOPE = ("node", "nodeInfo")
# Pods counted across nodes (engine/cel/types/counts.py): fixed for a request, read beside the node.
COUNTS = ("counts",)
SCOPES: dict[str, tuple[str, ...]] = {
    "match": POD_SCOPE,
    "variable": NODE_SCOPE + POD_SCOPE + COUNTS,
    "filter": NODE_SCOPE + POD_SCOPE + COUNTS,
    "score": NODE_SCOPE + POD_SCOPE + COUNTS,
    "admission": POD_SCOPE + ("nodes", "pods", "admitted"),
    "victim": NODE_SCOPE + POD_SCOPE + COUNTS + ("victim",),
    "preemption-node": NODE_SCOPE + POD_SCOPE + COUNTS + ("victims",),
}
# Scopes in which node-scoped variables may be used.
NODE_VARIABLE_KINDS = frozenset(("filter", "score", "victim", "preemption-node"))


@dataclass(frozen=True)
class Expression:
    """One compiled CEL expression and where it came from."""

    text: str
    program: cel.Program
    path: str
    location: Location
    variables: tuple[str, ...]  # names of policy variables it reads (``variables.<name>``)
    parameters: tuple[str, ...]  # the CEL variables, in program parameter order
    root: Any = field(default=None, repr=False, compare=False)  # syntax tree, node-scoped variables inlined

    def __repr__(self) -> str:
        return f"Expression({self.path}: {self.text!r})"


@dataclass(frozen=True)
class Variable:
    name: str
    expression: Expression
    node_scoped: bool
    reads_node_info: bool = False  # directly or through other variables


@dataclass(frozen=True)
class FilterRule:
    """One filter. ``unresolvable`` is what kube-scheduler is told: true when the
    author said so, and also when the rule cannot read ``nodeInfo`` (directly or
    through a variable), because then no eviction can change its verdict, and a
    preemption for it would evict pods in vain. ``declared_unresolvable`` is what
    the author wrote."""

    name: str
    expression: Expression
    message: str
    message_expression: Expression | None
    unresolvable: bool
    declared_unresolvable: bool = False
    reads_node_info: bool = True


@dataclass(frozen=True)
class ScoreRule:
    name: str
    expression: Expression
    weight: int


@dataclass(frozen=True)
class Admission:
    gate: str
    expression: Expression
    message: str
    message_expression: Expression | None


@dataclass(frozen=True)
class Preemption:
    victim: Expression | None
    node: Expression | None


@dataclass(frozen=True)
class Match:
    namespaces: frozenset[str] | None = None
    selector: LabelSelector | None = None
    resources: frozenset[str] | None = None
    expression: Expression | None = None


@dataclass(frozen=True)
class Policy:
    name: str
    file: str
    enforce: bool  # False: Audit mode
    fail_closed: bool  # failurePolicy Fail
    match: Match
    params: dict[str, Any]
    variables: tuple[Variable, ...]
    filters: tuple[FilterRule, ...]
    scores: tuple[ScoreRule, ...]
    admission: Admission | None
    preemption: Preemption | None
    source: dict[str, Any] = field(repr=False, compare=False, default_factory=dict)
    reservation: Reservation | None = field(default=None, repr=False, compare=False)  # set on a reservation's own policy
    # spec.paramsFrom (engine.policy.params): the ConfigMap, and what is wrong with it: the error
    # every read of params raises (Deny), and the problem whatever the action (for people).
    params_from: tuple[str, str] | None = field(default=None, compare=False)
    params_error: str = field(default="", compare=False)
    params_problem: str = field(default="", compare=False)
    # KPE600 and other warnings of its compile (engine.policy.lints): it is served all the same.
    warnings: tuple[PolicyError, ...] = field(default=(), compare=False, repr=False)

    @property
    def mode(self) -> str:
        return "Enforce" if self.enforce else "Audit"

    @property
    def failure_policy(self) -> str:
        return "Fail" if self.fail_closed else "Ignore"

    def variable(self, name: str) -> Variable:
        for v in self.variables:
            if v.name == name:
                return v
        raise KeyError(name)


# The namespaces no policy matches unless the deployment says otherwise: the control plane's,
# and kpe's own (deploy/), so that neither ever waits for kpe or for a policy's mistake.
SYSTEM_NAMESPACES: tuple[str, ...] = ("kube-system", "kube-public", "kube-node-lease", "kpe-system")

POLICY_PREFIX = "reservation."  # a reservation's own policy is named this and the reservation's name


@dataclass(frozen=True)
class Reservation:
    name: str
    file: str
    slots: int
    required: bool  # Required: owners only in its slots; Preferred: there first
    return_slots: bool  # a used slot comes back when its owner ends
    template: Mapping[str, Any] = field(repr=False)
    template_hash: str = ""

    @property
    def policy(self) -> str:
        """The name of the compiled policy that decides for its owners."""
        return POLICY_PREFIX + self.name

    @property
    def mode(self) -> str:
        return "Required" if self.required else "Preferred"


@dataclass(frozen=True)
class PolicySet:
    """Every policy of one load. ``generation`` is a hash of their content, so the
    same policies always have the same generation wherever they are loaded."""

    policies: tuple[Policy, ...]
    generation: str
    files: tuple[str, ...] = ()
    # What kpe's cache keeps of the pods bound to nodes under this set: the fields its
    # expressions can read of other pods and those kpe reads itself. The loader works it
    # out with the set (``engine.policy.reads``); a set made by hand keeps whole pods.
    pod_projection: Projection = field(default=EVERYTHING, compare=False, repr=False, kw_only=True)
    # Pods in these namespaces match no policy (``engine.decisions.evaluation.matching_scopes``).
    excluded_namespaces: frozenset[str] = field(default=frozenset(SYSTEM_NAMESPACES), compare=False, repr=False, kw_only=True)
    # What its expressions count across nodes (``engine.policy.counts``), worked out by the loader:
    # what kpe's cache keeps counts for. A set made by hand counts nothing.
    counts: CountSpecs = field(default=NO_SPECS, compare=False, repr=False, kw_only=True)
    # Other tools' objects the loader found beside the policies and left out ("file:line: Kind (apiVersion)").
    skipped: tuple[str, ...] = field(default=(), compare=False, repr=False, kw_only=True)

    def __len__(self) -> int:
        return len(self.policies)

    def get(self, name: str) -> Policy | None:
        for p in self.policies:
            if p.name == name:
                return p
        return None

    @cached_property
    def gates(self) -> dict[str, Policy]:
        """Gate name -> the policy that owns it (computed once; the set never changes)."""
        return {p.admission.gate: p for p in self.policies if p.admission is not None}

    @cached_property
    def reservations(self) -> tuple[Reservation, ...]:
        """The set's reservations (``engine.policy.reservation``), by name."""
        return tuple(p.reservation for p in self.policies if p.reservation is not None)

    @cached_property
    def without_reservations(self) -> PolicySet:
        """The set without its reservations' policies (the filters preemption re-runs:
        evicting a placeholder is how an owner takes the slot its filter asks for)."""
        if not self.reservations:
            return self
        return self.subset(tuple(p for p in self.policies if p.reservation is None))

    def subset(self, policies: tuple[Policy, ...]) -> PolicySet:
        """Some of the set's policies, served as the set is (same generation, projection and
        excluded namespaces)."""
        return PolicySet(policies, self.generation, self.files, pod_projection=self.pod_projection, excluded_namespaces=self.excluded_namespaces, counts=self.counts)

