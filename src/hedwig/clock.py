"""Clocks and randomness are injected so timing logic is testable without waiting.

``Clock`` is the one seam: production code uses ``SystemClock``; tests use ``ManualClock``
and advance it by hand.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import Protocol, TypeVar

T = TypeVar("T")


class Clock(Protocol):
    def monotonic(self) -> float:
        """Seconds on a clock that never goes backwards; for intervals and deadlines."""
        ...

    def wall_ms(self) -> int:
        """Milliseconds since the epoch; for timestamps that leave the process."""
        ...

    async def sleep(self, seconds: float) -> None: ...

    async def wait_for(self, aw: Awaitable[T], timeout: float | None) -> T:
        """``aw``'s result, or ``TimeoutError`` (and ``aw`` cancelled) after ``timeout``
        seconds of this clock; ``None`` waits forever."""
        ...


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def wall_ms(self) -> int:
        return time.time_ns() // 1_000_000

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    async def wait_for(self, aw: Awaitable[T], timeout: float | None) -> T:
        if timeout is None or not isinstance(aw, asyncio.Future):
            return await asyncio.wait_for(aw, timeout)
        # A future (an answer awaited): a timer that cancels it, rather than
        # ``asyncio.wait_for``'s extra future, callbacks and task hand-offs, a tenth of a
        # client's cost of a one-message publish. The same contract: cancelled and
        # ``TimeoutError`` once the time is up; cancelling the caller cancels ``aw``.
        fut: asyncio.Future[T] = aw
        if fut.done():
            return fut.result()
        expired = False

        def expire() -> None:
            nonlocal expired
            if not fut.done():
                expired = True
                fut.cancel()

        timer = asyncio.get_running_loop().call_later(timeout, expire)
        try:
            return await fut
        except asyncio.CancelledError:
            if expired:
                raise TimeoutError from None
            raise
        finally:
            timer.cancel()


class ManualClock:
    """A clock that moves only when told; ``sleep`` waits until ``advance`` passes the deadline."""

    def __init__(self, start: float = 1000.0, wall_ms: int = 1_700_000_000_000) -> None:
        self._now = start
        self._wall0 = wall_ms - int(start * 1000)
        self._sleepers: list[tuple[float, asyncio.Future[None]]] = []

    def monotonic(self) -> float:
        return self._now

    def wall_ms(self) -> int:
        return self._wall0 + int(self._now * 1000)

    async def sleep(self, seconds: float) -> None:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._sleepers.append((self._now + seconds, fut))
        await fut

    async def wait_for(self, aw: Awaitable[T], timeout: float | None) -> T:
        task = asyncio.ensure_future(aw)
        if timeout is None:
            return await task
        timer = asyncio.ensure_future(self.sleep(timeout))
        try:
            done, _ = await asyncio.wait({task, timer}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            task.cancel()
            raise
        finally:
            timer.cancel()
        if task in done:
            return task.result()
        task.cancel()
        raise TimeoutError(f"no result within {timeout} s of the manual clock")

    @property
    def sleepers(self) -> int:
        """Sleeps waiting for the clock to move (for tests that advance it step by step)."""
        return sum(1 for _, f in self._sleepers if not f.done())

    def advance(self, seconds: float) -> None:
        self._now += seconds
        due = [f for t, f in self._sleepers if t <= self._now]
        self._sleepers = [(t, f) for t, f in self._sleepers if t > self._now]
        for fut in due:
            if not fut.done():
                fut.set_result(None)


class Throttle:
    """Lets something through at most once per ``interval_s`` for each key.

    For warnings a lasting condition would otherwise repeat on every retry (a topic that
    cannot be taken over while hubs are missing): the first says it, the rest go to debug.
    """

    def __init__(self, interval_s: float, clock: Clock, *, max_keys: int = 10_000) -> None:
        self._interval = interval_s
        self._clock = clock
        self._max_keys = max_keys
        self._last: dict[object, float] = {}

    def allow(self, key: object = None) -> bool:
        now = self._clock.monotonic()
        last = self._last.get(key)
        if last is not None and now - last < self._interval:
            return False
        if len(self._last) >= self._max_keys:
            self._last = {k: t for k, t in self._last.items() if now - t < self._interval}
        self._last[key] = now
        return True
