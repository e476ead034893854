"""The ``kpe`` command: check, test and explain policies (serve comes with the server;
snapshot and diff in server.cli.snapshot and server.cli.diff, completion in
server.cli.completion).

Every command exits 0 when it did what it was asked, 1 when it found something wrong
(policy errors, failed tests, changes) and 2 on usage errors and inputs that cannot be
read; its ``--help`` ends with what each code means for it (``epilog=``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any, TextIO

import yaml

from engine.policy.compiler import CostLimits
from engine.errors import PolicyLoadError
from engine.policy.loader import load
from engine.policy.model import PolicySet

from engine.reports.tables import render_table

from server.settings import EXIT_FAILED as EXIT_FAILED
from server.settings import EXIT_OK as EXIT_OK
from server.settings import EXIT_USAGE as EXIT_USAGE
from server.cli.release import VersionAction, supported_kubernetes
from server.settings import Settings, UsageError, env_name, exit_codes, policy_paths



# -- check -----------------------------------------------------------------------


def cost_limits(args: argparse.Namespace) -> CostLimits:
    """``--cel-cost-limit`` and ``--cel-admission-cost-limit``, else ``KPE_CEL_*``, else the
    defaults: the same settings, and the same defaults, as ``kpe serve``."""
    values: dict[str, int] = {}
    for f in fields(Settings):
        if f.name in ("cel_cost_limit", "cel_admission_cost_limit"):
            flag = "--" + f.name.replace("_", "-")
            raw = getattr(args, f.name, None)
            raw = raw if raw is not None else os.environ.get(env_name(f.name))
            try:
                values[f.name] = int(raw) if raw is not None else int(f.default)  # type: ignore[arg-type]
            except ValueError:
                raise UsageError(f"{flag}: expected a number, got {raw!r}") from None
            if values[f.name] <= 0:
                raise UsageError(f"{flag} must be positive")
    return CostLimits(values["cel_cost_limit"], values["cel_admission_cost_limit"])



def cmd_check(args: argparse.Namespace, out: TextIO) -> int:
    try:
        policy_set = load(args.paths, allow_empty=args.allow_empty_policies, cost_limits=cost_limits(args))
    except PolicyLoadError as exc:
        # A path that cannot be read is a mistake on the command line, not in the policies:
        # exit 2, as for every input kpe cannot read, so CI tells the two apart.
        unreadable = [e for e in exc.errors if e.code == "KPE100"]
        if unreadable:
            raise UsageError("; ".join(e.render() for e in unreadable)) from None
        if args.output == "json":
            json.dump({"ok": False, "errors": [e.to_dict() for e in exc.errors]}, out, indent=2)
            out.write("\n")
        else:
            out.write(exc.render() + "\n")
            count = len(exc.errors)
            out.write(f"\n{count} error{'s' if count != 1 else ''} found.\n")
        return EXIT_FAILED
    warnings = sorted((w for p in policy_set.policies for w in p.warnings), key=lambda w: w.sort_key())
    failed = bool(warnings) and args.strict
    if args.output == "json":
        json.dump(
            {"ok": not failed, "generation": policy_set.generation, "policies": [_policy_summary(p) for p in policy_set.policies],
             "skipped": list(policy_set.skipped), "warnings": [w.to_dict() for w in warnings]},
            out,
            indent=2,
        )
        out.write("\n")
    else:
        for w in warnings:
            out.write(w.render() + "\n")
        if warnings:
            out.write("\n")
        rows = [[p.name, p.mode, p.failure_policy, _kinds(p), p.file] for p in policy_set.policies]
        out.write(render_table(["POLICY", "MODE", "FAILURE", "DECISIONS", "FILE"], rows) + "\n")
        noun = "policy" if len(policy_set) == 1 else "policies"
        said = f"{len(warnings)} warning{'s' if len(warnings) != 1 else ''}"
        if not warnings:
            out.write(f"{len(policy_set)} {noun} OK (generation {policy_set.generation}).\n")
        elif failed:
            out.write(f"{len(policy_set)} {noun} load (generation {policy_set.generation}), with {said}: refused by --strict.\n")
        else:
            out.write(f"{len(policy_set)} {noun} OK (generation {policy_set.generation}), with {said} (--strict fails on them).\n")
        if policy_set.skipped:
            count = len(policy_set.skipped)
            out.write(f"Skipped {count} document{'s' if count != 1 else ''} of other tools:\n" + "".join(f"  {s}\n" for s in policy_set.skipped))
    if failed:
        return EXIT_FAILED
    return EXIT_OK


def _kinds(policy: Any) -> str:
    kinds = [k for k, present in (("filter", policy.filters), ("score", policy.scores), ("admission", policy.admission), ("preemption", policy.preemption)) if present]
    return ",".join(kinds)


def _policy_summary(policy: Any) -> dict[str, Any]:
    return {"name": policy.name, "file": policy.file, "mode": policy.mode, "failurePolicy": policy.failure_policy, "decisions": _kinds(policy).split(",")}


# -- test ------------------------------------------------------------------------


def cmd_test(args: argparse.Namespace, out: TextIO) -> int:
    from engine.reports.policytest import junit_xml, run_test_files

    missing = [path for path in args.paths if not os.path.exists(path)]
    if missing:
        raise UsageError("; ".join(f"{path}: no such file or directory" for path in missing))
    results = run_test_files(args.paths)
    if not results:
        raise UsageError(f"no PolicyTest found in {', '.join(args.paths)}")
    if args.junit:
        Path(args.junit).write_text(junit_xml(results))
    failed = [r for r in results if not r.passed]
    if args.output == "json":
        json.dump({"passed": len(results) - len(failed), "failed": len(failed), "cases": [_case_dict(r) for r in results]}, out, indent=2, default=str)
        out.write("\n")
    else:
        rows = [["PASS" if r.passed else "FAIL", r.test, r.case, r.file] for r in results]
        out.write(render_table(["RESULT", "TEST", "CASE", "FILE"], rows) + "\n")
        for r in failed:
            out.write(f"\nFAIL {r.test} / {r.case} ({r.file})\n")
            if r.error:
                out.write(f"  error: {r.error}\n")
            for m in r.failures:
                out.write(f"  {m.what}:\n    expected: {_show(m.expected)}\n    actual:   {_show(m.actual)}\n")
        out.write(f"\n{len(results) - len(failed)} passed, {len(failed)} failed\n")
    return EXIT_FAILED if failed else EXIT_OK


def _case_dict(r: Any) -> dict[str, Any]:
    return {
        "file": r.file,
        "test": r.test,
        "case": r.case,
        "passed": r.passed,
        "error": r.error,
        "failures": [{"what": m.what, "expected": m.expected, "actual": m.actual} for m in r.failures],
    }


def _show(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str) if not isinstance(value, str) else value


# -- explain -----------------------------------------------------------------------


def read_objects(path: str) -> list[dict[str, Any]]:
    """Kubernetes objects from a JSON or YAML file: one object, a list, a ``*List``, or many YAML documents."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        raise UsageError(f"{path} is not valid JSON or YAML: {exc}") from None
    objects: list[dict[str, Any]] = []
    for doc in docs:
        items = doc.get("items") if isinstance(doc, dict) and "items" in doc else doc
        for obj in items if isinstance(items, list) else [items]:
            if not isinstance(obj, dict):
                raise UsageError(f"{path}: expected Kubernetes objects, found {type(obj).__name__}")
            objects.append(obj)
    return objects


