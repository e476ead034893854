"""What installing kpe brings: its own dependencies only, with the libraries that a
benchmark or a test compares kpe with kept in extras of their own."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def requirement_names(requirements: list[str]) -> set[str]:
    return {re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0].lower() for r in requirements}


def test_cel_python_is_no_dependency_of_kpe_but_of_the_benchmark_and_the_tests_that_import_it() -> None:
    project = PYPROJECT["project"]
    assert "cel-python" not in requirement_names(project["dependencies"])
    assert "cel-python" in requirement_names(project["optional-dependencies"]["bench"])
    importing = [p for p in (ROOT / "tests").rglob("*.py") if re.search(r"^\s*(import|from) celpy\b", p.read_text(), re.M)]
    assert ("cel-python" in requirement_names(project["optional-dependencies"]["test"])) == bool(importing)
    assert [p for package in ("engine", "server") for p in (ROOT / package).rglob("*.py") if re.search(r"^\s*(import|from) celpy\b", p.read_text(), re.M)] == []


def test_the_cel_benchmark_without_cel_python_says_how_to_install_it() -> None:
    blocked = "import sys, runpy; sys.modules['celpy'] = None; runpy.run_path('bench/cel_bench.py', run_name='__main__')"
    done = subprocess.run([sys.executable, "-c", blocked], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr == "bench/cel_bench.py compares kpe with cel-python, which is not installed: pip install -e '.[bench]'\n"
