"""PolicyTest: the unit tests policy authors write next to their policies (``kpe test``).

A PolicyTest file (``schemas/policytest-v1alpha1.json``) names the policies it
exercises, optional named fixtures (nodes, pods), and cases: a pod, nodes,
pods already in the cluster, and the decisions expected of kpe. Wherever a pod
is expected, a Deployment, ReplicaSet, StatefulSet, DaemonSet, Job or CronJob
may stand for the pod its controller would create (``engine.cluster.workloads``),
as users keep workloads, not pods, in Git. The runner
feeds exactly what the server would (``nodeInfo`` built from the cluster pods,
the same engine entry points), so a passing test means the policy behaves so
in production. Keys left out of ``expect`` are not checked; keys given are
checked exactly (``fail: {}`` means "no node fails"), because a test that
silently ignores an extra rejected node hides the bugs it exists to catch.

Problems with a test file itself (schema, unknown fixture, policies that do
not load) are reported as a case ``error`` with file, line and case, never as
an exception, so one broken file does not hide the results of the others.
"""

from __future__ import annotations

import copy
import json
import os
import re
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from engine.decisions.admission import admit
from engine.cluster.counts import counts_of
from engine.cel import EvalError
from engine.cel.ext.timestamps import Timestamp, parse_timestamp
from engine.policy.documents import Document, Path as DocPath, format_path, load_documents
from engine.errors import PolicyError, PolicyLoadError
from engine.decisions.filtering import filter_nodes
from engine.policy.loader import SUFFIXES, load
from engine.cluster.nodeinfo import node_info_map, node_name
from engine.cluster.devices import dra_of
from engine.cluster.projection import namespaces_by_name
from engine.cluster.workloads import WorkloadError, pod_for
from engine.policy.model import PolicySet
from engine.policy.params import ClusterParams
from engine.decisions.preemption import preempt
from engine.policy.schema import validate
from engine.decisions.scoring import score_nodes

KIND = "PolicyTest"
SCHEMA = "policytest-v1alpha1.json"


@dataclass
class Mismatch:
    """One expectation not met: ``what`` is the expectation's path, e.g. ``filter.fail[cpu-1]``."""

    what: str
    expected: Any
    actual: Any

    def __str__(self) -> str:
        return f"{self.what}: expected {_show(self.expected)}, got {_show(self.actual)}"


@dataclass
class CaseResult:
    file: str
    test: str  # metadata.name of the PolicyTest
    case: str  # the case's name; "" for a problem with the whole document
    failures: list[Mismatch] = field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return self.error is None and not self.failures

    def render(self) -> str:
        """Human-readable outcome, for the CLI."""
        head = f"{'PASS' if self.passed else 'ERROR' if self.error else 'FAIL'} {self.file}: {self.test}: {self.case or '(file)'}"
        details = [self.error] if self.error else [str(m) for m in self.failures]
        return "\n".join([head, *("    " + line for d in details for line in d.split("\n"))])


# Dynamic Resource Allocation objects a test may give (engine.cluster.devices), by kind: its field.
DRA_FIXTURES = {"resourceslices": "resourceSlices", "resourceclaims": "resourceClaims",
                "resourceclaimtemplates": "resourceClaimTemplates", "deviceclasses": "deviceClasses"}


class PolicyTestError(Exception):
    """A problem with a test file, already rendered with its location."""


def _show(value: Any) -> str:
    if value is None:  # the key was not expected at all
        return "no entry"
    if isinstance(value, Mapping) and set(value) == {"contains"}:
        return f"a reason containing {value['contains']!r}"
    return repr(value)


# -- discovery -----------------------------------------------------------------


def _test_files(paths: Iterable[str | os.PathLike[str]]) -> list[tuple[Path, bool]]:
    """Files to read, each with whether it was named explicitly (then it must hold a test)."""
    found: list[tuple[Path, bool]] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            for root, dirs, names in os.walk(path, followlinks=True):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                found += [(Path(root) / n, False) for n in sorted(names) if n.endswith(SUFFIXES) and not n.startswith(".")]
        else:
            found.append((path, True))
    # Each file once, even when named directly and inside a named directory too.
    seen: dict[str, int] = {}
    unique: list[tuple[Path, bool]] = []
    for file, explicit in found:
        real = os.path.realpath(file)
        if real in seen:
            index = seen[real]
            unique[index] = (unique[index][0], unique[index][1] or explicit)
        else:
            seen[real] = len(unique)
            unique.append((file, explicit))
    return unique


