"""Where a subscription reset starts (RESET_SUBSCRIPTION): a sequence id, the earliest kept
message, the end, or a publish time (``to`` TIME), always within what the log keeps.

Every batch a topic stores carries the time its owner appended it (``Batch.publish_time_ms``,
from the owner's clock), so publish times grow along the log: the first message published at
or after a time is found by a binary search over sequence ids, one read of one batch per step
(about 20 reads for a million messages, whatever the log's size: no scan, no index to keep).
A read returns the whole batch holding the sequence id asked for, so each step moves a bound
to a batch's edge.

What it rests on: publish times that do not go back. An owner's clock stepped back, or a
take-over by a hub whose clock is behind, makes times along the log dip; a time inside a dip
then lands at one of the positions that time could mean, never outside the kept log (earliest
and latest bound it). Kafka's time index keeps the greatest time so far for the same reason.
"""

from __future__ import annotations

from typing import Protocol

from hedwig.protocol import Batch, ResetTo


class TimedLog(Protocol):
    """What the search reads: the owner's ``TopicLog`` or a delivery hub's ``TailLog``."""

    @property
    def first_seq(self) -> int: ...

    @property
    def last_seq(self) -> int: ...

    async def read(self, start: int, limit: int, max_bytes: int) -> list[Batch]: ...


async def first_published_at(log: TimedLog, time_ms: int) -> int:
    """The sequence id of the first kept message published at or after ``time_ms`` (epoch
    milliseconds); ``log.last_seq + 1`` if none is (delivery then starts with the next)."""
    lo, hi = log.first_seq, log.last_seq + 1  # the answer is in [lo, hi]
    while lo < hi:
        mid = (lo + hi) // 2
        batches = await log.read(mid, 1, 1)
        if not batches:  # collected meanwhile: what is left starts later
            lo = mid + 1
            continue
        batch = batches[0]
        if batch.publish_time_ms >= time_ms:
            hi = min(mid, batch.first_seq)
        else:
            lo = max(mid + 1, batch.first_seq + batch.count)
    return lo


async def reset_mark(log: TimedLog, to: ResetTo, seq: int) -> int:
    """The consume mark a reset ``to`` (with its ``seq``: a sequence id, or a time) sets:
    delivery restarts after it."""
    if to is ResetTo.TIME:
        seq, to = await first_published_at(log, seq), ResetTo.SEQ
    first, last = log.first_seq, log.last_seq
    mark = {ResetTo.EARLIEST: first - 1, ResetTo.LATEST: last}.get(to, seq - 1)
    return min(max(mark, first - 1), last)
