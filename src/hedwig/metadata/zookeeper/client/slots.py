"""The bound on requests in flight: what a hub may have waiting on ZooKeeper at once.

A request takes a slot before it is sent and gives it back when its answer (or the loss of
its connection) comes back. At most ``MAX_IN_FLIGHT`` are out; the others wait their turn
here, in order: a slot given back while requests wait passes to the first of them (it stays
taken, so a request arriving meanwhile cannot jump the queue). While the session is not
connected nothing is sent, and a request that finds no free slot is refused at once
instead of waiting (nothing would give one back until the connection returns): a hub owning
100,000 topics whose ZooKeeper died must go on serving them, not pile up requests. A request
for many callers (the reads of a turn in one ``multiRead``, its transactions in one
``multi``) takes one slot.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable

from hedwig.errors import MetadataUnavailableError

# Requests out at once. Enough to keep ZooKeeper busy (a wave of claims or take-overs sends
# its reads and transactions many to a request), few enough that a hub whose ZooKeeper slows
# down does not pile up work it will have to redo.
MAX_IN_FLIGHT = 192


class Slots:
    """At most ``limit`` requests out, counted on the event loop (see the module
    docstring); ``connected()`` says whether the session can send now."""

    def __init__(self, limit: int, connected: Callable[[], bool]) -> None:
        self.limit = limit
        self.used = 0
        self._connected = connected
        # Each waiter's result: ``True``, a slot passed to it; ``False``, woken to look at
        # the connection again (``wake_all``).
        self._waiters: collections.deque[asyncio.Future[bool]] = collections.deque()

    def take_now(self) -> bool:
        """A slot if one is free and nobody waits for one."""
        if self.used < self.limit and not self._waiters:
            self.used += 1
            return True
        return False

    async def take(self, path: str) -> None:
        """A slot for a request on ``path``, waited for while connected."""
        while not self.take_now():
            if not self._connected():
                raise MetadataUnavailableError(
                    f"ZooKeeper unavailable (not connected, {self.used} requests waiting) at {path}"
                )
            waiter: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                passed = await waiter
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled() and waiter.result():
                    self.give()  # passed a slot it will not use: to the next one
                raise
            if passed:
                return

    def give(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(True)
                return
        self.used -= 1

    def wake_all(self) -> None:
        """Every waiter looks at the connection again (it was lost or is back)."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(False)