def run_test_files(paths: Iterable[str | os.PathLike[str]]) -> list[CaseResult]:
    """Run every PolicyTest in ``paths`` (files, or directories searched recursively)."""
    runner = _Runner()
    results: list[CaseResult] = []
    for file, explicit in _test_files(paths):
        try:
            text = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            results.append(CaseResult(str(file), "", "", error=f"{file}: cannot read test file: {exc}"))
            continue
        docs, yaml_errors = load_documents(text, str(file))
        # In a directory walk, a broken policy file is the policy loader's business, not ours.
        if yaml_errors and (explicit or KIND in text):
            results.append(CaseResult(str(file), "", "", error="\n".join(e.render() for e in yaml_errors)))
            continue
        tests = [d for d in docs if isinstance(d.data, dict) and d.data.get("kind") == KIND]
        if not tests and explicit:
            results.append(CaseResult(str(file), "", "", error=f"{file}: no {KIND} document in this file"))
        for doc in tests:
            results += runner.run_document(doc)
    return results


# -- running -------------------------------------------------------------------


class _Runner:
    """Caches what several tests share in one run: loaded policy sets and fixture files."""

    def __init__(self) -> None:
        self.policy_sets: dict[tuple[tuple[str, ...], str], PolicySet | PolicyLoadError] = {}
        self.files: dict[str, Any] = {}

    def run_document(self, doc: Document) -> list[CaseResult]:
        meta = doc.data.get("metadata")
        name = str(meta.get("name", "")) if isinstance(meta, dict) else ""
        schema_errors = validate(doc, policy=name, schema=SCHEMA)
        if schema_errors:
            return [CaseResult(doc.file, name, "", error="\n".join(e.render() for e in schema_errors))]
        spec = doc.data["spec"]
        base = Path(doc.file).parent
        paths = tuple(str(base / p) for p in spec["policies"])
        results: list[CaseResult] = []
        for i, case in enumerate(spec["cases"]):
            result = CaseResult(doc.file, name, case["name"])
            start = time.perf_counter()
            try:
                policy_set = self.policy_set(paths, _Case(self, doc, name, i, spec).cluster_params())
            except PolicyTestError as exc:
                result.error = str(exc)
                results.append(result)
                continue
            if isinstance(policy_set, PolicyLoadError):
                result.error = f"{doc.location(('spec', 'policies'))}: case {case['name']!r}: policies failed to load:\n{policy_set.render()}"
            else:
                try:
                    result.failures = _Case(self, doc, name, i, spec).run(policy_set)
                except PolicyTestError as exc:
                    result.error = str(exc)
                except Exception as exc:  # noqa: BLE001 - an engine crash is this case's result, not the run's end
                    result.error = f"{doc.location(('spec', 'cases', i))}: case {case['name']!r}: kpe raised {type(exc).__name__}: {exc}"
            result.seconds = time.perf_counter() - start
            results.append(result)
        return results

    def policy_set(self, paths: tuple[str, ...], cluster_params: ClusterParams | None) -> PolicySet | PolicyLoadError:
        """The policies at ``paths``, loaded once per set of ConfigMaps their paramsFrom reads."""
        key = (paths, json.dumps(sorted(cluster_params.items()) if cluster_params is not None else None, sort_keys=True))
        if key not in self.policy_sets:
            try:
                self.policy_sets[key] = load(paths, cluster_params=cluster_params)
            except PolicyLoadError as exc:
                self.policy_sets[key] = exc
        return self.policy_sets[key]

    def read_object(self, file: Path) -> Any:
        real = os.path.realpath(file)
        if real not in self.files:
            self.files[real] = yaml.safe_load(file.read_text(encoding="utf-8"))  # JSON is YAML
        return self.files[real]


