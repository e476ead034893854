"""All of kpe's server settings in one dataclass.

Every field is read from ``KPE_<FIELD>`` (upper case) and can be overridden by
the CLI flag ``--<field-with-dashes>``; ``kpe serve --help`` lists them with
the text below. Precedence: flag, then environment, then default.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from dataclasses import MISSING, Field, dataclass, field, fields
from typing import Any

from engine.policy.model import SYSTEM_NAMESPACES


class UsageError(Exception):
    """A problem with the command line, the settings or the files they name (exit 2)."""


EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2  # every kpe command's exit codes
CONTROLLERS = ("gates", "reservations", "requeue", "status")  # what --controllers may switch on
POLICY_SOURCES = ("files", "cluster")
LOG_LEVELS = ("debug", "info", "warning", "error")


def exit_codes(ok: str, failed: str | None, usage: str) -> str:
    """The paragraph that ends a command's ``--help`` (and its section of docs/reference/cli.md):
    what each exit code means for that command, so a CI script can tell its failures apart.
    ``failed`` None: the command never exits 1."""
    meanings = [(EXIT_OK, ok), (EXIT_FAILED, failed), (EXIT_USAGE, usage)]
    return "Exit codes: " + "; ".join(f"{code} {meaning}" for code, meaning in meanings if meaning) + "."


NO_POLICIES = (
    "no policies given: name a policy file or directory with --policies PATH (KPE_POLICIES for kpe serve); "
    "kpe uses no policy it was not given (the examples in its repository's policies/ folder included)"
)


def policy_paths(given: Sequence[str] | str | None) -> list[str]:
    """The policy paths a command was given. None given is a usage error, never a silent
    default: a directory picked for the user (./policies, or the examples beside the code)
    would decide pods under policies nobody chose."""
    if not given:
        raise UsageError(NO_POLICIES)
    return [given] if isinstance(given, str) else list(given)


@dataclass(frozen=True)
class Settings:
    policies: str = field(default="", metadata={"help": "policy file or directory (hot-reloaded); required with --policy-source files: kpe serves no policy it was not given"})
    policy_source: str = field(
        default="files",
        metadata={
            "choices": POLICY_SOURCES,
            "help": "where the policies come from: files (--policies, hot-reloaded) or cluster (the SchedulingPolicy and Reservation "
            "objects in the cluster, listed and watched: a change serves as soon as the watch delivers it and the set compiles; "
            "needs cluster access, kpe's CRDs and their RBAC: deploy/cluster-policies/, docs/guides/cluster-policies.md)",
        },
    )
    host: str = field(default="127.0.0.1", metadata={"group": "listening and TLS", "help": "address to listen on (0.0.0.0 in a pod)"})
    port: int = field(default=8888, metadata={"group": "listening and TLS", "help": "port to listen on"})
    prefix: str = field(default="/scheduler", metadata={"group": "listening and TLS", "help": "URL prefix of the extender verbs (kube-scheduler's urlPrefix path)"})
    tls_cert: str = field(default="", metadata={"group": "listening and TLS", "help": "PEM certificate file; with --tls-key, serve HTTPS"})
    tls_key: str = field(default="", metadata={"group": "listening and TLS", "help": "PEM private key file"})
    tls_client_ca: str = field(default="", metadata={"group": "listening and TLS", "help": "CA bundle: require client certificates signed by it on --port (kube-scheduler's tlsConfig)"})
    webhook_port: int = field(default=0, metadata={"group": "listening and TLS", "help": "port of the admission webhook's own listener (0: served on --port)"})
    webhook_client_ca: str = field(default="", metadata={"group": "listening and TLS", "help": "CA bundle: require kube-apiserver's client certificate on --webhook-port"})
    introspection_port: int = field(default=0, metadata={"group": "listening and TLS", "help": "port of /apis/v1 (pods, decisions, explanations) on its own listener (0: served on --port)"})
    introspection_host: str = field(default="127.0.0.1", metadata={"group": "listening and TLS", "help": "address of the --introspection-port listener (loopback: reach it with kubectl port-forward)"})
    health_port: int = field(default=0, metadata={"group": "listening and TLS", "help": "port of /healthz, /readyz and /metrics on their own plain-HTTP listener (0: served on --port)"})
    bind: bool = field(default=False, metadata={"group": "listening and TLS", "help": "serve the bind verb (kube-scheduler's bindVerb); off, /<prefix>/bind is not served"})
    request_deadline_s: float = field(
        default=4.0,
        metadata={
            "group": "limits and timeouts",
            "help": "stop evaluating a request's nodes after this long and answer the rest under each policy's failurePolicy; "
            "keep it below kube-scheduler's httpTimeout (5 s as kpe scheduler-config writes it)"
        },
    )
    keep_alive_s: float = field(default=120.0, metadata={"group": "limits and timeouts", "help": "close a connection idle this long; longer than kube-scheduler's 90 s, so kpe never closes one the scheduler is about to reuse"})
    header_timeout_s: float = field(default=10.0, metadata={"group": "limits and timeouts", "help": "close a connection whose request headers take longer than this"})
    body_timeout_s: float = field(default=10.0, metadata={"group": "limits and timeouts", "help": "answer 408 to a request whose body takes longer than this to arrive"})
    kubeconfig: str = field(default="", metadata={"group": "cluster access and cache", "help": "kubeconfig for cluster access; default: in-cluster credentials, else $KUBECONFIG or ~/.kube/config"})
    cluster: str = field(default="auto", metadata={"group": "cluster access and cache", "choices": ("auto", "on", "off"), "help": "cluster access: auto (use credentials if found), on (require them), off (serve whole-node requests only)"})
    controllers: str = field(
        default="",
        metadata={
            "group": "cluster access and cache",
            "help": "what kpe may change in the cluster, comma-separated: gates (the gate controller lifts scheduling gates), "
            "reservations (placeholder pods), requeue (touches rejected pods after a reload), status (with --policy-source "
            "cluster: the status of the SchedulingPolicy and Reservation objects); gates, reservations and status join the "
            "Lease; none: kpe answers, explains and previews but never writes to the cluster (deploy/ turns on the first three, "
            "deploy/cluster-policies/ status too)",
        },
    )
    excluded_namespaces: str = field(
        default=",".join(SYSTEM_NAMESPACES),
        metadata={
            "group": "policies",
            "help": "namespaces whose pods no policy matches, comma-separated (the control plane's and kpe's own, so they never "
            "depend on kpe; keep the admission webhook's namespaceSelector in step); empty: none",
        },
    )
    max_body_bytes: int = field(default=64 * 1024 * 1024, metadata={"group": "limits and timeouts", "help": "largest request body read (sized for 5,000 whole nodes; one is parsed only if it fits --body-memory-bytes)"})
    reload_debounce_ms: int = field(default=300, metadata={"group": "policies", "help": "wait this long after the last policy file change before reloading"})
    allow_empty_policies: bool = field(
        default=False,
        metadata={"group": "policies", "help": "accept a policy path with no policies (then every node passes every pod); refused by default, at start-up and on reload"},
    )
    cel_cost_limit: int = field(
        default=1_000_000,
        metadata={
            "group": "limits and timeouts",
            "help": "the most estimated worst-case cost (docs/cel-functions.md) one evaluation of a policy expression may have; "
            "over it a policy is refused at load time (KPE306), and it is each evaluation's run-time budget (Kubernetes' PerCallLimit)"
        },
    )
    cel_admission_cost_limit: int = field(
        default=1_000_000_000,
        metadata={"group": "limits and timeouts", "help": "the same for admission expressions, which may iterate every pod and node in the cluster"},
    )
    decision_log_size: int = field(default=1000, metadata={"group": "logging and introspection", "help": "how many recent decisions /apis/v1/decisions keeps"})
    decision_log_bytes: int = field(
        # 4 MiB: the log is the memory it keeps (each decision as its JSON), and kpe's memory is a
        # feature; 16 MiB made a fifth of kpe's RSS beside kube-scheduler (docs/performance.md).
        default=4 * 1024 * 1024,
        metadata={"group": "logging and introspection", "help": "the most bytes of decisions /apis/v1/decisions keeps (each as its JSON, which is the memory it takes), oldest going first; "
            "one decision keeps at most 1/16 of it (its first rejected nodes, and how many were left out)"},
    )
    log_level: str = field(default="info", metadata={"group": "logging and introspection", "choices": LOG_LEVELS, "help": "the least severe level logged"})
    log_decisions: bool = field(default=False, metadata={"group": "logging and introspection", "help": "log every decision at info level (else debug)"})
    webhook_on_error: str = field(default="allow", metadata={"group": "admission and gates", "choices": ("allow", "deny"), "help": "when kpe itself fails in the admission webhook: allow (pod created without kpe's gates) or deny"})
    lease_namespace: str = field(default="kpe-system", metadata={"group": "admission and gates", "help": "namespace of the gate controller's coordination.k8s.io Lease"})
    lease_name: str = field(default="kpe-gate-controller", metadata={"group": "admission and gates", "help": "name of the gate controller's Lease"})
    lease_duration_s: float = field(default=15.0, metadata={"group": "admission and gates", "help": "how long a leader's Lease lasts without renewal before another replica takes over"})
    identity: str = field(default="", metadata={"group": "admission and gates", "help": "this replica's identity in the Lease (default: hostname, pid and a random suffix)"})
    gate_resync_s: float = field(default=30.0, metadata={"group": "admission and gates", "help": "re-evaluate every gated pod at least this often"})
    gate_debounce_ms: int = field(default=200, metadata={"group": "admission and gates", "help": "after a pod, node or policy change, wait this long for more before re-evaluating"})
    policy_reports: bool = field(
        default=False,
        metadata={
            "group": "policy reports",
            "help": "write what Audit-mode policies would have done to pods as PolicyReports (wgpolicyk8s.io/v1alpha2), one "
            "named kpe-audit per namespace, from the replica holding the Lease (joins it); needs the PolicyReport CRD and the "
            "deploy/policy-reports component's RBAC",
        },
    )
    policy_report_interval_s: float = field(
        default=5.0,
        metadata={"group": "policy reports", "help": "at most one pass of the reports this often: a burst of pods is one pass and at most one write per namespace"},
    )
    reservation_namespace: str = field(default="kpe-system", metadata={"group": "reservations", "help": "namespace of the reservations' placeholder pods (kpe creates and deletes pods there)"})
    placeholder_image: str = field(default="registry.k8s.io/pause:3.10", metadata={"group": "reservations", "help": "image of the reservations' placeholder pods (never does anything)"})
    placeholder_priority_class: str = field(
        default="kpe-placeholder",
        metadata={"group": "reservations", "help": "PriorityClass of the placeholder pods; must exist and be lower than every owner's (deploy/priorityclass.yaml ships it)"},
    )
    reservation_grace_s: float = field(
        default=5.0,
        metadata={"group": "reservations", "help": "wait this long before recreating a placeholder that vanished, for the owner that preempted it to be nominated to its node"},
    )
    equivalence_classes: int = field(
        default=64,
        metadata={
            "group": "cluster access and cache",
            "help": "equivalence classes (the pods one policy cannot tell apart) whose per-node results kpe keeps of each policy, "
            "per verb, for node-name requests, least recently used going first; fewer when together they would remember more than "
            "160,000 node results, what 32 classes of 5,000 nodes do (0 turns the equivalence cache off)"
        },
    )
    warm_classes: bool = field(
        default=True,
        metadata={
            "group": "cluster access and cache",
            "help": "after an equivalence class's second filter with node names (on a large cluster, one within three of the scheduler's requests of its first), "
            "for the classes seen last after a policy reload, and at "
            "start-up for the pods waiting for a node and the workloads that placed pods last: "
            "evaluate the rest of the cluster's nodes for it in the background (steps of about 2 ms on the worker thread, while it is idle; "
            "the classes take turns, each in the order kube-scheduler's windows will come), so its next pods "
            "find their nodes remembered"
        },
    )
    requeue_rate: float = field(
        default=50.0,
        metadata={
            "group": "policies",
            "help": "after a policy reload, touch at most this many pending pods a second that kpe rejected under the old set, "
            "so kube-scheduler retries them (0 turns it off)"
        },
    )
    relist_backoff_max_s: float = field(default=30.0, metadata={"group": "cluster access and cache", "help": "longest wait between retries when the API server fails"})
    in_flight_s: float = field(
        default=30.0,
        metadata={
            "group": "cluster access and cache",
            "help": "how long a pod kpe's filter passed counts, for filters that read nodeInfo, on every node it passed, until kpe "
            "sees it bound, failed or deleted (kube-scheduler may have placed it on any of them: docs/policy-format.md, Pods in flight); 0 counts only "
            "bound pods and pods nominated to a node, which lets a burst of pods past a per-node limit",
        },
    )
    cache_stale_after_s: float = field(
        default=60.0,
        metadata={
            "group": "cluster access and cache",
            "help": "0: answer node names from whatever the cache holds, connected or not; any other value: from the moment a "
            "watch breaks until the cache has caught up again, node-name requests get an Error (kube-scheduler retries the pod) "
            "instead of answers from a cache that may miss changes (docs/operations.md)"
        },
    )
    scheduler_name: str = field(
        default="",
        metadata={
            "group": "admission and gates",
            "help": "kpe's own scheduler (deploy/scheduler/): the admission webhook sets a pod's spec.schedulerName to it when a policy "
            "with filters, scores or preemption matches the pod and the pod left the choice to the cluster (no schedulerName, or "
            "default-scheduler), never overriding another; a pod created while the webhook is unreachable keeps the default one; "
            "empty: pods keep the scheduler they name",
        },
    )
    body_memory_bytes: int = field(
        default=512 * 1024 * 1024,
        metadata={
            "group": "limits and timeouts",
            "help": "the most memory the request bodies being parsed and answered may take at once, as estimated before parsing "
            "(their bytes and the values parsing makes, docs/operations.md): a body that would go over waits up to --body-timeout-s "
            "for others to be answered, then gets a 503 to retry; one that alone would go over gets a 413 (the default leaves the "
            "rest of the Deployment's 1 GiB to kpe itself and the cache of 5,000 nodes and 150,000 pods)",
        },
    )

    @property
    def controller_set(self) -> frozenset[str]:
        return frozenset(c.strip() for c in self.controllers.split(",") if c.strip())

    @property
    def excluded_namespace_set(self) -> frozenset[str]:
        return frozenset(n.strip() for n in self.excluded_namespaces.split(",") if n.strip())

    @property
    def tls(self) -> bool:
        return bool(self.tls_cert and self.tls_key)

    def validate(self) -> list[str]:
        problems = []
        if bool(self.tls_cert) != bool(self.tls_key):
            problems.append("--tls-cert and --tls-key go together")
        if self.tls_client_ca and not self.tls:
            problems.append("--tls-client-ca needs --tls-cert and --tls-key")
        if self.webhook_client_ca and not (self.tls and self.webhook_port):
            problems.append("--webhook-client-ca needs --webhook-port, --tls-cert and --tls-key")
        ports = [p for p in (self.port, self.webhook_port, self.introspection_port, self.health_port) if p]
        if len(ports) != len(set(ports)):
            problems.append("--port, --webhook-port, --introspection-port and --health-port must differ (0 serves a surface on --port)")
        for name in ("keep_alive_s", "header_timeout_s", "body_timeout_s", "request_deadline_s"):
            if getattr(self, name) <= 0:
                problems.append(f"--{name.replace('_', '-')} must be positive")
        if self.policy_reports and self.cluster == "off":
            problems.append("--policy-reports writes to the cluster: it needs --cluster on or auto")
        if self.policy_report_interval_s <= 0:
            problems.append("--policy-report-interval-s must be positive")
        if self.in_flight_s < 0:
            problems.append("--in-flight-s must be 0 (off) or more")
        if not self.policies and self.policy_source != "cluster":
            problems.append(NO_POLICIES)
        if self.policy_source == "cluster" and self.cluster == "off":
            problems.append("--policy-source cluster reads the policies from the cluster: it needs --cluster auto or on")
        if "status" in self.controller_set and self.policy_source != "cluster":
            problems.append("--controllers status writes the status of the policies kept in the cluster: it needs --policy-source cluster")
        unknown = sorted(self.controller_set - set(CONTROLLERS))
        if unknown:
            problems.append(f"--controllers takes {', '.join(CONTROLLERS)} (comma-separated), not {', '.join(unknown)}")
        for f in fields(self):
            allowed = f.metadata.get("choices")
            if allowed and getattr(self, f.name) not in allowed:
                problems.append(f"{flag_of(f.name)} must be {_either(allowed)}, not {getattr(self, f.name)!r}")
        if not self.prefix.startswith("/"):
            problems.append(f"--prefix must start with '/', not {self.prefix!r}")
        if self.equivalence_classes < 0:
            problems.append("--equivalence-classes must be 0 (off) or more")
        if self.requeue_rate < 0:
            problems.append("--requeue-rate must be 0 (off) or more")
        if self.cel_cost_limit <= 0 or self.cel_admission_cost_limit <= 0:
            problems.append("--cel-cost-limit and --cel-admission-cost-limit must be positive")
        if self.reservation_grace_s < 0:
            problems.append("--reservation-grace-s must be 0 or more")
        if self.max_body_bytes <= 0:
            problems.append("--max-body-bytes must be positive")
        if self.scheduler_name and (self.scheduler_name == "default-scheduler" or len(self.scheduler_name) > 253 or not all(p[:1].isalnum() and p[-1:].isalnum() and p.isascii() and p == p.lower() and p.replace("-", "").isalnum() for p in self.scheduler_name.split("."))):
            problems.append(f"--scheduler-name must be a lowercase DNS subdomain naming kpe's own scheduler, not the default one: {self.scheduler_name!r}")
        return problems


def _parse(kind: Any, raw: str, name: str) -> Any:
    if kind in (bool, "bool"):
        lowered = raw.strip().lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off", ""):
            return False
        raise ValueError(f"{name}: expected true or false, got {raw!r}")
    try:
        if kind in (int, "int"):
            return int(raw)
        if kind in (float, "float"):
            return float(raw)
    except ValueError:
        raise ValueError(f"{name}: expected a number, got {raw!r}") from None
    return raw


def env_name(name: str) -> str:
    return "KPE_" + name.upper()


def flag_of(name: str) -> str:
    return "--" + name.replace("_", "-")


def _either(values: Sequence[str]) -> str:
    return ", ".join(values[:-1]) + " or " + values[-1] if len(values) > 1 else "".join(values)


# `kpe serve --help`'s headings, most asked-for first; a field names its own with a "group" metadata key.
GROUPS = ("policies", "listening and TLS", "cluster access and cache", "admission and gates", "reservations", "policy reports", "limits and timeouts", "logging and introspection")


def grouped_fields(of: Any = None) -> list[tuple[str, list[Field[Any]]]]:
    """The fields of Settings (or of the dataclass ``of``) under their headings, in the order
    of GROUPS, then of any other group a field names.

    A field without a group is listed with the field above it (the first field, under the
    first heading): one added beside its kin shows up with them instead of going missing."""
    by_group: dict[str, list[Field[Any]]] = {group: [] for group in GROUPS}
    group = GROUPS[0]
    for f in fields(of or Settings):
        group = str(f.metadata.get("group", group))
        by_group.setdefault(group, []).append(f)
    return [(group, members) for group, members in by_group.items() if members]


def plain(text: str) -> str:
    """Help text as a terminal shows it: the ``code`` markup of docstrings is noise there."""
    return text.replace("``", "")


def default_words(f: Field[Any]) -> str:
    """A field's default as `kpe serve --help` shows it; "" when its help says it in words
    ("default: ...") or it is computed at start-up."""
    if f.default is MISSING or "default:" in str(f.metadata.get("help", "")):
        return ""
    if isinstance(f.default, bool):
        return "on" if f.default else "off"
    return "none" if f.default == "" else str(f.default)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """One flag per field, named after it, under its group's heading; the default is None so
    unset flags fall back to the environment."""
    for title, members in grouped_fields():
        group = parser.add_argument_group(title)
        for f in members:
            default = default_words(f)
            help_text = plain(str(f.metadata.get("help", ""))) + (f" (default: {default})" if default else "") + f" [env {env_name(f.name)}]"
            help_text = help_text.replace("%", "%%")  # argparse formats help with %
            if f.type in (bool, "bool"):
                group.add_argument(flag_of(f.name), dest=f.name, action=argparse.BooleanOptionalAction, default=None, help=help_text)
            else:
                allowed = f.metadata.get("choices")
                # Not argparse's choices=: the KPE_* variables need the same check, so validate() makes it.
                metavar = "{" + ",".join(allowed) + "}" if allowed else f.name.upper()
                group.add_argument(flag_of(f.name), dest=f.name, default=None, metavar=metavar, help=help_text)


def load_settings(args: argparse.Namespace | None = None, *, environ: Mapping[str, str] | None = None) -> Settings:
    """Settings from flags (``args``), then ``KPE_*`` variables, then defaults."""
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for f in fields(Settings):
        flag_value = getattr(args, f.name, None) if args is not None else None
        if flag_value is not None:
            values[f.name] = flag_value if isinstance(flag_value, bool) else _parse(f.type, str(flag_value), "--" + f.name.replace("_", "-"))
        elif env_name(f.name) in env:
            values[f.name] = _parse(f.type, env[env_name(f.name)], env_name(f.name))
    return Settings(**values)


def describe(settings: Settings) -> dict[str, Any]:
    return {f.name: getattr(settings, f.name) for f in fields(Settings)}


__all__ = ["Settings", "add_arguments", "describe", "env_name", "exit_codes", "grouped_fields", "load_settings"]
