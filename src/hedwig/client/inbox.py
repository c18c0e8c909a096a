"""What a subscription has received and not yet handed out: batches of messages, in order,
then perhaps an error or the end.

Messages arrive a batch at a time, so they are queued a batch at a time: putting a delivered
batch is one append whatever its size, and handing out a message is an index into the batch
being handed out (``asyncio.Queue`` would cost a put and a coroutine per message). Errors and
the end (``None``) are queued between batches, in the order they happened, and handed out
once each, as a queue would.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Final

from hedwig.errors import HedwigError
from hedwig.protocol import DeliveredMessage


class _Empty:
    """Nothing to hand out yet (a marker ``pop`` returns)."""


EMPTY: Final = _Empty()

Item = DeliveredMessage | HedwigError | None


class Inbox:
    def __init__(self) -> None:
        self._items: deque[list[DeliveredMessage] | HedwigError | None] = deque()
        # The batch being handed out, and the index of its next message.
        self._current: list[DeliveredMessage] = []
        self._pos = 0
        self._waiter: asyncio.Future[None] | None = None

    def put_messages(self, messages: list[DeliveredMessage]) -> None:
        """Queue a batch's messages (the list is kept, not copied: do not change it)."""
        if messages:
            self._items.append(messages)
            self._wake()

    def put(self, item: HedwigError | None) -> None:
        """Queue an error, or the end (``None``), after what is queued."""
        self._items.append(item)
        self._wake()

    def drop_messages(self) -> None:
        """Forget the messages not handed out yet; errors and the end stay queued."""
        self._current, self._pos = [], 0
        kept = [item for item in self._items if not isinstance(item, list)]
        self._items = deque(kept)

    def pop(self) -> Item | _Empty:
        """The next item, or ``EMPTY``."""
        current, pos = self._current, self._pos
        if pos < len(current):
            self._pos = pos + 1
            return current[pos]
        items = self._items
        while items:
            item = items.popleft()
            if not isinstance(item, list):
                return item
            self._current, self._pos = item, 1
            return item[0]
        return EMPTY

    async def get(self) -> Item:
        """The next item, once there is one (cancelling the wait loses nothing)."""
        while True:
            item = self.pop()
            if not isinstance(item, _Empty):
                return item
            await self.wait()

    async def wait(self) -> None:
        """Until there is something to hand out."""
        while self._pos >= len(self._current) and not self._items:
            waiter = self._waiter = asyncio.get_running_loop().create_future()
            try:
                await waiter
            finally:
                self._waiter = None

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
