"""The documentation shows what kpe does now: the `kpe` commands it quotes print
what it quotes, the `curl` answers it quotes are what the server answers, the
example files agree with each other, and its links, metric names, routes and
flags exist.

Conventions the docs follow (and these tests rely on):

- A ```console block holds `$ command` lines, each followed by its output;
  a command may continue on the next line after a trailing backslash. Every
  `$ kpe ...` command in such a block (except `kpe serve`) is run here and its
  standard output compared; a line `...` in the quoted output stands for any
  number of lines.
- In the README and the guides, a ```sh block with `curl ... localhost:8888`
  followed by a ```json block is replayed against `kpe serve --cluster off`
  with the policies of the guide's last ```sh `kpe serve` line, and the JSON
  compared (`time` fields aside).
"""

from __future__ import annotations

import asyncio
import importlib.util
import io
import json
import re
import shlex
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest
import yaml

from engine.errors import PolicyLoadError
from engine.policy.loader import load_text
from engine.reports.policytest import run_test_files
from server.app import create_app
from server.cli.main import build_parser, main
from server.telemetry.metrics import Metrics
from server.settings import Settings, env_name

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
EXAMPLES = DOCS / "examples"
GUIDES = ["filters", "scores", "admission", "preemption"]
PAGES = sorted([ROOT / "README.md", *DOCS.glob("*.md"), *(DOCS / "guides").glob("*.md")])
WRITTEN = [p for p in PAGES if "reference" not in p.parts]  # docs/reference/ is generated


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


# -- reading the docs -----------------------------------------------------------------


@dataclass
class Block:
    page: Path
    lang: str
    text: str
    line: int


def blocks(page: Path) -> list[Block]:
    """Fenced code blocks, in order."""
    found: list[Block] = []
    lines = page.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        opening = re.match(r"^```(\S*)\s*$", lines[i])
        if opening:
            start = i
            i += 1
            body: list[str] = []
            while i < len(lines) and lines[i] != "```":
                body.append(lines[i])
                i += 1
            found.append(Block(page, opening.group(1), "\n".join(body), start + 1))
        i += 1
    return found


@dataclass
class Shown:
    page: Path
    line: int
    command: str
    output: str

    def __str__(self) -> str:
        return f"{rel(self.page)}:{self.line}: {self.command[:60]}"


def console_commands(page: Path) -> Iterator[Shown]:
    for block in blocks(page):
        if block.lang != "console":
            continue
        lines = block.text.split("\n")
        i = 0
        while i < len(lines):
            if not lines[i].startswith("$ "):
                i += 1
                continue
            command = lines[i][2:]
            while command.endswith("\\"):
                i += 1
                command = command[:-1].rstrip() + " " + lines[i].strip()
            i += 1
            output: list[str] = []
            while i < len(lines) and not lines[i].startswith("$ "):
                output.append(lines[i])
                i += 1
            yield Shown(page, block.line, command, "\n".join(output))


KPE_COMMANDS = [shown for page in PAGES for shown in console_commands(page) if shown.command.startswith("kpe ") and not shown.command.startswith("kpe serve")]


def matches(expected: str, actual: str) -> bool:
    """``actual`` lines equal ``expected`` lines, where an expected line ``...`` matches any run of lines."""
    pattern = "".join("(?:.*\n)*?" if line == "..." else re.escape(line) + "\n" for line in expected.split("\n"))
    return re.fullmatch(pattern, actual.rstrip("\n") + "\n") is not None


# -- the kpe commands ---------------------------------------------------------------------


def test_the_docs_show_kpe_commands_from_every_guide_and_the_readme() -> None:
    pages = {shown.page.name for shown in KPE_COMMANDS}
    assert {"README.md", "filters.md", "scores.md", "admission.md", "preemption.md", "gitops.md"} <= pages
    kinds = {shown.command.split()[1] for shown in KPE_COMMANDS}
    assert {"check", "test", "explain", "scheduler-config"} <= kinds


