"""``kpe scheduler-config``: what it prints is what a real kube-scheduler accepted
(fixtures/kube-scheduler-wire/scheduler-config.yaml), and the verbs and
managedResources follow the policy set."""

from __future__ import annotations

import io
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from server.cli.main import EXIT_FAILED, EXIT_OK, EXIT_USAGE, main
from server.verbs.schedulerconfig import DEFAULT_URL, is_extended_resource_name
from server.settings import Settings
from tests.e2e.controlplane import HOW_TO_GET, find_binaries

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "data" / "fixtures" / "kube-scheduler-wire" / "scheduler-config.yaml"

# Fields of kube-scheduler's Extender type that the captured config does not use
# but kpe may write, and the fields of its ExtenderTLSConfig (json tags of the Go types).
EXTRA_EXTENDER_FIELDS = {"httpTimeout": str, "tlsConfig": dict}
TLS_FIELDS = {"insecure": bool, "serverName": str, "certFile": str, "keyFile": str, "caFile": str}
GO_DURATION = re.compile(r"^(\d+(\.\d+)?(ns|us|µs|ms|s|m|h))+$")

HEAD = "apiVersion: kpe.dev/v1alpha1\nkind: SchedulingPolicy\n"
FILTER = "  filters:\n  - name: f\n    expression: 'true'\n"
SCORE = "  scores:\n  - name: s\n    expression: '50'\n"
PREEMPT = "  preemption:\n    victim: 'true'\n"
ADMIT = "  admission:\n    expression: 'true'\n"


def policy(name: str, *parts: str, resources: list[str] | None = None, mode: str = "Enforce") -> str:
    match = f"  match:\n    resources: [{', '.join(resources)}]\n" if resources else ""
    return f"{HEAD}metadata:\n  name: {name}\nspec:\n  mode: {mode}\n{match}{''.join(parts)}"


def write_policies(tmp_path: Path, *docs: str) -> str:
    directory = tmp_path / "policies"
    directory.mkdir(exist_ok=True)
    for i, doc in enumerate(docs):
        (directory / f"p{i}.yaml").write_text(doc)
    return str(directory)


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(["scheduler-config", *argv], out=out)
    return code, out.getvalue()


def generate(*argv: str) -> Any:
    code, text = run(*argv)
    assert code == EXIT_OK, text
    return yaml.safe_load(text)


def entry_for(tmp_path: Path, *docs: str, extra: tuple[str, ...] = ()) -> dict[str, Any]:
    entry: dict[str, Any] = generate("--entry-only", "--policies", write_policies(tmp_path, *docs), *extra)
    return entry


def fixture_config() -> dict[str, Any]:
    if not FIXTURE.exists():
        pytest.skip(f"captured kube-scheduler config not found at {FIXTURE}")
    config: dict[str, Any] = yaml.safe_load(FIXTURE.read_text())
    return config


# -- against the configuration a real kube-scheduler accepted ---------------------------


def test_document_has_the_captured_api_version_and_kind(tmp_path: Path) -> None:
    captured = fixture_config()
    path = write_policies(tmp_path, policy("a", FILTER))
    generated = generate("--policies", path, "--api-version", "v1beta3")
    assert generated["apiVersion"] == captured["apiVersion"] == "kubescheduler.config.k8s.io/v1beta3"
    assert generated["kind"] == captured["kind"]
    assert generated["clientConnection"] == captured["clientConnection"]
    assert isinstance(generated["extenders"], list) and len(generated["extenders"]) == 1


@pytest.mark.parametrize("index", [0, 1])
def test_entry_matches_each_captured_extender(tmp_path: Path, index: int) -> None:
    """Configured like a captured extender, kpe prints the same entry: same keys,
    same value types, same values, except what kpe always states on purpose."""
    captured = fixture_config()["extenders"][index]
    resources = [r["name"] for r in captured.get("managedResources", [])]
    docs = [policy("all", FILTER, SCORE, PREEMPT, resources=resources or None)]
    options = ["--url", captured["urlPrefix"], "--weight", str(captured["weight"])]
    options.append("--node-cache-capable" if captured["nodeCacheCapable"] else "--no-node-cache-capable")
    if "bindVerb" in captured:
        options.append("--bind")
    if captured.get("ignorable"):
        options.append("--ignorable")
    generated = entry_for(tmp_path, *docs, extra=tuple(options))

    # kpe always writes httpTimeout and ignorable (explicit beats the scheduler's defaults);
    # ignoredByScheduler is false because the scheduler must still count the resource.
    expected = dict(captured, httpTimeout="5s", ignorable=captured.get("ignorable", False))
    if "managedResources" in expected:
        expected["managedResources"] = [dict(r, ignoredByScheduler=False) for r in captured["managedResources"]]
    assert generated == expected
    assert list(generated)[0] == "urlPrefix"


