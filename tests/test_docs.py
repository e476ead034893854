"""The reference docs are generated and current, and docs/cel-functions.md lists
every function of kpe's CEL library with examples that hold."""

from __future__ import annotations

import argparse
import importlib.util
import re
import sys
from dataclasses import fields
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from engine import cel
from engine.cel.types import names
from engine.cluster.counts import CountSpecs, counts_of
from server.cli.main import build_parser
from server.settings import Settings, env_name

ROOT = Path(__file__).resolve().parent.parent
CEL_DOC = ROOT / "docs" / "cel-functions.md"


def load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_reference", ROOT / "docs" / "gen_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


gen = load_generator()


# -- generated reference ------------------------------------------------------------------


@pytest.mark.parametrize("name", ["policy.md", "reservation.md", "settings.md", "cli.md"])
def test_generated_reference_is_current(name: str) -> None:
    path = ROOT / "docs" / "reference" / name
    expected: str = gen.outputs()[path]
    assert path.exists(), "run: python docs/gen_reference.py"
    assert path.read_text(encoding="utf-8") == expected, "out of date; run: python docs/gen_reference.py"


def test_every_policy_field_is_described() -> None:
    rows = gen.policy_fields()
    assert len(rows) > 30
    for row in rows:
        assert row.type and row.description, f"{row.path} needs a type and a description in the schema"
    by_path = {row.path: row for row in rows}
    assert by_path["spec.mode"].default == '`"Enforce"`' and "`Audit`" in by_path["spec.mode"].allowed
    assert by_path["spec.scores[].weight"].default == "`1`"
    assert by_path["spec.filters[].expression"].type == "string (CEL)" and by_path["spec.filters[].expression"].required


def policy_paths(node: Any, path: str = "") -> set[str]:
    """Field paths a policy document uses, in the reference's notation; free-form maps stop the walk."""
    found: set[str] = set()
    if isinstance(node, dict):
        for key, value in node.items():
            child = f"{path}.{key}" if path else str(key)
            found.add(child)
            if child not in ("spec.params", "metadata.labels", "metadata.annotations", "spec.match.podSelector.matchLabels"):
                found |= policy_paths(value, child)
    elif isinstance(node, list):
        for item in node:
            found |= policy_paths(item, f"{path}[]")
        found = {p for p in found if p != f"{path}[]"}
    return found


def test_reference_covers_every_field_the_shipped_policies_use() -> None:
    documented = {row.path for row in gen.policy_fields()}
    used: set[str] = set()
    for file in (ROOT / "policies").glob("*.yaml"):
        for doc in yaml.safe_load_all(file.read_text()):
            used |= policy_paths(doc)
    assert used and used <= documented, used - documented


def serve_options() -> set[str]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {opt for action in sub.choices["serve"]._actions for opt in action.option_strings}


def test_settings_reference_names_every_flag_and_variable() -> None:
    text = gen.render_settings_reference()
    options = serve_options()
    for f in fields(Settings):
        flag = "--" + f.name.replace("_", "-")
        assert flag in options
        row = next(line for line in text.splitlines() if line.startswith(f"| `{f.name}` |"))
        assert f"`{flag}" in row and f"`{env_name(f.name)}`" in row
        assert str(f.metadata["help"]) in row


def test_the_cli_reference_names_every_command_and_option() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    text = gen.render_cli_reference()
    for name, command in sub.choices.items():
        assert f"## `kpe {name}`" in text
        if name != "serve":  # its options are the settings reference
            for action in command._actions:
                for option in action.option_strings:
                    assert option in ("-h", "--help") or f"`{option}`" in text, (name, option)
    assert "Exit codes: 0 no change (or none that --fail-on counts); 1 changes" in text


def test_generator_check_mode() -> None:
    assert gen.main(["--check"]) == 0


# -- CEL functions -------------------------------------------------------------------------


def receiver_name(cls: type) -> str:
    """The receiver as the doc writes it: the CEL type name without its namespace
    (``kubernetes.Quantity`` → ``Quantity``, ``optional_type`` → ``optional``)."""
    name = names.class_name(cls)  # the registry library modules fill in
    return name.rsplit(".", 1)[-1].removesuffix("_type")


