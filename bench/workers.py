"""Worker processes for the throughput benchmarks: load generators that run beside the hubs.

One Python process cannot generate load for several capped hubs and still leave the hubs to
be what is measured, so the benchmarks spread their clients over worker processes. A worker
prints one line once it is ready (its clients attached or started), then, when it is done,
one JSON line with what it counted.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from hedwig.errors import HedwigError

# The repository: workers run as ``-m bench.<module>`` from here.
ROOT = Path(__file__).resolve().parents[1]


def spawn(commands: list[list[str]], ready: str) -> list[subprocess.Popen[str]]:
    """``python ARGS`` for each command; returns once every one has printed ``ready``."""
    procs = [
        subprocess.Popen([sys.executable, *cmd], stdout=subprocess.PIPE, text=True, cwd=ROOT)
        for cmd in commands
    ]
    for proc in procs:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if line.strip() != ready:
            for p in procs:
                p.kill()
            raise HedwigError(f"a benchmark worker failed: {line!r}")
    return procs


def results(procs: list[subprocess.Popen[str]], timeout: float = 180) -> list[dict[str, Any]]:
    """Each worker's last line, as JSON, once it has exited."""
    out = []
    for proc in procs:
        text, _ = proc.communicate(timeout=timeout)
        out.append(json.loads(text.strip().splitlines()[-1]))
    return out
