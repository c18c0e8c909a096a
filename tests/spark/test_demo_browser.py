"""The demo, end to end, seen through a real browser (Debian's chromium, headless).

Runs the demo as ``make demo`` does (``python -m demo.run_demo`` in ``spark-apps/``), waits
for its one ``DEMO URL`` line, lets Spark produce heat maps, then has chromium render the page
and checks the DOM it built: cells coloured by traffic and every quadrant labelled with the hub
that owns its topic.
The screenshot goes to the test's temporary directory, or to ``$HEDWIG_DEMO_SCREENSHOT``
(``make demo-screenshot`` points it at ``docs/spark-demo.png``).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from hedwig.client import SyncClient
from hedwig.errors import AuthenticationError

from .helpers import wait_for

pytestmark = pytest.mark.timeout(400)

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def chromium(*args: str, timeout: float = 90) -> str:
    assert CHROMIUM is not None
    with tempfile.TemporaryDirectory(prefix="hedwig-chromium-") as profile:
        out = subprocess.run(
            [
                CHROMIUM,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-dev-shm-usage",
                f"--user-data-dir={profile}",
                "--window-size=1080,800",
                "--virtual-time-budget=6000",
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def get_state(url: str) -> dict[str, object]:
    with urllib.request.urlopen(url + "api/state", timeout=5) as r:
        state: dict[str, object] = json.loads(r.read())
        return state


@contextlib.contextmanager
def running_demo(
    tmp_path: Path, *flags: str, ready_within: float
) -> Iterator[tuple[str, list[str]]]:
    """The demo (``python -m demo.run_demo`` in ``spark-apps/``, as ``make demo`` runs it) until
    its page shows a heat map with every quadrant owned; yields the page's URL and the lines
    the demo printed. On the way out it is stopped with Ctrl-C and must exit 0."""
    demo = subprocess.Popen(
        [sys.executable, "-m", "demo.run_demo", "--duration", "300", *flags],
        cwd=ROOT / "spark-apps",
        stdout=subprocess.PIPE,
        stderr=open(tmp_path / "demo.log", "wb"),  # noqa: SIM115
        text=True,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(demo.stdout or []), daemon=True)
    reader.start()
    try:
        wait_for(lambda: bool(lines) or demo.poll() is not None, timeout=90, what="DEMO line")
        assert lines, (tmp_path / "demo.log").read_text()[-3000:]
        m = re.fullmatch(r"DEMO (http://127\.0\.0\.1:\d+/)\n", lines[0])
        assert m, lines[0]
        url = m.group(1)

        def ready() -> bool:
            assert demo.poll() is None, (tmp_path / "demo.log").read_text()[-3000:]
            s = get_state(url)
            cells, quadrants = s["cells"], s["quadrants"]
            assert isinstance(cells, list) and isinstance(quadrants, list)
            return len(cells) >= 10 and all(q["owner"] for q in quadrants)

        wait_for(ready, timeout=ready_within, what="heat map with owners")
        yield url, lines
    finally:
        if demo.poll() is None:
            demo.send_signal(signal.SIGINT)
        try:
            demo.wait(90)
        except subprocess.TimeoutExpired:
            demo.kill()
            raise
    reader.join(5)
    assert demo.returncode == 0, (tmp_path / "demo.log").read_text()[-3000:]


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (make test installs it)")
def test_demo_page_shows_heat_and_owner_hubs(tmp_path: Path) -> None:
    with running_demo(tmp_path, ready_within=180) as (url, lines):
        dom = chromium("--dump-dom", url)
        hot = re.findall(r'class="cell hot"[^>]*data-reports="(\d+)"', dom)
        assert len(hot) >= 10 and all(int(n) > 0 for n in hot), dom[:3000]
        owners = re.findall(r'id="quadrant-\d-\d"[^>]*data-owner="(127\.0\.0\.1:\d+)"', dom)
        assert len(owners) == 4, dom[:3000]
        assert len(re.findall(r'class="hub-\d">hub \d<', dom)) >= 4
        assert "live · updated" in dom

        shot = Path(os.environ.get("HEDWIG_DEMO_SCREENSHOT") or tmp_path / "spark-demo.png")
        chromium(f"--screenshot={shot}", url)
        assert shot.stat().st_size > 10_000
    assert len(lines) == 1, lines  # exactly one line on stdout


def test_the_secured_demo_runs_as_the_super_user(tmp_path: Path) -> None:
    """``--secure``: the hubs are TLS and ACLs (``hedwig dev up --secure``); the simulator, the
    watchers and the Spark job connect as the super-user, and the heat map fills with the
    quadrants owned, as in the open demo (its page is the open demo's: the state it shows is
    checked here)."""
    with running_demo(tmp_path, "--secure", ready_within=240) as (url, _):
        quadrants = get_state(url)["quadrants"]
        assert isinstance(quadrants, list)
        plaintext = SyncClient([quadrants[0]["owner"]])
        try:  # the hubs the demo works with are secured
            with pytest.raises(AuthenticationError, match="TLS connections only"):
                plaintext.publish("not-allowed", b"x")
        finally:
            plaintext.close()