def signatures() -> set[str]:
    """Every ``name(`` / ``Receiver.name(`` at the start of a code span in the doc's signature column."""
    found: set[str] = set()
    for line in CEL_DOC.read_text().splitlines():
        if line.startswith("| `"):
            first_cell = line.split(" | ")[0]
            found |= set(re.findall(r"`([A-Za-z_][\w.]*)\(", first_cell))
    return found


def test_every_library_function_is_documented() -> None:
    library = cel.default_library()
    documented = signatures()
    missing = [f"{name}()" for name in library.functions if name not in documented]
    for name, by_type in library.methods.items():
        for cls in by_type:
            if f"{receiver_name(cls)}.{name}" not in documented:
                missing.append(f"{receiver_name(cls)}.{name}()")
    assert not missing, f"add to docs/cel-functions.md: {', '.join(sorted(set(missing)))}"


def test_documented_functions_exist() -> None:
    """The other direction: no signature names a function or method kpe lacks
    (macros and the compiler's own functions aside)."""
    library = cel.default_library()
    compiler_provided = {"size", "type", "has", "all", "exists", "exists_one", "existsOne", "map", "filter", "transformList", "transformMap", "optMap", "optFlatMap"}
    receivers = {receiver_name(cls) for by_type in library.methods.values() for cls in by_type} | {"list", "map", "bytes", "string", "optional"}
    for signature in signatures():
        receiver, _, name = signature.rpartition(".")
        if signature in library.functions or name in compiler_provided:
            continue
        assert receiver in receivers and name in library.methods, signature


def examples() -> list[str]:
    found: list[str] = []
    for line in CEL_DOC.read_text().splitlines():
        if line.startswith("| `"):
            cells = [c.strip() for c in re.split(r"(?<!\\) \| ", line.strip().strip("|"))]
            last = cells[-1]
            assert last.startswith("`") and last.endswith("`"), line
            found.append(last[1:-1].replace("\\|", "|"))
    return found


# The cluster the examples of `counts` (docs/cel-functions.md, "Counts across nodes") count in.
DOC_NODES = [{"metadata": {"name": n, "labels": {"topology.kubernetes.io/zone": z}}} for n, z in (("n1", "a"), ("n2", "a"), ("n3", "b"))]
DOC_PODS = [{"metadata": {"name": f"web-{i}", "labels": {"app": "web"}}, "spec": {"nodeName": n}} for i, n in enumerate(("n1", "n2", "n3"))]


@pytest.mark.parametrize("example", examples())
def test_examples_are_true(example: str) -> None:
    if "counts." not in example:
        assert cel.compile(example).evaluate({}) is True
        return
    specs = CountSpecs(frozenset({(("app",), "topology.kubernetes.io/zone")}), frozenset({("app",)}))
    assert cel.compile(example, variables=["counts"]).evaluate({"counts": counts_of(specs, DOC_NODES, DOC_PODS)}) is True


# -- architecture ---------------------------------------------------------------------------


def _architecture_tree() -> list[str]:
    """The module paths docs/architecture.md's tree names, from its indentation."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    block = text.split("<!-- tree:", 1)[1].split("<!-- end of tree -->", 1)[0]
    block = block.split("```", 2)[1].split("\n", 1)[1]  # after the fence's language
    paths: list[str] = []
    folders: list[str] = []
    for line in block.splitlines():
        if not line.strip():
            continue
        depth = (len(line) - len(line.lstrip(" "))) // 2
        name = line.split()[0]
        del folders[depth:]
        if name.endswith("/"):
            folders.append(name.rstrip("/"))
        else:
            paths.append("/".join([*folders, name]))
    return paths


def test_the_architecture_page_names_every_module_of_engine_and_server() -> None:
    actual = sorted(str(p.relative_to(ROOT)) for package in ("engine", "server") for p in (ROOT / package).rglob("*.py") if p.name != "__init__.py")
    assert sorted(_architecture_tree()) == actual


def test_the_architecture_page_describes_every_folder() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text().split("<!-- end of tree -->", 1)[1]
    folders = sorted(str(p.relative_to(ROOT)) + "/" for package in ("engine", "server") for p in (ROOT / package).rglob("*") if p.is_dir() and (p / "__init__.py").exists())
    assert [f for f in folders if f"`{f}" not in text] == []
