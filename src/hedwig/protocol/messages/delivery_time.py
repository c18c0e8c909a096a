"""A message's delivery time: the ``hedwig-deliver-at`` header, its encoding and its checks.

A publisher that wants a message delivered later puts one header on it, ``hedwig-deliver-at``,
whose value is 8 bytes: the epoch time in milliseconds before which the message is not given
to a consumer, big-endian and signed (a negative time is malformed). It travels, is stored and
is delivered as every header is: nothing else in the batch or its frame changes, so a hub,
a ledger or a reader that knows nothing of delays passes it on untouched, and a subscriber
sees it among the message's headers.

Who honours it is the owner of a failover, shared or key-shared subscription
(``hedwig.hub.serving.delays``); an exclusive subscription and a reader of the log get the
message in log order at once (as Pulsar does for its non-shared subscriptions).

Looking for the header must cost nothing for the batches without one, which is nearly all
of them: ``may_hold`` is one search of the payload for the header's encoded name (in C); only
a batch that may hold one is read message by message (``deliver_times``). ``check_payload``
is what a hub runs on every publish that may hold one: a value that is not 8 bytes, a
negative time or a time further ahead than the hub allows is refused (``DeliveryTimeError``),
so what is stored is always well formed.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

from hedwig.errors import UsageError
from hedwig.protocol.messages.delivered import iter_delivered
from hedwig.protocol.wire import I64, pack_str

DELIVER_AT = "hedwig-deliver-at"
# The header's name as it sits in an encoded message (``u16 length + UTF-8``).
_ENCODED_NAME = pack_str(DELIVER_AT)


class DeliveryTimeError(UsageError):
    """A ``hedwig-deliver-at`` header that cannot be honoured: malformed, negative, or
    further ahead than allowed. Retrying it unchanged cannot succeed."""


def deliver_at_header(epoch_ms: int) -> tuple[str, bytes]:
    """The header that holds a message back until ``epoch_ms``."""
    if type(epoch_ms) is not int or epoch_ms < 0:
        raise DeliveryTimeError(
            f"a delivery time is epoch milliseconds, 0 or more, not {epoch_ms!r}"
        )
    try:
        return DELIVER_AT, I64.pack(epoch_ms)
    except struct.error as exc:
        raise DeliveryTimeError(f"delivery time {epoch_ms} is out of range") from exc


def decode_deliver_at(value: bytes) -> int:
    """The epoch milliseconds a header value holds; ``DeliveryTimeError`` if malformed."""
    if len(value) != I64.size:
        raise DeliveryTimeError(
            f"a {DELIVER_AT} header holds 8 bytes (big-endian epoch milliseconds), not {len(value)}"
        )
    (ms,) = I64.unpack(value)
    if ms < 0:
        raise DeliveryTimeError(f"a {DELIVER_AT} header holds a negative time: {ms}")
    return int(ms)


def deliver_at_of(headers: Iterable[tuple[str, bytes]]) -> int | None:
    """The delivery time among a message's headers (the first such header), if any."""
    for name, value in headers:
        if name == DELIVER_AT:
            return decode_deliver_at(value)
    return None


def may_hold(payload: bytes) -> bool:
    """Whether a batch payload may hold a delivery time: False means surely not (the header's
    encoded name appears nowhere), at the cost of one search in C."""
    return _ENCODED_NAME in payload


def deliver_times(payload: bytes, first_seq: int, *, strict: bool = False) -> list[tuple[int, int]]:
    """``(seq, epoch ms)`` of each message of a checked batch payload that carries a delivery
    time, in order (empty without reading the messages if ``may_hold`` says none). A malformed
    one is ``DeliveryTimeError`` if ``strict``, else read as none (a stored message is
    delivered, not stuck behind a header its publisher got wrong)."""
    if not may_hold(payload):
        return []
    out: list[tuple[int, int]] = []
    for m in iter_delivered(payload, first_seq, 0, ""):
        if m.headers:
            try:
                at = deliver_at_of(m.headers)
            except DeliveryTimeError:
                if strict:
                    raise
                continue
            if at is not None:
                out.append((m.seq, at))
    return out


def check_payload(payload: bytes, now_ms: int, max_delay_ms: int) -> None:
    """Refuse (``DeliveryTimeError``) a checked batch payload with a malformed delivery time
    or one more than ``max_delay_ms`` after ``now_ms``."""
    for seq, at in deliver_times(payload, 1, strict=True):
        if at - now_ms > max_delay_ms:
            raise DeliveryTimeError(
                f"message {seq} of the batch asks to be delivered {(at - now_ms) / 1000:.0f} s "
                f"from now; at most {max_delay_ms / 1000:.0f} s ahead is allowed"
            )
