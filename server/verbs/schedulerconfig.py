"""``kpe scheduler-config``: the kube-scheduler ``extenders:`` entry a policy set needs.

The entry is derived from the policies rather than written by hand, so the
scheduler never calls a verb no policy answers (each call costs scheduling
latency) and never skips one a policy needs:

- ``filterVerb`` only if some policy has ``filters``, ``prioritizeVerb`` only
  if some policy has ``scores``, ``preemptVerb`` if some policy has ``filters``
  or ``preemption`` (Audit-mode policies count: they must be evaluated to be
  counted); ``bindVerb`` only on request, because binding through kpe is a
  deployment choice, not something a policy asks for.
- Filters need ``preemptVerb`` too: kube-scheduler's preemption dry run runs
  only its own filter plugins, never the extender's filter, so it can pick
  victims on a node kpe rejects whatever is evicted (a label, a taint, a pod
  count the victims do not change). The preempt verb is kpe's only chance to
  drop such a node before the victims are deleted; without it they are
  evicted in vain and the pod stays pending.
- Reservations (``kind: Reservation``) need ``preemptVerb`` and every pod,
  whatever their own policy matches: the preempt verb is where kpe keeps
  every pod but a reservation's owners from evicting its placeholders. They
  get ``filterVerb`` and ``prioritizeVerb`` too, so that a reload changing
  ``Preferred`` (a score) to ``Required`` (a filter) needs no new configuration.
- ``managedResources`` only when every policy the scheduler calls kpe for
  matches nothing but pods requesting some extended resources: kube-scheduler
  then sends kpe only pods that request or limit one of them (containers and
  init containers — exactly what ``match.resources`` tests), and every other
  pod skips the HTTP round trip. Listed with ``ignoredByScheduler: false`` so
  the scheduler's own resource fit still counts them.

In whole-node mode (``--no-node-cache-capable``) kube-scheduler sends whole
Node objects but never the pods on them, so ``nodeInfo`` still comes from
kpe's own pod cache; the command warns when some rule reads it, because
without cluster access such a rule fails on every node. What the mode does
without cluster access, as ``--help`` says:

- filter and prioritize evaluate the nodes sent; rules reading ``nodeInfo``
  cannot be evaluated, and their policy's failurePolicy decides;
- preempt (victims by node name, no node objects) checks the filters after the
  evictions on the nodes kpe was sent by filter and prioritize lately
  (``server.verbs.wholenodes``); kube-scheduler sends only the nodes its own
  filters pass, so a node full since before that is unknown to kpe, and each
  matching policy's failurePolicy decides (Fail drops it, Ignore keeps it), as
  the decision log says.

With ``--scheduler-name NAME`` the document configures a scheduler of kpe's
own (``deploy/scheduler/``) beside the cluster's default one, for clusters whose
control plane cannot be configured (managed ones): one profile named NAME, which
pods opt into with ``spec.schedulerName``; leader election on a Lease of that
name, because the default scheduler's Lease (``kube-scheduler``) would make the
two schedulers take turns instead of running side by side; and no
``clientConnection.kubeconfig``, so that it uses its pod's ServiceAccount. Only
the opted-in pods then wait while kpe is down; the default scheduler never calls
kpe. Without the flag the output is what it always was.

Field names and shapes are kube-scheduler's ``Extender`` type
(``kubescheduler.config.k8s.io/v1`` and ``v1beta3`` share it). ``enableHTTPS``
is never written: the ``https://`` scheme of ``urlPrefix`` already selects TLS,
and ``enableHTTPS`` without a CA silently turns certificate checks off.
"""

from __future__ import annotations

import argparse
import re
import shlex
import sys
from dataclasses import dataclass, fields
from typing import Any, TextIO
from urllib.parse import urlsplit

import yaml

from engine.errors import PolicyLoadError
from engine.policy.loader import load
from engine.policy.model import Expression, Policy, PolicySet

from server.settings import Settings
from server.verbs.wholenodes import FORGET_AFTER_S

API_GROUP = "kubescheduler.config.k8s.io"
API_VERSIONS = ("v1", "v1beta3")
KIND = "KubeSchedulerConfiguration"

# The verb paths are the server's route names under its prefix (server/app.py).
FILTER, PRIORITIZE, PREEMPT, BIND = "filter", "prioritize", "preempt", "bind"

