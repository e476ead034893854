"""All of kpe's server settings in one dataclass.

Every field is read from ``KPE_<FIELD>`` (upper case) and can be overridden by
the CLI flag ``--<field-with-dashes>``; ``kpe serve --help`` lists them with
the text below. Precedence: flag, then environment, then default.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from pathlib import Path
from dataclasses import dataclass, field, fields
from typing import Any


class UsageError(Exception):
    """A problem with the command line, the settings or the files they name (exit 2)."""


EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2  # every kpe command's exit codes


def default_policies() -> str:
    """The shipped example policies: ./policies if present, else the ones beside the installed code."""
    here = Path("policies")
    if here.is_dir():
        return str(here)
    return str(Path(__file__).resolve().parent.parent / "policies")


@dataclass(frozen=True)
class Settings:
    policies: str = field(default_factory=default_policies, metadata={"help": "policy file or directory (hot-reloaded); default: the shipped policies"})
    host: str = field(default="127.0.0.1", metadata={"help": "address to listen on (0.0.0.0 in a pod)"})
    port: int = field(default=8888, metadata={"help": "port to listen on"})
    prefix: str = field(default="/scheduler", metadata={"help": "URL prefix of the extender verbs (kube-scheduler's urlPrefix path)"})
    tls_cert: str = field(default="", metadata={"help": "PEM certificate file; with --tls-key, serve HTTPS"})
    tls_key: str = field(default="", metadata={"help": "PEM private key file"})
    tls_client_ca: str = field(default="", metadata={"help": "CA bundle: require client certificates signed by it on --port (kube-scheduler's tlsConfig)"})
    webhook_port: int = field(default=0, metadata={"help": "port of the admission webhook's own listener (0: served on --port)"})
    webhook_client_ca: str = field(default="", metadata={"help": "CA bundle: require kube-apiserver's client certificate on --webhook-port"})
    introspection_port: int = field(default=0, metadata={"help": "port of /apis/v1 (pods, decisions, explanations) on its own listener (0: served on --port)"})
    introspection_host: str = field(default="127.0.0.1", metadata={"help": "address of the --introspection-port listener (loopback: reach it with kubectl port-forward)"})
    health_port: int = field(default=0, metadata={"help": "port of /healthz, /readyz and /metrics on their own plain-HTTP listener (0: served on --port)"})
    bind: bool = field(default=False, metadata={"help": "serve the bind verb (kube-scheduler's bindVerb); off, /<prefix>/bind is not served"})
    request_deadline_s: float = field(
        default=4.0,
        metadata={
            "help": "stop evaluating a request's nodes after this long and answer the rest under each policy's failurePolicy; "
            "keep it below kube-scheduler's httpTimeout (5 s as kpe scheduler-config writes it)"
        },
    )
    keep_alive_s: float = field(default=120.0, metadata={"help": "close a connection idle this long; longer than kube-scheduler's 90 s, so kpe never closes one the scheduler is about to reuse"})
    header_timeout_s: float = field(default=10.0, metadata={"help": "close a connection whose request headers take longer than this"})
    body_timeout_s: float = field(default=10.0, metadata={"help": "answer 408 to a request whose body takes longer than this to arrive"})
    kubeconfig: str = field(default="", metadata={"help": "kubeconfig for cluster access; default: in-cluster credentials, else $KUBECONFIG or ~/.kube/config"})
    cluster: str = field(default="auto", metadata={"help": "cluster access: auto (use credentials if found), on (require them), off (serve whole-node requests only)"})
    max_body_bytes: int = field(default=64 * 1024 * 1024, metadata={"help": "largest request body accepted (sized for 5,000 whole nodes)"})
    reload_debounce_ms: int = field(default=300, metadata={"help": "wait this long after the last policy file change before reloading"})
    allow_empty_policies: bool = field(
        default=False,
        metadata={"help": "accept a policy path with no policies (then every node passes every pod); refused by default, at start-up and on reload"},
    )
    cel_cost_limit: int = field(
        default=1_000_000,
        metadata={
            "help": "the most estimated worst-case cost (docs/cel-functions.md) one evaluation of a policy expression may have; "
            "over it a policy is refused at load time (KPE306), and it is each evaluation's run-time budget (Kubernetes' PerCallLimit)"
        },
    )
    cel_admission_cost_limit: int = field(
        default=100_000_000,
        metadata={"help": "the same for admission expressions, which may iterate every pod and node in the cluster"},
    )
    decision_log_size: int = field(default=1000, metadata={"help": "how many recent decisions /apis/v1/decisions keeps"})
    decision_log_bytes: int = field(
        default=16 * 1024 * 1024,
        metadata={"help": "the most bytes (estimated from their JSON) of decisions /apis/v1/decisions keeps, oldest going first; "
            "one decision keeps at most 1/16 of it (its first rejected nodes, and how many were left out)"},
    )
    log_level: str = field(default="info", metadata={"help": "debug, info, warning or error"})
    log_decisions: bool = field(default=False, metadata={"help": "log every decision at info level (else debug)"})
    webhook_on_error: str = field(default="allow", metadata={"help": "when kpe itself fails in the admission webhook: allow (pod created without kpe's gates) or deny"})
    lease_namespace: str = field(default="kpe-system", metadata={"help": "namespace of the gate controller's coordination.k8s.io Lease"})
    lease_name: str = field(default="kpe-gate-controller", metadata={"help": "name of the gate controller's Lease"})
    lease_duration_s: float = field(default=15.0, metadata={"help": "how long a leader's Lease lasts without renewal before another replica takes over"})
    identity: str = field(default="", metadata={"help": "this replica's identity in the Lease (default: hostname, pid and a random suffix)"})
    gate_resync_s: float = field(default=30.0, metadata={"help": "re-evaluate every gated pod at least this often"})
    gate_debounce_ms: int = field(default=200, metadata={"help": "after a pod, node or policy change, wait this long for more before re-evaluating"})
    reservation_namespace: str = field(default="kpe-system", metadata={"help": "namespace of the reservations' placeholder pods (kpe creates and deletes pods there)"})
    placeholder_image: str = field(default="registry.k8s.io/pause:3.10", metadata={"help": "image of the reservations' placeholder pods (never does anything)"})
    placeholder_priority_class: str = field(
        default="kpe-placeholder",
        metadata={"help": "PriorityClass of the placeholder pods; must exist and be lower than every owner's (deploy/priorityclass.yaml ships it)"},
    )
    reservation_grace_s: float = field(
        default=5.0,
        metadata={"help": "wait this long before recreating a placeholder that vanished, for the owner that preempted it to be nominated to its node"},
    )
    equivalence_classes: int = field(
        default=16,
        metadata={
            "help": "pod equivalence classes whose per-node results kpe keeps for node-name requests, least recently used "
            "going first (0.3 to 0.6 MB per class per 1,000 nodes; 0 turns the equivalence cache off)"
        },
    )
    requeue_rate: float = field(
        default=50.0,
        metadata={
            "help": "after a policy reload, touch at most this many pending pods a second that kpe rejected under the old set, "
            "so kube-scheduler retries them (0 turns it off)"
        },
    )
    relist_backoff_max_s: float = field(default=30.0, metadata={"help": "longest wait between retries when the API server fails"})
    cache_stale_after_s: float = field(
        default=60.0,
        metadata={
            "help": "when kpe has been cut off from the API server this long, node-name requests get an Error instead of answers "
            "from its stale cache (0: never)"
        },
    )

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
        if self.cluster not in ("auto", "on", "off"):
            problems.append(f"--cluster must be auto, on or off, not {self.cluster!r}")
        if self.webhook_on_error not in ("allow", "deny"):
            problems.append(f"--webhook-on-error must be allow or deny, not {self.webhook_on_error!r}")
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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """One flag per field, named after it; the default is None so unset flags fall back to the environment."""
    for f in fields(Settings):
        flag = "--" + f.name.replace("_", "-")
        help_text = f"{f.metadata.get('help', '')} [env {env_name(f.name)}]"
        if f.type in (bool, "bool"):
            parser.add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction, default=None, help=help_text)
        else:
            parser.add_argument(flag, dest=f.name, default=None, metavar=f.name.upper(), help=help_text)


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


__all__ = ["Settings", "add_arguments", "describe", "env_name", "load_settings"]
