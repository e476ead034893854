"""Filling an equivalence class ahead of the scheduler: the rest of the cluster, in small steps.

kube-scheduler sends each pod a window of the nodes (at 5,000 nodes about 500), a different one
for each pod, so a class that starts empty (a new Deployment, every class after a kpe restart,
the classes of a policy a reload changed) evaluates a window on each of its first pods: at
5,000 nodes ten requests of tens of milliseconds, where a warm class answers in a fraction of
one. Once a class's second request has been answered, the same pod is evaluated in the
background against the nodes of the scheduler's next windows (``Warming.asked_again``), a few
nodes at a time (the filter of every class waiting first, then the scores of the nodes it
passes), so its next pods find their windows remembered. Not after its first: on a cluster whose pods differ, many a class is asked once (a pod like no other
in what one policy reads), and filling the cluster for it is work no later pod reuses (at 5,000
nodes it took kpe's CPU a pod from 10 to 26 ms). A class asked twice is likely asked again, and
its next pods would have evaluated those nodes anyway, on the scheduler's clock. On a large
cluster (the next windows less than half of it), only if its second request came soon after its
first (within ``BACK_TO_BACK`` of the scheduler's requests, ``engine.equivalence.filtering``: its
pods come together, as a workload's do when it scales): a class whose pods come among many others'
gets its next window anywhere, and filling the scheduler's next windows for it cost kpe 4 ms of
CPU a pod at 5,000 nodes for no more hits (docs/performance.md).

What comes first matters when the scheduler's next pods come at once (after a reload, a restart,
a burst of new Deployments): the classes take turns a chunk at a time, and each is filled in the
order kube-scheduler will ask for its nodes, learnt from its last requests (``Warming.order``:
its windows go round its nodes in one fixed order), so every class's next windows are
remembered before any class's far ones.

After a reload, the classes whose first pods were seen most recently are filled again under the
new set; a class the reload left alone (its policies' content unchanged) still has its results
(``engine.equivalence.classes``), so its first step is all hits and ends its job. After a
restart, nothing of the classes is left: the classes filled first are those of the pods waiting
for a node and of the workloads whose pods were created last (``Exemplars``, from the cache's
first list, which has every pod whole).

This module only keeps the jobs and decides what to evaluate next; the caller evaluates
(``Evaluate``: the filter, and the scores of what passed, through the equivalence cache) and
decides when a step may run (the server: on its event loop while the worker thread is idle).
"""

from __future__ import annotations

import time
from collections import deque
from itertools import chain
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engine.equivalence.memo import Offload
from engine.policy.model import PolicySet

Evaluate = Callable[[PolicySet, Mapping[str, Any], list[str], bool, float | None], bool]
"""Evaluates a pod against some node names through the equivalence cache, the filter (``scores``
False) or the scores of the nodes the filter passes (True), within a budget of seconds (None: no
limit; over it by the classes' measured costs, ``Offload`` is raised before anything is
evaluated); returns whether this call was the first to fill one of its classes
(``FilterResult.first_of_class``)."""


@dataclass(slots=True)
class Job:
    policy_set: PolicySet
    pod: Mapping[str, Any]
    names: Sequence[str]  # the cluster's node names when the job was queued
    done: int = 0  # names evaluated so far
    # Whether the job's first step must be its class's first fill to go on: a job for a pod no
    # request asked about (a class from before a reload) ends at once when its class is filled
    # or being filled already.
    speculative: bool = False
    scores: bool = False  # the second pass: the scores of the nodes the filter passes
    size: int = 1  # names per evaluation, grown or shrunk by how long the last one took
    ordered: bool = False  # ``names`` put in the order the scheduler will ask for them (at the first step)
    limit: int | None = None  # the first names of that order to fill, None for all