# kubeadm's kube-scheduler kubeconfig: the full document is meant to replace
# kubeadm's --config, which carries the client connection.
DEFAULT_KUBECONFIG = "/etc/kubernetes/scheduler.conf"

# The namespace of deploy/, where deploy/scheduler/'s Role grants the scheduler its Lease.
DEFAULT_LEASE_NAMESPACE = "kpe-system"
# kube-scheduler's own profile name: a second scheduler under it would take the
# default scheduler's pods too, and pods could no longer opt in by name.
DEFAULT_SCHEDULER_NAME = "default-scheduler"

# A Go time.Duration as metav1.Duration parses it ("5s", "1m30s", "500ms").
_GO_DURATION = re.compile(r"^(\d+(\.\d+)?(ns|us|µs|ms|s|m|h))+$")
# Kubernetes' IsQualifiedName: an optional DNS-subdomain prefix and a name of at most 63 characters.
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def _settings_default(name: str) -> Any:
    for f in fields(Settings):
        if f.name == name:
            return f.default
    raise KeyError(name)


# The in-cluster Service of deploy/ (kpe in kpe-system, port 443) and the
# server's own extender prefix, so the default URL follows a changed default.
DEFAULT_URL = f"https://kpe.kpe-system.svc:443{_settings_default('prefix')}"


class ConfigError(ValueError):
    """Options that cannot make a configuration kube-scheduler accepts."""


@dataclass(frozen=True)
class ExtenderOptions:
    url: str = DEFAULT_URL
    bind: bool = False
    weight: int = 1
    node_cache_capable: bool = True
    http_timeout: str = "5s"
    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""
    server_name: str = ""
    insecure: bool = False
    ignorable: bool = False

    def validate(self) -> list[str]:
        """What kube-scheduler (or its TLS client) would refuse, as messages naming our flags."""
        problems: list[str] = []
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            problems.append(f"--url must be an http:// or https:// URL, not {self.url!r}")
        tls_flags = [flag for flag, value in (("--ca-file", self.ca_file), ("--cert-file", self.cert_file), ("--key-file", self.key_file), ("--server-name", self.server_name), ("--insecure", self.insecure)) if value]
        if parts.scheme == "http" and tls_flags:
            problems.append(f"{', '.join(tls_flags)} need an https:// --url")
        if bool(self.cert_file) != bool(self.key_file):
            problems.append("--cert-file and --key-file go together")
        if self.insecure and self.ca_file:
            # client-go's TLSConfigFor refuses a root CA together with insecure.
            problems.append("--insecure and --ca-file exclude each other")
        if self.weight <= 0:
            # kube-scheduler's validation: an extender with prioritizeVerb needs a positive weight.
            problems.append(f"--weight must be positive, not {self.weight}")
        if self.http_timeout and not _GO_DURATION.match(self.http_timeout):
            problems.append(f"--http-timeout must be a Go duration such as 5s or 1m30s, not {self.http_timeout!r}")
        return problems


@dataclass(frozen=True)
class ExtenderPlan:
    """What the policy set needs from kube-scheduler, with the policies behind each choice."""

    filter: tuple[str, ...] = ()
    prioritize: tuple[str, ...] = ()
    preempt: tuple[str, ...] = ()
    managed_resources: tuple[str, ...] = ()
    # Why managedResources is empty although some policies call for the extender.
    every_pod_reason: str = ""

    @property
    def any_verb(self) -> bool:
        return bool(self.filter or self.prioritize or self.preempt)


def is_extended_resource_name(name: str) -> bool:
    """Kubernetes' ``IsExtendedResourceName``, which kube-scheduler applies to
    ``managedResources``: domain-prefixed, not in ``kubernetes.io``, not ``requests.*``,
    and a qualified name once prefixed with ``requests.``."""
    if "/" not in name or "kubernetes.io/" in name or name.startswith("requests."):
        return False
    prefix, _, short = f"requests.{name}".rpartition("/")
    return (
        len(prefix) <= 253
        and _DNS_SUBDOMAIN.match(prefix) is not None
        and 0 < len(short) <= 63
        and _QUALIFIED_NAME.match(short) is not None
        and "/" not in prefix
    )


