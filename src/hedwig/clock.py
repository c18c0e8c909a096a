"""Clocks and randomness are injected so timing logic is testable without waiting.

``Clock`` is the one seam: production code uses ``SystemClock``; tests use ``ManualClock``
and advance it by hand.
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float:
        """Seconds on a clock that never goes backwards; for intervals and deadlines."""
        ...

    def wall_ms(self) -> int:
        """Milliseconds since the epoch; for timestamps that leave the process."""
        ...

    async def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def wall_ms(self) -> int:
        return time.time_ns() // 1_000_000

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


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

    def advance(self, seconds: float) -> None:
        self._now += seconds
        due = [f for t, f in self._sleepers if t <= self._now]
        self._sleepers = [(t, f) for t, f in self._sleepers if t > self._now]
        for fut in due:
            if not fut.done():
                fut.set_result(None)
