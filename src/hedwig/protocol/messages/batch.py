"""A batch: consecutive messages of one topic, the same bytes in three places.

The unit a publisher sends, the unit a ledger stores as one entry, and the unit a subscriber
receives::

    u64 first_seq | u64 publish_time_ms | str publisher_id | u64 publisher_seq
    | u32 count | messages

so the hub never re-encodes a message on the hot path: it prefixes and forwards. A batch read
from the wire is checked against its count (one lean scan); one read back from a ledger was
checked when it was published and is checksummed on disk, so it is not scanned again. A stored
batch is cut again and again (by every subscription whose window ends inside it), so the
offsets of its messages are measured once and kept.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field

from hedwig.errors import MalformedBatchError
from hedwig.protocol.messages.delivered import DeliveredMessage, iter_delivered, iter_uniform
from hedwig.protocol.messages.encoded import EncodedMessages, trusted_messages
from hedwig.protocol.messages.scanning import scan
from hedwig.protocol.wire import pack_str, read_str

_BATCH_HEAD = struct.Struct(">QQ")  # first_seq, publish_time_ms
_PUB_SEQ_COUNT = struct.Struct(">QI")  # publisher_seq, count


@dataclass(frozen=True, slots=True, kw_only=True)
class Batch:
    """Consecutive messages of one topic, as stored in one ledger entry and delivered.

    ``first_seq`` is the topic sequence id of the first message; the batch covers
    ``first_seq .. last_seq``. ``publisher_id`` and ``publisher_seq`` identify the publish
    request, so a retried publish can be recognised as a duplicate. ``raw`` is the batch's
    encoding when it is already known (read from a ledger, or just written to one), so it is
    forwarded as it is stored, never encoded again.
    """

    first_seq: int
    publish_time_ms: int
    publisher_id: str
    publisher_seq: int
    messages: EncodedMessages
    raw: bytes | None = field(default=None, compare=False, repr=False)
    # Where each message starts in the payload, and its end: measured by the first ``slice``
    # and kept, because a stored batch is cut again and again (by every subscription whose
    # window ends inside it, and where the next delivery starts).
    offsets: list[int] | None = field(default=None, compare=False, repr=False, init=False)

    @property
    def count(self) -> int:
        return self.messages.count

    @property
    def payload(self) -> bytes:
        return self.messages.payload

    @property
    def last_seq(self) -> int:
        return self.first_seq + self.messages.count - 1

    def encode(self) -> bytes:
        if self.raw is not None:
            return self.raw
        return b"".join(
            (
                _BATCH_HEAD.pack(self.first_seq, self.publish_time_ms),
                pack_str(self.publisher_id),
                _PUB_SEQ_COUNT.pack(self.publisher_seq, self.messages.count),
                self.messages.payload,
            )
        )

    def with_raw(self) -> Batch:
        """This batch carrying its encoding (made once, then reused by every reader)."""
        if self.raw is not None:
            return self
        return Batch(
            first_seq=self.first_seq,
            publish_time_ms=self.publish_time_ms,
            publisher_id=self.publisher_id,
            publisher_seq=self.publisher_seq,
            messages=self.messages,
            raw=self.encode(),
        )

    @classmethod
    def decode(cls, data: bytes) -> Batch:
        """A batch from the wire: its messages are checked against its count (one lean scan;
        they are decoded when asked for, by ``delivered`` or ``iter_delivered``)."""
        return cls._decode(data, trusted=False)

    @classmethod
    def from_stored(cls, data: bytes) -> Batch:
        """A batch read back from a ledger entry: written by a hub from a checked publish and
        checksummed on disk, so its messages are not scanned again."""
        return cls._decode(data, trusted=True)

    @classmethod
    def _decode(cls, data: bytes, *, trusted: bool) -> Batch:
        try:
            first_seq, time_ms = _BATCH_HEAD.unpack_from(data, 0)
            pid, pos = read_str(data, _BATCH_HEAD.size)
            pseq, count = _PUB_SEQ_COUNT.unpack_from(data, pos)
        except struct.error as exc:
            raise MalformedBatchError("truncated batch header") from exc
        payload = data[pos + _PUB_SEQ_COUNT.size :]
        messages = (
            trusted_messages(count, payload) if trusted else EncodedMessages.parse(payload, count)
        )
        return cls(
            first_seq=first_seq,
            publish_time_ms=time_ms,
            publisher_id=pid,
            publisher_seq=pseq,
            messages=messages,
            raw=data,
        )

    def iter_delivered(self, lane: int = 0) -> Iterator[DeliveredMessage]:
        """Its messages with their places in the topic (or in ``lane`` of it), made one at a
        time."""
        messages = self.messages
        if messages.uniform and messages.largest is not None:
            return iter_uniform(
                messages.payload,
                messages.largest,
                self.first_seq,
                self.publish_time_ms,
                self.publisher_id,
                lane,
            )
        return iter_delivered(
            self.payload, self.first_seq, self.publish_time_ms, self.publisher_id, lane
        )

    def delivered(self) -> list[DeliveredMessage]:
        """Its messages with their places in the topic."""
        return list(self.iter_delivered())

    def slice(self, first: int, last: int) -> Batch:
        """The sub-batch holding sequence ids ``first .. last`` (inclusive)."""
        first = max(first, self.first_seq)
        last = min(last, self.last_seq)
        if first == self.first_seq and last == self.last_seq:
            return self
        offsets = self.offsets
        if offsets is None:
            offsets, _ = scan(self.payload, self.count)
            offsets.append(len(self.payload))
            object.__setattr__(self, "offsets", offsets)
        lo = first - self.first_seq
        hi = last - self.first_seq + 1
        count = max(0, hi - lo)
        return Batch(
            first_seq=first,
            publish_time_ms=self.publish_time_ms,
            publisher_id=self.publisher_id,
            publisher_seq=self.publisher_seq + lo if self.publisher_seq else 0,
            messages=trusted_messages(
                count, self.payload[offsets[lo] : offsets[hi]] if count else b""
            ),
        )
