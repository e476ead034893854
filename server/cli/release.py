"""What this kpe is, as ``kpe --version`` says it: its version, the commit it was built from
and the Kubernetes versions it supports.

The version is the package's, declared once in pyproject.toml. The commit comes from
``server/buildinfo.json``, which only the image build writes (the Dockerfile's ``KPE_COMMIT``
build argument): an installed wheel has no git history to ask. A git checkout asks git;
anything else says ``unknown`` rather than guess.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# The oldest and newest Kubernetes minor versions kpe supports: the two its end-to-end tests run
# against (tests/e2e/build-control-plane.sh), the newest also the one whose schemas expressions
# are typed against (engine.cel.checker.schema.KUBERNETES_VERSION). tests/test_cli_release.py
# holds it to both, and to every page of the docs that names the range.
SUPPORTED_KUBERNETES = ("1.32", "1.37")

PACKAGE = "kube-policy-extender"
BUILD_INFO = Path(__file__).resolve().parents[1] / "buildinfo.json"
CHECKOUT = Path(__file__).resolve().parents[2]  # the repository root, when this is a checkout


def version() -> str:
    try:
        return importlib.metadata.version(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        # Run from a checkout that was never installed (python -m server.cli): the version it declares.
        import tomllib

        pyproject = CHECKOUT / "pyproject.toml"
        return str(tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["version"])


def commit() -> str:
    try:
        built = json.loads(BUILD_INFO.read_text(encoding="utf-8")).get("commit")
    except (OSError, ValueError, AttributeError):
        built = None
    if isinstance(built, str) and built.strip():
        return built.strip()
    # Only the checkout kpe's own code sits in: git run from site-packages would find the
    # repository of whatever project the virtualenv lives in, and name its commit.
    if (CHECKOUT / ".git").exists():
        try:
            done = subprocess.run(
                ["git", "-C", str(CHECKOUT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10, check=False
            )
        except (OSError, subprocess.SubprocessError):
            return "unknown"
        if done.returncode == 0 and done.stdout.strip():
            return done.stdout.strip()
    return "unknown"


def supported_kubernetes() -> str:
    """The range as kpe says it: ``1.32 to 1.37``."""
    oldest, newest = SUPPORTED_KUBERNETES
    return f"{oldest} to {newest}"


def version_line() -> str:
    return f"kpe {version()} (commit {commit()}, Kubernetes {supported_kubernetes()})"


class VersionAction(argparse.Action):
    """``--version``, worked out only when it is given: asking git on every command would slow
    each ``kpe check`` down for a line nobody asked for."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, default: Any = argparse.SUPPRESS, help: str | None = None) -> None:
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option_string: str | None = None) -> None:
        sys.stdout.write(version_line() + "\n")
        parser.exit()


__all__ = ["SUPPORTED_KUBERNETES", "VersionAction", "commit", "supported_kubernetes", "version", "version_line"]
