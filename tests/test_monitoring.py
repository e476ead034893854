"""deploy/monitoring/, the optional kustomize component for the Prometheus Operator and
Grafana: it is a well-formed Component, its ServiceMonitor scrapes the port kpe serves
/metrics on, its PrometheusRule holds exactly the alerts docs/operations.md suggests, and
every metric and label its PromQL (alerts and dashboard) names is one kpe exports."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import generate_latest
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.parser import text_string_to_metric_families

from server.telemetry.metrics import Metrics
from server.verbs.schedulerconfig import ExtenderOptions

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
COMPONENT = DEPLOY / "monitoring"
OPERATIONS = ROOT / "docs" / "operations.md"
KUBECTL = shutil.which("kubectl")

Obj = dict[str, Any]

# Labels Prometheus adds to every series it scrapes through a ServiceMonitor, on top of kpe's own.
TARGET_LABELS = {"namespace", "service", "pod", "container", "endpoint", "job", "instance"}

# PromQL functions and aggregation operators: identifiers that are followed by "(".
FUNCTIONS = {
    "abs", "absent", "absent_over_time", "acos", "acosh", "asin", "asinh", "atan", "atanh", "avg_over_time",
    "ceil", "changes", "clamp", "clamp_max", "clamp_min", "cos", "cosh", "count_over_time", "day_of_month",
    "day_of_week", "day_of_year", "days_in_month", "deg", "delta", "deriv", "exp", "floor", "histogram_avg",
    "histogram_count", "histogram_fraction", "histogram_quantile", "histogram_stddev", "histogram_stdvar",
    "histogram_sum", "holt_winters", "hour", "idelta", "increase", "irate", "label_join", "label_replace",
    "last_over_time", "ln", "log10", "log2", "mad_over_time", "max_over_time", "min_over_time", "minute",
    "month", "pi", "predict_linear", "present_over_time", "quantile_over_time", "rad", "rate", "resets",
    "round", "scalar", "sgn", "sin", "sinh", "sort", "sort_by_label", "sort_by_label_desc", "sort_desc",
    "sqrt", "stddev_over_time", "stdvar_over_time", "sum_over_time", "tan", "tanh", "time", "timestamp",
    "vector", "year",
    "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk", "topk",
    "quantile", "limitk", "limit_ratio",
}  # fmt: skip
# Keywords that stand where a metric name could; `bool`, `offset` and bare `group_left` take no parentheses.
KEYWORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left", "group_right", "inf", "nan", "atan2"}

STRING = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|`[^`]*`')
# Grafana's $var and ${var}: after strings are gone they only stand for durations ([$__rate_interval]).
VARIABLE = re.compile(r"\$\{?\w+\}?")
SELECTOR = re.compile(r"([A-Za-z_:][\w:]*)?\s*\{([^}]*)\}")
MATCHER = re.compile(r"([A-Za-z_]\w*)\s*(?:=~|!~|!=|=)")
GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
# Not after a letter or digit (the "m" of 5m), a dot (1.5e3) or "$".
IDENTIFIER = re.compile(r"(?<![\w:.$])([A-Za-z_:][\w:]*)")
LABEL_VALUES = re.compile(r"^\s*label_values\((.*),\s*([A-Za-z_]\w*)\s*\)\s*$")


# -- PromQL, read closely enough to name its metrics and labels -------------------------------


def clean(expr: str) -> str:
    return VARIABLE.sub("1m", STRING.sub('""', expr))


def metric_names(text: str) -> list[str]:
    """Metric names in ``text``, which has no selector bodies and no grouping clauses left."""
    names: list[str] = []
    for match in IDENTIFIER.finditer(text):
        name = match.group(1)
        if name in KEYWORDS:
            continue
        if text[match.end() :].lstrip().startswith("("):
            if name not in FUNCTIONS:
                raise ValueError(f"{name}(...) is no PromQL function")
        else:
            names.append(name)
    return names


def balanced(text: str, start: int, step: int) -> str:
    """The parenthesised text starting at ``text[start]`` ("(" forwards, ")" backwards)."""
    depth = 0
    i = start
    while 0 <= i < len(text):
        depth += {"(": 1, ")": -1}.get(text[i], 0) * step
        if depth == 0:
            return text[min(start, i) : max(start, i) + 1]
        i += step
    raise ValueError(f"unbalanced parentheses in {text!r}")


def aggregated_metrics(argument: str) -> list[str]:
    """Metrics whose labels an aggregation's argument keeps: `a and b` and `a unless b`
    keep a's series (b only filters them); anything else (strictly) every metric."""
    text = GROUPING.sub(" ", argument).strip()
    while text.startswith("(") and balanced(text, 0, 1) == text:
        text = text[1:-1].strip()
    for keyword in re.finditer(r"(?<![\w:])(?:and|unless)\b", text):
        before = text[: keyword.start()]
        if before.count("(") == before.count(")"):
            return aggregated_metrics(before)
    return metric_names(text)