@pytest.mark.parametrize("shown", KPE_COMMANDS, ids=str)
def test_each_kpe_command_in_the_docs_prints_what_the_docs_show(shown: Shown, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    argv = shlex.split(shown.command)[1:]
    if "--junit" in argv:  # write the report aside, not into the repository
        argv[argv.index("--junit") + 1] = str(tmp_path / "report.xml")
    monkeypatch.chdir(ROOT)
    out = io.StringIO()
    main(argv, out=out)
    assert matches(shown.output, out.getvalue()), f"{shown}: the output differs from the docs; now it is:\n{out.getvalue()}"


def test_the_readme_starts_with_the_two_install_commands() -> None:
    sh = [b.text for b in blocks(ROOT / "README.md")[:2]]
    assert sh == [
        "python3 -m venv .venv && . .venv/bin/activate && pip install -e . && kpe check policies && kpe explain --policies policies --pod docs/examples/pod-gpu-training.yaml --nodes docs/examples/nodes.yaml",
        "python3 -m venv .venv && . .venv/bin/activate && pip install -e '.[test]' && python -m pytest -q",
    ]


def test_the_readme_cluster_pods_sentence_is_what_kpe_explain_says(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    readme = (ROOT / "README.md").read_text()
    reason = "gpu-placement/enough-free-gpus: node has 1 of 8 GPUs free, pod needs 2"
    assert "--cluster-pods docs/examples/cluster-pods.yaml" in readme and f"`{reason}`" in readme
    out = io.StringIO()
    main(["explain", "--policies", "policies", "--pod", "docs/examples/pod-gpu-training.yaml", "--nodes", "docs/examples/nodes.yaml", "--cluster-pods", "docs/examples/cluster-pods.yaml", "--output", "json"], out=out)
    verdicts = {n["node"]: (n["verdict"], n["reason"]) for n in json.loads(out.getvalue())["nodes"]}
    assert verdicts["gpu-b1"] == ("fail", reason)


# -- the curl examples ------------------------------------------------------------------


@dataclass
class Curl:
    page: Path
    line: int
    policies: str
    method: str
    path: str
    body: str | None
    expected: Any
    controllers: str = ""  # the example's --controllers

    def __str__(self) -> str:
        return f"{rel(self.page)}:{self.line}: {self.method} {self.path}"


def curl_examples() -> list[Curl]:
    found: list[Curl] = []
    for page in [ROOT / "README.md", *sorted((DOCS / "guides").glob("*.md"))]:
        policies, controllers = "", ""
        page_blocks = blocks(page)
        for i, block in enumerate(page_blocks):
            if block.lang != "sh":
                continue
            serve = re.search(r"^kpe serve (.*)$", block.text, re.M)
            if serve:
                args = shlex.split(serve.group(1))
                assert "--cluster" in args and args[args.index("--cluster") + 1] == "off", f"{rel(page)}:{block.line}: examples serve with --cluster off"
                assert "--policies" in args, f"{rel(page)}:{block.line}: kpe serve needs --policies"
                policies = args[args.index("--policies") + 1]
                controllers = args[args.index("--controllers") + 1] if "--controllers" in args else ""
            command = block.text.replace("\\\n", " ")
            if "curl " not in command or i + 1 >= len(page_blocks) or page_blocks[i + 1].lang != "json":
                continue
            words = shlex.split(command.split("|")[0])
            url = next(w for w in words if "localhost:8888" in w)
            body = next((w[1:] for w in words if w.startswith("@")), None)
            found.append(Curl(page, block.line, policies, "POST" if "-XPOST" in words else "GET", url.split("localhost:8888", 1)[1], body, json.loads(page_blocks[i + 1].text), controllers))
    return found


CURLS = curl_examples()


def without_time(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: without_time(v) for k, v in value.items() if k != "time"}
    if isinstance(value, list):
        return [without_time(v) for v in value]
    return value


def test_the_readme_and_every_guide_but_filters_replay_a_request_against_kpe_serve() -> None:
    assert {c.page.name for c in CURLS} == {"README.md", "scores.md", "admission.md", "preemption.md"}


def test_each_curl_example_gets_the_answer_the_docs_show(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)

    async def replay() -> list[tuple[Curl, Any]]:
        apps: dict[str, Any] = {}
        answers = []
        for curl in CURLS:  # in document order: the decision log sees the requests before it
            key = f"{curl.page}:{curl.policies}:{curl.controllers}"
            if key not in apps:  # no lifespan: no policy watcher, no cluster connection
                apps[key] = create_app(Settings(policies=curl.policies, cluster="off", controllers=curl.controllers), connect=False)
            transport = httpx.ASGITransport(app=apps[key])
            async with httpx.AsyncClient(transport=transport, base_url="http://localhost:8888") as client:
                if curl.body is None:
                    response = await client.request(curl.method, curl.path)
                else:
                    body = (ROOT / curl.body).read_bytes()
                    response = await client.request(curl.method, curl.path, content=body, headers={"Content-Type": "application/json"})
            answers.append((curl, response.json()))
        return answers

    for curl, answer in asyncio.run(replay()):
        assert without_time(answer) == without_time(curl.expected), f"{curl}: the answer differs from the docs:\n{json.dumps(answer, indent=4)}"


def load_script(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_request_bodies_are_generated_from_the_example_yaml() -> None:
    make_requests = load_script(EXAMPLES / "make_requests.py")
    assert make_requests.main(["--check"]) == 0, "run: python docs/examples/make_requests.py"
    used = {c.body for c in CURLS if c.body}
    assert {rel(p) for p in make_requests.outputs()} >= used


def test_the_walkthrough_pod_is_one_the_api_server_accepts() -> None:
    """The Priority admission plugin sets spec.priority from priorityClassName and
    refuses a pod that sets it itself."""
    [pod] = objects(EXAMPLES / "pod-gpu-training.yaml")
    assert "priority" not in pod["spec"]


# -- the example files ------------------------------------------------------------------


@pytest.mark.parametrize("guide", GUIDES)
def test_each_guide_has_an_example_policytest_that_passes(guide: str) -> None:
    results = run_test_files([EXAMPLES / guide / "test.yaml"])
    assert results, f"no cases in docs/examples/{guide}/test.yaml"
    failed = [r.render() for r in results if not r.passed]
    assert not failed, "\n".join(failed)
    assert f"examples/{guide}/test.yaml" in (DOCS / "guides" / f"{guide}.md").read_text()


def plain(obj: dict[str, Any], name: str | None = None) -> dict[str, Any]:
    """An object as a fixture holds it: no apiVersion and kind, metadata.name set to the fixture's key."""
    out = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}
    metadata = dict(out.get("metadata") or {})
    if name is not None:
        metadata["name"] = name
    out["metadata"] = metadata
    return out


def objects(path: Path) -> list[dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    return [item for d in docs for item in (d["items"] if "items" in d else [d])]


@pytest.mark.parametrize(
    ("guide", "files"),
    [
        ("filters", {"nodes": ["nodes.yaml"], "pods": ["cluster-pods.yaml"]}),
        ("scores", {"nodes": ["nodes.yaml"], "pods": ["cluster-pods.yaml"]}),
        ("admission", {"nodes": ["nodes.yaml"], "pods": ["cluster-pods.yaml"]}),
        ("preemption", {"pods": ["victims.yaml"]}),
    ],
)
def test_the_policytest_fixtures_are_the_objects_kpe_explain_and_curl_are_shown_with(guide: str, files: dict[str, list[str]]) -> None:
    test = yaml.safe_load((EXAMPLES / guide / "test.yaml").read_text())
    fixtures = test["spec"]["fixtures"]
    for kind, names in files.items():
        for file in names:
            for obj in objects(EXAMPLES / guide / file):
                name = obj["metadata"]["name"]
                assert name in fixtures[kind], f"{guide}/{file}: {name} is not a fixture of test.yaml"
                assert plain(fixtures[kind][name], name) == plain(obj), f"{guide}/{file}: {name} differs from its fixture in test.yaml"


def yaml_blocks() -> list[Block]:
    return [b for page in WRITTEN for b in blocks(page) if b.lang == "yaml"]


def example_policies() -> dict[str, Any]:
    found: dict[str, Any] = {}
    for path in [*EXAMPLES.rglob("*.yaml"), *(ROOT / "policies").glob("*.yaml")]:
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "SchedulingPolicy":
                found[doc["metadata"]["name"]] = doc
    return found


def test_every_policy_quoted_in_the_docs_loads_and_is_the_example_file_it_names() -> None:
    quoted = [b for b in yaml_blocks() if "kind: SchedulingPolicy" in b.text]
    assert len(quoted) >= 6
    examples = example_policies()
    for block in quoted:
        try:
            policy_set = load_text(block.text, file=f"{rel(block.page)}:{block.line}")
        except PolicyLoadError as exc:
            pytest.fail(exc.render())
        for policy in policy_set.policies:
            if block.page.name != "README.md":
                assert yaml.safe_load(block.text) == examples[policy.name], f"{rel(block.page)}:{block.line}: {policy.name} differs from its file"


def test_every_yaml_excerpt_in_the_guides_is_copied_from_a_file() -> None:
    """Excerpts (no apiVersion) are verbatim copies; `"..."` marks a sketch, which is exempt."""
    sources = [p.read_text() for p in [*EXAMPLES.rglob("*.yaml"), *(ROOT / "policies").rglob("*.yaml"), *(ROOT / "deploy").rglob("*.yaml")]]
    excerpts = [b for b in yaml_blocks() if b.page.parent.name == "guides" and "apiVersion:" not in b.text and '"..."' not in b.text]
    assert excerpts
    for block in excerpts:
        assert any(block.text in source for source in sources), f"{rel(block.page)}:{block.line}: not found in docs/examples, policies or deploy"


# -- links, names, routes, flags ----------------------------------------------------------


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    return {slug(m.group(1)) for m in re.finditer(r"^#+\s+(.*)$", text, re.M)}


def links(page: Path) -> Iterator[tuple[str, str]]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    for match in re.finditer(r"\[[^\]]*\]\(([^)\s]+)\)", text):
        target = match.group(1)
        if not re.match(r"^[a-z]+:", target):
            yield match.group(0), target


def test_every_relative_link_in_the_docs_points_to_an_existing_file() -> None:
    checked = 0
    for page in PAGES:
        for link, target in links(page):
            path_part, _, anchor = target.partition("#")
            resolved = (page.parent / path_part).resolve() if path_part else page
            assert resolved.exists(), f"{rel(page)}: {link} points to a missing file"
            if anchor and resolved.suffix == ".md":
                assert anchor in anchors(resolved), f"{rel(page)}: {link}: no heading #{anchor} in {rel(resolved)}"
            checked += 1
    assert checked > 50


def exposed_metric_names() -> set[str]:
    from prometheus_client import Counter, Gauge, Histogram

    names: set[str] = set()
    for metric in vars(Metrics()).values():
        if isinstance(metric, Counter):
            names.add(metric._name + "_total")
        elif isinstance(metric, Histogram):
            names |= {metric._name + suffix for suffix in ("", "_bucket", "_sum", "_count")}
        elif isinstance(metric, Gauge):
            names.add(metric._name)
    return names


def test_every_metric_the_docs_name_exists_and_operations_lists_them_all() -> None:
    exposed = exposed_metric_names()
    for page in WRITTEN:
        for name in set(re.findall(r"\bkpe_[a-z_]+[a-z]", page.read_text())):
            assert name in exposed, f"{rel(page)} names {name}, which kpe does not export"
    table = (DOCS / "operations.md").read_text()
    families = {n for n in exposed if not n.endswith(("_bucket", "_sum", "_count"))}
    missing = sorted(n for n in families if f"| `{n}` |" not in table)
    assert not missing, f"add to the metrics table of docs/operations.md: {missing}"


def test_every_api_path_the_docs_name_is_served() -> None:
    app = create_app(Settings(policies=str(ROOT / "policies"), cluster="off"), connect=False)
    routes = [re.compile(re.sub(r"\\\{\w+\\\}", "[^/]+", re.escape(route.path))) for route in app.routes]  # type: ignore[attr-defined]
    found = 0
    for page in WRITTEN:
        for path in set(re.findall(r"/apis/v1/[\w{}]+(?:/[\w{}.-]+)?", page.read_text())):
            assert any(r.fullmatch(path) for r in routes), f"{rel(page)} names {path}, which kpe does not serve"
            found += 1
    assert found >= 7


# Flags of other programs that the docs use.
OTHER_PROGRAMS = {"--cacert", "--cert", "--key", "--resolve", "--admission-control-config-file", "--dry-run", "--runtime-config", "--feature-gates",
                  "--gil", "--format", "--pid",  # these three: py-spy's, which bench/profile_phases.py reads the output of
                  "--build-arg", "--short",  # docker build's and git rev-parse's, for the commit kpe --version names
                  "--namespace", "--create-namespace", "--set", "--reuse-values", "--wait"}  # helm's, in docs/install.md


def kpe_options() -> set[str]:
    import argparse

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    own = {opt for action in parser._actions for opt in action.option_strings}  # kpe --version
    return own | {opt for command in sub.choices.values() for action in command._actions for opt in action.option_strings}


def test_every_flag_and_variable_the_docs_name_exists() -> None:
    options = kpe_options()
    scripts = "".join(p.read_text() for p in [*(ROOT / "bench").glob("*.py"), EXAMPLES / "make_requests.py", ROOT / "deploy" / "sync_policies.py"])
    variables = {env_name(name) for name in Settings.__dataclass_fields__}
    variables |= set(re.findall(r"^ARG (KPE_\w+)", (ROOT / "Dockerfile").read_text(), re.M))  # the image's build arguments
    for page in WRITTEN:
        text = page.read_text()
        for flag in set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]+", text)):
            known = flag in options or flag in OTHER_PROGRAMS or f'"{flag}"' in scripts
            assert known, f"{rel(page)} names {flag}, which no kpe command or script takes"
        for variable in set(re.findall(r"\bKPE_[A-Z_]+[A-Z]", text)):
            assert variable in variables, f"{rel(page)} names {variable}, which is no kpe setting"