def test_every_field_kpe_writes_has_the_shape_the_scheduler_accepts(tmp_path: Path) -> None:
    """With every option on, each key is one the captured config used (with the same
    value type) or one of the Go type's other fields, with its type."""
    captured = fixture_config()["extenders"]
    known: dict[str, type] = dict(EXTRA_EXTENDER_FIELDS)
    for entry in captured:
        for key, value in entry.items():
            known[key] = type(value)
    docs = [policy("all", FILTER, SCORE, PREEMPT, resources=["example.com/foo"])]
    generated = entry_for(
        tmp_path,
        *docs,
        extra=("--bind", "--ignorable", "--ca-file", "/etc/kpe/ca.crt", "--cert-file", "/etc/kpe/c.crt", "--key-file", "/etc/kpe/c.key", "--server-name", "kpe.kpe-system.svc", "--http-timeout", "1m30s"),
    )
    assert set(generated) <= set(known), set(generated) - set(known)
    for key, value in generated.items():
        assert type(value) is known[key], (key, value)
    captured_resource = next(e for e in captured if "managedResources" in e)["managedResources"][0]
    for resource in generated["managedResources"]:
        assert {k: type(v) for k, v in resource.items()} == {k: type(v) for k, v in captured_resource.items()}
    assert GO_DURATION.match(generated["httpTimeout"])
    assert set(generated["tlsConfig"]) <= set(TLS_FIELDS)
    for key, value in generated["tlsConfig"].items():
        assert type(value) is TLS_FIELDS[key]
    # The scheme picks TLS; enableHTTPS would only add "insecure when no CA".
    assert "enableHTTPS" not in generated


def test_verbs_are_server_routes_and_the_default_url_uses_the_server_prefix() -> None:
    from server.verbs.endpoints import VERBS

    generated = generate("--entry-only", "--bind", "--policies", str(ROOT / "policies"))
    for key in ("filterVerb", "prioritizeVerb", "preemptVerb", "bindVerb"):
        assert generated[key] in VERBS
    prefix = str(Settings.__dataclass_fields__["prefix"].default)
    assert DEFAULT_URL.endswith(prefix) and generated["urlPrefix"] == DEFAULT_URL


# -- verbs follow the policy set --------------------------------------------------------


@pytest.mark.parametrize(
    ("parts", "verbs"),
    [
        ((FILTER,), {"filterVerb", "preemptVerb"}),
        ((SCORE,), {"prioritizeVerb"}),
        ((PREEMPT,), {"preemptVerb"}),
        ((FILTER, ADMIT), {"filterVerb", "preemptVerb"}),
        ((FILTER, SCORE, PREEMPT), {"filterVerb", "prioritizeVerb", "preemptVerb"}),
    ],
)
def test_only_the_verbs_some_policy_needs(tmp_path: Path, parts: tuple[str, ...], verbs: set[str]) -> None:
    entry = entry_for(tmp_path, policy("a", *parts))
    assert {k for k in entry if k.endswith("Verb")} == verbs


def test_verbs_union_over_policies_and_audit_mode_counts(tmp_path: Path) -> None:
    entry = entry_for(tmp_path, policy("a", FILTER), policy("b", SCORE, mode="Audit"))
    assert {k for k in entry if k.endswith("Verb")} == {"filterVerb", "prioritizeVerb", "preemptVerb"}


def test_filters_need_the_preempt_verb_and_the_header_says_which_policies(tmp_path: Path) -> None:
    """kube-scheduler's preemption dry run never calls the extender's filter: the
    preempt verb is where kpe drops nodes its filters reject whatever is evicted."""
    path = write_policies(tmp_path, policy("a", FILTER), policy("b", SCORE), policy("c", PREEMPT))
    code, text = run("--entry-only", "--policies", path)
    assert code == EXIT_OK
    assert "# filter: a\n# prioritize: b\n# preempt: a, c\n" in text
    assert yaml.safe_load(text)["preemptVerb"] == "preempt"


