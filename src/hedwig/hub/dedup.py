"""Duplicate detection for idempotent publishing.

A publisher numbers its messages per topic (``publisher_seq``); a batch covers
``publisher_seq .. publisher_seq + count - 1``. The owner remembers, per publisher, the highest
sequence stored and where the last ``RECENT`` batches landed, so a re-sent batch (its
acknowledgement was lost to a crash or a move) is answered with the sequence ids it already
has instead of being stored again. A re-send that arrives while the original is still being
written waits for it. After a change of owner the table is rebuilt from the end of the log
(``learn``), which is what makes retries through a failover safe.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import dataclass, field

RECENT = 256
# Publishers remembered per topic, least recently seen forgotten first: writers that use a new
# id per job or batch (Spark) must not grow the table forever. A forgotten publisher's very
# late re-send would be stored again.
MAX_PUBLISHERS = 10_000


@dataclass
class _Publisher:
    highest: int = 0
    batches: OrderedDict[int, tuple[int, int]] = field(default_factory=OrderedDict)


@dataclass(frozen=True, slots=True)
class Known:
    """A batch already stored: where it is (0, 0 when too old to remember the place)."""

    first_seq: int
    last_seq: int


class PublisherTable:
    def __init__(self) -> None:
        self._pubs: OrderedDict[str, _Publisher] = OrderedDict()
        self._inflight: dict[tuple[str, int], asyncio.Future[Known]] = {}

    async def check(self, publisher: str, pseq: int, count: int) -> Known | None:
        """The stored place of this batch if it is a duplicate, else ``None``."""
        waiting = self._inflight.get((publisher, pseq))
        if waiting is not None:
            return await asyncio.shield(waiting)
        pub = self._pubs.get(publisher)
        if pub is None or pseq + count - 1 > pub.highest:
            return None
        place = pub.batches.get(pseq)
        if place is not None:
            return Known(*place)
        if pub.batches and pseq >= min(pub.batches):
            # Inside the remembered window but never stored: a hole left by a client that
            # re-sent out of order. Store it (late, but stored); calling it a duplicate
            # would drop an acknowledged message.
            return None
        return Known(0, 0)

    def begin(self, publisher: str, pseq: int) -> None:
        fut: asyncio.Future[Known] = asyncio.get_running_loop().create_future()
        self._inflight[(publisher, pseq)] = fut

    def end(self, publisher: str, pseq: int, stored: Known | None) -> None:
        fut = self._inflight.pop((publisher, pseq), None)
        if fut is not None and not fut.done():
            if stored is None:
                fut.cancel()
            else:
                fut.set_result(stored)

    def learn(self, publisher: str, pseq: int, count: int, first_seq: int) -> None:
        pub = self._pubs.get(publisher)
        if pub is None:
            pub = self._pubs[publisher] = _Publisher()
            while len(self._pubs) > MAX_PUBLISHERS:
                self._pubs.popitem(last=False)
        else:
            self._pubs.move_to_end(publisher)
        last = pseq + count - 1
        pub.highest = max(pub.highest, last)
        pub.batches[pseq] = (first_seq, first_seq + count - 1)
        pub.batches.move_to_end(pseq)
        while len(pub.batches) > RECENT:
            pub.batches.popitem(last=False)
