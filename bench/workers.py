"""Worker processes for the throughput benchmarks: load generators that run beside the hubs.

One Python process cannot generate load for several capped hubs and still leave the hubs to
be what is measured, so the benchmarks spread their clients over worker processes. A worker
prints one line once it is ready (its clients attached or started), then, when it is done,
one JSON line with what it counted.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from hedwig.errors import HedwigError

# The repository: workers run as ``-m bench.<module>`` from here.
ROOT = Path(__file__).resolve().parents[1]


def spawn(commands: list[list[str]], ready: str) -> list[subprocess.Popen[str]]:
    """``python ARGS`` for each command; returns once every one has printed ``ready``."""
    procs = [
        subprocess.Popen(
            [sys.executable, *cmd],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
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


def pin(pids: list[int], cpus: set[int]) -> None:
    """Run every thread of ``pids`` on ``cpus`` only (threads made later inherit it)."""
    for pid in pids:
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError):  # the thread may have ended meanwhile
                os.sched_setaffinity(int(task.name), cpus)


def open_window(procs: list[subprocess.Popen[str]], start: float, end: float) -> None:
    """Tell every worker the one window (``time.monotonic()`` values, the same clock in every
    process) in which to count. Workers start at different times; a window of each worker's
    own would count one worker's early seconds, when the others are not loading the hubs
    yet, and its last ones, when they have stopped."""
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write(f"WINDOW {start} {end}\n")
        proc.stdin.flush()


async def window_from_driver() -> tuple[float, float]:
    """In a worker: the window ``open_window`` sends."""
    line = await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    _, start, end = line.split()
    return float(start), float(end)


def results(procs: list[subprocess.Popen[str]], timeout: float = 180) -> list[dict[str, Any]]:
    """Each worker's last line, as JSON, once it has exited."""
    out = []
    for proc in procs:
        text, _ = proc.communicate(timeout=timeout)
        out.append(json.loads(text.strip().splitlines()[-1]))
    return out


class CpuUse:
    """CPU used over a window, read from ``/proc``: by the whole machine (busy, in cores) and
    by some processes (the hubs). With every hub capped, the machine's other cores belong to
    the load generators; a window in which the machine is near its cores is one in which the
    generators, not the hubs, may be what was measured, and the report says so."""

    def __init__(self, pids: list[int]) -> None:
        self.pids = pids
        self._tick = os.sysconf("SC_CLK_TCK")
        self._start = self._read()

    def _read(self) -> tuple[float, float, list[float], float]:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
        ticks = [int(x) for x in fields]
        idle = ticks[3] + ticks[4]  # idle + iowait
        busy = sum(ticks[:8]) - idle  # user .. steal
        steal = ticks[7]  # taken by the hypervisor: a capped hub gets less done per second
        procs = []
        for pid in self.pids:
            try:
                stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                procs.append((int(stat[11]) + int(stat[12])) / self._tick)
            except OSError:
                procs.append(0.0)
        return time.monotonic(), busy / self._tick, procs, steal / self._tick

    def stop(self) -> dict[str, Any]:
        """Cores used since the start: the machine's, and each process's."""
        end = self._read()
        seconds = end[0] - self._start[0]
        return {
            "machine_cores_busy": round((end[1] - self._start[1]) / seconds, 2),
            "machine_cores": os.cpu_count(),
            "machine_cores_stolen": round((end[3] - self._start[3]) / seconds, 3),
            "hub_cores": [
                round((b - a) / seconds, 3) for a, b in zip(self._start[2], end[2], strict=True)
            ],
        }
