"""A client outside the pod network, on the real node's machine: a network namespace joined to
the host by a veth pair, with one route, to the node's address and nothing else.

So what it can reach is what a machine in another network could: the node's address (its
NodePorts), not the pods' addresses, not the Services' cluster IPs, not the cluster's DNS.
``Outside`` makes the namespace and the pair and removes both afterwards (removing the
namespace removes its end of the pair, and the pair with it); a run killed half-way leaves a
namespace of this name, which the next one removes first.

The clients run in the namespace on a thread of the test process that entered it
(``setns(2)`` moves the calling thread only): an event loop on that thread opens every socket
there, so the test's own threads stay in the host's namespace and drive the cluster
meanwhile. Only numeric addresses are dialled: resolving a name would run on another thread.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import subprocess
import threading
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

NAMESPACE = "hedwig-outside"
HOST_END = "hxo-host"
INSIDE_END = "hxo-in"
# A /30 of its own, apart from the node's 10.245.0.0/24 and the Services' 10.96.0.0/12.
HOST_ADDRESS = "10.246.0.1"
INSIDE_ADDRESS = "10.246.0.2"
CLONE_NEWNET = 0x40000000


def _ip(*args: str, check: bool = True) -> None:
    subprocess.run(["ip", *args], check=check, capture_output=True, text=True)


def _in_namespace(*args: str) -> None:
    _ip("netns", "exec", NAMESPACE, "ip", *args)


class Outside:
    """The namespace, reaching ``node_ip`` only, while in a ``with`` block."""

    def __init__(self, node_ip: str) -> None:
        self.node_ip = node_ip

    def __enter__(self) -> Outside:
        self._remove()
        _ip("netns", "add", NAMESPACE)
        try:
            _ip("link", "add", HOST_END, "type", "veth", "peer", "name", INSIDE_END)
            _ip("link", "set", INSIDE_END, "netns", NAMESPACE)
            _ip("addr", "add", f"{HOST_ADDRESS}/30", "dev", HOST_END)
            _ip("link", "set", HOST_END, "up")
            _in_namespace("addr", "add", f"{INSIDE_ADDRESS}/30", "dev", INSIDE_END)
            _in_namespace("link", "set", INSIDE_END, "up")
            _in_namespace("link", "set", "lo", "up")
            _in_namespace("route", "add", f"{self.node_ip}/32", "via", HOST_ADDRESS)
        except BaseException:
            self._remove()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._remove()

    @staticmethod
    def _remove() -> None:
        _ip("netns", "del", NAMESPACE, check=False)
        _ip("link", "del", HOST_END, check=False)

    def run(self, main: Callable[[], Awaitable[T]]) -> T:
        """``asyncio.run(main())`` on a thread inside the namespace; its result or its error."""
        result: list[T] = []
        error: list[BaseException] = []

        def thread() -> None:
            try:
                _enter(NAMESPACE)
                result.append(asyncio.run(main()))  # type: ignore[arg-type]
            except BaseException as exc:
                error.append(exc)

        t = threading.Thread(target=thread, name="outside")
        t.start()
        t.join()
        if error:
            raise error[0]
        return result[0]


def _enter(namespace: str) -> None:
    """Move the calling thread into ``namespace`` (its network only)."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/run/netns/{namespace}", os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns into {namespace}: {os.strerror(err)}")
    finally:
        os.close(fd)
