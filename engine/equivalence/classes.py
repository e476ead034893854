"""Equivalence classes: pods the policies cannot tell apart get the same answer
on the same node, so per-node results are kept and reused.

kube-scheduler places the replicas of a Deployment or Job one after another,
and each asks kpe about every node again. Two pods are *equivalent* for a
request when the same policies match them and every pod field their filter,
score, variable and message expressions read is equal (``pod.metadata.name``
counts only if a policy reads it). For one class, kpe keeps each node's result
together with the node object and ``nodeInfo`` object it was computed from; the
cluster cache replaces those objects whenever they change, so an identity check
tells a current result from a stale one without hashing anything.

Rules that read ``now`` run on every request (the filter replays the
remembered rules around them in the same order, so the verdict and reason
are exactly those of a full evaluation), except on nodes where the operands
of a top-level ``||`` that do not read ``now`` already hold. The rules
themselves are bound once per class. Results are kept for at most ``classes``
classes, fewer when together they would remember more than ``results`` node
results (least recently used go first), keyed by the content of the policies
that match the class (``PolicyReads.digest``) rather than by the set's
generation: a reload that changes one policy leaves every class that policy
does not match with its results, so a GitOps change to one team's policy is
not a cold start for every other pod in the cluster. A new class starts from
the kept class that shares the most policies with it, by each policy's content
and what it reads of the pod (its *donor*): the class its pods were in before
a reload changed one of their policies, or that of another Deployment that
differs only in a label one policy reads. The shared policies decide each node
as they did there, so only the other policies' rules are evaluated
(``engine.equivalence.filtering``).
"""

from __future__ import annotations

import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from engine.equivalence.memo import ClassMemo
from engine.equivalence.reads import PolicyReads, pod_fingerprint
from engine.equivalence.reads import Path as Path

if TYPE_CHECKING:
    from engine.decisions.evaluation import Outcome, PolicyScope
    from engine.policy.model import Policy



