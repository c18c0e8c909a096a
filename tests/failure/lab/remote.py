"""The history workload in a child process, so it can run in a namespace of its own.

The test process stays in the host's namespace (it manages the lab through the controller
link); the publishers and subscribers must sit in the lab's ``client`` namespace so that a
partition can cut them off from a hub. ``RemoteWorkload`` starts ``python -m
tests.failure.lab.remote`` there and speaks one JSON line each way over its stdin/stdout:

- the first line it sends is the workload's settings; the child answers ``{"started": true}``;
- ``{"op": "status"}`` -> ``{"acked": N, "failed": M}``;
- ``{"op": "finish"}`` -> the whole ``History`` (``history_to_json``), then the child exits.

Times in the history are ``time.monotonic()``, one clock for every process of the machine,
so the test compares them with the times it injected faults at. Messages are ASCII
(``pub<p>:<n>``), carried as text.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from hedwig.security import ClientSecurity
from tests.failure.history import History, Workload

ROOT = Path(__file__).resolve().parents[3]


def history_to_json(h: History) -> dict[str, Any]:
    return {
        "acked": {t: [(v.decode(), s) for v, s in acks] for t, acks in h.acked.items()},
        "failed": h.failed,
        "delivered": [
            [t, name, [(s, v.decode()) for s, v in got]] for (t, name), got in h.delivered.items()
        ],
        "log": {t: [(s, v.decode()) for s, v in log] for t, log in h.log.items()},
        "ack_times": h.ack_times,
        "topic_ack_times": dict(h.topic_ack_times),
    }


def history_from_json(d: dict[str, Any]) -> History:
    h = History()
    for t, acks in d["acked"].items():
        h.acked[t] = [(v.encode(), s) for v, s in acks]
    h.failed = d["failed"]
    for t, name, got in d["delivered"]:
        h.delivered[(t, name)] = [(s, v.encode()) for s, v in got]
    h.log = {t: [(s, v.encode()) for s, v in log] for t, log in d["log"].items()}
    h.ack_times = d["ack_times"]
    h.topic_ack_times = defaultdict(list, d["topic_ack_times"])
    return h


class RemoteWorkload:
    """A ``Workload`` running in ``launch`` (e.g. ``ip netns exec NS``), seen from here."""

    def __init__(self, launch: tuple[str, ...], log_path: Path, **settings: Any) -> None:
        self.launch = launch
        self.log_path = log_path
        self.settings = settings
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        with open(self.log_path, "ab") as log:
            self.proc = await asyncio.create_subprocess_exec(
                *self.launch, sys.executable, "-m", "tests.failure.lab.remote",
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=log,
                cwd=ROOT, limit=1 << 30,
            )  # fmt: skip
        answer = await self._ask(self.settings, timeout=60)
        assert answer.get("started"), answer

    async def _ask(self, message: dict[str, Any], timeout: float) -> dict[str, Any]:
        assert self.proc is not None and self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        await self.proc.stdin.drain()
        line = await asyncio.wait_for(self.proc.stdout.readline(), timeout)
        if not line:
            raise AssertionError(f"the workload process died; see {self.log_path}")
        answer: dict[str, Any] = json.loads(line)
        return answer

    async def acked_count(self) -> int:
        return int((await self._ask({"op": "status"}, timeout=30))["acked"])

    async def finish(self, timeout: float = 60.0) -> History:
        answer = await self._ask({"op": "finish", "timeout": timeout}, timeout=timeout + 120)
        assert self.proc is not None
        await self.proc.wait()
        return history_from_json(answer)

    def kill(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()

    async def abort(self) -> None:
        """Kill the process and reap it on this loop: a test that fails must not leave its
        transport to be collected after the loop closed (an unraisable error)."""
        self.kill()
        if self.proc is not None:
            await self.proc.wait()


async def _child() -> None:
    # the workload's progress and the client's warnings go to the log (stderr)
    logging.basicConfig(
        level=os.environ.get("HEDWIG_LOG_LEVEL", "WARNING"),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("tests.failure.history").setLevel(logging.INFO)
    loop = asyncio.get_running_loop()

    async def readline() -> dict[str, Any]:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            raise SystemExit(0)  # the test went away
        message: dict[str, Any] = json.loads(line)
        return message

    def say(message: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()

    settings = await readline()
    if settings.get("security"):  # ClientSecurity.build's arguments: paths, sent as JSON
        settings["security"] = ClientSecurity.build(**settings["security"])
    work = Workload(settings.pop("hubs"), settings.pop("topics"), **settings)
    await work.start()
    say({"started": True})
    while True:
        request = await readline()
        if request["op"] == "status":
            say({"acked": work.history.acked_count, "failed": work.history.failed})
        elif request["op"] == "finish":
            history = await work.finish(timeout=request.get("timeout", 60.0))
            say(history_to_json(history))
            return


if __name__ == "__main__":
    asyncio.run(_child())