def test_bind_only_on_request(tmp_path: Path) -> None:
    assert "bindVerb" not in entry_for(tmp_path, policy("a", FILTER, SCORE, PREEMPT))
    assert entry_for(tmp_path, policy("a", FILTER), extra=("--bind",))["bindVerb"] == "bind"


def test_admission_only_needs_no_extender(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_policies(tmp_path, policy("a", ADMIT))
    code, text = run("--policies", path)
    assert code == EXIT_FAILED and text == ""
    assert "nothing to call kpe for" in capsys.readouterr().err
    entry = yaml.safe_load(run("--entry-only", "--policies", path, "--bind")[1])
    assert {k for k in entry if k.endswith("Verb")} == {"bindVerb"}


def test_defaults_and_options(tmp_path: Path) -> None:
    entry = entry_for(tmp_path, policy("a", FILTER))
    assert entry["weight"] == 1 and entry["nodeCacheCapable"] is True and entry["ignorable"] is False
    assert entry["httpTimeout"] == "5s" and "tlsConfig" not in entry
    entry = entry_for(tmp_path, policy("a", FILTER), extra=("--weight", "4", "--no-node-cache-capable", "--ignorable", "--insecure", "--url", "https://10.0.0.9:443/scheduler"))
    assert entry["weight"] == 4 and entry["nodeCacheCapable"] is False and entry["ignorable"] is True
    assert entry["tlsConfig"] == {"insecure": True} and entry["urlPrefix"] == "https://10.0.0.9:443/scheduler"


# -- whole-node mode and nodeInfo --------------------------------------------------------

NODE_INFO_POLICY = f"""{HEAD}metadata:
  name: packing
spec:
  variables:
  - name: busy
    expression: "nodeInfo.podCount > 10"
  filters:
  - name: room
    expression: "nodeInfo.podCount < 110"
  - name: labelled
    expression: "has(node.metadata.labels)"
  - name: not-busy
    expression: "!variables.busy"
  scores:
  - name: emptiest
    expression: "100 - nodeInfo.podCount"
  preemption:
    victim: "victim.spec.priority < 10"
    node: "size(victims) < nodeInfo.podCount"
"""

WHOLE_NODE_WARNING = (
    "kpe scheduler-config: warning: in whole-node mode (--no-node-cache-capable) kube-scheduler sends whole "
    "nodes but not the pods on them, so nodeInfo still comes from kpe's own pod cache: run kpe with cluster "
    "access. Without it (--cluster off, or no credentials found) these rules, which read nodeInfo, fail on "
    "every node with \"no value for variable 'nodeInfo'\" and their policy's failurePolicy decides: "
    "packing/room, packing/not-busy, packing/emptiest, packing/preemption.node\n"
)


def test_whole_node_mode_warns_about_rules_that_read_node_info(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_policies(tmp_path, NODE_INFO_POLICY, policy("plain", FILTER))
    code, _ = run("--policies", path, "--no-node-cache-capable", "--insecure")
    assert code == EXIT_OK
    assert capsys.readouterr().err == WHOLE_NODE_WARNING
    # With node names kpe needs its caches anyway; rules that do not read nodeInfo need nothing.
    assert run("--policies", path, "--insecure")[0] == EXIT_OK
    (tmp_path / "plain").mkdir()
    assert run("--policies", write_policies(tmp_path / "plain", policy("plain", FILTER)), "--no-node-cache-capable", "--insecure")[0] == EXIT_OK
    assert capsys.readouterr().err == ""


def test_the_shipped_policies_reading_node_info_are_named() -> None:
    from engine.policy.loader import load
    from server.verbs.schedulerconfig import node_info_rules

    assert node_info_rules(load([ROOT / "policies"])) == ["bin-packing/cpu-fullness", "bin-packing/memory-fullness", "gpu-placement/enough-free-gpus", "gpu-placement/preemption.node"]


# -- managedResources -------------------------------------------------------------------


def test_managed_resources_when_every_extender_policy_names_resources(tmp_path: Path) -> None:
    entry = entry_for(
        tmp_path,
        policy("gpu", FILTER, resources=["nvidia.com/gpu"]),
        policy("fpga", SCORE, resources=["example.com/fpga", "nvidia.com/gpu"]),
        # Admission runs outside the scheduler, so a catch-all admission policy changes nothing.
        policy("gate", ADMIT),
    )
    assert entry["managedResources"] == [
        {"name": "example.com/fpga", "ignoredByScheduler": False},
        {"name": "nvidia.com/gpu", "ignoredByScheduler": False},
    ]


def test_no_managed_resources_when_one_extender_policy_matches_every_pod(tmp_path: Path) -> None:
    code, text = run("--entry-only", "--policies", write_policies(tmp_path, policy("gpu", FILTER, resources=["nvidia.com/gpu"]), policy("all", PREEMPT)))
    assert code == EXIT_OK and "managedResources" not in yaml.safe_load(text)
    assert "every pod is sent to kpe: policy all applies to pods without match.resources" in text


PREFERRED_GPUS = """apiVersion: kpe.dev/v1alpha1
kind: Reservation
metadata: {name: gpus}
spec:
  slots: 1
  mode: Preferred
  owners: {resources: [nvidia.com/gpu]}
  template: {resources: {requests: {nvidia.com/gpu: 1}}}
"""


def test_a_reservation_needs_every_verb_for_every_pod_even_when_its_owners_only_score(tmp_path: Path) -> None:
    code, text = run("--entry-only", "--policies", write_policies(tmp_path, policy("gpu", SCORE, resources=["nvidia.com/gpu"]), PREFERRED_GPUS))
    entry = yaml.safe_load(text)
    assert code == EXIT_OK and entry["preemptVerb"] == "preempt" and "managedResources" not in entry
    assert entry["filterVerb"] == "filter" and entry["prioritizeVerb"] == "prioritize"  # its mode may change on reload
    assert "every pod is sent to kpe: reservation gpus vetoes every other pod's preemption of its placeholders" in text


def test_no_managed_resources_for_resources_the_scheduler_would_refuse(tmp_path: Path) -> None:
    entry = entry_for(tmp_path, policy("cpu", FILTER, resources=["cpu", "nvidia.com/gpu"]))
    assert "managedResources" not in entry


def test_shipped_policies_send_every_pod() -> None:
    assert "managedResources" not in generate("--entry-only", "--policies", str(ROOT / "policies"))


@pytest.mark.parametrize(
    ("name", "extended"),
    [
        ("nvidia.com/gpu", True),
        ("example.com/foo", True),
        ("cpu", False),
        ("hugepages-2Mi", False),
        ("kubernetes.io/foo", False),
        ("requests.example.com/foo", False),
        ("example.com/", False),
        ("a/b/c", False),
    ],
)
def test_extended_resource_names(name: str, extended: bool) -> None:
    assert is_extended_resource_name(name) is extended


# -- API versions and output forms ------------------------------------------------------


def test_api_version_default_v1_and_v1beta3_flag(tmp_path: Path) -> None:
    path = write_policies(tmp_path, policy("a", FILTER))
    v1 = generate("--policies", path)
    beta = generate("--policies", path, "--api-version", "v1beta3")
    assert v1["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert beta["apiVersion"] == "kubescheduler.config.k8s.io/v1beta3"
    assert v1["extenders"] == beta["extenders"]
    assert "clientConnection" not in generate("--policies", path, "--kubeconfig", "")


def test_entry_only_is_the_entry_of_the_document(tmp_path: Path) -> None:
    path = write_policies(tmp_path, policy("a", FILTER, SCORE))
    assert generate("--policies", path, "--entry-only") == generate("--policies", path)["extenders"][0]


def test_header_names_the_command_that_reproduces_the_output(tmp_path: Path) -> None:
    path = write_policies(tmp_path, policy("a", FILTER))
    code, text = run("--policies", path, "--weight", "2", "--bind", "--no-node-cache-capable")
    assert code == EXIT_OK
    command = text.splitlines()[0].removeprefix("# Generated by: kpe scheduler-config ").split()
    assert run(*command) == (EXIT_OK, text)


@pytest.mark.parametrize(
    "argv",
    [
        ("--weight", "0"),
        ("--insecure", "--ca-file", "/ca.crt"),
        ("--cert-file", "/c.crt"),
        ("--url", "http://kpe:80/scheduler", "--ca-file", "/ca.crt"),
        ("--url", "kpe:443"),
        ("--http-timeout", "5"),
    ],
)
def test_usage_errors(argv: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    code, text = run("--policies", str(ROOT / "policies"), *argv)  # --policies is required; the options are what is wrong
    assert code == EXIT_USAGE and text == ""
    assert capsys.readouterr().err.startswith("kpe scheduler-config: ")


def test_policy_errors_go_to_stderr(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_policies(tmp_path, policy("a", "  filters:\n  - name: f\n    expression: 'nope('\n"))
    code, text = run("--policies", path)
    assert code == EXIT_FAILED and text == ""
    assert "KPE300" in capsys.readouterr().err


# -- a scheduler of kpe's own (--scheduler-name) ------------------------------------------

# kube-scheduler of every Kubernetes version on this machine (tests/e2e/controlplane.py finds them).
SCHEDULERS = [pytest.param(b / "kube-scheduler", id=f"k8s-{b.version}") for b in find_binaries()] or [
    pytest.param(None, id="no-k8s", marks=pytest.mark.skip(reason="no kube-scheduler on this machine: " + HOW_TO_GET))
]

OWN_SCHEDULER = """\
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: true
  resourceName: kpe-scheduler
  resourceNamespace: kpe-system
profiles:
- schedulerName: kpe-scheduler
extenders:
- urlPrefix: https://kpe.kpe-system.svc:443/scheduler
  filterVerb: filter
  preemptVerb: preempt
  weight: 1
  nodeCacheCapable: true
  httpTimeout: 5s
  tlsConfig:
    certFile: /etc/kpe/scheduler-client/tls.crt
    keyFile: /etc/kpe/scheduler-client/tls.key
    caFile: /etc/kpe/scheduler-client/ca.crt
  ignorable: false
"""

TLS_FLAGS = ("--ca-file", "/etc/kpe/scheduler-client/ca.crt", "--cert-file", "/etc/kpe/scheduler-client/tls.crt", "--key-file", "/etc/kpe/scheduler-client/tls.key")


def body(text: str) -> str:
    """The YAML without the generated header's comment lines."""
    return "".join(line for line in text.splitlines(keepends=True) if not line.startswith("#"))


def test_a_scheduler_of_kpe_s_own_has_one_profile_its_own_lease_and_in_cluster_credentials(tmp_path: Path) -> None:
    path = write_policies(tmp_path, policy("a", FILTER))
    code, text = run("--policies", path, "--scheduler-name", "kpe-scheduler", *TLS_FLAGS)
    assert code == EXIT_OK
    assert body(text) == OWN_SCHEDULER
    assert "# scheduler kpe-scheduler: only pods with spec.schedulerName: kpe-scheduler are scheduled here; the default scheduler never calls kpe\n" in text
    assert "# every pod it schedules is sent to kpe: policy a applies to pods without match.resources\n" in text


def test_without_a_scheduler_name_the_document_extends_the_default_scheduler_as_before(tmp_path: Path) -> None:
    path = write_policies(tmp_path, policy("a", FILTER))
    code, text = run("--policies", path, *TLS_FLAGS)
    assert code == EXIT_OK
    expected = OWN_SCHEDULER.replace(
        "leaderElection:\n  leaderElect: true\n  resourceName: kpe-scheduler\n  resourceNamespace: kpe-system\nprofiles:\n- schedulerName: kpe-scheduler\n",
        "clientConnection:\n  kubeconfig: /etc/kubernetes/scheduler.conf\n",
    )
    assert body(text) == expected
    assert "scheduler kpe-scheduler" not in text and "every pod is sent to kpe" in text


def test_the_lease_namespace_and_an_explicit_kubeconfig_are_written_and_reproduced_by_the_header(tmp_path: Path) -> None:
    path = write_policies(tmp_path, policy("a", FILTER, SCORE))
    code, text = run("--policies", path, "--scheduler-name", "gpu.kpe.dev", "--lease-namespace", "schedulers", "--kubeconfig", "/etc/kpe/kubeconfig", "--api-version", "v1beta3")
    assert code == EXIT_OK
    doc = yaml.safe_load(text)
    assert doc["leaderElection"] == {"leaderElect": True, "resourceName": "gpu.kpe.dev", "resourceNamespace": "schedulers"}
    assert doc["clientConnection"] == {"kubeconfig": "/etc/kpe/kubeconfig"}
    assert doc["profiles"] == [{"schedulerName": "gpu.kpe.dev"}]
    assert list(doc) == ["apiVersion", "kind", "leaderElection", "clientConnection", "profiles", "extenders"], "the Go type's field order"
    command = text.splitlines()[0].removeprefix("# Generated by: kpe scheduler-config ").split()
    assert run(*command) == (EXIT_OK, text)


def test_entry_only_prints_the_same_entry_for_a_scheduler_of_kpe_s_own(tmp_path: Path) -> None:
    path = write_policies(tmp_path, policy("a", FILTER, SCORE))
    own = generate("--policies", path, "--scheduler-name", "kpe-scheduler")
    assert generate("--policies", path, "--scheduler-name", "kpe-scheduler", "--entry-only") == own["extenders"][0] == generate("--policies", path, "--entry-only")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--scheduler-name", "default-scheduler"), "is the default scheduler's name"),
        (("--scheduler-name", "Kpe_Scheduler"), "--scheduler-name must be a lowercase DNS subdomain"),
        (("--scheduler-name", "kpe-scheduler", "--lease-namespace", "kpe.system"), "--lease-namespace must be a namespace name"),
        (("--lease-namespace", "other"), "--lease-namespace needs --scheduler-name"),
    ],
)
def test_names_kube_scheduler_or_the_api_server_would_refuse_are_usage_errors(
    tmp_path: Path, argv: tuple[str, ...], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, text = run("--policies", write_policies(tmp_path, policy("a", FILTER)), *argv)
    assert code == EXIT_USAGE and text == ""
    assert message in capsys.readouterr().err


def tls_files(directory: Path) -> tuple[str, ...]:
    """A CA and a client certificate on disk: kube-scheduler reads tlsConfig's files while it builds the extender."""
    import trustme

    ca = trustme.CA()
    client = ca.issue_cert("kube-scheduler-to-kpe")
    ca.cert_pem.write_to_path(str(directory / "ca.crt"))
    client.cert_chain_pems[0].write_to_path(str(directory / "tls.crt"))
    client.private_key_pem.write_to_path(str(directory / "tls.key"))
    return ("--ca-file", str(directory / "ca.crt"), "--cert-file", str(directory / "tls.crt"), "--key-file", str(directory / "tls.key"))


@pytest.mark.parametrize("kube_scheduler", SCHEDULERS)
@pytest.mark.parametrize("mode", [("--scheduler-name", "kpe-scheduler"), ("--kubeconfig", "")], ids=["own-scheduler", "default-scheduler"])
def test_kube_scheduler_itself_accepts_the_configuration(tmp_path: Path, mode: tuple[str, ...], kube_scheduler: Path) -> None:
    """kube-scheduler decodes the file strictly (an unknown field is an error), validates it, and
    with --write-config-to prints what it will run with, then exits; --master stands in for the
    in-cluster credentials it would otherwise look for, and is never called."""
    path = write_policies(tmp_path, policy("a", FILTER, SCORE, PREEMPT))
    code, text = run("--policies", path, *mode, *tls_files(tmp_path))
    assert code == EXIT_OK
    config, written = tmp_path / "config.yaml", tmp_path / "written.yaml"
    config.write_text(text)
    result = subprocess.run(
        [str(kube_scheduler), "--config", str(config), "--master", "https://127.0.0.1:1", "--secure-port", "0", "--write-config-to", str(written)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    ours, theirs = yaml.safe_load(text), yaml.safe_load(written.read_text())
    # It leaves out false booleans when it writes the file back.
    assert [{"ignorable": False, **e} for e in theirs["extenders"]] == ours["extenders"]
    if "profiles" in ours:
        assert [p["schedulerName"] for p in theirs["profiles"]] == ["kpe-scheduler"]
        election = theirs["leaderElection"]
        assert (election["leaderElect"], election["resourceName"], election["resourceNamespace"]) == (True, "kpe-scheduler", "kpe-system")
        assert election["resourceLock"] == "leases"
        assert theirs["clientConnection"]["kubeconfig"] == ""
    else:
        assert [p["schedulerName"] for p in theirs["profiles"]] == ["default-scheduler"]
        assert theirs["leaderElection"]["resourceName"] == "kube-scheduler"


@pytest.mark.parametrize("kube_scheduler", SCHEDULERS)
def test_kube_scheduler_refuses_what_kpe_never_writes(tmp_path: Path, kube_scheduler: Path) -> None:
    """The check above would pass a kube-scheduler that ignores its file: this one must fail."""
    doc = generate("--policies", write_policies(tmp_path, policy("a", FILTER)), "--scheduler-name", "kpe-scheduler", *tls_files(tmp_path))
    doc["profiles"].append({"schedulerName": "kpe-scheduler"})
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(doc))
    result = subprocess.run(
        [str(kube_scheduler), "--config", str(config), "--master", "https://127.0.0.1:1", "--secure-port", "0", "--write-config-to", str(tmp_path / "w.yaml")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode != 0 and "schedulerName" in result.stderr
