"""docs/operations.md lists every hub setting, with its flag, its variable and its meaning."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest

from hedwig.hub.config import HubConfig

DOC = (Path(__file__).resolve().parents[1] / "docs" / "operations.md").read_text()
SETTINGS = [f for f in fields(HubConfig) if "doc" in f.metadata]


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda f: f.name)
def test_every_setting_is_documented(setting: object) -> None:
    name = setting.name  # type: ignore[attr-defined]
    flag = "--" + name.removesuffix("_s").replace("_", "-")
    row = f"| `{flag}` | `HEDWIG_{name.upper()}` |"
    assert row in DOC, f"docs/operations.md lacks the setting {name} ({row})"
    assert setting.metadata["doc"] in DOC  # type: ignore[attr-defined]


def test_only_settings_that_exist_are_documented() -> None:
    documented = {
        line.split("`")[3]
        for line in DOC.splitlines()
        if line.startswith("| `--") and "`HEDWIG_" in line
    }
    assert documented == {f"HEDWIG_{f.name.upper()}" for f in SETTINGS}
