"""Many messages handed over at once, encoded and cut into chunks that each fit one batch.

``HedwigClient.publish_batch`` checks and encodes every message before anything is queued (a
bad message refuses the whole call, harming nothing), then cuts them into chunks of at most
``max_batch_messages`` messages and ``max_batch_bytes`` bytes, so the publisher can put each
chunk into a batch whole and settle it with one result.

Plain values (``bytes``) are the common case and take a path with no Python step per message:
sizes come from ``map(len, ...)``, the encoding from ``encode_values`` (slice assignment and
one join), the chunk bounds from sums over slices.
"""

from __future__ import annotations

from collections.abc import Sequence

from hedwig.errors import MessageTooLargeError, UsageError
from hedwig.protocol import Message, encode_message
from hedwig.protocol.messages import MESSAGE_OVERHEAD, encode_value, encode_values


def chunk_messages(
    messages: Sequence[bytes | Message],
    *,
    max_message_size: int,
    max_batch_messages: int,
    max_batch_bytes: int,
) -> list[tuple[bytes, int]]:
    """``(payload, count)`` per chunk, in order; ``UsageError`` or ``MessageTooLargeError``
    (for the first offending message) before anything is encoded into a chunk."""
    if set(map(type, messages)) <= {bytes}:
        values: Sequence[bytes] = messages  # type: ignore[assignment]
        sizes = list(map(len, values))
        _check_size(max(sizes, default=0), max_message_size)
        return [
            (encode_values(values[lo:hi]), hi - lo)
            for lo, hi in _bounds(sizes, MESSAGE_OVERHEAD, max_batch_messages, max_batch_bytes)
        ]
    raws: list[bytes] = []
    for m in messages:
        if isinstance(m, Message):
            _check_size(m.size, max_message_size)
            raws.append(encode_message(m))
        elif isinstance(m, (bytes, bytearray, memoryview)):  # (a tuple: no union built per call)
            _check_size(len(m), max_message_size)
            raws.append(encode_value(bytes(m)))
        else:
            raise UsageError(
                f"a message is bytes or a Message, not {type(m).__name__} (encode text first)"
            )
    return [
        (b"".join(raws[lo:hi]), hi - lo)
        for lo, hi in _bounds(list(map(len, raws)), 0, max_batch_messages, max_batch_bytes)
    ]


def _check_size(size: int, limit: int) -> None:
    if size > limit:
        raise MessageTooLargeError(
            f"message of {size} bytes exceeds the limit of {limit}", size=size, limit=limit
        )


def _bounds(
    sizes: list[int], overhead: int, max_messages: int, max_bytes: int
) -> list[tuple[int, int]]:
    """``(lo, hi)`` per chunk: at most ``max_messages`` messages and ``max_bytes`` encoded
    bytes (``sizes[i] + overhead`` each), except that a chunk always holds at least one."""
    bounds: list[tuple[int, int]] = []
    n = len(sizes)
    lo = 0
    while lo < n:
        hi = min(n, lo + max_messages)
        if sum(sizes[lo:hi]) + overhead * (hi - lo) > max_bytes:
            # Too many bytes for a full chunk: walk to where they run out.
            total = 0
            hi = lo
            while hi < n and hi - lo < max_messages:
                size = sizes[hi] + overhead
                if hi > lo and total + size > max_bytes:
                    break
                total += size
                hi += 1
        bounds.append((lo, hi))
        lo = hi
    return bounds
