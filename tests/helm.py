"""Rendering and running kpe's Helm chart (deploy/helm/kpe) with the real helm, which
tests/e2e/build-helm.sh builds from the Go module proxy. Tests that need it skip, with that
command, when it is absent."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "deploy" / "helm" / "kpe"
BUILD = "tests/e2e/build-helm.sh"


def helm_binary() -> str | None:
    """``$KPE_HELM_BIN/helm``, else ``~/.cache/kpe-helm/bin/helm`` (where the build script puts it), else helm on PATH."""
    folder = os.environ.get("KPE_HELM_BIN") or str(Path.home() / ".cache" / "kpe-helm" / "bin")
    found = Path(folder) / "helm"
    return str(found) if found.is_file() else shutil.which("helm")


def need_helm() -> str:
    found = helm_binary()
    if found is None:
        pytest.skip(f"helm is not installed; build it with {BUILD} (about 3 minutes) or set KPE_HELM_BIN")
    return found


def template(values: dict[str, Any] | None = None, *, namespace: str = "kpe-system", crds: bool = False, chart: Path = CHART) -> list[dict[str, Any]]:
    """``helm template`` of the chart with ``values`` (as --set-json of each key), as objects."""
    helm = need_helm()
    command = [helm, "template", "kpe", str(chart), "--namespace", namespace]
    command += ["--include-crds"] if crds else []
    for key, value in (values or {}).items():
        command += ["--set-json", f"{key}={json.dumps(value)}"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d]