def cmd_explain(args: argparse.Namespace, out: TextIO) -> int:
    from engine.cluster.workloads import WorkloadError, describe, is_workload, pod_for
    from engine.cluster.projection import namespaces_by_name
    from engine.reports.explain import explain

    if args.target:
        from server.cli.podexplain import cmd_explain_pod

        return cmd_explain_pod(args, out)
    if not args.pod or not args.nodes:
        raise UsageError("expected --pod FILE --nodes FILE, or pod NAMESPACE/NAME to explain a pod of the cluster")
    if args.server:
        raise UsageError("--server explains a pod of the cluster: kpe explain pod NAMESPACE/NAME --server URL")
    objects = read_objects(args.pod)
    if not objects:
        raise UsageError(f"{args.pod} holds no pod or workload")
    # A workload stands for the pod its controller would create (docs/workloads.md); every
    # object is checked before any is explained, so a manifest with a Service fails whole.
    try:
        pods = [(pod_for(obj), describe(obj) if is_workload(obj) else None) for obj in objects]
    except WorkloadError as exc:
        raise UsageError(f"{args.pod}: {exc}") from None
    nodes = read_objects(args.nodes)
    cluster_pods = read_objects(args.cluster_pods) if args.cluster_pods else []
    namespaces = namespaces_by_name(read_objects(args.namespaces)) if args.namespaces else None
    try:
        policy_set: PolicySet = load(policy_paths(args.policies))
    except PolicyLoadError as exc:
        out.write(exc.render() + "\n")
        return EXIT_FAILED
    if args.output == "markdown":
        from engine.reports.diagnosis.diagnose import diagnose

        from server.cli.podexplain import write

        for i, (pod, workload) in enumerate(pods):
            if i:
                out.write("\n")
            if workload:
                out.write(f"Pod made from {workload} as its controller would create it.\n\n")
            write(diagnose(policy_set, pod, nodes, cluster_pods=cluster_pods, namespaces=namespaces).to_dict(), "markdown", out, limit=args.limit)
        return EXIT_OK
    # What files cannot or did not give, said next to the policies that read it.
    missing = frozenset({"dra", "params"} | ({"namespaceObject"} if namespaces is None else set())
                        | ({"nodeInfo", "counts"} if not args.cluster_pods else set()))
    reports = [explain(policy_set, pod, nodes, cluster_pods=cluster_pods, namespaces=namespaces, missing=missing) for pod, _ in pods]
    for report, (_, workload) in zip(reports, pods):
        report.workload = workload
    if args.output == "json":
        # One object for one pod or workload (as before workloads); a list, in file order, for several.
        data = [r.to_dict() for r in reports]
        json.dump(data[0] if len(data) == 1 else data, out, indent=2, default=str)
        out.write("\n")
    else:
        out.write("\n\n".join(r.render() for r in reports) + "\n")
    return EXIT_OK


