"""Equivalence classes: pods one policy cannot tell apart get the same answer from
its rules on the same node, so per-node results are kept per policy and reused.

kube-scheduler places the pods of a cluster one after another, and each asks kpe about every
node again. The pods of a real cluster differ (teams, apps, request sizes, selectors), so
hardly two pending pods agree on everything every policy reads; but each policy reads only a
few of their fields. Two pods are *equivalent for a policy* when its content is the same
(``PolicyReads.digest``) and every pod field its filter, score, variable and message
expressions read is equal (``pod.metadata.name`` counts only if it reads it), as are what it
reads of the pod's namespace and the DRA objects when it reads them. A request's answer is put
together from the classes of each of its policies (``engine.equivalence.filtering``,
``engine.equivalence.scoring``): a new combination of team, app and requests reuses every
policy's results that do not depend on what changed. For one policy's class, kpe keeps each
node's result together with the node object and ``nodeInfo`` object it was computed from (or by
node name, forgotten as the cluster cache's change log names the node); the cluster cache
replaces those objects whenever they change, so an identity check tells a current result from
a stale one without hashing anything.

Rules that read ``now`` run on every request (the filter replays the remembered rules around
them in the same order, so the verdict and reason are exactly those of a full evaluation),
except on nodes where the operands of a top-level ``||`` that do not read ``now`` already hold.
The rules themselves are bound once per class. Results are kept for at most ``classes``
classes of each policy per verb, fewer when together they would remember more than ``results`` node results
(least recently used go first), keyed by the policy's content rather than by the set's
generation: a reload that changes one policy leaves every other policy's classes with their
results, so a GitOps change to one team's policy is not a cold start for every other pod in
the cluster.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from engine.equivalence.memo import ClassMemo
from engine.equivalence.reads import PolicyReads, pod_fingerprint
from engine.equivalence.reads import Path as Path

if TYPE_CHECKING:
    from engine.decisions.evaluation import Outcome, PolicyScope
    from engine.policy.model import Policy



# Classes kept of one policy for one verb by default: a cluster of 30 teams and 100 apps has about
# as many classes of a policy that reads the team or the app as it has teams or apps; the budget
# of node results (``RESULTS_KEPT``) bounds them all together.
CLASSES = 64


class EquivalenceCache:
    """Per-node results for the most recently used classes of pods for one policy, whatever
    generation the policy came from: a class is keyed by its policy's content, so one that a
    reload left alone keeps its results, and one whose policy changed is another class."""

    def __init__(self, *, classes: int = CLASSES, results: int | None = None, clock: Callable[[], float] = time.perf_counter) -> None:
        self.classes = classes
        # Beyond what ``classes`` allows, tables go while all of them together remember more node
        # results than this: many classes on a small cluster, few on a large one.
        self.results = RESULTS_KEPT if results is None else results
        self.clock = clock  # what the classes measure their evaluations with
        self.requests = 0  # the scheduler's filter requests answered from the cache, numbered (``ClassMemo.ask``)
        self._generation = ""
        self._tables: OrderedDict[tuple[Any, ...], ClassMemo] = OrderedDict()
        # The keys of ``_tables`` by verb and policy (their digests), least recently used first.
        self._groups: dict[tuple[Any, ...], OrderedDict[tuple[Any, ...], None]] = {}
        self._reads: dict[str, PolicyReads] = {}
        # By the class's policies' digests: what their expressions read of the pod and its namespace.
        self._paths: dict[tuple[str, tuple[bytes, ...]], tuple[Path, ...]] = {}
        self._namespace_paths: dict[tuple[str, tuple[bytes, ...]], tuple[Path, ...]] = {}
        # (policy name, pod fingerprint) -> (the policy's digest, its match outcome); the digest
        # tells a changed policy of the same name from one a reload left as it was.
        self._matches: dict[tuple[str, bytes], tuple[bytes, Outcome]] = {}
        # Outcomes of matches that read dra, all under ``_matches_dra`` (the DRA objects they were worked out with).
        self._dra_matches: dict[tuple[str, bytes], tuple[bytes, Outcome]] = {}
        self._matches_dra: Any = None
        # The last pod asked about, and its outcomes by policy name (with the policy's digest and
        # the request's inputs they were worked out with): the filter and the prioritize worked out
        # ahead of it ask about the very same pod object, and its fingerprints were half of what
        # matching cost. Held, so its identity is not another pod's.
        self._pod: Any = None
        self._pod_outcomes: dict[str, tuple[bytes, Any, Any, Outcome]] = {}
        # A prioritize answer's entry prefix per node name (``prefixes``), of the one encoder met.
        self._encoder: Any = None
        self._prefixes: dict[str, bytes] = {}

    def __len__(self) -> int:
        return len(self._tables)

    def tables(self, *, generation: str, verb: str, scopes: Sequence[PolicyScope], pod: Mapping[str, Any]) -> list[ClassMemo] | None:
        """The remembered results of ``pod``'s class for ``verb`` of each of ``scopes``' policies,
        in their order; None when the pod's fields cannot be fingerprinted for one of them (the
        caller then evaluates everything)."""
        found: list[ClassMemo] = []
        created = False
        for scope in scopes:
            before = len(self._tables)
            table = self._table(generation, verb, (scope,), pod)
            if table is None:
                return None
            created = created or len(self._tables) != before
            found.append(table)
        if created:
            self._within_budget(found)
        return found

    def table(self, *, generation: str, verb: str, scopes: Sequence[PolicyScope], pod: Mapping[str, Any]) -> ClassMemo | None:
        """The remembered results for ``verb`` of ``pod``'s class for ``scopes``' policies
        together (``tables``: one policy each), or None when the pod's fields cannot be
        fingerprinted (the caller then evaluates everything)."""
        table = self._table(generation, verb, scopes, pod)
        if table is not None:
            self._within_budget([table])
        return table

    def _table(self, generation: str, verb: str, scopes: Sequence[PolicyScope], pod: Mapping[str, Any]) -> ClassMemo | None:
        if self.classes <= 0:
            return None
        if generation != self._generation:
            self._generation = generation
            # What is keyed by name alone goes (a policy dropped from the set would keep its analysis);
            # tables and match outcomes are keyed by content and stay.
            self._reads.clear()
            if len(self._paths) > PATHS_KEPT:
                self._paths.clear()
                self._namespace_paths.clear()
        digests = tuple(self.reads(s.policy).digest for s in scopes)
        read_by = (verb, digests)
        paths = self._paths.get(read_by)
        if paths is None:
            read: set[Path] = set()
            for scope in scopes:
                read |= self.reads(scope.policy).paths(verb)[0]
            paths = self._paths[read_by] = tuple(sorted(read))
            self._namespace_paths[read_by] = tuple(sorted({p for scope in scopes for p in self.reads(scope.policy).paths(verb)[1]}))
        fixed: Mapping[str, Any] = scopes[0].fixed if scopes else {}
        dra = fixed.get("dra") if any(self.reads(s.policy).reads_dra for s in scopes) else None
        fingerprint = inputs_print(pod, paths, self._namespace_paths[read_by], fixed, dra)
        if fingerprint is None:
            return None
        key = (verb, digests, fingerprint)
        table = self._tables.get(key)
        group = self._groups.get(key[:2])
        if group is None:
            group = self._groups[key[:2]] = OrderedDict()
        if table is None:
            blind = not any(self.reads(s.policy).reads_node_info(verb) for s in scopes)
            table = ClassMemo(info_blind=blind, clock=self.clock)
            self._tables[key] = table
            group[key] = None
            table.pinned = dra
            while len(group) > self.classes:  # at most ``classes`` classes of one policy for one verb
                oldest, _ = group.popitem(last=False)
                del self._tables[oldest]
        else:
            self._tables.move_to_end(key)
            group.move_to_end(key)
        return table

    def _within_budget(self, using: list[ClassMemo]) -> None:
        """Forget the least recently used classes while all of them together remember more than
        ``results`` node results, except those of the request at hand (``using``). Counted when
        a class comes (not per request): a table grows after that, by the window of each
        request, so the budget can be overrun by what the kept ones learn until the next comes."""
        remembered = sum(map(_remembered, self._tables.values()))
        if remembered <= self.results:
            return
        keep = set(map(id, using))
        for key in [key for key, table in self._tables.items() if id(table) not in keep]:
            if remembered <= self.results:
                break
            gone = self._tables.pop(key)
            group = self._groups[key[:2]]
            del group[key]
            if not group:  # a policy a reload dropped or changed leaves no group behind
                del self._groups[key[:2]]
            remembered -= _remembered(gone)

    def match(self, policy: Policy, pod: Mapping[str, Any], evaluate: Callable[[], Outcome], fixed: Mapping[str, Any] | None = None) -> Outcome:
        """The outcome of ``policy``'s match expression for ``pod``: remembered for pods that
        agree on every field the policy reads (match expression, variables and rules: a
        superset of what the match reads), unless it reads ``now``. Replicas of one pod
        template share it, so a request no longer binds and runs every match expression.
        ``fixed``: the request's inputs beside the pod (its ``namespaceObject``, ``dra``). A
        match that reads ``dra`` (the shipped GPU policies: a pod claims GPUs through DRA) is
        remembered while ``dra`` is the same object, that is until a DRA object changes. The
        pod asked about last (a filter's, then the prioritize worked out ahead of it: one object)
        has its outcomes kept by identity, without its fingerprint worked out again."""
        reads = self.reads(policy)
        if self.classes <= 0 or reads.match_paths is None:
            return evaluate()
        fixed = fixed or {}
        namespace, dra = fixed.get("namespaceObject"), fixed.get("dra")
        if pod is self._pod:
            seen = self._pod_outcomes.get(policy.name)
            if seen is not None and seen[0] == reads.digest and seen[1] is namespace and seen[2] is dra:
                return seen[3]
        else:
            self._pod, self._pod_outcomes = pod, {}
        outcome = self._match(policy, reads, pod, evaluate, fixed)
        self._pod_outcomes[policy.name] = (reads.digest, namespace, dra, outcome)
        return outcome

    def _match(self, policy: Policy, reads: PolicyReads, pod: Mapping[str, Any], evaluate: Callable[[], Outcome], fixed: Mapping[str, Any]) -> Outcome:
        """``match`` for a pod not asked about just before: by its fingerprint."""
        fingerprint = pod_fingerprint(pod, reads.match_paths or ())
        if fingerprint is not None and reads.match_namespace_paths:
            seen = namespace_fingerprint(fixed.get("namespaceObject"), reads.match_namespace_paths)
            fingerprint = None if seen is None else fingerprint + seen
        if fingerprint is None:
            return evaluate()
        matches = self._matches
        if reads.match_reads_dra:
            dra = fixed.get("dra")
            if dra is not self._matches_dra:
                # Only the current DRA objects are kept (a snapshot can be megabytes): outcomes
                # under the ones before go with them.
                self._dra_matches.clear()
                self._matches_dra = dra
            matches = self._dra_matches
        key = (policy.name, fingerprint)
        found = matches.get(key)
        if found is None or found[0] != reads.digest:
            if len(matches) >= MATCHES_KEPT:
                matches.clear()
            found = matches[key] = (reads.digest, evaluate())
        return found[1]

    def prefixes(self, encoder: Any, names: Sequence[str]) -> list[bytes]:
        """``encoder.prefix(name)`` of each name, remembered: a node's prefix depends on its name
        alone, and an answer's hundreds of entries are then looked up in C."""
        if encoder is not self._encoder:
            self._encoder, self._prefixes = encoder, {}
        kept = self._prefixes
        found = list(map(kept.get, names))
        if None in found:
            if len(kept) + len(names) > PREFIXES_KEPT:
                kept.clear()
            for i, name in enumerate(names):
                if found[i] is None:
                    found[i] = kept[name] = encoder.prefix(name)
        return found  # type: ignore[return-value]  # no None left

    def reads(self, policy: Policy) -> PolicyReads:
        found = self._reads.get(policy.name)
        if found is None or found.policy is not policy:  # a new generation's policy of the same name
            found = self._reads[policy.name] = PolicyReads(policy)
        return found


def inputs_print(pod: Mapping[str, Any], paths: Sequence[Path], namespace_paths: Sequence[Path], fixed: Mapping[str, Any], dra: Any) -> bytes | None:
    """What policies reading ``paths`` of the pod and ``namespace_paths`` of its namespace (and
    the DRA objects ``dra``, when they read them) see of a request; None when it cannot be told."""
    fingerprint = pod_fingerprint(pod, paths)
    if fingerprint is None:
        return None
    if namespace_paths:
        # A namespace's labels changed: its pods are another class (the cache replaced the object).
        seen = namespace_fingerprint(fixed.get("namespaceObject"), namespace_paths)
        if seen is None:
            return None
        fingerprint += seen
    if dra is not None:
        # The DRA objects changed (a new object): another class. The table keeps the object,
        # so its id is not reused while the key holds it.
        fingerprint += b"\0dra" + id(dra).to_bytes(8, "little")
    return fingerprint


def namespace_fingerprint(namespace: Any, paths: Sequence[Path]) -> bytes | None:
    """What a class key adds for what policies read of the pod's namespace (null apart)."""
    if namespace is None:
        return b"\0null"
    seen = pod_fingerprint(namespace, paths)
    return None if seen is None else b"\0" + seen


def _remembered(table: ClassMemo) -> int:
    """Node results a table keeps: by name, by node object (whole nodes), and by kind of node."""
    return len(table.by_name) + len(table.result_of) + len(table.alike)


# Node results kept across every class's tables before the least recently used go, whatever
# ``classes`` allows: what 16 classes (a filter and a score table each) remember of 5,000 nodes,
# the default before classes were counted against it. 64 classes of 1,000 nodes fit; at 5,000
# nodes about 16 do. A result costs 150 to 300 bytes (0.3 to 0.6 MB per class per 1,000 nodes).
RESULTS_KEPT = 2 * 16 * 5000

MATCHES_KEPT = 4096  # remembered match outcomes, all forgotten at once past this
PATHS_KEPT = 1024  # combinations of policies whose reads are kept, all forgotten at once past this
PREFIXES_KEPT = 65536  # node names whose answer prefixes are kept, all forgotten at once past this