class _Case:
    """One case: resolves its references, runs the decisions it expects, compares."""

    def __init__(self, runner: _Runner, doc: Document, test: str, index: int, spec: dict[str, Any]) -> None:
        self.runner, self.doc, self.test, self.spec = runner, doc, test, spec
        self.path: DocPath = ("spec", "cases", index)
        self.case: dict[str, Any] = spec["cases"][index]
        self.fixtures: dict[str, Any] = spec.get("fixtures") or {}

    def fail(self, sub: DocPath, message: str, *, absolute: bool = False) -> PolicyTestError:
        where = sub if absolute else (*self.path, *sub)
        error = PolicyError("KPE500", f"case {self.case['name']!r}: {message}", self.doc.location(where), self.test, format_path(where))
        return PolicyTestError(error.render())

    def object(self, value: Any, sub: DocPath, fixture: str = "") -> dict[str, Any]:
        """An inline object or ``{file: path}``. A fixture is named by its key, which
        overrides metadata.name: tests speak in fixture names, and one file can serve
        as several nodes. ``sub`` is relative to the case, or absolute for a fixture."""
        if isinstance(value, dict) and set(value) == {"file"}:
            file = Path(self.doc.file).parent / value["file"]
            where = (*sub, "file")
            try:
                value = self.runner.read_object(file)
            except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
                raise self.fail(where, f"cannot read fixture file {str(file)!r}: {exc}", absolute=bool(fixture)) from None
            if not isinstance(value, dict):
                raise self.fail(where, f"fixture file {str(file)!r} does not hold an object", absolute=bool(fixture))
        obj: dict[str, Any] = copy.deepcopy(value)
        if fixture:
            meta = obj.setdefault("metadata", {})
            if isinstance(meta, dict):
                meta["name"] = fixture
        return obj

    def ref(self, value: Any, kind: str, sub: DocPath, extra: Mapping[str, dict[str, Any]] | None = None) -> dict[str, Any]:
        """A fixture name (``kind``: nodes, pods, namespaces or configMaps) or an object. A pod may be given as a
        workload: it stands for the pod its controller would create
        (``engine.cluster.workloads``); the fixture key then names the workload."""
        if not isinstance(value, str):
            return self.pod(self.object(value, sub), kind, sub, "pod")
        if extra and value in extra:
            return extra[value]
        named = self.fixtures.get(kind) or {}
        if value not in named:
            known = ", ".join([*(extra or {}), *named]) or "none defined"
            raise self.fail(sub, f"unknown {kind[:-1]} fixture {value!r} (known: {known})")
        where = ("spec", "fixtures", kind, value)
        return self.pod(self.object(named[value], where, fixture=value), kind, where, f"pod fixture {value!r}", absolute=True)

    def pod(self, obj: dict[str, Any], kind: str, where: DocPath, what: str, *, absolute: bool = False) -> dict[str, Any]:
        if kind != "pods":
            return obj
        try:
            return pod_for(obj)
        except WorkloadError as exc:
            raise self.fail(where, f"{what}: {exc}", absolute=absolute) from None

    def cluster_params(self) -> ClusterParams | None:
        """The case's ConfigMaps by (namespace, name), for paramsFrom; None when the test gives none."""
        if "configMaps" in self.case:
            raw = list(self.case["configMaps"])
        elif "configMaps" in self.fixtures:
            raw = list(self.fixtures["configMaps"])
        else:
            return None
        found: dict[tuple[str, str], Mapping[str, str] | None] = {}
        for i, ref in enumerate(raw):
            obj = self.ref(ref, "configMaps", ("configMaps", i))
            meta = obj.get("metadata") or {}
            data = obj.get("data") or {}
            found[(str(meta.get("namespace") or "default"), str(meta.get("name") or ""))] = {str(k): str(v) for k, v in data.items()}
        return found

    def dra(self) -> dict[str, Any]:
        """``dra`` from the case's DRA objects (each kind's fixtures by default)."""
        objects = {}
        for kind, field in DRA_FIXTURES.items():
            raw = self.case[field] if field in self.case else list(self.fixtures.get(field) or {})
            objects[kind] = [self.ref(r, field, (field, i)) for i, r in enumerate(raw)]
        return dra_of(objects)

    def run(self, policy_set: PolicySet) -> list[Mismatch]:
        case = self.case
        pod = self.ref(case["pod"], "pods", ("pod",))
        raw_nodes = case["nodes"] if "nodes" in case else list(self.fixtures.get("nodes") or {})
        nodes = [self.ref(n, "nodes", ("nodes", i)) for i, n in enumerate(raw_nodes)]
        cluster = [self.ref(p, "pods", ("clusterPods", i)) for i, p in enumerate(case.get("clusterPods") or [])]
        raw_namespaces = case["namespaces"] if "namespaces" in case else list(self.fixtures.get("namespaces") or {})
        namespaces = namespaces_by_name(self.ref(n, "namespaces", ("namespaces", i)) for i, n in enumerate(raw_namespaces))
        stamp = case.get("now", self.spec.get("now"))
        try:
            now: Timestamp | None = parse_timestamp(stamp) if stamp else None
        except EvalError as exc:
            raise self.fail(("now",) if "now" in case else ("spec", "now"), exc.message, absolute="now" not in case) from None
        info = node_info_map(nodes, cluster)
        counts = counts_of(policy_set.counts, nodes, cluster)
        dra = self.dra()
        expect: dict[str, Any] = case["expect"]
        out: list[Mismatch] = []

        if "matched" in expect or "filter" in expect:
            result = filter_nodes(policy_set, pod, nodes, node_info=info, now=now, counts=counts, namespaces=namespaces, dra=dra)
            if "matched" in expect:
                _same_set(out, "matched", expect["matched"], result.matched)
            verdicts = {name: "passed" for name in result.passed}
            verdicts |= {n: f"failed: {r}" for n, r in result.failed.items()}
            verdicts |= {n: f"unresolvable: {r}" for n, r in result.unresolvable.items()}
            want = expect.get("filter") or {}
            if "pass" in want:
                _same_set(out, "filter.pass", want["pass"], result.passed)
            for key, actual in (("fail", result.failed), ("unresolvable", result.unresolvable)):
                if key in want:
                    _reasons(out, f"filter.{key}", want[key], actual, lambda n: verdicts.get(n, "not among the case's nodes"))
            if "audit" in want:
                audit: dict[str, str] = {}
                for event in result.audit_rejections:
                    audit.setdefault(event.node, event.message)
                _reasons(out, "filter.audit", want["audit"], audit, lambda n: "no audit rejection")

        if "score" in expect:
            scores = score_nodes(policy_set, pod, nodes, node_info=info, now=now, counts=counts, namespaces=namespaces, dra=dra).scores
            want = expect["score"]
            for n, value in (want.get("values") or {}).items():
                if scores.get(n) != value:
                    out.append(Mismatch(f"score.values[{n}]", value, scores.get(n, "not among the case's nodes")))
            order: list[str] = want.get("order") or []
            if any(scores.get(a, -1) <= scores.get(b, -1) for a, b in zip(order, order[1:])) or not set(order) <= set(scores):
                actual_order = dict(sorted(((n, scores.get(n)) for n in order), key=lambda kv: -(kv[1] if kv[1] is not None else -1)))
                out.append(Mismatch("score.order", order, actual_order))

        if "admission" in expect:
            decision = admit(policy_set, pod, nodes=nodes, pods=cluster, now=now, namespaces=namespaces, dra=dra)
            want = expect["admission"]
            if "admitted" in want and want["admitted"] != decision.admitted:
                out.append(Mismatch("admission.admitted", want["admitted"], decision.admitted))
            if "gates" in want:
                _same_set(out, "admission.gates", want["gates"], decision.gates)
            pending = {d.gate: d.message for d in decision.pending}
            if "pending" in want:
                _same_set(out, "admission.pending", want["pending"], list(pending))
            if "messages" in want:
                _reasons(out, "admission.messages", want["messages"], pending, lambda g: "gate not pending")

        if "preemption" in expect:
            want = expect["preemption"]
            by_name = {str((p.get("metadata") or {}).get("name", "")): p for p in cluster}
            names = {node_name(n) for n in nodes}
            for n in want["victims"]:
                if n not in names:
                    raise self.fail(("expect", "preemption", "victims", n), f"victims proposed on {n!r}, which is not among the case's nodes")
            proposed = {
                n: [self.ref(v, "pods", ("expect", "preemption", "victims", n, i), by_name) for i, v in enumerate(victims)]
                for n, victims in want["victims"].items()
            }
            result_p = preempt(policy_set, pod, proposed, nodes={node_name(n): n for n in nodes}, node_info=info, now=now, counts=counts, namespaces=namespaces, dra=dra)
            if "candidates" in want:
                _same_set(out, "preemption.candidates", want["candidates"], list(result_p.candidates))
            rejected = want.get("rejected")
            if isinstance(rejected, list):
                _same_set(out, "preemption.rejected", rejected, list(result_p.rejected))
            elif isinstance(rejected, dict):
                _reasons(out, "preemption.rejected", rejected, result_p.rejected, lambda n: "candidate" if n in result_p.candidates else "not proposed")
        return out