def requirements(expr: str) -> tuple[list[str], list[tuple[str, str]]]:
    """The metrics ``expr`` reads, and (metric, label) for every label it needs on a metric:
    label matchers bind to their metric, `by`/`without` to every metric of the aggregated
    expression, `on`/`ignoring`/`group_*` (strictly) to every metric of the expression."""
    text = clean(expr)
    labels: list[tuple[str, str]] = []
    for selector in SELECTOR.finditer(text):
        metric = selector.group(1)
        if not metric:
            raise ValueError(f"a selector without a metric name: {selector.group(0)}")
        labels += [(metric, label) for label in MATCHER.findall(selector.group(2))]
    text = SELECTOR.sub(lambda m: (m.group(1) or "") + "{}", text)
    everything = metric_names(GROUPING.sub(" ", text))
    for clause in GROUPING.finditer(text):
        names = [n.strip() for n in clause.group(2).split(",") if n.strip()]
        scope = everything
        if clause.group(1) in ("by", "without"):
            rest = text[clause.end() :]
            if rest.lstrip().startswith("("):
                argument = balanced(text, len(text) - len(rest.lstrip()), 1)
            else:
                before = text[: clause.start()].rstrip()
                argument = balanced(before, len(before) - 1, -1)
            scope = aggregated_metrics(argument)
        labels += [(metric, name) for metric in scope for name in names]
    return everything, labels


def test_the_promql_reader_names_metrics_and_labels_but_not_functions_keywords_or_durations() -> None:
    expr = (
        'histogram_quantile(0.9, sum by (le, policy) (rate(kpe_gate_wait_seconds_bucket{verb=~"a|b c", pod=~"$pod"}[$__rate_interval])))'
        " > 3600 and on (pod) (max(kpe_gate_controller_leader offset 5m) by (kind) == bool 1e3)"
        " or sum by (policy) (kpe_gated_pods and on (pod) kpe_policies)"
    )
    metrics, labels = requirements(expr)
    assert metrics == ["kpe_gate_wait_seconds_bucket", "kpe_gate_controller_leader", "kpe_gated_pods", "kpe_policies"]
    # `on (pod)` binds to every metric; `by (policy)` over `a and b` only to a.
    assert set(labels) == {
        ("kpe_gate_wait_seconds_bucket", "verb"), ("kpe_gate_wait_seconds_bucket", "le"), ("kpe_gate_wait_seconds_bucket", "policy"),
        ("kpe_gate_controller_leader", "kind"), ("kpe_gated_pods", "policy"),
    } | {(metric, "pod") for metric in metrics}  # fmt: skip
    with pytest.raises(ValueError, match="no PromQL function"):
        requirements("sum(rat(kpe_requests_total[5m]))")


# -- what kpe exports -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def exported() -> dict[str, set[str]]:
    """Every series name kpe's /metrics can carry, with its label names."""
    metrics = Metrics()
    for metric in vars(metrics).values():
        # A labelled metric shows no series until a child exists.
        if isinstance(metric, MetricWrapperBase) and metric._labelnames:
            metric.labels(*("x" for _ in metric._labelnames))
    series: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(generate_latest(metrics.registry).decode()):
        assert family.samples, f"{family.name} shows no series"
        for sample in family.samples:
            series.setdefault(sample.name, set()).update(sample.labels)
    assert {"kpe_requests_total", "kpe_request_duration_seconds_bucket", "kpe_cache_lag_seconds"} <= set(series)
    assert "le" in series["kpe_request_duration_seconds_bucket"]
    return series


