"""A slow link: a delaying TCP relay between two lab nodes (this kernel has no ``netem``).

``SlowLink(lab, src, dst, port, delay_s)`` starts the relay in the lab's ``relay`` namespace
and steers ``src``'s connections to ``dst:port`` through it with a DNAT rule in ``src``. The
connections ``src`` already has to ``dst:port`` are reset (a REJECT with a TCP reset in
``dst``), so the client reconnects, through the relay. Undoing it removes both rules and stops
the relay, which closes the relayed connections: the client reconnects directly.

The relay itself (``python -m tests.failure.lab.relay``) forwards each chunk it reads, in each
direction, ``delay_s`` after it arrived, keeping order: latency, not a bandwidth cap. Run it as
a module in the relay's namespace; it prints ``ready`` once it listens.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tests.failure.lab.netns import Lab, Node

ROOT = Path(__file__).resolve().parents[3]
_BUFFERED_CHUNKS = 256


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay_s: float) -> None:
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue(_BUFFERED_CHUNKS)

    async def late_writer() -> None:
        while True:
            due, data = await queue.get()
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            if not data:
                with contextlib.suppress(OSError):
                    writer.write_eof()
                return
            writer.write(data)
            await writer.drain()

    task = asyncio.create_task(late_writer())
    try:
        while True:
            data = await reader.read(65536)
            await queue.put((time.monotonic() + delay_s, data))
            if not data:
                break
        await task
    except (OSError, asyncio.IncompleteReadError):
        task.cancel()
    finally:
        writer.close()


async def serve(listen: str, target: str, delay_s: float) -> None:
    thost, _, tport = target.rpartition(":")

    async def handle(cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        try:
            sr, sw = await asyncio.open_connection(thost, int(tport))
        except OSError:
            cw.close()
            return
        await asyncio.gather(_pump(cr, sw, delay_s), _pump(sr, cw, delay_s))

    host, _, port = listen.rpartition(":")
    server = await asyncio.start_server(handle, host, int(port))
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--listen", required=True)
    p.add_argument("--target", required=True)
    p.add_argument("--delay", type=float, required=True, help="seconds, each direction")
    args = p.parse_args()
    asyncio.run(serve(args.listen, args.target, args.delay))


def start_relay(
    listen: str, target: str, delay_s: float, launch: Sequence[str] = ()
) -> subprocess.Popen[str]:
    """The relay as a process (run through ``launch``: a lab namespace's, or none for
    loopback), once it listens on ``listen``."""
    proc = subprocess.Popen(
        [*launch, sys.executable, "-m", "tests.failure.lab.relay", "--listen", listen,
         "--target", target, "--delay", str(delay_s)],
        stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, cwd=ROOT,
    )  # fmt: skip
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != "ready":
        proc.kill()
        proc.wait()
        raise RuntimeError(f"the relay {listen} -> {target} did not start")
    return proc


@dataclass
class SlowLink:
    """``src``'s TCP connections to ``dst:port`` delayed by ``delay_s`` each way."""

    lab: Lab
    src: Node
    dst: Node
    port: int
    delay_s: float
    proc: subprocess.Popen[str] | None = field(default=None, init=False)
    _relay_port: int = field(default=0, init=False)
    _rules: list[tuple[Node, str, tuple[str, ...]]] = field(default_factory=list, init=False)

    @property
    def description(self) -> str:
        return f"{self.src.name} -> {self.dst.name}:{self.port} slowed by {self.delay_s}s"

    def start(self) -> SlowLink:
        relay = self.lab.add_node("relay")
        self._relay_port = 7000 + self.lab.next_relay_port()
        self.proc = start_relay(
            f"0.0.0.0:{self._relay_port}",
            f"{self.dst.ip}:{self.port}",
            self.delay_s,
            launch=relay.host.launch,
        )
        dnat = ("HWL-NAT", "-d", self.dst.ip, "-p", "tcp", "--dport", str(self.port),
                "-j", "DNAT", "--to-destination", f"{relay.ip}:{self._relay_port}")  # fmt: skip
        reset = ("HWL-IN", "-s", self.src.ip, "-p", "tcp", "--dport", str(self.port),
                 "-j", "REJECT", "--reject-with", "tcp-reset")  # fmt: skip
        for node, table, rule in ((self.src, "nat", dnat), (self.dst, "filter", reset)):
            node.iptables("-A", *rule, table=table)
            self._rules.append((node, table, rule))
        return self

    def undo(self) -> None:
        for node, table, rule in reversed(self._rules):
            node.exec("iptables", "-w", "-t", table, "-D", *rule, check=False)
        self._rules.clear()
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


if __name__ == "__main__":
    main()
