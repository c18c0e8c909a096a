"""The README's by-hand session, pasted into a shell as written, does what its comments say."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests import scratch

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[1]


def block_after(page: str, marker: str, fence: str = "```") -> str:
    """The first code block of ``page`` after ``marker``, as a user copies it."""
    text = (ROOT / page).read_text()
    after = text[text.index(marker) :]
    match = re.search(re.escape(fence) + r"\n(.*?)```", after, re.S)
    assert match is not None, f"{page} has no code block after {marker!r}"
    return match.group(1)


def by_hand_session() -> str:
    return block_after("README.md", "By hand, after `make deps`")


def pasted(script: str, tmp: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``script`` run as a shell runs what is pasted into it (stopping at the first failure),
    with a state file and temporary directory of its own; its cluster stopped afterwards."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEDWIG_")}
    env["HEDWIG_DEV_STATE"] = str(tmp / "dev.json")
    env["TMPDIR"] = str(tmp)  # mktemp -d in the script
    # The script runs its own ``hedwig``: the one next to this interpreter (``.venv/bin``).
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    try:
        return subprocess.run(
            ["bash", "-e", "-c", script],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    finally:
        subprocess.run(
            [sys.executable, "-m", "hedwig", "dev", "down"], env=env, capture_output=True
        )


def test_the_by_hand_session_works_when_pasted() -> None:
    tmp = Path(scratch.mkdtemp("readme-"))
    state = tmp / "dev.json"
    out = pasted(by_hand_session(), tmp)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert any(line.startswith("READY hubs=") for line in lines)
    # What the comments promise: two acknowledgements, then the subscriber prints both.
    assert lines.count("1\thello") == 2 and lines.count("2\tworld") == 2
    assert "3\tagain" in lines
    assert "stopping the development cluster" in out.stdout
    assert not state.exists()


def test_the_security_by_hand_steps_work_when_pasted() -> None:
    """docs/security.md's steps: admin publishes, alice is refused until ``hedwig acl add``
    (finding the development cluster and its region by itself) grants her the topics, and
    says what it added."""
    tmp = Path(scratch.mkdtemp("security-doc-"))
    out = pasted(block_after("docs/security.md", "## Running it by hand"), tmp)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert any(line.startswith("SECURE credentials in ") for line in lines)
    assert lines.count("1\thi") == 1 and lines.count("2\thi") == 1
    assert "refused" in lines
    assert "principal alice may not publish topic 'orders.eu'" in out.stderr
    assert "hedwig acl add" in out.stderr  # the refusal says what grants it
    added = "ACL entry shop/alice (region default): allow alice create,publish,subscribe on "
    assert added + "topics 'orders.'*" in lines
    assert "\tallow alice create,publish,subscribe on topics 'orders.'*" in lines


def _dev_up(tmp: Path) -> tuple[dict[str, str], dict[str, object]]:
    """``hedwig dev up --detach`` with a state file of its own: its environment and state."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEDWIG_")}
    env["HEDWIG_DEV_STATE"] = str(tmp / "dev.json")
    up = subprocess.run(
        [sys.executable, "-m", "hedwig", "dev", "up", "--detach"],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert up.returncode == 0, up.stdout + up.stderr
    return env, json.loads((tmp / "dev.json").read_text())


@pytest.mark.spark
def test_the_spark_example_runs_against_the_development_cluster() -> None:
    """docs/spark.md's "Using it": the shell lines, then the script, against ``hedwig dev up``
    (whose ports are the page's unless another cluster holds them: then they are put in)."""
    tmp = Path(scratch.mkdtemp("spark-doc-"))
    env, state = _dev_up(tmp)
    try:
        hubs = [str(h["address"]) for h in state["hubs"]]  # type: ignore[attr-defined]
        ports = {"127.0.0.1:24000": str(state["zk"])}
        ports |= {f"127.0.0.1:{24001 + i}": address for i, address in enumerate(hubs)}

        def placed(text: str) -> str:
            return re.sub(r"127\.0\.0\.1:240\d\d", lambda m: ports[m.group(0)], text)

        shell = placed(block_after("docs/spark.md", "## Using it"))
        done = subprocess.run(
            ["bash", "-e", "-c", shell], cwd=ROOT, env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        script = tmp / "example.py"
        script.write_text(
            placed(block_after("docs/spark.md", "this runs as a script", "```python"))
        )
        ran = subprocess.run(
            [sys.executable, str(script)],
            cwd=tmp,
            env={**env, "TMPDIR": str(tmp)},
            capture_output=True,
            text=True,
            timeout=400,
        )
        assert ran.returncode == 0, ran.stdout + ran.stderr[-3000:]
        assert "streamed 3 messages" in ran.stdout
        assert "traffic.quadrant-1-0|  1|    c|" in ran.stdout
        peek = subprocess.run(
            [sys.executable, "-m", "hedwig", "sub", "shouting", "--peek"],
            env=env,
            capture_output=True,
            text=True,
        )
        assert sorted(line.split("\t")[1] for line in peek.stdout.splitlines()) == ["A", "B", "C"]
    finally:
        subprocess.run(
            [sys.executable, "-m", "hedwig", "dev", "down"], env=env, capture_output=True
        )


def test_the_python_example_runs_as_a_script() -> None:
    """The README's Python example, saved as a file and run against ``hedwig dev up`` (its
    first hub's address put in if another cluster holds the README's port)."""
    tmp = Path(scratch.mkdtemp("python-doc-"))
    env, state = _dev_up(tmp)
    try:
        first = str(state["hubs"][0]["address"])  # type: ignore[index]
        script = tmp / "greetings.py"
        code = block_after("README.md", "In Python, as a script", "```python")
        script.write_text(code.replace("127.0.0.1:24001", first))
        ran = subprocess.run(
            [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120
        )
        assert ran.returncode == 0, ran.stdout + ran.stderr
        assert ran.stdout.splitlines() == ["1 b'hello'", "[2, 3, 4]"]
        peek = subprocess.run(
            [sys.executable, "-m", "hedwig", "sub", "greetings", "--peek"],
            env=env,
            capture_output=True,
            text=True,
        )
        assert peek.stdout.splitlines()[-1] == "5\tfour"  # sent, and flushed before the end
    finally:
        subprocess.run(
            [sys.executable, "-m", "hedwig", "dev", "down"], env=env, capture_output=True
        )