# -- the component's files --------------------------------------------------------------------


def kustomization() -> Obj:
    doc: Obj = yaml.safe_load((COMPONENT / "kustomization.yaml").read_text())
    return doc


def resources() -> list[Obj]:
    return [d for name in kustomization()["resources"] for d in yaml.safe_load_all((COMPONENT / name).read_text()) if d]


def resource(kind: str) -> Obj:
    [found] = [r for r in resources() if r["kind"] == kind]
    return found


def dashboard() -> Obj:
    doc: Obj = json.loads((COMPONENT / "dashboard.json").read_text())
    return doc


def panels(node: Obj) -> Iterator[Obj]:
    """Every panel, rows' own panels (collapsed rows keep theirs inside) included."""
    for panel in node.get("panels", []):
        yield panel
        yield from panels(panel)


def dashboard_exprs() -> list[tuple[str, str]]:
    return [(panel["title"], target["expr"]) for panel in panels(dashboard()) for target in panel.get("targets", [])]


def rules() -> list[Obj]:
    return [rule for group in resource("PrometheusRule")["spec"]["groups"] for rule in group["rules"]]


def all_exprs() -> list[tuple[str, str]]:
    return [(f"alert {r['alert']}", r["expr"]) for r in rules()] + [(f"panel {title!r}", expr) for title, expr in dashboard_exprs()]


def documented_alerts() -> list[Obj]:
    """The rules of the ```yaml block with `groups:` in the "Metrics and alerts" section."""
    text = OPERATIONS.read_text(encoding="utf-8")
    section = text.split("\n## Metrics and alerts\n", 1)[1].split("\n## ", 1)[0]
    documents = [yaml.safe_load(b) for b in re.findall(r"^```yaml\n(.*?)^```$", section, re.S | re.M)]
    [alerts] = [d for d in documents if isinstance(d, dict) and "groups" in d]
    return [rule for group in alerts["groups"] for rule in group["rules"]]


def test_the_component_is_a_kustomize_component_whose_files_exist() -> None:
    k = kustomization()
    assert (k["apiVersion"], k["kind"]) == ("kustomize.config.k8s.io/v1alpha1", "Component")
    assert k["resources"] and all((COMPONENT / name).is_file() for name in k["resources"])
    for r in resources():
        assert r["metadata"]["name"] and r["metadata"]["namespace"] == "kpe-system", r["kind"]
        assert r["apiVersion"] == "monitoring.coreos.com/v1"
    assert sorted(r["kind"] for r in resources()) == ["PrometheusRule", "ServiceMonitor"]
    [generator] = k["configMapGenerator"]
    for entry in generator["files"]:
        assert (COMPONENT / entry.rpartition("=")[2]).is_file(), entry
    assert generator["namespace"] == "kpe-system"
    # What kube-prometheus-stack's Grafana sidecar looks for.
    assert generator["options"]["labels"] == {"grafana_dashboard": "1"}
    assert [entry.rpartition("=")[2] for entry in generator["files"]] == ["dashboard.json"]


def test_the_service_monitor_scrapes_metrics_on_the_port_kpe_serves_them_on() -> None:
    monitor = resource("ServiceMonitor")
    [service] = [d for d in yaml.safe_load_all((DEPLOY / "service.yaml").read_text()) if d]
    [deployment] = [d for d in yaml.safe_load_all((DEPLOY / "deployment.yaml").read_text()) if d]
    assert "service.yaml" in yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())["resources"]
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector and selector.items() <= service["metadata"]["labels"].items()
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    health_port = int(next(e["value"] for e in container["env"] if e["name"] == "KPE_HEALTH_PORT"))
    [endpoint] = monitor["spec"]["endpoints"]
    [port] = [p for p in service["spec"]["ports"] if p["name"] == endpoint["port"]]
    [target] = [p for p in container["ports"] if port["targetPort"] in (p["name"], p["containerPort"])]
    # /metrics is on the plain-HTTP listener of the probes, not on the verbs' HTTPS one.
    assert target["containerPort"] == health_port
    assert container["readinessProbe"]["httpGet"]["port"] == target["name"]
    assert (endpoint["path"], endpoint["scheme"]) == ("/metrics", "http")


