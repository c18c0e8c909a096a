"""Duplicate detection and per-publisher order for idempotent publishing.

A publisher numbers its messages per topic (``publisher_seq``); a batch covers
``publisher_seq .. publisher_seq + count - 1``. The owner remembers, per publisher, the highest
sequence stored and where the last ``RECENT`` batches landed, so a re-sent batch (its
acknowledgement was lost to a crash or a move) is answered with the sequence ids it already
has instead of being stored again. A re-send that arrives while the original is still being
written waits for it. After a change of owner the table is rebuilt from the end of the log
(``learn``), which is what makes retries through a failover safe.

Order, as Kafka's idempotent producer keeps it: a known publisher's batch is stored only if it
starts right after what is stored or being written for that publisher. A batch that would leave
a gap (an earlier one was sent to another hub, or is still being retried) is refused with
``OutOfOrderError``, which the client retries once the earlier batches have settled. So however
a client's pipelined batches are scattered by a move, the log holds them in its order. A
publisher the table does not know (new, or not seen in the part of the log read back after a
change of owner) is taken at whatever sequence it starts.

A batch replicated from another region (``ORIGIN_MARK``: ``@<region>/<publisher>``, written by
the hub's replicator alone) is numbered by its origin sequence ids, which have gaps (other
publishers' messages in between): its order is the origin log's, kept by the replicator, so
only the duplicate half of these rules applies to it.
"""

from __future__ import annotations

import asyncio
import sys
from dataclasses import dataclass

from hedwig.errors import OutOfOrderError
from hedwig.protocol.names import ORIGIN_MARK

RECENT = 256
# Publishers remembered per topic, least recently seen forgotten first: writers that use a new
# id per job or batch (Spark) must not grow the table forever. A forgotten publisher's very
# late re-send would be stored again.
MAX_PUBLISHERS = 10_000


@dataclass(slots=True)
class _Publisher:
    highest: int = 0
    # Where its last batches landed, oldest first: (publisher sequence, first and last
    # sequence ids) while there is one (most topics are published to once or seldom, and a
    # dictionary of one entry is 184 bytes against a tuple's 64), else a table by publisher
    # sequence. Plain dicts, ordered by insertion, here and for the publishers: an
    # ``OrderedDict`` of one entry is 384 bytes, and every topic published to keeps one.
    batches: tuple[int, int, int] | dict[int, tuple[int, int]] | None = None

    def place(self, pseq: int) -> tuple[int, int] | None:
        """Where the remembered batch ``pseq`` landed."""
        b = self.batches
        if isinstance(b, dict):
            return b.get(pseq)
        return (b[1], b[2]) if b is not None and b[0] == pseq else None

    def oldest(self) -> int | None:
        """The lowest publisher sequence remembered."""
        b = self.batches
        if isinstance(b, dict):
            return min(b) if b else None
        return None if b is None else b[0]

    def add(self, pseq: int, first_seq: int, last_seq: int) -> None:
        b = self.batches
        if b is None or (not isinstance(b, dict) and b[0] == pseq):
            self.batches = (pseq, first_seq, last_seq)
            return
        if not isinstance(b, dict):
            b = self.batches = {b[0]: (b[1], b[2])}
        b.pop(pseq, None)
        b[pseq] = (first_seq, last_seq)
        while len(b) > RECENT:
            del b[next(iter(b))]


@dataclass(frozen=True, slots=True)
class Known:
    """A batch already stored: where it is (0, 0 when too old to remember the place)."""

    first_seq: int
    last_seq: int


