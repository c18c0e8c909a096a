"""The caller's side of a subscription: messages handed out, and consumes sent back.

Messages are handed out from the subscription's inbox in the order they arrived: one at a time
(``next``, ``async for``) or in lists of what one delivered batch held (``batches``, as Kafka's
``consume(num_messages)``: one step of the caller's loop per list rather than per message). An
iterator takes a batch's messages straight from the inbox's current batch, so ``next`` takes up
where an iteration stopped, and a drop (a reset) ends the batch.

A consume is cumulative and per lane: it marks every message up to a sequence id of one lane
consumed, and is sent at once without waiting for its answer (``sync`` waits for the hub to
take them). One said while the subscription is detached is said again when it attaches. With
``auto_consume`` a message is consumed as it is handed out (a list: when the next is asked
for).

``next`` waits at most its timeout; a timeout says whether the hub is holding messages back
because the window of messages handed out and not consumed is full.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from hedwig.client.routing import Router
from hedwig.client.subscribing.inbox import Inbox
from hedwig.errors import DeadlineExceededError, HedwigError, UsageError
from hedwig.net.connection import HubConnection
from hedwig.protocol import Consume, DeliveredMessage, Error, Reply

if TYPE_CHECKING:
    from hedwig.client.subscribing.subscriber import Subscriber


class Reading:
    """The caller's part of ``Subscriber``."""

    topic: str
    name: str
    lane: int
    _router: Router
    _inbox: Inbox
    _auto_consume: bool
    _window: int
    _last_seen: int
    _consumed: int
    _conn: HubConnection | None
    _lanes: dict[int, Subscriber]
    _last_consume: asyncio.Future[Reply] | None

    def __aiter__(self) -> AsyncIterator[DeliveredMessage]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[DeliveredMessage]:
        inbox = self._inbox
        while (item := await inbox.messages()) is not None:
            # A batch's messages, straight from its iterator; it stays the inbox's current
            # one, so ``next`` takes up where this stops, and a drop (a reset) ends it.
            for m in item:
                yield m
                if self._auto_consume:
                    self.consume(m.seq, m.lane)
                if inbox.current is not item:
                    break
            else:
                if inbox.current is item:
                    inbox.current = None

    def batches(self, max_messages: int = 1000) -> AsyncIterator[list[DeliveredMessage]]:
        """The messages as they come, in lists of at most ``max_messages`` (each from one
        delivered batch, so of one lane): as Kafka's ``consume(num_messages)``, one step of
        the caller's loop per list rather than per message. With ``auto_consume``, a list is
        consumed when the next one is asked for."""
        if max_messages < 1:
            raise UsageError("max_messages is at least 1")
        return self._iterate_lists(max_messages)

    async def _iterate_lists(self, max_messages: int) -> AsyncIterator[list[DeliveredMessage]]:
        inbox = self._inbox
        while (item := await inbox.messages()) is not None:
            got = list(itertools.islice(item, max_messages))
            if len(got) < max_messages and inbox.current is item:
                inbox.current = None  # used up
            if got:
                yield got
                if self._auto_consume:
                    self.consume(got[-1].seq, got[-1].lane)

    async def next(self, timeout: float | None = None) -> DeliveredMessage:
        """The next message; ``DeadlineExceededError`` after ``timeout`` seconds (saying so if
        the hub is holding messages back because the window of unconsumed ones is full)."""
        try:
            item = await self._router.clock.wait_for(self._inbox.get(), timeout)
        except TimeoutError:
            why = ""
            if self._window and self._last_seen - self._consumed >= self._window:
                why = (
                    f"; {self._last_seen - self._consumed} messages were handed out and not "
                    f"consumed, the subscription's window of {self._window}: the hub sends "
                    "more once they are consumed (Subscriber.consume)"
                )
            raise DeadlineExceededError(
                f"no message on {self.topic!r} within {timeout}s{why}"
            ) from None
        if item is None:
            raise UsageError("subscriber is closed")
        if isinstance(item, HedwigError):
            raise item
        if self._auto_consume:
            self.consume(item.seq, item.lane)
        return item

    def consume(self, seq: int | DeliveredMessage, lane: int = 0) -> None:
        """Cumulatively consume every message up to ``seq`` (of ``lane``, for a topic served
        by lanes: ``DeliveredMessage.lane``), sent without waiting. Given the message itself,
        every message up to it in its lane."""
        if not isinstance(seq, int):
            msg = seq
            seq, lane = msg.seq, msg.lane
        if lane != self.lane:
            child = self._lanes.get(lane)
            if child is not None:
                child.consume(seq, lane)
            return
        if seq <= self._consumed:
            return
        self._consumed = seq
        conn = self._conn
        if conn is None or conn.closed:
            return  # said again after re-subscription (see attach)
        self._send_consume(conn, seq)

    def _send_consume(self, conn: HubConnection, seq: int) -> None:
        with contextlib.suppress(HedwigError):
            fut = conn.send_nowait(
                Consume(request_id=conn.next_id(), topic=self.topic, subscriber=self.name, seq=seq)
            )
            fut.add_done_callback(ignore_answer)
            self._last_consume = fut

    async def sync(self, timeout: float | None = 10.0) -> bool:
        """Wait until the hub has taken every consume sent so far (it persists them with its
        next flush); False if the last one was lost with its connection (the hub will then
        redeliver from its mark: at least once) or did not come back within ``timeout``."""
        for child in list(self._lanes.values()):
            if not await child.sync(timeout):
                return False
        fut = self._last_consume
        if fut is None:
            return True
        try:
            answer = await self._router.clock.wait_for(asyncio.shield(fut), timeout)
        except (HedwigError, TimeoutError):
            return False
        return not isinstance(answer, Error)


def ignore_answer(fut: asyncio.Future[Reply]) -> None:
    """A done callback for a request nobody waits on: its failure is retrieved, and dropped."""
    if not fut.cancelled():
        fut.exception()
