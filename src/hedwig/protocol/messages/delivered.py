"""A message as a subscriber or reader sees it, made as it is handed out.

One flat named tuple per message (``DeliveredMessage``): a subscriber makes one per delivered
message, so it is the cheapest record to make, ``tuple.__new__`` in one call, read through C
accessors. They are made lazily, one at a time as they are asked for (``iter_delivered``), so a
record is usually dropped soon after it is made and its memory reused at once, instead of a
whole batch of records made up front and kept in a queue. A batch checked to hold equal
messages without keys or headers has each value sliced at a fixed stride (``iter_uniform``).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import NamedTuple

from hedwig.protocol.messages.encoding import KEY_VALUE, MESSAGE_OVERHEAD, NO_KEY, Message
from hedwig.protocol.wire import U16, U32, read_str


class DeliveredMessage(NamedTuple):
    """A message as a subscriber or reader sees it: with its place in the topic.

    One flat tuple per message (a subscriber makes one per delivered message, so it is the
    cheapest record to make: ``tuple.__new__`` in one call, read through C accessors);
    ``message`` gives the ``Message`` as it was published, made on demand."""

    seq: int
    publish_time_ms: int
    publisher_id: str
    value: bytes
    key: bytes | None = None
    headers: tuple[tuple[str, bytes], ...] = ()
    # The lane it came from (``hedwig.metadata.plans``): 0 for a topic not served by lanes.
    # ``seq`` is its place in that lane; a subscriber consumes per lane.
    lane: int = 0

    @property
    def message(self) -> Message:
        return Message(value=self.value, key=self.key, headers=self.headers)


_new_tuple = tuple.__new__


def iter_delivered(
    payload: bytes, first_seq: int, publish_time_ms: int, publisher_id: str, lane: int = 0
) -> Iterator[DeliveredMessage]:
    """A checked batch's messages as delivered, one at a time as they are asked for.

    Lazy on purpose: a subscriber makes each record as it hands it out, and the record is
    usually dropped soon after (so its memory is reused at once), instead of a whole batch of
    records made up front and kept alive in a queue. ``payload`` must have passed a structure
    check (``EncodedMessages.parse``), as every batch from the wire has."""
    new = _new_tuple
    lengths = KEY_VALUE.unpack_from
    unpack32 = U32.unpack_from
    unpack16 = U16.unpack_from
    end = len(payload)
    pos = 0
    seq = first_seq
    while pos < end:
        klen, vlen = lengths(payload, pos)
        key: bytes | None = None
        if klen != NO_KEY:
            key = payload[pos + 4 : pos + 4 + klen]
            (vlen,) = unpack32(payload, pos + 4 + klen)
            pos += klen
        pos += 8
        value = payload[pos : pos + vlen]
        pos += vlen
        (nh,) = unpack16(payload, pos)
        pos += 2
        headers: tuple[tuple[str, bytes], ...] = ()
        if nh:
            found: list[tuple[str, bytes]] = []
            for _h in range(nh):
                name, pos = read_str(payload, pos)
                (hv,) = unpack32(payload, pos)
                pos += 4
                found.append((name, payload[pos : pos + hv]))
                pos += hv
            headers = tuple(found)
        yield new(DeliveredMessage, (seq, publish_time_ms, publisher_id, value, key, headers, lane))
        seq += 1


def iter_uniform(
    payload: bytes, size: int, first_seq: int, publish_time_ms: int, publisher_id: str, lane: int
) -> Iterator[DeliveredMessage]:
    """``iter_delivered`` for a batch checked to hold messages of ``size`` bytes without keys
    or headers: each value is a slice at a fixed stride, nothing to read first."""
    new = _new_tuple
    for seq, start in zip(
        itertools.count(first_seq), range(8, len(payload), size + MESSAGE_OVERHEAD), strict=False
    ):
        yield new(
            DeliveredMessage,
            (seq, publish_time_ms, publisher_id, payload[start : start + size], None, (), lane),
        )
