"""The ZooKeeper client's ``select`` (``hedwig.metadata.zookeeper.handler``) answers as the
stock kazoo one does: readable, writable, timed out, hung up, on real sockets."""

from __future__ import annotations

import socket
import threading
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


def test_completions_run_on_the_thread_that_completes_the_request(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A request's completion callbacks run where its result is set (kazoo's connection
    thread), at once, not queued for another thread; one that fails is logged and the
    others still run; one added after the result is set runs at once too."""
    handler = PollingHandler()
    handler.start()
    try:
        result = handler.async_result()
        ran: list[tuple[str, int]] = []

        def broken(_r: object) -> None:
            raise RuntimeError("broken callback")

        result.rawlink(broken)
        result.rawlink(lambda r: ran.append(("first", threading.get_ident())))
        setter = threading.Thread(target=result.set, args=(7,))
        with caplog.at_level("ERROR"):
            setter.start()
            setter.join()
        assert ran == [("first", setter.ident)]
        assert "completion callback failed" in caplog.text
        result.rawlink(lambda r: ran.append(("late", threading.get_ident())))
        assert ran[-1] == ("late", threading.get_ident())
        assert result.get() == 7
    finally:
        handler.stop()