class EquivalenceCache:
    """Per-node results for the most recently used pod classes, whatever generation their
    policies came from: a class is keyed by its policies' content, so one that a reload left
    alone keeps its results, and one whose policies changed is another class."""

    def __init__(self, *, classes: int = 64, results: int | None = None, clock: Callable[[], float] = time.perf_counter) -> None:
        self.classes = classes
        # Beyond what ``classes`` allows, tables go while all of them together remember more node
        # results than this: many classes on a small cluster, few on a large one.
        self.results = RESULTS_KEPT if results is None else results
        self.clock = clock  # what the classes measure their evaluations with
        self._generation = ""
        self._tables: OrderedDict[tuple[Any, ...], ClassMemo] = OrderedDict()
        self._reads: dict[str, PolicyReads] = {}
        # By the class's policies' digests: what their expressions read of the pod and its namespace.
        self._paths: dict[tuple[bytes, ...], tuple[Path, ...]] = {}
        self._namespace_paths: dict[tuple[bytes, ...], tuple[Path, ...]] = {}
        # (policy name, pod fingerprint) -> (the policy's digest, its match outcome); the digest
        # tells a changed policy of the same name from one a reload left as it was.
        self._matches: dict[tuple[str, bytes], tuple[bytes, Outcome]] = {}
        # Outcomes of matches that read dra, all under ``_matches_dra`` (the DRA objects they were worked out with).
        self._dra_matches: dict[tuple[str, bytes], tuple[bytes, Outcome]] = {}
        self._matches_dra: Any = None

    def __len__(self) -> int:
        return len(self._tables)

    def table(self, *, generation: str, verb: str, scopes: Sequence[PolicyScope], pod: Mapping[str, Any]) -> ClassMemo | None:
        """The remembered results of ``pod``'s class for ``verb``, or None when the
        pod's fields cannot be fingerprinted (the caller then evaluates everything)."""
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
        paths = self._paths.get(digests)
        if paths is None:
            read: set[Path] = set()
            for scope in scopes:
                read |= self.reads(scope.policy).pod_paths
            paths = self._paths[digests] = tuple(sorted(read))
            self._namespace_paths[digests] = tuple(sorted({p for scope in scopes for p in self.reads(scope.policy).namespace_paths}))
        fixed: Mapping[str, Any] = scopes[0].fixed if scopes else {}
        dra = fixed.get("dra") if any(self.reads(s.policy).reads_dra for s in scopes) else None
        fingerprint = self._fingerprint(digests, pod, fixed, dra)
        if fingerprint is None:
            return None
        key = (verb, digests, fingerprint)
        table = self._tables.get(key)
        if table is None:
            blind = not any(self.reads(s.policy).reads_node_info(verb) for s in scopes)
            table = ClassMemo(info_blind=blind, clock=self.clock)
            table.prints = self._prints(scopes, pod, fixed)
            self._donor(table, verb)
            self._tables[key] = table
            table.pinned = dra
            while len(self._tables) > 2 * self.classes:  # a filter and a score table per class
                self._tables.popitem(last=False)
            # Counted when a class comes (not per request): a table grows after that, by the
            # window of each request, so the budget can be overrun by what the kept ones learn
            # until the next class comes.
            remembered = sum(map(_remembered, self._tables.values()))
            while remembered > self.results and len(self._tables) > 2:
                _, gone = self._tables.popitem(last=False)
                remembered -= _remembered(gone)
        else:
            self._tables.move_to_end(key)
        return table

    def _fingerprint(self, digests: tuple[bytes, ...], pod: Mapping[str, Any], fixed: Mapping[str, Any], dra: Any) -> bytes | None:
        """The class key's fingerprint of ``pod`` for the policies of ``digests`` (their reads known)."""
        return inputs_print(pod, self._paths[digests], self._namespace_paths[digests], fixed, dra)

    def _prints(self, scopes: Sequence[PolicyScope], pod: Mapping[str, Any], fixed: Mapping[str, Any]) -> dict[str, bytes]:
        """Per policy: its digest and what it reads of ``pod``, the namespace and the DRA objects.
        Two classes with a policy's same print have the same values for every input of its rules
        but the node, ``nodeInfo`` and the per-request ones (``now``, ``counts``)."""
        prints: dict[str, bytes] = {}
        for scope in scopes:
            reads = self.reads(scope.policy)
            seen = inputs_print(pod, sorted(reads.pod_paths), sorted(reads.namespace_paths), fixed, fixed.get("dra") if reads.reads_dra else None)
            if seen is not None:
                prints[scope.policy.name] = reads.digest + seen
        return prints

    def _donor(self, table: ClassMemo, verb: str) -> None:
        """Give a new class the kept class of the same verb that shares the most policies' prints
        with it, if any does: the class its pods were before a reload changed one of their
        policies, or the class of another Deployment that differs in what one policy reads. The
        shared policies decide each node as they did there, so the new class need only evaluate
        the others (a GitOps change to a policy every pod matches is otherwise a cold start of
        every class, and a class that differs in one label a cold start of every policy)."""
        mine = table.prints.items()
        best, most = None, (0, 0)
        for (kind, _, _), other in self._tables.items():
            if kind != verb or other.bound is None:
                continue
            score = (len(mine & other.prints.items()), _remembered(other))
            if score[0] and score > most:
                best, most = other, score
        if best is not None:
            table.donor = weakref.ref(best)
            table.shared_policies = frozenset(name for name, _ in mine & best.prints.items())

    def match(self, policy: Policy, pod: Mapping[str, Any], evaluate: Callable[[], Outcome], fixed: Mapping[str, Any] | None = None) -> Outcome:
        """The outcome of ``policy``'s match expression for ``pod``: remembered for pods that
        agree on every field the policy reads (match expression, variables and rules: a
        superset of what the match reads), unless it reads ``now``. Replicas of one pod
        template share it, so a request no longer binds and runs every match expression.
        ``fixed``: the request's inputs beside the pod (its ``namespaceObject``, ``dra``). A
        match that reads ``dra`` (the shipped GPU policies: a pod claims GPUs through DRA) is
        remembered while ``dra`` is the same object, that is until a DRA object changes."""
        reads = self.reads(policy)
        if self.classes <= 0 or reads.match_paths is None:
            return evaluate()
        fixed = fixed or {}
        fingerprint = pod_fingerprint(pod, reads.match_paths)
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
    """Node results a table keeps: by name, and by node object (whole nodes)."""
    return len(table.by_name) + len(table.result_of)


# Node results kept across every class's tables before the least recently used go, whatever
# ``classes`` allows: what 16 classes (a filter and a score table each) remember of 5,000 nodes,
# the default before classes were counted against it. 64 classes of 1,000 nodes fit; at 5,000
# nodes about 16 do. A result costs 150 to 300 bytes (0.3 to 0.6 MB per class per 1,000 nodes).
RESULTS_KEPT = 2 * 16 * 5000

MATCHES_KEPT = 4096  # remembered match outcomes, all forgotten at once past this
PATHS_KEPT = 1024  # combinations of policies whose reads are kept, all forgotten at once past this