def _uses_extender(policy: Policy) -> bool:
    # Admission runs in the webhook and the gate controller, never through the scheduler.
    return bool(policy.filters or policy.scores or policy.preemption is not None)


def plan(policy_set: PolicySet) -> ExtenderPlan:
    """The verbs and managed resources ``policy_set`` needs."""
    policies = policy_set.policies
    users = [p for p in policies if _uses_extender(p)]
    resources: set[str] = set()
    reason = ""
    for p in users:
        if p.match.resources is None:
            reason = f"policy {p.name} applies to pods without match.resources"
            break
        resources |= p.match.resources
    if not reason and users:
        invalid = sorted(r for r in resources if not is_extended_resource_name(r))
        if invalid:
            # kube-scheduler refuses such managedResources, and every pod has cpu and memory anyway.
            reason = f"match.resources names resources that are not extended resources: {', '.join(invalid)}"
    if not reason and policy_set.reservations:
        reason = f"reservation {policy_set.reservations[0].name} vetoes every other pod's preemption of its placeholders"
    return ExtenderPlan(
        # A reservation's mode can change on reload (Required filters, Preferred scores): both verbs.
        filter=tuple(p.name for p in policies if p.filters or p.reservation is not None),
        prioritize=tuple(p.name for p in policies if p.scores or p.reservation is not None),
        # Filters too: the scheduler's preemption dry run never calls kpe's filter (module docstring).
        # And reservations: the preempt verb keeps everyone but their owners off their placeholders.
        preempt=tuple(p.name for p in policies if p.filters or p.preemption is not None or p.reservation is not None),
        managed_resources=tuple(sorted(resources)) if users and not reason else (),
        every_pod_reason=reason,
    )


def _reads_node_info(policy: Policy, expr: Expression) -> bool:
    """Whether ``expr`` reads ``nodeInfo``, itself or through the policy variables it uses."""
    return "nodeInfo" in expr.program.free_variables or any(_reads_node_info(policy, policy.variable(v).expression) for v in expr.variables)


def node_info_rules(policy_set: PolicySet) -> list[str]:
    """The rules kube-scheduler calls kpe for that read ``nodeInfo``, as ``policy/rule``
    (``policy/preemption.victim`` and ``policy/preemption.node`` for preemption rules)."""
    found: list[str] = []
    for p in policy_set.policies:
        rules = [(r.name, r.expression) for r in p.filters] + [(r.name, r.expression) for r in p.scores]
        if p.preemption is not None:
            rules += [(f"preemption.{kind}", e) for kind, e in (("victim", p.preemption.victim), ("node", p.preemption.node)) if e is not None]
        found += [f"{p.name}/{name}" for name, expr in rules if _reads_node_info(p, expr)]
    return found


def whole_node_warning(policy_set: PolicySet) -> str:
    """What to say when ``--no-node-cache-capable`` meets rules that read ``nodeInfo`` ('' if none do)."""
    rules = node_info_rules(policy_set)
    if not rules:
        return ""
    return (
        "kpe scheduler-config: warning: in whole-node mode (--no-node-cache-capable) kube-scheduler sends whole "
        "nodes but not the pods on them, so nodeInfo still comes from kpe's own pod cache: run kpe with cluster "
        "access. Without it (--cluster off, or no credentials found) these rules, which read nodeInfo, fail on "
        f"every node with \"no value for variable 'nodeInfo'\" and their policy's failurePolicy decides: {', '.join(rules)}"
    )


def extender_entry(extender_plan: ExtenderPlan, options: ExtenderOptions) -> dict[str, Any]:
    """One element of ``KubeSchedulerConfiguration.extenders``, keys in the order the Go type declares them."""
    problems = options.validate()
    if problems:
        raise ConfigError("; ".join(problems))
    entry: dict[str, Any] = {"urlPrefix": options.url}
    if extender_plan.filter:
        entry["filterVerb"] = FILTER
    if extender_plan.prioritize:
        entry["prioritizeVerb"] = PRIORITIZE
    if extender_plan.preempt:
        entry["preemptVerb"] = PREEMPT
    if options.bind:
        entry["bindVerb"] = BIND
    entry["weight"] = options.weight
    entry["nodeCacheCapable"] = options.node_cache_capable
    if options.http_timeout:
        entry["httpTimeout"] = options.http_timeout
    tls = {
        key: value
        for key, value in (("insecure", options.insecure), ("serverName", options.server_name), ("certFile", options.cert_file), ("keyFile", options.key_file), ("caFile", options.ca_file))
        if value
    }
    if tls:
        entry["tlsConfig"] = tls
    if extender_plan.managed_resources:
        entry["managedResources"] = [{"name": r, "ignoredByScheduler": False} for r in extender_plan.managed_resources]
    entry["ignorable"] = options.ignorable
    return entry


