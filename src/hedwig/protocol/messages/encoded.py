"""Encoded messages paired with their count, made only in ways that keep the two in agreement.

From messages encoded here (``EncodedMessages.of``, ``of_joined``, ``of_values``,
``of_messages``: no check needed, and none made), or from untrusted bytes, which are scanned
(``EncodedMessages.parse``, or the constructor: ``MalformedBatchError`` if the count lies).
``trusted_messages`` makes one whose count is known to match, skipping the constructor's
scan: for bytes read back from a ledger, and for the slices of a checked batch.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from hedwig.errors import MalformedBatchError
from hedwig.protocol.messages.encoding import (
    EncodedMessage,
    Message,
    decode_messages,
    encode_message,
    encode_values,
)
from hedwig.protocol.messages.scanning import largest_message, uniform_size


@dataclass(frozen=True, slots=True, kw_only=True)
class EncodedMessages:
    """Encoded messages and their count; built only in ways that keep the two in agreement.

    ``largest`` is the size of the largest message when it was measured (bytes parsed from the
    wire are), else ``None``; a hub checks it against the topic's limit without a second scan.
    """

    count: int
    payload: bytes
    largest: int | None = field(default=None, compare=False, repr=False)
    # True when a check found every message of one size without key or headers (then
    # ``largest`` is that size and the messages sit at a fixed stride).
    uniform: bool = field(default=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.count < 0:
            raise MalformedBatchError(f"negative message count {self.count}")
        if self.largest is None:
            object.__setattr__(self, "largest", largest_message(self.payload, self.count))

    @classmethod
    def of(cls, parts: Sequence[EncodedMessage]) -> EncodedMessages:
        """Messages encoded by ``encode_message``/``encode_value``: one per part, no scan."""
        return trusted_messages(len(parts), b"".join(parts))

    @classmethod
    def of_joined(cls, parts: Sequence[bytes], count: int) -> EncodedMessages:
        """Parts made here (``encode_message``, ``encode_value``, ``encode_values``) holding
        ``count`` messages in all: joined, no scan (a publisher's batch of single messages
        and of chunks handed over together)."""
        return trusted_messages(count, b"".join(parts))

    @classmethod
    def of_values(cls, values: Sequence[bytes]) -> EncodedMessages:
        return trusted_messages(len(values), encode_values(values))

    @classmethod
    def of_messages(cls, messages: Iterable[Message]) -> EncodedMessages:
        return cls.of([encode_message(m) for m in messages])

    @classmethod
    def parse(cls, payload: bytes, count: int) -> EncodedMessages:
        """Untrusted bytes: scanned, ``MalformedBatchError`` if they do not hold ``count``
        messages."""
        size = uniform_size(payload, count)
        if size is not None:
            return cls(count=count, payload=payload, largest=size, uniform=True)
        return cls(count=count, payload=payload, largest=largest_message(payload, count))

    def decode(self) -> list[Message]:
        return decode_messages(self.payload, self.count)


def trusted_messages(count: int, payload: bytes) -> EncodedMessages:
    """An ``EncodedMessages`` whose count is known to match (skips ``__post_init__``'s scan)."""
    made = object.__new__(EncodedMessages)
    object.__setattr__(made, "count", count)
    object.__setattr__(made, "payload", payload)
    object.__setattr__(made, "largest", None)
    object.__setattr__(made, "uniform", False)
    return made