def _same_set(out: list[Mismatch], what: str, expected: list[str], actual: list[str]) -> None:
    if set(expected) != set(actual):
        out.append(Mismatch(what, sorted(expected), sorted(actual)))


def _matches(expected: Any, actual: str) -> bool:
    return expected["contains"] in actual if isinstance(expected, dict) else bool(expected == actual)


def _reasons(out: list[Mismatch], what: str, expected: Mapping[str, Any], actual: Mapping[str, str], otherwise: Callable[[str], str]) -> None:
    """Exactly the keys of ``expected``, each with a matching reason; ``otherwise(key)``
    says what happened to a key that has no reason."""
    for key in sorted(set(expected) | set(actual)):
        if key not in actual:
            out.append(Mismatch(f"{what}[{key}]", expected[key], otherwise(key)))
        elif key not in expected:
            out.append(Mismatch(f"{what}[{key}]", None, actual[key]))
        elif not _matches(expected[key], actual[key]):
            out.append(Mismatch(f"{what}[{key}]", expected[key], actual[key]))


# -- reporting -----------------------------------------------------------------

# Characters XML 1.0 cannot carry even escaped; a reason quoting a node label could hold one.
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _xml_text(text: str) -> str:
    return _NOT_XML.sub("\ufffd", text)


def junit_xml(results: Iterable[CaseResult]) -> str:
    """JUnit XML, one ``testsuite`` per PolicyTest, as CI systems (GitLab, Jenkins, GitHub
    test reporters) read it: a mismatch is a ``failure``, a broken test file an ``error``."""
    suites: dict[tuple[str, str], list[CaseResult]] = {}
    for r in results:
        suites.setdefault((r.file, r.test), []).append(r)
    root = ET.Element("testsuites", name="kpe test")
    totals = {"tests": 0, "failures": 0, "errors": 0}
    total_time = 0.0
    for (file, test), cases in suites.items():
        counts = {"tests": len(cases), "failures": sum(1 for c in cases if c.failures and not c.error), "errors": sum(1 for c in cases if c.error)}
        seconds = sum(c.seconds for c in cases)
        attributes = {"name": test or file, "file": file, "time": f"{seconds:.3f}", **{k: str(v) for k, v in counts.items()}}
        suite = ET.SubElement(root, "testsuite", attributes)
        for c in cases:
            element = ET.SubElement(suite, "testcase", classname=f"{file}:{test}", name=c.case or "(file)", file=file, time=f"{c.seconds:.3f}")
            if c.error:
                error = _xml_text(c.error)
                ET.SubElement(element, "error", message=error.split("\n")[0], type="PolicyTestError").text = error
            elif c.failures:
                count = len(c.failures)
                detail = _xml_text("\n".join(str(m) for m in c.failures))
                ET.SubElement(element, "failure", message=f"{count} expectation{'s' if count != 1 else ''} not met", type="Mismatch").text = detail
        for k in totals:
            totals[k] += counts[k]
        total_time += seconds
    for k, v in totals.items():
        root.set(k, str(v))
    root.set("time", f"{total_time:.3f}")
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
