"""docs/operations.md lists every hub setting, with its flag, its variable and its meaning."""

from __future__ import annotations

from pathlib import Path

import pytest

from hedwig.settings import Declared, HubConfig
from hedwig.settings.declaration import declarations

DOC = (Path(__file__).resolve().parents[1] / "docs" / "operations.md").read_text()
SETTINGS = declarations(HubConfig)


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda d: d.name)
def test_every_setting_is_documented(setting: Declared) -> None:
    row = f"| `{setting.flag}` | `{setting.env}` |"
    assert row in DOC, f"docs/operations.md lacks the setting {setting.name} ({row})"
    assert setting.setting.doc in DOC


def test_only_settings_that_exist_are_documented() -> None:
    documented = {
        line.split("`")[3]
        for line in DOC.splitlines()
        if line.startswith("| `--") and "`HEDWIG_" in line
    }
    assert documented == {d.env for d in SETTINGS}
