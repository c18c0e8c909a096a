"""A topic's log as the store keeps it: its ledgers in order (``LedgerRanges``), and each
ledger's metadata (``LedgerMetadata``, changed only by compare-and-set).

``msgspec`` structs rather than dataclasses: decoded from the stored record in one call,
copied with a change (``msgspec.structs.replace``) in a tenth of a frozen dataclass's time,
and, holding only numbers, strings and tuples of them, in no reference cycle, so the cycle
collector never walks them (``gc=False``). Every owned topic keeps one of each, and a
failover's take-overs make them by the hundred thousand.
"""

from __future__ import annotations

from enum import Enum

import msgspec

from hedwig.errors import MetadataError
from hedwig.metadata.records.encoding import ENCODER, decode_as


class LedgerRange(msgspec.Struct, frozen=True, gc=False, array_like=True):
    """One ledger of a topic's log and the sequence ids it holds.

    ``end_seq`` is ``None`` while the ledger is the open tail; ``end_seq = start_seq - 1``
    means the ledger holds no message. Stored as ``[ledger_id, start_seq, end_seq]``.
    """

    ledger_id: int
    start_seq: int
    end_seq: int | None = None


class LedgerRanges(msgspec.Struct, frozen=True, gc=False):
    """The topic's log: its ledgers in order (the TopicPersistenceManager's record).

    ``msgspec`` structs, as the ledger's metadata (``LedgerMetadata``): decoded from the
    stored record in one call, and, holding only numbers, never walked by the cycle
    collector; every owned topic keeps one, and a failover's take-overs make them by the
    hundred thousand.
    """

    ranges: tuple[LedgerRange, ...] = ()

    def to_json(self) -> bytes:
        return ENCODER.encode(self)

    @classmethod
    def from_json(cls, raw: bytes) -> LedgerRanges:
        return decode_as(_RANGES, raw, "ledger ranges")

    @property
    def last_seq(self) -> int:
        """The last sequence id of the closed ledgers (0 if none)."""
        for r in reversed(self.ranges):
            if r.end_seq is not None:
                return r.end_seq
        return self.ranges[0].start_seq - 1 if self.ranges else 0

    def with_tail(self, ledger_id: int, start_seq: int) -> LedgerRanges:
        return LedgerRanges((*self.ranges, LedgerRange(ledger_id, start_seq)))

    def close_tail(self, end_seq: int) -> LedgerRanges:
        if not self.ranges or self.ranges[-1].end_seq is not None:
            return self
        last = self.ranges[-1]
        return LedgerRanges(
            (*self.ranges[:-1], LedgerRange(last.ledger_id, last.start_seq, end_seq))
        )


_RANGES = msgspec.json.Decoder(LedgerRanges)


class LedgerState(str, Enum):
    OPEN = "OPEN"
    IN_RECOVERY = "IN_RECOVERY"
    CLOSED = "CLOSED"


class LedgerMetadata(msgspec.Struct, frozen=True, gc=False):
    """A ledger's metadata, changed only by CAS (see ``docs/architecture.md``, ledgers).

    ``fragments`` maps a first entry id to the ensemble (storage addresses) used from it on;
    an ensemble change appends a fragment. ``owner_epoch`` identifies the writer's ownership so
    a stale owner's metadata writes can be told apart.

    A ``msgspec`` struct, not a dataclass: a take-over builds several (read, marked, closed,
    the next ledger's), each copied with a change (``msgspec.structs.replace``), in a tenth of
    a frozen dataclass's time; and, holding only numbers, strings and tuples of them, it can
    be in no reference cycle, so the cycle collector never walks it (``gc=False``): one per
    owned topic is kept for as long as the topic is.
    """

    ledger_id: int
    topic: str
    ensemble_size: int
    write_quorum: int
    ack_quorum: int
    fragments: tuple[tuple[int, tuple[str, ...]], ...]
    state: LedgerState = LedgerState.OPEN
    last_entry_id: int = -1
    last_seq: int = 0
    length: int = 0
    owner: str = ""
    owner_epoch: int = 0
    created_ms: int = 0
    closed_ms: int = 0

    def __post_init__(self) -> None:
        if not self.ensemble_size >= self.write_quorum >= self.ack_quorum >= 1:
            raise MetadataError("ledger needs ensemble >= write_quorum >= ack_quorum >= 1")

    def ensemble_for(self, entry_id: int) -> tuple[str, ...]:
        current = self.fragments[0][1]
        for first, ensemble in self.fragments:
            if first <= entry_id:
                current = ensemble
            else:
                break
        return current

    def to_json(self) -> bytes:
        return ENCODER.encode(self)

    @classmethod
    def from_json(cls, raw: bytes, ledger_id: int | None = None) -> LedgerMetadata:
        """``ledger_id``: the id the store keeps the record under, which stores pass
        and which counts over the record's own field."""
        md = decode_as(_LEDGER_METADATA, raw, "ledger metadata")
        if ledger_id is not None and md.ledger_id != ledger_id:
            md = msgspec.structs.replace(md, ledger_id=ledger_id)
        return md


_LEDGER_METADATA = msgspec.json.Decoder(LedgerMetadata)
