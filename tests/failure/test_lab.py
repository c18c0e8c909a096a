"""The network lab itself: cuts are silent and undone, slow links and disks are slow, and a
killed run's leftovers are swept. Fast (no ZooKeeper, no hubs)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.failure.lab.disk import SlowDisk, slow_disk_unavailable
from tests.failure.lab.netns import REGISTRY, Lab, Node, lab_namespaces, run, sweep
from tests.failure.lab.partitions import cut, heal, isolate, one_way
from tests.failure.lab.relay import SlowLink

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.integration
ECHO = """
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 5000)); s.listen(16); print("ready", flush=True)
while True:
    c, _ = s.accept()
    while (d := c.recv(100)):
        c.sendall(d)
    c.close()
"""
# Connects, sends one byte, waits for the echo: prints "ok <seconds>" or the failure's name.
PROBE = """
import socket, sys, time
t = time.monotonic()
try:
    with socket.create_connection((sys.argv[1], 5000), timeout=float(sys.argv[2])) as s:
        s.sendall(b"x"); s.recv(1)
    print("ok", round(time.monotonic() - t, 3))
except OSError as e:
    print(type(e).__name__)
"""


@pytest.fixture
def nodes(lab: Lab) -> Iterator[tuple[Node, Node]]:
    a, b = lab.add_node("a"), lab.add_node("b")
    servers = [
        subprocess.Popen([*n.host.launch, sys.executable, "-c", ECHO], stdout=subprocess.PIPE)
        for n in (a, b)
    ]
    for s in servers:
        assert s.stdout is not None and s.stdout.readline().strip() == b"ready"
    yield a, b
    for s in servers:
        s.kill()
        s.wait()


def probe(src: Node, dst: Node, timeout: float = 1.0) -> str:
    out = src.exec(sys.executable, "-c", PROBE, dst.ip, str(timeout)).stdout.strip()
    return out.split()[0]


def rtt(src: Node, dst: Node) -> float:
    out = src.exec(sys.executable, "-c", PROBE, dst.ip, "5").stdout.split()
    assert out[0] == "ok", out
    return float(out[1])


def test_cuts_are_silent_and_heal(lab: Lab, nodes: tuple[Node, Node]) -> None:
    a, b = nodes
    assert probe(a, b) == probe(b, a) == "ok"
    part = cut(a, [b])
    # silent: the sender's connect times out (no EPERM, no reset), both ways
    assert probe(a, b) == probe(b, a) == "TimeoutError"
    part.undo()
    assert probe(a, b) == probe(b, a) == "ok"
    one_way(a, b)
    assert probe(a, b) == "TimeoutError"  # a's SYN is dropped at b
    assert probe(b, a) == "TimeoutError"  # b's SYN reaches a, a's answer is dropped at b
    heal(lab)
    assert probe(a, b) == "ok"
    isolate(lab, a)
    assert probe(a, b) == "TimeoutError"
    heal(lab)
    # the controller (this process, on the host) is never cut
    with_host = run("python3", "-c", PROBE.replace("sys.argv[1]", repr(a.ip)), "x", "1")
    assert with_host.stdout.startswith("ok")


def test_slow_link_delays_both_ways_and_undoes(lab: Lab, nodes: tuple[Node, Node]) -> None:
    a, b = nodes
    assert rtt(a, b) < 0.2
    link = SlowLink(lab, a, b, 5000, 0.25).start()
    try:
        # connect (answered by the relay at once) + 0.25 s there + 0.25 s back
        assert rtt(a, b) >= 0.5
        assert rtt(b, a) < 0.2  # the other direction's connections are not slowed
    finally:
        link.undo()
    assert rtt(a, b) < 0.2


def test_slow_disk_delays_fsync(lab: Lab) -> None:
    reason = slow_disk_unavailable()
    if reason:
        pytest.skip(reason)
    disk = SlowDisk(lab.id, delay_ms=300).create()
    node = lab.add_node("d")
    timed = f"""
import os, time
fd = os.open({str(disk.path / "f")!r}, os.O_CREAT | os.O_WRONLY)
os.write(fd, b"x" * 4096)
t = time.monotonic(); os.fsync(fd); print(time.monotonic() - t)
"""
    try:
        slow = float(node.exec(*disk.launch, sys.executable, "-c", timed).stdout)
        disk.set_delay(0)
        fast = float(node.exec(*disk.launch, sys.executable, "-c", timed).stdout)
    finally:
        disk.remove()
    assert slow >= 0.3 > fast


def test_sweep_removes_a_killed_runs_lab_not_a_live_one(lab: Lab) -> None:
    lab.add_node("mine")
    orphan = subprocess.Popen(
        [sys.executable, "-c",
         "import time; from tests.failure.lab.netns import Lab\n"
         "lab = Lab().start(); lab.add_node('x'); print(lab.id, flush=True); time.sleep(600)"],
        stdout=subprocess.PIPE, text=True, cwd=ROOT,
    )  # fmt: skip
    assert orphan.stdout is not None
    orphan_id = orphan.stdout.readline().strip()
    assert lab_namespaces(orphan_id)
    os.kill(orphan.pid, signal.SIGKILL)  # killed mid-run: nothing cleaned up
    orphan.wait()
    assert lab_namespaces(orphan_id) and (REGISTRY / orphan_id).exists()
    removed = sweep()
    assert orphan_id in removed and lab.id not in removed
    assert not lab_namespaces(orphan_id)
    assert orphan_id not in run("ip", "-o", "link", "show").stdout
    assert not (REGISTRY / orphan_id).exists()
    assert lab_namespaces(lab.id)  # ours is still there
