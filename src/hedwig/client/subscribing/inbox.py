"""What a subscription has received and not yet handed out: batches of messages, in order,
then perhaps an error or the end.

Messages arrive a batch at a time, so they are queued a batch at a time: putting a delivered
batch is one append whatever its size, and its messages are decoded one at a time as they are
handed out (``Batch.iter_delivered``), so a queue of many batches holds their bytes, not a
record per message (``asyncio.Queue`` would cost a put, a record and a coroutine per
message). Errors and the end (``None``) are queued between batches, in the order they
happened, and handed out once each, as a queue would.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterator
from typing import Final

from hedwig.errors import HedwigError
from hedwig.protocol import DeliveredMessage


class _Empty:
    """Nothing to hand out yet (a marker ``pop`` returns)."""


EMPTY: Final = _Empty()

Item = DeliveredMessage | HedwigError | None


class Inbox:
    def __init__(self) -> None:
        self._items: deque[Iterator[DeliveredMessage] | HedwigError | None] = deque()
        # The messages of the batch being handed out (``None``: none is).
        self.current: Iterator[DeliveredMessage] | None = None
        self._waiter: asyncio.Future[None] | None = None

    def put_messages(self, messages: Iterator[DeliveredMessage]) -> None:
        """Queue a batch's messages, to be taken from ``messages`` as they are handed out."""
        self._items.append(messages)
        self._wake()

    def put(self, item: HedwigError | None) -> None:
        """Queue an error, or the end (``None``), after what is queued."""
        self._items.append(item)
        self._wake()

    def drop_messages(self) -> None:
        """Forget the messages not handed out yet; errors and the end stay queued."""
        self.current = None
        self._items = deque(i for i in self._items if i is None or isinstance(i, HedwigError))

    def pop(self) -> Item | _Empty:
        """The next item, or ``EMPTY``."""
        while True:
            current = self.current
            if current is not None:
                m = next(current, None)
                if m is not None:
                    return m
                self.current = None
            item = self._take()
            if item is None or isinstance(item, HedwigError | _Empty):
                return item

    def next_batch(self) -> Iterator[DeliveredMessage] | HedwigError | _Empty | None:
        """The messages of the next batch (or the rest of the current one), or the next
        error or end, or ``EMPTY``; the iterator stays ``current`` until it is used up."""
        if self.current is not None:
            return self.current
        return self._take()

    def _take(self) -> Iterator[DeliveredMessage] | HedwigError | _Empty | None:
        """The next item queued (a batch's messages become ``current``), or ``EMPTY``."""
        if not self._items:
            return EMPTY
        item = self._items.popleft()
        if item is not None and not isinstance(item, HedwigError):
            self.current = item
        return item

    async def messages(self) -> Iterator[DeliveredMessage] | None:
        """``next_batch``, waiting while there is nothing: the messages of the next batch (or
        the rest of the current one), or ``None`` at the end; a queued error is raised."""
        while True:
            item = self.next_batch()
            if isinstance(item, _Empty):
                await self.wait()
            elif isinstance(item, HedwigError):
                raise item
            else:
                return item

    async def get(self) -> Item:
        """The next item, once there is one (cancelling the wait loses nothing)."""
        while True:
            item = self.pop()
            if not isinstance(item, _Empty):
                return item
            await self.wait()

    async def wait(self) -> None:
        """Until there is something to hand out."""
        while self.current is None and not self._items:
            waiter = self._waiter = asyncio.get_running_loop().create_future()
            try:
                await waiter
            finally:
                self._waiter = None

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
