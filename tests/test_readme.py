"""The README's examples do what it says: its by-hand session, pasted into a shell as written,
what its comments say; its Python script and its worker pool (given its imports and a job
handler), run against ``hedwig dev up``."""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests import scratch
from tests.cluster_helpers import hedwig as cli
from tests.waiting import poll

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
    # Without --secure it says it is open (on loopback only).
    assert any(line.startswith("OPEN no TLS, no authentication") for line in lines)
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
    assert not any(line.startswith("OPEN ") for line in lines)
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


# What the README's worker pool is run with: its imports before it, and after it a ``handle``
# that fails ``job-3`` once across all the workers (the first to take the marker file fails),
# and the worker started against the hubs given on the command line.
WORKER_PRELUDE = """\
import asyncio
import os
import sys

from hedwig.client import HedwigClient, SubscriptionType
"""
WORKER_MAIN = """
async def handle(value: bytes) -> None:
    job = value.decode()
    if job == "job-3":
        try:
            os.close(os.open(sys.argv[3], os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            pass
        else:
            print(sys.argv[2], "failed", job, flush=True)
            raise RuntimeError(job)
    print(sys.argv[2], "ok", job, flush=True)


asyncio.run(work(sys.argv[1].split(",")))
"""


def test_the_worker_pool_shares_its_jobs_and_retries_a_failed_one() -> None:
    """The README's worker pool, saved as a file, run as three processes against ``hedwig dev
    up``: the jobs published are spread over the workers, each handled once, and the one that
    fails is nacked and handled again (by any worker) about five seconds later; the
    subscription's mark reaches the last job (every one acknowledged)."""
    tmp = Path(scratch.mkdtemp("workers-doc-"))
    env, state = _dev_up(tmp)
    workers: list[subprocess.Popen[str]] = []
    try:
        hubs = ",".join(str(h["address"]) for h in state["hubs"])  # type: ignore[attr-defined]
        script = tmp / "workers.py"
        pool = block_after("README.md", "A worker pool:", "```python")
        script.write_text(WORKER_PRELUDE + "\n\n" + pool + "\n" + WORKER_MAIN)
        outs = [tmp / f"worker-{i}.out" for i in range(3)]
        for i, out in enumerate(outs):
            with out.open("w") as sink:
                workers.append(
                    subprocess.Popen(
                        [sys.executable, str(script), hubs, str(i), str(tmp / "failed-once")],
                        env=env,
                        stdout=sink,
                        stderr=subprocess.STDOUT,
                        text=True,
                    )
                )

        hedwig = functools.partial(cli, env=env)

        def pool_row() -> dict[str, Any] | None:
            got = hedwig("subscriptions", "jobs", "--json")
            rows = json.loads(got.stdout) if got.returncode == 0 else []
            return next((r for r in rows if r["subscription"] == "workers"), None)

        def all_joined() -> bool:
            assert all(w.poll() is None for w in workers), [o.read_text() for o in outs]
            row = pool_row()
            return row is not None and row["consumers"] == 3

        poll(all_joined, 60, what="three workers joined")
        jobs = [f"job-{i}" for i in range(20)]
        sent = hedwig("pub", "jobs", "-q", input="".join(f"{j}\n" for j in jobs))
        assert sent.returncode == 0, sent.stderr
        lines: list[list[str]] = []

        def handled() -> bool:
            lines[:] = [line.split() for o in outs for line in o.read_text().splitlines()]
            return sorted(job for _, what, job in lines if what == "ok") == sorted(jobs)

        poll(handled, 60, what="every job handled")
        assert [job for _, what, job in lines if what == "failed"] == ["job-3"]
        assert len({worker for worker, what, _ in lines if what == "ok"}) >= 2, lines

        def all_acknowledged() -> bool:
            row = pool_row()
            return row is not None and row["position"] == len(jobs) and row["unacked"] == 0

        poll(all_acknowledged, 30, what="every job acknowledged")
    finally:
        for w in workers:
            w.terminate()
            w.wait(30)
        subprocess.run(
            [sys.executable, "-m", "hedwig", "dev", "down"], env=env, capture_output=True
        )