def scheduler_name_problems(scheduler_name: str, lease_namespace: str) -> list[str]:
    """What kube-scheduler or the API server would refuse of ``--scheduler-name`` and ``--lease-namespace``."""
    problems: list[str] = []
    if not scheduler_name:
        if lease_namespace != DEFAULT_LEASE_NAMESPACE:
            problems.append("--lease-namespace needs --scheduler-name (the default scheduler keeps its own Lease)")
        return problems
    # The name is a Lease's name and a pod's spec.schedulerName: both must be DNS subdomains.
    if len(scheduler_name) > 253 or not _DNS_SUBDOMAIN.match(scheduler_name):
        problems.append(f"--scheduler-name must be a lowercase DNS subdomain such as kpe-scheduler, not {scheduler_name!r}")
    elif scheduler_name == DEFAULT_SCHEDULER_NAME:
        problems.append(f"--scheduler-name {DEFAULT_SCHEDULER_NAME} is the default scheduler's name: pick a name of kpe's own such as kpe-scheduler")
    if len(lease_namespace) > 63 or not _DNS_LABEL.match(lease_namespace):
        problems.append(f"--lease-namespace must be a namespace name, not {lease_namespace!r}")
    return problems


def scheduler_configuration(
    entry: dict[str, Any],
    *,
    api_version: str = "v1",
    kubeconfig: str = DEFAULT_KUBECONFIG,
    scheduler_name: str = "",
    lease_namespace: str = DEFAULT_LEASE_NAMESPACE,
) -> dict[str, Any]:
    """A whole KubeSchedulerConfiguration with kpe as its one extender; with ``scheduler_name``,
    that of a scheduler of its own (one profile, its own Lease), keys in the Go type's order."""
    if api_version not in API_VERSIONS:
        raise ConfigError(f"--api-version must be one of {', '.join(API_VERSIONS)}, not {api_version!r}")
    problems = scheduler_name_problems(scheduler_name, lease_namespace)
    if problems:
        raise ConfigError("; ".join(problems))
    doc: dict[str, Any] = {"apiVersion": f"{API_GROUP}/{api_version}", "kind": KIND}
    if scheduler_name:
        # Stated although leaderElect defaults to true: the replicas' safety should not rest on a default.
        doc["leaderElection"] = {"leaderElect": True, "resourceName": scheduler_name, "resourceNamespace": lease_namespace}
    if kubeconfig:
        doc["clientConnection"] = {"kubeconfig": kubeconfig}
    if scheduler_name:
        doc["profiles"] = [{"schedulerName": scheduler_name}]
    doc["extenders"] = [entry]
    return doc


def kubeconfig_of(args: argparse.Namespace) -> str:
    """``--kubeconfig`` as given, else the mode's default: kubeadm's file for the default
    scheduler on a control-plane host, none (in-cluster credentials) for a scheduler of kpe's own."""
    if args.kubeconfig is not None:
        return str(args.kubeconfig)
    return "" if args.scheduler_name else DEFAULT_KUBECONFIG


def command_line(args: argparse.Namespace) -> list[str]:
    """The flags of ``args`` that differ from their defaults: the command that makes the same output."""
    argv: list[str] = []
    if args.policies:
        argv += ["--policies", *args.policies]
    for flag, value, default in (
        ("--url", args.url, DEFAULT_URL),
        ("--api-version", args.api_version, "v1"),
        ("--weight", args.weight, 1),
        ("--http-timeout", args.http_timeout, "5s"),
        ("--ca-file", args.ca_file, ""),
        ("--cert-file", args.cert_file, ""),
        ("--key-file", args.key_file, ""),
        ("--server-name", args.server_name, ""),
        ("--scheduler-name", args.scheduler_name, ""),
        ("--lease-namespace", args.lease_namespace, DEFAULT_LEASE_NAMESPACE),
        ("--kubeconfig", kubeconfig_of(args), "" if args.scheduler_name else DEFAULT_KUBECONFIG),
    ):
        if value != default:
            argv += [flag, str(value)]
    for flag, on in (("--entry-only", args.entry_only), ("--bind", args.bind), ("--insecure", args.insecure), ("--ignorable", args.ignorable)):
        if on:
            argv.append(flag)
    if not args.node_cache_capable:
        argv.append("--no-node-cache-capable")
    return argv