class PublisherTable(_Publisher):
    """A topic's publishers and where their last batches landed. While the topic has one
    publisher (most have), the table is that publisher's record itself (the fields it
    inherits), named by ``_one_id``: no dictionary of one entry (184 bytes) and no record
    object of its own (48) on each such topic."""

    __slots__ = ("_inflight", "_one_id", "_pubs", "_writing")
    # Compared and hashed as itself, not as the record it inherits from.
    __eq__ = object.__eq__
    __hash__ = object.__hash__

    def __init__(self) -> None:
        super().__init__()
        # The publishers, least recently seen first, once there are two (None before).
        self._pubs: dict[str, _Publisher] | None = None
        self._one_id: str | None = None
        # Made while something is being written (None: nothing; most topics are idle).
        self._inflight: dict[tuple[str, int], asyncio.Future[Known]] | None = None
        # Per publisher: how many batches are being written now, and the last sequence of them.
        self._writing: dict[str, tuple[int, int]] | None = None

    async def check(self, publisher: str, pseq: int, count: int) -> Known | None:
        """The stored place of this batch if it is a duplicate, else ``None`` (store it).

        ``OutOfOrderError`` if storing it would leave a gap in a known publisher's sequence.
        """
        waiting = None if self._inflight is None else self._inflight.get((publisher, pseq))
        if waiting is not None:
            return await asyncio.shield(waiting)
        pub = self._get(publisher)
        writing = None if self._writing is None else self._writing.get(publisher)
        if pub is None or pseq + count - 1 > pub.highest:
            if pub is not None or writing is not None:
                expected = max(pub.highest if pub else 0, writing[1] if writing else 0) + 1
                if pseq > expected and not publisher.startswith(ORIGIN_MARK):
                    raise OutOfOrderError(
                        f"publisher {publisher} sent sequence {pseq}, the next stored here "
                        f"is {expected}: earlier batches first",
                        expected=expected,
                    )
            return None
        place = pub.place(pseq)
        if place is not None:
            return Known(*place)
        oldest = pub.oldest()
        if oldest is not None and pseq >= oldest:
            # Inside the remembered window but never stored: a hole left by a client that
            # re-sent out of order. Store it (late, but stored); calling it a duplicate
            # would drop an acknowledged message.
            return None
        return Known(0, 0)

    def begin(self, publisher: str, pseq: int, count: int) -> None:
        fut: asyncio.Future[Known] = asyncio.get_running_loop().create_future()
        if self._inflight is None:
            self._inflight = {}
        self._inflight[(publisher, pseq)] = fut
        if self._writing is None:
            self._writing = {}
        n, last = self._writing.get(publisher, (0, 0))
        self._writing[publisher] = (n + 1, max(last, pseq + count - 1))

    def end(self, publisher: str, pseq: int, stored: Known | None) -> None:
        writing = self._writing
        n, last = (1, 0) if writing is None else writing.pop(publisher, (1, 0))
        if writing is not None and n > 1:
            writing[publisher] = (n - 1, last)
        elif not writing:
            self._writing = None  # an emptied table keeps its slots; most topics are idle
        inflight = self._inflight
        fut = None if inflight is None else inflight.pop((publisher, pseq), None)
        if not inflight:
            self._inflight = None
        if fut is not None and not fut.done():
            if stored is None:
                fut.cancel()
            else:
                fut.set_result(stored)

    def _get(self, publisher: str) -> _Publisher | None:
        if self._pubs is not None:
            return self._pubs.get(publisher)
        return self if publisher == self._one_id else None

    def learn(self, publisher: str, pseq: int, count: int, first_seq: int) -> None:
        pub = self._get(publisher)
        pubs = self._pubs
        if pub is None:
            # Interned: a client's id is the same on every topic it publishes to, and each
            # frame decodes a copy of its own (a string per topic, on a hub owning 100,000).
            publisher = sys.intern(publisher)
            if pubs is None and self._one_id is None:
                self._one_id, pub = publisher, self
            else:
                pub = _Publisher()
                if pubs is None:  # a second one: a table from now on
                    pubs = self._pubs = {}
                    if self._one_id is not None:
                        pubs[self._one_id] = _Publisher(self.highest, self.batches)
                        self.highest, self.batches = 0, None
                    self._one_id = None
                while len(pubs) >= MAX_PUBLISHERS:
                    del pubs[next(iter(pubs))]
                pubs[publisher] = pub
        elif pubs is not None and next(reversed(pubs)) != publisher:
            del pubs[publisher]  # the most recently seen now (moved last)
            pubs[publisher] = pub
        last = pseq + count - 1
        pub.highest = max(pub.highest, last)
        pub.add(pseq, first_seq, first_seq + count - 1)