# -- main --------------------------------------------------------------------------


CHECK_EXIT_CODES = exit_codes(
    "the policies load (with --strict: without warnings)", "policy errors (with --strict: warnings too)", "usage errors and paths that cannot be read"
)
TEST_EXIT_CODES = exit_codes(
    "every case passed",
    "a case failed, or a test file or the policies it names do not load",
    "usage errors: a path that does not exist, or no PolicyTest in the paths given",
)
EXPLAIN_EXIT_CODES = exit_codes(
    "explained",
    "the policies do not load",
    "usage errors, files that cannot be read, a cluster or a running kpe that cannot be reached, a pod that does not exist",
)
SCHEDULER_CONFIG_EXIT_CODES = exit_codes(
    "printed",
    "the policies do not load, or none has filters, scores or preemption (nothing for kube-scheduler to call kpe for) and --bind is not given",
    "usage errors: no --policies, options that do not go together",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kpe",
        description="kpe: CEL scheduling policies for kube-scheduler",
        epilog="Each command's --help ends with what its exit codes mean. Shell completion: kpe completion bash (or zsh).",
    )
    parser.add_argument(
        "--version", action=VersionAction,
        help=f"print kpe's version, the commit it was built from and the Kubernetes versions it supports ({supported_kubernetes()}), and exit",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    check = sub.add_parser("check", help="load policies and report every error", epilog=CHECK_EXIT_CODES)
    check.add_argument("paths", nargs="+", metavar="PATH", help="policy files or directories")
    check.add_argument("--output", choices=("text", "json"), default="text")
    check.add_argument(
        "--strict", action="store_true",
        help="fail (exit 1) on warnings too: reads that fail on ordinary pods or nodes in rules that block them (KPE600)",
    )
    check.add_argument(
        "--allow-empty-policies", action="store_true", help="accept paths that hold no policy (refused by default: every node would pass every pod)"
    )
    for f in fields(Settings):
        if f.name in ("cel_cost_limit", "cel_admission_cost_limit"):
            check.add_argument(
                "--" + f.name.replace("_", "-"), dest=f.name, metavar="UNITS", default=None,
                help=f"{f.metadata['help']} [env {env_name(f.name)}; default {f.default:,}]",
            )
    check.set_defaults(run=cmd_check)

    test = sub.add_parser("test", help="run PolicyTest files", epilog=TEST_EXIT_CODES)
    test.add_argument("paths", nargs="+", metavar="PATH", help="PolicyTest files or directories")
    test.add_argument("--junit", metavar="FILE", help="also write a JUnit XML report")
    test.add_argument("--output", choices=("text", "json"), default="text")
    test.set_defaults(run=cmd_test)

    from server.cli.podexplain import add_explain_pod_arguments

    exp = sub.add_parser(
        "explain",
        help="show what the policies decide for a pod on each node",
        description="kpe explain --pod FILE --nodes FILE: a pod and nodes from files. "
        "kpe explain pod NAMESPACE/NAME: a pod of the live cluster (--kubeconfig, in-cluster) or of a running kpe (--server).",
        epilog=EXPLAIN_EXIT_CODES,
    )
    exp.add_argument("target", nargs="*", metavar="pod NAMESPACE/NAME", help="explain this pod of the cluster instead of files")
    exp.add_argument(
        "--pod", metavar="FILE",
        help="the pod (JSON or YAML), or a Deployment, ReplicaSet, StatefulSet, DaemonSet, Job or CronJob: the pod its controller would create "
        "(docs/workloads.md); several documents: each is explained, in order",
    )
    exp.add_argument("--nodes", metavar="FILE", help="nodes: a NodeList, a list, or YAML documents")
    exp.add_argument("--cluster-pods", metavar="FILE", help="pods already running (for nodeInfo and admission)")
    exp.add_argument("--namespaces", metavar="FILE", help="Namespace objects: the pod's is namespaceObject (null when not among them)")
    # Not required=True: with --server the policies are the ones that kpe serves, and giving any is refused.
    exp.add_argument(
        "--policies", nargs="+", metavar="PATH",
        help="policy files or directories; required, except with --server (which explains with the policies that kpe serves)",
    )
    exp.add_argument("--output", choices=("table", "json", "markdown"), default="table")
    add_explain_pod_arguments(exp)
    exp.set_defaults(run=cmd_explain)

    from server.verbs.schedulerconfig import add_arguments as add_scheduler_config_arguments
    from server.verbs.schedulerconfig import cmd_scheduler_config

    sched = sub.add_parser(
        "scheduler-config",
        help="print the kube-scheduler extender configuration the policies need",
        description="Print kube-scheduler's `extenders:` entry for kpe (verbs and managedResources follow the policies).",
        epilog=SCHEDULER_CONFIG_EXIT_CODES,
    )
    add_scheduler_config_arguments(sched)
    sched.set_defaults(run=cmd_scheduler_config)

    from server.cli.completion import add_completion_command
    from server.cli.diff import add_diff_command
    from server.cli.serve import add_serve_command
    from server.cli.snapshot import add_snapshot_command
    from server.cli.view import add_view_command

    add_snapshot_command(sub)
    add_view_command(sub)
    add_diff_command(sub)
    add_serve_command(sub)
    add_completion_command(sub, parser)
    return parser


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    stream = out or sys.stdout
    try:
        code: int = args.run(args, stream)
    except UsageError as exc:
        print(f"kpe {args.command}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:
        # `kpe explain ... | head`: the reader has what it wanted. Point stdout at
        # devnull so the interpreter's final flush does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
