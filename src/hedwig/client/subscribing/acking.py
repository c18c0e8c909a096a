"""The caller's acknowledgements of a subscription shared by several consumers (failover or
shared: ``SubscriptionType``), where each message is acknowledged on its own.

``ack(msg)`` says a message is processed, ``nack(msg, delay=...)`` that it is not and should
come again (after ``delay`` seconds, or the subscription's backoff). Both are sent at once
without waiting for their answer, to the connection the message came on, and concern the
lane it came from. Rules:

- An acknowledgement said while the subscription is detached is not said again: the hub took
  back what this consumer held when it left, and delivers it again (to whichever consumer),
  with its delivery count (``DeliveredMessage.delivery_count``). At least once, never lost.
- The hub refuses an acknowledgement of a message this connection does not hold (it timed
  out and went to another consumer); that is counted (``not_held``), not raised: the message
  is someone else's now.
- ``consume`` (cumulative) is refused: on a queue it would acknowledge other consumers'
  messages.
- Acknowledgements made in one turn of the event loop (a caller working through a delivered
  batch acknowledges many before it awaits anything) go as one ACK of their ranges, sent at
  the end of the turn: one frame and one answer instead of one per message.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

from hedwig.errors import HedwigError, UsageError
from hedwig.net.connection import HubConnection
from hedwig.protocol import Ack, DeliveredMessage, Error, Nack, Reply, SeqRange, Status

if TYPE_CHECKING:
    from hedwig.client.subscribing.subscriber import Subscriber

# The longest delay a nack asks for: what a u32 of milliseconds holds is more than a policy
# should allow anyway (the hub bounds backoffs at an hour).
MAX_NACK_DELAY_S = 3_600.0


class Acking:
    """The acknowledging part of ``Subscriber``."""

    topic: str
    name: str
    lane: int
    _conn: HubConnection | None
    _lanes: dict[int, Subscriber]
    _last_consume: asyncio.Future[Reply] | None
    not_held: int
    # Acknowledgements of this turn, for the connection they go to (``_send_acks``).
    _acks: list[int]
    _acks_conn: HubConnection | None

    def ack(self, msg: DeliveredMessage) -> None:
        """``msg`` is processed: the hub will not deliver it again."""
        if msg.lane != self.lane:
            self._settle(msg, None)
            return
        conn = self._conn
        if conn is None or conn.closed:
            return  # the hub took it back when this consumer left: it comes again
        if self._acks_conn is not conn:
            self._send_acks()
            self._acks_conn = conn
        if not self._acks:
            asyncio.get_running_loop().call_soon(self._send_acks)
        self._acks.append(msg.seq)

    def _send_acks(self) -> None:
        seqs, conn = self._acks, self._acks_conn
        if not seqs:
            return
        self._acks = []
        if conn is None or conn.closed or conn is not self._conn:
            return  # detached since: the hub took them back
        seqs.sort()
        ranges = []
        first = last = seqs[0]
        for seq in seqs[1:]:
            if seq > last + 1:
                ranges.append(SeqRange(first, last))
                first = seq
            last = seq
        ranges.append(SeqRange(first, last))
        self._send(
            conn,
            Ack(
                request_id=conn.next_id(),
                topic=self.topic,
                subscriber=self.name,
                ranges=tuple(ranges),
            ),
        )

    def nack(self, msg: DeliveredMessage, *, delay: float = 0.0) -> None:
        """``msg`` was not processed: deliver it again after ``delay`` seconds (0: after the
        subscription's backoff for its delivery count)."""
        if not 0 <= delay <= MAX_NACK_DELAY_S:
            raise UsageError(f"a nack's delay is 0 to {MAX_NACK_DELAY_S:.0f} seconds")
        self._settle(msg, round(delay * 1000))

    def _settle(self, msg: DeliveredMessage, delay_ms: int | None) -> None:
        if msg.lane != self.lane:
            child = self._lanes.get(msg.lane)
            if child is not None:
                child._settle(msg, delay_ms)
            return
        if delay_ms is None:
            self.ack(msg)
            return
        conn = self._conn
        if conn is None or conn.closed:
            return  # the hub took it back when this consumer left: it comes again
        self._send(
            conn,
            Nack(
                request_id=conn.next_id(),
                topic=self.topic,
                subscriber=self.name,
                delay_ms=delay_ms,
                ranges=(SeqRange(msg.seq, msg.seq),),
            ),
        )

    def _send(self, conn: HubConnection, frame: Ack | Nack) -> None:
        with contextlib.suppress(HedwigError):
            fut = conn.send_nowait(frame)
            fut.add_done_callback(self._answered)
            self._last_consume = fut

    def _answered(self, fut: asyncio.Future[Reply]) -> None:
        if fut.cancelled() or fut.exception() is not None:
            return
        answer = fut.result()
        if isinstance(answer, Error) and answer.status == Status.NOT_HELD:
            self.not_held += max(1, answer.seq)