class Warming:
    """Jobs of classes to fill, oldest first, and the first pods of the classes seen last."""

    def __init__(self, *, chunk: int = 1024, first_chunk: int = 2, ahead: int = 2, recent: int = 16, jobs: int = 64, windows: int = 64, step_s: float = 0.002,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        # Names per evaluation: a job starts at ``first_chunk`` and doubles while an evaluation takes
        # under half a step, up to ``chunk``; halves when one takes longer than a step, and is cut
        # to what fits a step when the classes' measured costs say a chunk would not (``Offload``). A
        # slow policy is evaluated a node at a time, so a step overruns its time by one node at most.
        self.chunk = chunk
        self.first_chunk = first_chunk
        self.ahead = ahead  # windows of the scheduler's a class asked again is filled for (``asked_again``)
        self.step_s = step_s  # how long one step evaluates before handing the event loop back
        self.clock = clock
        self._jobs: deque[Job] = deque(maxlen=jobs)  # filters to fill; a burst of new classes drops the oldest jobs
        self._scores: deque[Job] = deque(maxlen=jobs)  # then the scores of what they passed
        # The node names of the last filter requests, newest last: the scheduler's order of its
        # nodes, which its windows go round (``order``). References only: the requests' own lists.
        self._windows: deque[Sequence[str]] = deque(maxlen=windows)
        # The last ``order``: its names, the newest window then, how many windows, and its answer.
        self._ordered: tuple[Sequence[str], Sequence[str], int, list[str]] | None = None
        self._recent: deque[Mapping[str, Any]] = deque(maxlen=recent)  # first pods of the classes seen last
        self.evaluated = 0  # names evaluated, for the metrics
        self.on_job: Callable[[], None] | None = None  # called when a job is queued (the server wakes its task)

    def __bool__(self) -> bool:
        return bool(self._jobs) or bool(self._scores)

    def saw(self, names: Sequence[str]) -> None:
        """A filter request with these node names (in the scheduler's order) was answered."""
        self._windows.append(names)

    def order(self, names: Sequence[str]) -> list[str]:
        """``names`` in the order the scheduler is likely to ask for them next.

        kube-scheduler looks at its nodes in one fixed order, each pod's window starting where the
        previous pod's stopped (``nextStartNodeIndex``), and sends kpe the window's feasible nodes
        in that order. So once its windows have gone round the cluster, the nodes kpe saw longest
        ago are the next to come; before that, the nodes not seen yet are. A node the scheduler
        never sends (its own filters reject it) is left for last once the windows went round."""
        windows = list(self._windows)  # one C call: the event loop appends while a step reads
        if not windows:
            return list(names)
        last = self._ordered
        if last is not None and last[0] is names and last[1] is windows[-1] and last[2] == len(windows):
            return last[3]  # the jobs a reload queues share one list of names
        # Every name once, by when it was last seen, newest first (each window read backwards), then turned round.
        by_last_seen = list(dict.fromkeys(chain.from_iterable(map(reversed, reversed(windows)))))
        by_last_seen.reverse()
        went_round = not set(windows[-1]).isdisjoint(chain.from_iterable(windows[:-1]))
        current = set(names)
        seen = [name for name in by_last_seen if name in current]
        known = set(by_last_seen)
        unseen = [name for name in names if name not in known]
        ordered = seen + unseen if went_round else unseen + seen
        self._ordered = (names, windows[-1], len(windows), ordered)  # held, so no other list takes their place
        return ordered

    @property
    def recent(self) -> int:
        """How many classes seen last are kept (and filled again after a reload)."""
        return self._recent.maxlen or 0

    def asked_again(self, policy_set: PolicySet, pod: Mapping[str, Any], names: Sequence[str], *, together: bool = True) -> None:
        """A filter was the second one a class of ``pod`` answered (``FilterResult.recurring``):
        fill its classes with ``names`` (the cluster's nodes), as far as the scheduler's next
        ``ahead`` windows go (``order``): the windows of the class's next pods. Past them, its
        pods would evaluate a node only if they came often enough to go round the cluster, and
        on a large cluster most classes' pods do not (at 5,000 nodes a window is a tenth of it).

        Where those windows are less than half the cluster, only a class whose second filter
        came soon after its first (``together``: its pods come together, as a workload's do when
        it scales) is filled: the next windows go to the next pods, and a class whose pods come
        among many others' gets a window anywhere. On a small cluster the next windows are most
        of it, so a filled class is a whole class whenever its next pod comes."""
        self._recent.append(pod)
        limit = self.ahead * max(map(len, self._windows)) if self._windows else None
        if not together and limit is not None and 2 * limit < len(names):
            return
        self._jobs.append(Job(policy_set, pod, names, size=self.first_chunk, limit=limit))
        if self.on_job is not None:
            self.on_job()

    def reloaded(self, policy_set: PolicySet, names: Sequence[str]) -> None:
        """The policies were reloaded: the pending jobs are of the old set; the classes seen last are
        filled under ``policy_set``, the most recent first."""
        self._jobs.clear()
        self._scores.clear()
        for pod in reversed(self._recent):
            self._jobs.append(Job(policy_set, pod, names, speculative=True, size=self.first_chunk))

    def at_start(self, policy_set: PolicySet, waiting: Sequence[Mapping[str, Any]], newest: Sequence[Mapping[str, Any]],
                 names: Sequence[str], *, node: Callable[[str], Mapping[str, Any] | None] = lambda name: None) -> None:
        """At start-up, once the cache has synced: the classes the scheduler asks about first after a
        restart. First those of the pods waiting for a node (no ``nodeName``, no scheduling gate),
        then those of the workloads that created pods last (``newest``, ``Exemplars.take``, as pending pods: a kpe
        restarted in a running cluster sees the Deployment that was scaling when it stopped), one
        pod per workload (its controller, else its namespace and labels), as many as the classes
        seen last are kept."""
        seen: set[Any] = set()
        limit = self.recent
        bound = [as_pending(p, node(str((p.get("spec") or {}).get("nodeName") or ""))) for p in newest]
        for pod in [*(p for p in waiting if _waiting(p)), *bound]:
            key = workload(pod)
            if key in seen:
                continue
            seen.add(key)
            self._jobs.append(Job(policy_set, pod, names, speculative=True, size=self.first_chunk))
            self._recent.append(pod)
            if len(seen) >= limit:
                break
        if seen and self.on_job is not None:
            self.on_job()

    def clear(self) -> None:
        """Drop every job (after an error: a job that fails would fail again)."""
        self._jobs.clear()
        self._scores.clear()

    def step(self, current: PolicySet, evaluate: Evaluate) -> None:
        """Evaluate chunks of the jobs for about ``step_s``, a chunk of each in turn, filters before
        scores; a job of a set no longer ``current`` is dropped (a reload queues its own)."""
        start = now = self.clock()
        while (self._jobs or self._scores) and now - start < self.step_s:
            jobs = self._jobs or self._scores
            job = jobs[0]
            if job.policy_set is not current:
                jobs.popleft()
                continue
            if not job.ordered:
                job.ordered = True
                if self._windows:
                    job.names = self.order(job.names)
                    now = self.clock()  # ordering a large cluster's names takes a moment of the step
                if job.limit is not None:
                    job.names = job.names[:job.limit]
            names = list(job.names[job.done:job.done + job.size])
            before = now
            try:
                # Past its first names, a chunk is evaluated only if the classes' measured costs
                # say it fits a step: most of a job's nodes are remembered already (a new pod
                # shares most of its policies' classes with pods before it), so its chunks grow
                # large, and a chunk of nodes to compute is cut before it overruns the step.
                first = evaluate(job.policy_set, job.pod, names, job.scores, self.step_s if len(names) > self.first_chunk else None)
            except Offload as exc:
                now = self.clock()
                fits = self.first_chunk if exc.estimate is None else int(len(names) * self.step_s / exc.estimate / 2)
                job.size = max(self.first_chunk, min(len(names) // 2, fits))
                continue
            now = self.clock()
            took = now - before
            if took > self.step_s:
                job.size = max(1, job.size // 2)
            elif took < self.step_s / 2:
                job.size = min(self.chunk, job.size * 2)
            self.evaluated += len(names)
            if job.done == 0 and job.speculative and not job.scores and not first:
                jobs.popleft()  # its class was kept through the reload, or is being filled
                continue
            job.done += len(names)
            jobs.popleft()
            if job.done < len(job.names):
                # A chunk of each class in turn: the scheduler's next pods are of any of them, and
                # each class's next windows are filled before any class's far ones.
                jobs.append(job)
            elif not job.scores:
                # Every class's filter before any class's scores: the filter is what the
                # scheduler's next pods wait for first, and a prioritize is often worked out
                # ahead of its request.
                self._scores.append(Job(job.policy_set, job.pod, job.names, scores=True, size=job.size, ordered=True))


def _waiting(pod: Mapping[str, Any]) -> bool:
    spec = pod.get("spec") or {}
    return not spec.get("nodeName") and not spec.get("schedulingGates") and (pod.get("status") or {}).get("phase", "Pending") == "Pending"


def workload(pod: Mapping[str, Any]) -> Any:
    """What pods of one class usually share: their controller (a ReplicaSet, a Job), else their
    namespace and labels (but topology ones)."""
    meta = pod.get("metadata") or {}
    owner = next((o.get("uid") for o in meta.get("ownerReferences") or () if isinstance(o, dict) and o.get("controller")), None)
    # Without the labels binding copies from the node (``as_pending``): a workload's pods in three zones are one workload.
    labels = tuple(sorted((k, v) for k, v in (meta.get("labels") or {}).items() if not k.split("/", 1)[0].endswith(TOPOLOGY_DOMAINS)))
    return owner or (meta.get("namespace"), labels)


def as_pending(pod: Mapping[str, Any], node: Mapping[str, Any] | None = None) -> Mapping[str, Any]:
    """A bound pod as its workload's next pod reaches the scheduler: no node, pending, and without
    the topology labels binding copied onto it from ``node`` (its node; the API server's
    PodTopologyLabels admission, on by default from Kubernetes 1.35, copies the node's
    ``topology.kubernetes.io/zone`` and ``region`` onto a pod it binds): its next pod has no such
    labels yet, and labels are part of most classes."""
    spec = {k: v for k, v in (pod.get("spec") or {}).items() if k != "nodeName"}
    pending: dict[str, Any] = {**pod, "spec": spec, "status": {"phase": "Pending"}}
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    node_labels = ((node or {}).get("metadata") or {}).get("labels") or {}
    copied = [k for k, v in labels.items() if k.split("/", 1)[0].endswith(TOPOLOGY_DOMAINS) and node_labels.get(k) == v]
    if copied:
        pending["metadata"] = {**meta, "labels": {k: v for k, v in labels.items() if k not in copied}}
    return pending


# The label domains binding copies from the node (topology.k8s.io and its subdomains in the
# plugin's first version, topology.kubernetes.io since).
TOPOLOGY_DOMAINS = ("topology.kubernetes.io", "topology.k8s.io")


class Exemplars:
    """The newest pod of each of the ``limit`` workloads that created pods last, offered whole as
    the cache's first list arrives (the cache keeps bound pods cut to what policies read, which is
    not enough to tell a pod's class). After a restart these are the classes to fill first: the
    workloads the scheduler was placing when kpe stopped. Memory: ``limit`` pods, kept until
    start-up has queued them."""

    def __init__(self, *, limit: int = 16) -> None:
        self.limit = limit
        self._by_workload: dict[Any, tuple[str, Mapping[str, Any]]] = {}
        self._oldest = ""  # the oldest kept pod's creationTimestamp, once ``limit`` are kept

    def offer(self, pod: Mapping[str, Any]) -> None:
        """A pod of the first list: kept if its workload is among the ``limit`` with the newest pods
        so far (a workload dropped earlier comes back with a newer pod, so the kept ones are the
        ``limit`` workloads with the newest pods of the whole list)."""
        meta = pod.get("metadata") or {}
        created = meta.get("creationTimestamp")
        if not isinstance(created, str) or (len(self._by_workload) >= self.limit and created <= self._oldest):
            return  # not newer than any kept pod (the common case, decided before anything else is read)
        spec = pod.get("spec") or {}
        if meta.get("deletionTimestamp") or spec.get("schedulingGates") or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            return
        key = workload(pod)
        kept = self._by_workload.get(key)
        if kept is not None:
            if created > kept[0]:
                self._by_workload[key] = (created, pod)
        else:
            if len(self._by_workload) >= self.limit:
                del self._by_workload[min(self._by_workload, key=lambda k: self._by_workload[k][0])]
            self._by_workload[key] = (created, pod)
        if len(self._by_workload) >= self.limit:
            self._oldest = min(created for created, _ in self._by_workload.values())

    def take(self) -> list[Mapping[str, Any]]:
        """The kept pods, newest first; forgets them."""
        kept = sorted(self._by_workload.values(), key=lambda entry: entry[0], reverse=True)
        self._by_workload, self._oldest = {}, ""
        return [pod for _, pod in kept]