def test_every_alert_operations_describes_is_a_rule_with_the_same_condition_and_no_other() -> None:
    documented = {a["alert"]: a for a in documented_alerts()}
    shipped = {r["alert"]: r for r in rules()}
    assert len(shipped) == len(rules()), "alert names are unique"
    assert sorted(documented) == sorted(shipped), f"missing: {sorted(set(documented) - set(shipped))}, not documented: {sorted(set(shipped) - set(documented))}"
    for name, alert in documented.items():
        assert shipped[name]["expr"] == alert["expr"], name
        assert shipped[name]["for"] == alert["for"], name
        assert shipped[name]["annotations"]["summary"], name


def test_every_metric_the_alerts_and_the_dashboard_use_is_one_kpe_exports(exported: dict[str, set[str]]) -> None:
    assert len(dashboard_exprs()) >= 20
    for where, expr in all_exprs():
        metrics, _ = requirements(expr)
        assert metrics, f"{where}: no metric in {expr}"
        for metric in metrics:
            assert metric in exported, f"{where} uses {metric}, which kpe does not export: {expr}"


def test_every_label_the_alerts_and_the_dashboard_use_is_on_its_metric(exported: dict[str, set[str]]) -> None:
    for where, expr in all_exprs():
        for metric, label in requirements(expr)[1]:
            known = exported.get(metric, set()) | TARGET_LABELS
            assert label in known, f"{where}: {metric} has no label {label} (it has {sorted(exported.get(metric, set()))}): {expr}"


def test_the_dashboard_variables_query_exported_metrics_and_labels(exported: dict[str, set[str]]) -> None:
    variables = dashboard()["templating"]["list"]
    assert [v["name"] for v in variables] == ["datasource", "namespace", "pod"]
    for variable in variables[1:]:
        query = variable["query"]["query"] if isinstance(variable["query"], dict) else variable["query"]
        match = LABEL_VALUES.match(query)
        assert match, query
        metrics, labels = requirements(match.group(1))
        for metric in metrics:
            assert metric in exported, f"variable {variable['name']} uses {metric}, which kpe does not export"
            labels.append((metric, match.group(2)))
        for metric, label in labels:
            assert label in exported[metric] | TARGET_LABELS, f"variable {variable['name']}: {metric} has no label {label}"


def test_every_alert_is_explained_by_a_panel_on_its_metrics() -> None:
    shown = {m for _, expr in dashboard_exprs() for m in requirements(expr)[0]}
    for rule in rules():
        metrics = set(requirements(rule["expr"])[0])
        assert metrics & shown, f"{rule['alert']}: no panel shows {sorted(metrics)}"


def seconds(duration: str) -> float:
    """A Go duration of whole units (5s, 1m30s)."""
    parts = re.findall(r"(\d+(?:\.\d+)?)(h|m|s|ms)", duration)
    assert "".join(n + u for n, u in parts) == duration, duration
    return sum(float(n) * {"h": 3600, "m": 60, "s": 1, "ms": 0.001}[u] for n, u in parts)


def threshold_lines(panel: Obj) -> set[float]:
    defaults = panel["fieldConfig"]["defaults"]
    if defaults.get("custom", {}).get("thresholdsStyle", {}).get("mode", "off") == "off":
        return set()
    return {float(step["value"]) for step in defaults["thresholds"]["steps"] if step["value"] is not None}


def test_the_latency_panel_draws_kube_schedulers_http_timeout_as_written_by_kpe_scheduler_config() -> None:
    timeout = seconds(ExtenderOptions().http_timeout)
    example = yaml.safe_load((DEPLOY / "scheduler-config.yaml").read_text())
    assert seconds(example["extenders"][0]["httpTimeout"]) == timeout == 5
    [latency] = [p for p in panels(dashboard()) if "httpTimeout" in p["title"]]
    assert latency["fieldConfig"]["defaults"]["unit"] == "s"
    assert timeout in threshold_lines(latency)
    verbs = {m for t in latency["targets"] for m in requirements(t["expr"])[0]}
    assert verbs == {"kpe_request_duration_seconds_bucket"}


