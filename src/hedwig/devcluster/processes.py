"""Ending the server processes of a development cluster: asked first, then made to.

Every server a development cluster runs (ZooKeeper, etcd, a hub) ends the same way: SIGTERM,
so that it can finish what it does on the way out (a hub hands its topics over, a store
flushes), a grace period for it to exit, then SIGKILL if it has not; the caller says how long
the grace is, as it knows how long its server takes. ``kill`` is SIGKILL alone, with no chance
to flush anything: the crash that fault tests inject. Both wait for the process to be gone,
so its ports and files are free when they return.
"""

from __future__ import annotations

import subprocess
from typing import Any


def end(proc: subprocess.Popen[Any] | None, grace_s: float) -> int | None:
    """SIGTERM, ``grace_s`` seconds to exit, then SIGKILL; the exit status (None: no
    process)."""
    if proc is None:
        return None
    if proc.poll() is None:
        proc.terminate()
    try:
        return proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


def kill(proc: subprocess.Popen[Any] | None) -> None:
    """SIGKILL (``kill -9``), and the process waited for."""
    if proc is not None and proc.poll() is None:
        proc.kill()
        proc.wait()
