"""The chart's NOTES as ``helm install`` prints them, without a cluster: ``helm template``
never renders NOTES.txt, so a copy of the chart renders it as the value of a ConfigMap
(``tpl`` of the file, with the same values and helpers). Shared by the static test and the
real-pods test, which runs the commands it gives."""

from __future__ import annotations

import re
import shutil
import tempfile
import textwrap
from collections.abc import Sequence
from pathlib import Path

import yaml

from tests.chart.tools import CHART, helm

_RENDERER = """apiVersion: v1
kind: ConfigMap
metadata: {name: rendered-notes}
data:
  notes: {{ tpl (.Files.Get "rendered-notes.txt") . | toYaml | nindent 4 }}
"""


def render_notes(sets: Sequence[str] = (), namespace: str = "hedwig") -> str:
    with tempfile.TemporaryDirectory(prefix="hedwig-notes-") as tmp:
        chart = Path(tmp) / "hedwig"
        shutil.copytree(CHART, chart)
        shutil.copy(chart / "templates" / "NOTES.txt", chart / "rendered-notes.txt")
        (chart / "templates" / "zz-rendered-notes.yaml").write_text(_RENDERER)
        args = ["template", "hedwig", str(chart), "--namespace", namespace]
        args += ["--show-only", "templates/zz-rendered-notes.yaml"]
        for s in sets:
            args += ["--set", s]
        out = helm(*args).stdout
    notes: str = yaml.safe_load(out)["data"]["notes"]
    return notes


def step(notes: str, number: int) -> str:
    """Step ``number`` of the NOTES, as a user copies its indented commands: the lines
    indented as commands are (five spaces) and the blank lines between them, dedented."""
    match = re.search(rf"^{number}\. .*?(?=^\d+\. |\Z)", notes, re.S | re.M)
    assert match is not None, f"the NOTES have no step {number}"
    lines = [line for line in match.group(0).splitlines() if line.startswith("     ") or not line]
    return textwrap.dedent("\n".join(lines)).strip("\n") + "\n"
