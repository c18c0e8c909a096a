"""The README's by-hand session, pasted into a shell as written, does what its comments say."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests import scratch

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[1]


def by_hand_session() -> str:
    readme = (ROOT / "README.md").read_text()
    after = readme[readme.index("By hand, after `make deps`") :]
    match = re.search(r"```\n(.*?)```", after, re.S)
    assert match is not None, "the README has no by-hand session"
    return match.group(1)


def test_the_by_hand_session_works_when_pasted() -> None:
    session = by_hand_session()
    state = Path(scratch.mkdtemp("readme-")) / "dev.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEDWIG_")}
    env["HEDWIG_DEV_STATE"] = str(state)
    # The session runs its own ``hedwig``: the one next to this interpreter (``.venv/bin``).
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    try:
        out = subprocess.run(
            ["bash", "-e", "-c", session],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        subprocess.run(
            [sys.executable, "-m", "hedwig", "dev", "down"], env=env, capture_output=True
        )
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert any(line.startswith("READY hubs=") for line in lines)
    # What the comments promise: two acknowledgements, then the subscriber prints both.
    assert lines.count("1\thello") == 2 and lines.count("2\tworld") == 2
    assert "3\tagain" in lines
    assert "stopping the development cluster" in out.stdout
    assert not state.exists()
