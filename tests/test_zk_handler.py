"""The ZooKeeper client's ``select`` (``hedwig.metadata.zookeeper.handler``) answers as the
stock kazoo one does: readable, writable, timed out, hung up, on real sockets."""

from __future__ import annotations

import socket
import time

import pytest

from hedwig.metadata.zookeeper.handler import PollingHandler


def test_select_reports_what_is_ready_and_waits_out_its_timeout() -> None:
    handler = PollingHandler()
    a, b = socket.socketpair()
    with a, b:
        assert handler.select([a], [], [], 0) == ([], [], [])
        started = time.monotonic()
        assert handler.select([a, b], [], [], 0.05) == ([], [], [])
        assert time.monotonic() - started >= 0.04
        assert handler.select([], [a], [], 0) == ([], [a], [])  # room to write
        b.send(b"x")
        assert handler.select([a, b], [a], [], 1.0) == ([a], [], [])  # reading comes first
        assert handler.select([a.fileno()], [], [], None) == ([a.fileno()], [], [])
        b.close()
        a.recv(1)
        assert handler.select([a], [], [], 1.0) == ([a], [], [])  # hang-up: read it


def test_select_refuses_what_kazoo_refuses() -> None:
    handler = PollingHandler()
    a, b = socket.socketpair()
    with a, b, pytest.raises(ValueError, match="non-negative"):
        handler.select([a], [], [], -1)
    with pytest.raises(ValueError, match="invalid file descriptor"):
        handler.select([-1], [], [], 0)