def test_alerts_on_a_duration_threshold_have_it_drawn_on_a_panel_of_their_metric() -> None:
    checked = 0
    for rule in rules():
        metrics = set(requirements(rule["expr"])[0])
        threshold = re.search(r">\s*(\d+(?:\.\d+)?)\s*$", rule["expr"])
        if not threshold or not any(re.search(r"_seconds(_bucket)?$", m) for m in metrics):
            continue
        candidates = [p for p in panels(dashboard()) if p.get("targets") and metrics & {m for t in p["targets"] for m in requirements(t["expr"])[0]}]
        assert any(float(threshold.group(1)) in threshold_lines(p) for p in candidates), f"{rule['alert']}: draw {threshold.group(1)} on a panel of {sorted(metrics)}"
        checked += 1
    assert checked == 3  # KpeSlowVerbs, KpeCacheStale, KpeGateWaitLong


def test_the_dashboard_panels_have_unique_ids_do_not_overlap_and_use_the_datasource_variable() -> None:
    board = dashboard()
    assert board["uid"] and board["title"]
    ids = [p["id"] for p in panels(board)]
    assert len(ids) == len(set(ids))
    cells: set[tuple[int, int]] = set()
    for panel in panels(board):
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24, panel["title"]
        mine = {(pos["x"] + dx, pos["y"] + dy) for dx in range(pos["w"]) for dy in range(pos["h"])}
        assert not mine & cells, f"{panel['title']} overlaps another panel"
        cells |= mine
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
            assert panel["description"], panel["title"]
            for target in panel["targets"]:
                assert target["datasource"]["uid"] == "${datasource}", panel["title"]
    rows = [p["title"] for p in board["panels"] if p["type"] == "row"]
    assert rows == ["Decisions per policy and rule", "Requests and latency", "Gates and admission webhook", "Node and pod cache", "Policies and reloads", "Binding"]


def test_the_docs_show_how_to_install_the_component() -> None:
    operations = OPERATIONS.read_text(encoding="utf-8")
    assert "components: [../../deploy/monitoring]" in operations
    assert "`monitoring/`" in (DEPLOY / "README.md").read_text()


# -- rendered with the base ---------------------------------------------------------------------


def kustomize(directory: Path) -> list[Obj]:
    if KUBECTL is None:
        pytest.skip("kubectl (with its built-in kustomize) is not installed; the checks above read the files directly")
    result = subprocess.run([KUBECTL, "kustomize", str(directory)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d]


def test_an_overlay_with_the_component_adds_exactly_its_three_objects_to_the_unchanged_base(tmp_path: Path) -> None:
    # kustomize refuses absolute paths to bases; an overlay outside the repo refers to them relatively.
    (tmp_path / "kustomization.yaml").write_text(
        yaml.safe_dump({"resources": [os.path.relpath(DEPLOY, tmp_path)], "components": [os.path.relpath(COMPONENT, tmp_path)]})
    )
    with_monitoring = kustomize(tmp_path)
    base = kustomize(DEPLOY)
    added = [o for o in with_monitoring if o not in base]
    assert [o for o in base if o not in with_monitoring] == []
    assert sorted((o["kind"], o["metadata"]["name"], o["metadata"]["namespace"]) for o in added) == [
        ("ConfigMap", "kpe-grafana-dashboard", "kpe-system"),
        ("PrometheusRule", "kpe", "kpe-system"),
        ("ServiceMonitor", "kpe", "kpe-system"),
    ]
    [config_map] = [o for o in added if o["kind"] == "ConfigMap"]
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(config_map["data"]["kpe.json"]) == dashboard()
    [monitor] = [o for o in added if o["kind"] == "ServiceMonitor"]
    [service] = [o for o in base if o["kind"] == "Service"]
    assert monitor["metadata"]["namespace"] == service["metadata"]["namespace"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
