"""The layers of kpe's code hold (tests/cases/layers.yaml): no import circles, the engine
never reaches the server or an HTTP or Kubernetes client, each engine package imports only
the ones below it, and server surfaces never import each other.

The graph is read from the source with ``ast``, so an import inside a function or under
``TYPE_CHECKING`` counts as much as one at the top: both tie the modules together for
whoever reads or changes them.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
RULES: dict[str, Any] = yaml.safe_load((Path(__file__).parent / "cases" / "layers.yaml").read_text())
PACKAGES = ("engine", "server")


@dataclass(frozen=True)
class Import:
    importer: str  # dotted module name
    imported: str  # dotted name as written (a module, or a module's attribute)
    line: int

    def where(self) -> str:
        return f"{self.importer.replace('.', '/')}.py:{self.line}: imports {self.imported}"


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, root: Path) -> Iterator[Import]:
    """Every import in one file, relative ones made absolute."""
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(name, alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for alias in node.names:
                yield Import(name, f"{module}.{alias.name}", node.lineno)


def all_imports(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES) -> list[Import]:
    return [imp for package in packages for path in sorted((root / package).rglob("*.py")) for imp in imports_of(path, root)]


def modules(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES) -> set[str]:
    return {module_name(path, root) for package in packages for path in (root / package).rglob("*.py")}


def resolve(name: str, known: set[str]) -> str | None:
    """The module a dotted import name lands in (``engine.cel.compile`` -> ``engine.cel``)."""
    while name:
        if name in known:
            return name
        name = name.rpartition(".")[0]
    return None


def within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The graph's strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component: list[str] = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def graph_of(imports: list[Import], known: set[str]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {m: set() for m in known}
    for imp in imports:
        target = resolve(imp.imported, known)
        if target is not None and target != imp.importer:
            graph[imp.importer].add(target)
    return graph


# -- the rules, each a function of (imports, known modules) -> violations, so the tests below
# -- can show them failing on a tree made to break them.


def circle_violations(imports: list[Import], known: set[str]) -> list[str]:
    return [" -> ".join(c) for c in circles(graph_of(imports, known))]


def engine_violations(imports: list[Import], known: set[str]) -> list[str]:
    rules = RULES["engine"]
    layers: list[str] = rules["layers"]
    out = []
    for imp in imports:
        if not within(imp.importer, "engine"):
            continue
        if any(within(imp.imported, f) for f in rules["forbidden"]):
            out.append(f"{imp.where()}: the engine never imports {imp.imported.split('.')[0]}")
            continue
        target = resolve(imp.imported, known)
        if target is None or not within(target, "engine"):
            continue
        mine = [i for i, layer in enumerate(layers) if within(imp.importer, layer)]
        theirs = [i for i, layer in enumerate(layers) if within(target, layer)]
        if mine and theirs and theirs[0] > mine[0]:
            out.append(f"{imp.where()}: {layers[mine[0]]} may not import {layers[theirs[0]]}, a layer above it")
    return out


def _part(name: str, parts: list[str]) -> str | None:
    return next((p for p in parts if within(name, p)), None)


def server_violations(imports: list[Import], known: set[str]) -> list[str]:
    rules = RULES["server"]
    surfaces, foundations, commands = rules["surfaces"], rules["foundations"], rules["commands"]
    kube = rules["kubernetes"]
    out = []
    for imp in imports:
        if not within(imp.importer, "server"):
            continue
        if any(within(imp.imported, c) for c in kube["clients"]) and not within(imp.importer, kube["package"]):
            out.append(f"{imp.where()}: only {kube['package']} talks to the Kubernetes API")
            continue
        target = resolve(imp.imported, known)
        if target is None or not within(target, "server"):
            continue
        source_surface, target_surface = _part(imp.importer, surfaces), _part(target, surfaces)
        if source_surface and target_surface and source_surface != target_surface:
            out.append(f"{imp.where()}: surface {source_surface} may not import surface {target_surface}")
        elif _part(imp.importer, foundations) and not (_part(target, foundations) or target == "server.settings"):
            out.append(f"{imp.where()}: {_part(imp.importer, foundations)} builds only on the other foundations and server.settings")
        elif _part(target, commands) and not _part(imp.importer, commands):
            out.append(f"{imp.where()}: nothing imports the command line")
    return out


def folder_violations(root: Path = ROOT) -> list[str]:
    limit = RULES["max_modules_per_folder"]
    out = []
    for package in PACKAGES:
        for folder in [root / package, *sorted(p for p in (root / package).rglob("*") if p.is_dir() and (p / "__init__.py").exists())]:
            held = [p for p in folder.glob("*.py") if p.name not in ("__init__.py", "__main__.py")]
            if len(held) > limit:
                out.append(f"{folder.relative_to(root)}/ holds {len(held)} modules (at most {limit}): group them in subfolders")
    return out


IMPORTS = all_imports()
KNOWN = modules()


def test_no_module_of_engine_or_server_imports_itself_through_others() -> None:
    assert circle_violations(IMPORTS, KNOWN) == []


def test_the_engine_imports_only_the_layers_below_it_and_never_the_server_or_a_client() -> None:
    assert engine_violations(IMPORTS, KNOWN) == []


def test_server_surfaces_never_import_each_other_and_foundations_never_import_surfaces() -> None:
    assert server_violations(IMPORTS, KNOWN) == []


def test_no_folder_holds_more_modules_than_a_reader_can_take_in() -> None:
    assert folder_violations() == []


def test_every_layer_named_in_the_rules_exists() -> None:
    named = [*RULES["engine"]["layers"], *(p for key in ("root", "foundations", "surfaces", "commands") for p in RULES["server"][key])]
    assert [p for p in named if p not in KNOWN] == []


# -- the rules can fail: each is shown a small tree that breaks it.


def _tree(tmp_path: Path, files: dict[str, str]) -> tuple[list[Import], set[str]]:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for package in PACKAGES:
        (tmp_path / package).mkdir(exist_ok=True)
        for folder in [p for p in (tmp_path / package).rglob("*") if p.is_dir()] + [tmp_path / package]:
            (folder / "__init__.py").touch()
    return all_imports(tmp_path), modules(tmp_path)


@pytest.mark.parametrize(
    ("files", "rule", "expected"),
    [
        pytest.param(
            {"engine/cel/ext/a.py": "from engine.cel.ext.b import x\n", "engine/cel/ext/b.py": "from engine.cel.ext import a\n"},
            circle_violations,
            ["engine.cel.ext.a -> engine.cel.ext.b"],
            id="a circle",
        ),
        pytest.param(
            {"engine/cel/ext/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from engine.cel.ext.b import x\n", "engine/cel/ext/b.py": "def f():\n    from engine.cel.ext.a import y\n"},
            circle_violations,
            ["engine.cel.ext.a -> engine.cel.ext.b"],
            id="a circle through TYPE_CHECKING and a late import",
        ),
        pytest.param(
            {"engine/decisions/filtering.py": "from engine.equivalence.classes import EquivalenceCache\n", "engine/equivalence/classes.py": ""},
            engine_violations,
            ["engine/decisions/filtering.py:1: imports engine.equivalence.classes.EquivalenceCache: engine.decisions may not import engine.equivalence, a layer above it"],
            id="a decision reaching for the cache around it",
        ),
        pytest.param(
            {"engine/reports/explain.py": "import starlette.responses\nfrom server.state import ServerState\n", "server/state.py": ""},
            engine_violations,
            [
                "engine/reports/explain.py:1: imports starlette.responses: the engine never imports starlette",
                "engine/reports/explain.py:2: imports server.state.ServerState: the engine never imports server",
            ],
            id="the engine importing the server",
        ),
        pytest.param(
            {"server/admission/webhook.py": "from server.verbs.handlers import read_json\n", "server/verbs/handlers.py": ""},
            server_violations,
            ["server/admission/webhook.py:1: imports server.verbs.handlers.read_json: surface server.admission may not import surface server.verbs"],
            id="a surface importing another",
        ),
        pytest.param(
            {"server/cluster/cache.py": "from server.state import ServerState\n", "server/state.py": ""},
            server_violations,
            ["server/cluster/cache.py:1: imports server.state.ServerState: server.cluster builds only on the other foundations and server.settings"],
            id="a foundation importing the state",
        ),
        pytest.param(
            {"server/admission/gates.py": "import kr8s\n"},
            server_violations,
            ["server/admission/gates.py:1: imports kr8s: only server.cluster talks to the Kubernetes API"],
            id="a Kubernetes client outside server.cluster",
        ),
        pytest.param(
            {"server/state.py": "from server.cli.main import EXIT_OK\n", "server/cli/main.py": ""},
            server_violations,
            ["server/state.py:1: imports server.cli.main.EXIT_OK: nothing imports the command line"],
            id="the root importing the command line",
        ),
    ],
)
def test_each_rule_reports_a_tree_that_breaks_it(tmp_path: Path, files: dict[str, str], rule: Any, expected: list[str]) -> None:
    imports, known = _tree(tmp_path, files)
    assert rule(imports, known) == expected


def test_a_folder_of_too_many_modules_is_reported(tmp_path: Path) -> None:
    _tree(tmp_path, {f"engine/cel/ext/m{i}.py": "" for i in range(RULES["max_modules_per_folder"] + 1)})
    assert folder_violations(tmp_path) == [f"engine/cel/ext/ holds {RULES['max_modules_per_folder'] + 1} modules (at most {RULES['max_modules_per_folder']}): group them in subfolders"]