def header(extender_plan: ExtenderPlan, argv: list[str], *, scheduler_name: str = "") -> str:
    """A YAML comment saying how the file was made and which policies asked for each verb,
    so a reviewer sees why a verb is (not) there without reading every policy."""
    lines = ["Generated by: " + shlex.join(["kpe", "scheduler-config", *argv]), "Do not edit; regenerate instead."]
    if scheduler_name:
        lines.append(f"scheduler {scheduler_name}: only pods with spec.schedulerName: {scheduler_name} are scheduled here; the default scheduler never calls kpe")
    for verb, names in (("filter", extender_plan.filter), ("prioritize", extender_plan.prioritize), ("preempt", extender_plan.preempt)):
        lines.append(f"{verb}: {', '.join(names) if names else 'no policy needs it'}")
    if extender_plan.managed_resources:
        lines.append(f"only pods requesting {', '.join(extender_plan.managed_resources)} are sent to kpe (managedResources)")
    elif extender_plan.every_pod_reason:
        lines.append(f"every pod {'it schedules ' if scheduler_name else ''}is sent to kpe: {extender_plan.every_pod_reason}")
    return "".join(f"# {line}\n" for line in lines)


def render(doc: Any) -> str:
    # Key order is meaningful to readers (the Go field order), so no sorting.
    text: str = yaml.safe_dump(doc, sort_keys=False, default_flow_style=False, allow_unicode=True)
    return text


def options_from_args(args: argparse.Namespace) -> ExtenderOptions:
    return ExtenderOptions(
        url=args.url,
        bind=args.bind,
        weight=args.weight,
        node_cache_capable=args.node_cache_capable,
        http_timeout=args.http_timeout,
        ca_file=args.ca_file,
        cert_file=args.cert_file,
        key_file=args.key_file,
        server_name=args.server_name,
        insecure=args.insecure,
        ignorable=args.ignorable,
    )


def generate(policy_set: PolicySet, args: argparse.Namespace) -> tuple[str, ExtenderPlan]:
    """The YAML text for ``args`` (the whole document, or with ``--entry-only`` the entry alone)."""
    extender_plan = plan(policy_set)
    entry = extender_entry(extender_plan, options_from_args(args))
    body: Any = (
        entry
        if args.entry_only
        else scheduler_configuration(
            entry, api_version=args.api_version, kubeconfig=kubeconfig_of(args), scheduler_name=args.scheduler_name, lease_namespace=args.lease_namespace
        )
    )
    return header(extender_plan, command_line(args), scheduler_name=args.scheduler_name) + render(body), extender_plan


