"""Where a development process runs: the address it listens on and how it is started there.

By default every process runs on this machine's loopback. The failure tests put each hub and
ZooKeeper in a network namespace of its own instead (``tests/failure/lab``): the process then
listens on that namespace's address and is started through a launch prefix such as
``ip netns exec NS``, which replaces itself with the process, so signals (``kill -9``,
SIGSTOP) still reach the process itself.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Host:
    """A place to run a process: its listen address and the command prefix that starts it."""

    address: str = "127.0.0.1"
    launch: tuple[str, ...] = ()


LOOPBACK = Host()
