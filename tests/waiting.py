"""Waiting in tests for a condition to hold, never for a fixed time.

A test that needs something to have happened (a watch fired, a session lost, a hub gone from
the registry) polls for it with a deadline rather than sleeping for a time that is long enough
on one machine and too short on a loaded one: ``until`` for a condition read from memory,
``eventually`` for one that needs a call (a read of the store, a request to a hub). Both give up
at the deadline with an ``AssertionError`` naming what they waited for, so a slow machine makes
a test slower, not wrong, and a real failure says what never came.

The deadlines are generous against what they wait for (seconds where the thing takes
milliseconds): a deadline is a bound on a hang, not an assertion of speed. A test that asserts
speed measures the time itself. A sleep that is what a test is about (load kept up for a while,
a frozen peer, a window in which something must not happen) is not a wait and is written as a
sleep, with a comment saying so.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


async def until(
    condition: Callable[[], object],
    timeout: float = 10.0,
    *,
    what: str = "the condition",
    interval: float = 0.002,
) -> None:
    """Return once ``condition()`` is true; fail after ``timeout`` seconds, polling every
    ``interval`` seconds (both by the event loop's clock)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        if loop.time() >= deadline:
            raise AssertionError(f"{what}: not within {timeout} s")
        await asyncio.sleep(interval)


async def eventually(
    check: Callable[[], Awaitable[object]],
    timeout: float = 20.0,
    interval: float = 0.05,
    *,
    what: str = "the condition",
) -> None:
    """Return once ``await check()`` is true; fail after ``timeout`` seconds, calling it again
    every ``interval`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await check():
        if loop.time() >= deadline:
            raise AssertionError(f"{what}: not within {timeout} s")
        await asyncio.sleep(interval)


async def succeeds(
    attempt: Callable[[], Awaitable[T]],
    errors: type[Exception] | tuple[type[Exception], ...],
    timeout: float = 20.0,
    interval: float = 0.1,
    *,
    what: str = "an attempt",
) -> T:
    """What ``await attempt()`` returns once it raises none of ``errors`` (a server coming
    back, a client reconnecting); fail after ``timeout`` seconds, trying every ``interval``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        try:
            return await attempt()
        except errors as exc:
            if loop.time() >= deadline:
                raise AssertionError(f"{what}: still {exc!r} after {timeout} s") from exc
        await asyncio.sleep(interval)


def poll(
    condition: Callable[[], object],
    timeout: float = 20.0,
    *,
    what: str = "the condition",
    interval: float = 0.2,
) -> None:
    """``until`` for a test without an event loop (one that drives processes, the CLI): the
    thread sleeps between looks."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what}: not within {timeout} s")
        time.sleep(interval)
