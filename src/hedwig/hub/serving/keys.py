"""Which consumer of a key-shared subscription a key's messages go to, and what keeps a key's
order while consumers come and go (``KeyPins``, sans-IO, used by ``Deliveries``).

Rules (Pulsar's PIP-379 invariant):

- A key is hashed into 65,536 slots (CRC-32 of its bytes, low 16 bits); a message without a
  key has no slot and is shared as in a shared subscription.
- A slot with messages held by a consumer is *pinned* to that consumer: the slot's next
  messages go to it and to no other, whatever joined since, until everything of the slot it
  holds is acknowledged, nacked, timed out or given back. So the messages of one key are held
  by at most one consumer at a time, and a consumer that joins receives a key's new messages
  only after those sent elsewhere are settled.
- An unpinned slot goes to the attached consumer its rendezvous hash ranks first
  (``choose``, BLAKE2b of slot and consumer: CRC-32 is linear, and ranked every slot alike
  for two consumers): adding or removing a consumer moves only the slots that rank it first.
- A message whose slot's consumer has no room, or whose slot has messages waiting to be
  delivered again, waits too, behind them (``HOLD_BACK_MS``): a later message of a key never
  overtakes an earlier one, not even a nacked one (its key waits out the nack's delay, where
  Pulsar gives the order up).
- What is kept is bounded: a pin per slot with held messages, and the slot of each
  unacknowledged message.
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hedwig.hub.serving.deliveries import Consumer

SLOTS = 1 << 16
# A held-back message is looked at again this soon (an acknowledgement wakes delivery earlier).
HOLD_BACK_MS = 50


def slot_of(key: bytes | None) -> int | None:
    return None if key is None else zlib.crc32(key) & (SLOTS - 1)


class KeyPins:
    def __init__(self) -> None:
        self.slot: dict[int, int] = {}  # seq -> slot, for unacknowledged keyed messages
        self._pins: dict[int, tuple[Consumer, int]] = {}  # slot -> (consumer, messages held)
        self._waiting: dict[int, set[int]] = {}  # slot -> its messages waiting

    def pinned(self, slot: int) -> Consumer | None:
        got = self._pins.get(slot)
        return None if got is None else got[0]

    def blocked(self, slot: int, seq: int) -> bool:
        """An older message of ``slot`` than ``seq`` waits to be delivered again: ``seq``
        must wait behind it."""
        waiting = self._waiting.get(slot)
        return waiting is not None and len(waiting) > 0 and min(waiting) < seq

    @staticmethod
    def choose(slot: int, consumers: Iterable[Consumer]) -> Consumer | None:
        """The consumer an unpinned ``slot`` goes to: the highest rendezvous score."""
        best, best_score = None, b""
        tag = slot.to_bytes(2, "big")
        for c in consumers:
            score = hashlib.blake2b(tag + c.token, digest_size=8).digest()
            if score > best_score:
                best, best_score = c, score
        return best

    def held(self, seq: int, slot: int, consumer: Consumer) -> None:
        """``seq`` of ``slot`` was delivered to ``consumer``."""
        self.slot[seq] = slot
        got = self._pins.get(slot)
        self._pins[slot] = (consumer, 1 if got is None else got[1] + 1)

    def released(self, seq: int) -> None:
        """``seq`` is no longer held by its consumer (settled, waiting, or given back)."""
        slot = self.slot.get(seq)
        if slot is None:
            return
        got = self._pins.get(slot)
        if got is not None:
            if got[1] <= 1:
                del self._pins[slot]
            else:
                self._pins[slot] = (got[0], got[1] - 1)

    def waits(self, seq: int, slot: int | None = None) -> None:
        if slot is not None:
            self.slot[seq] = slot
        s = self.slot.get(seq)
        if s is not None:
            self._waiting.setdefault(s, set()).add(seq)

    def stops_waiting(self, seq: int) -> None:
        s = self.slot.get(seq)
        waiting = self._waiting.get(s) if s is not None else None
        if waiting is not None:
            waiting.discard(seq)
            if not waiting:
                del self._waiting[s]  # type: ignore[arg-type]

    def settled(self, seq: int) -> None:
        self.slot.pop(seq, None)

    def clear(self) -> None:
        self.slot.clear()
        self._pins.clear()
        self._waiting.clear()