def cmd_scheduler_config(args: argparse.Namespace, out: TextIO) -> int:
    from server.settings import EXIT_FAILED, EXIT_OK, EXIT_USAGE, UsageError, policy_paths

    # Usage problems are reported here rather than raised as cli.UsageError: under
    # `python -m server.cli.main` that class is a second copy main() does not catch.
    problems = options_from_args(args).validate() + scheduler_name_problems(args.scheduler_name, args.lease_namespace)
    if problems:
        print(f"kpe scheduler-config: {'; '.join(problems)}", file=sys.stderr)
        return EXIT_USAGE
    try:
        policy_set = load(policy_paths(args.policies))
    except UsageError as exc:
        print(f"kpe scheduler-config: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except PolicyLoadError as exc:
        # stdout is usually redirected into a config file: errors go where a person sees them.
        print(exc.render(), file=sys.stderr)
        return EXIT_FAILED
    text, extender_plan = generate(policy_set, args)
    if not extender_plan.any_verb and not args.bind:
        print(
            "kpe scheduler-config: no policy has filters, scores or preemption, so kube-scheduler has "
            "nothing to call kpe for (admission runs through the webhook); add --bind to bind through kpe",
            file=sys.stderr,
        )
        return EXIT_FAILED
    if not args.node_cache_capable:
        warning = whole_node_warning(policy_set)
        if warning:
            print(warning, file=sys.stderr)
    url = urlsplit(args.url)
    if url.scheme == "https" and not (args.ca_file or args.insecure):
        print(
            "kpe scheduler-config: note: no --ca-file, so kube-scheduler checks kpe's certificate against "
            "the system roots; pass the CA that signed kpe-tls",
            file=sys.stderr,
        )
    out.write(text)
    return EXIT_OK


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--policies", nargs="+", required=True, metavar="PATH", help="policy files or directories (required: kpe uses no policy it was not given)")
    parser.add_argument("--url", default=DEFAULT_URL, help=f"kpe's extender URL prefix as kube-scheduler reaches it (default: {DEFAULT_URL})")
    parser.add_argument("--api-version", choices=API_VERSIONS, default="v1", help=f"{API_GROUP} version (default: v1; v1beta3 for Kubernetes before 1.25)")
    parser.add_argument("--entry-only", action="store_true", help="print only the extender entry, not a whole KubeSchedulerConfiguration")
    parser.add_argument("--bind", action="store_true", help="let kpe bind pods (bindVerb); at most one extender may bind")
    parser.add_argument("--weight", type=int, default=1, help="multiplier of kpe's scores (0..10) against the scheduler's plugins (default: 1)")
    parser.add_argument(
        "--node-cache-capable", action=argparse.BooleanOptionalAction, default=True,
        help="send node names only; kpe resolves them from its node cache (default: on). --no-node-cache-capable: whole nodes, "
        "the mode of kpe without cluster access, where rules that read nodeInfo cannot be evaluated (failurePolicy decides) "
        f"and preemption checks the nodes kpe was sent by filter and prioritize in the last {FORGET_AFTER_S / 60:g} minutes; "
        "a node it was not sent follows failurePolicy",
    )
    parser.add_argument("--http-timeout", default="5s", metavar="DURATION", help="kube-scheduler's timeout per call, a Go duration (default: 5s)")
    parser.add_argument("--ca-file", default="", metavar="FILE", help="CA that signed kpe's serving certificate, as a path on the scheduler's host")
    parser.add_argument("--cert-file", default="", metavar="FILE", help="client certificate kube-scheduler presents (when kpe runs with --tls-client-ca)")
    parser.add_argument("--key-file", default="", metavar="FILE", help="private key of --cert-file")
    parser.add_argument("--server-name", default="", metavar="NAME", help="name to check kpe's certificate against, when --url uses an address")
    parser.add_argument("--insecure", action="store_true", help="do not verify kpe's certificate (testing only)")
    parser.add_argument("--ignorable", action="store_true", help="schedule without kpe when it is unreachable, instead of failing the pod's attempt")
    parser.add_argument(
        "--scheduler-name",
        default="",
        metavar="NAME",
        help="configure a scheduler of kpe's own instead of the default one (deploy/scheduler/): one profile NAME, which pods opt into "
        "with spec.schedulerName, leader election on a Lease named NAME, in-cluster credentials; only those pods depend on kpe",
    )
    parser.add_argument(
        "--lease-namespace",
        default=DEFAULT_LEASE_NAMESPACE,
        metavar="NAMESPACE",
        help=f"namespace of --scheduler-name's Lease, where its Role grants it (default: {DEFAULT_LEASE_NAMESPACE})",
    )
    parser.add_argument(
        "--kubeconfig",
        default=None,
        metavar="FILE",
        help=f"clientConnection.kubeconfig of the whole document; '' to leave it out "
        f"(default: {DEFAULT_KUBECONFIG}; none with --scheduler-name, which runs in a pod with its ServiceAccount)",
    )


__all__ = [
    "API_VERSIONS",
    "DEFAULT_URL",
    "ConfigError",
    "ExtenderOptions",
    "ExtenderPlan",
    "add_arguments",
    "cmd_scheduler_config",
    "command_line",
    "extender_entry",
    "is_extended_resource_name",
    "node_info_rules",
    "plan",
    "scheduler_configuration",
    "scheduler_name_problems",
    "whole_node_warning",
]
