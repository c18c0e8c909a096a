"""Where each entry stored on this hub is: the storage role's in-memory index (BookKeeper's
ledger index), rebuilt from the entry logs at every start.

A hub of a region stores a replica of most of the region's ledgers (a million, at a million
topics), so the index keeps little per ledger, and its rules are about memory:

- A ledger is a ``StoredLedger``: where its entries are (``Place``s), its last entry, the
  highest LAC it learnt and its fence. Its entries' places are one int while it holds one
  entry (most do: a topic published to once), a table by entry id only past that (a table of
  one entry costs 160 bytes more than its int, on every replica of most ledgers). What is
  waiting or being written is in the group commit's tables, not here.
- The commonest ledger of all, entry 0 alone, its LAC -1 or 0 and no fence, is held as one
  int instead of a ``StoredLedger`` (``packed``: 64 bytes less on each replica, three per
  topic in a 3/3/2 region). Whoever changes a ledger takes it ``mutable`` (unpacked) and
  ``pack``s it again; reads of a packed ledger's entry or LAC read the int as it is.
- A fence is ``NOT_FENCED``, ``FENCING`` (asked; its record is not on disk yet), or the id of
  the log its record is in (compaction moves it with the ledger's entries).
- At start the logs are replayed in order: a later copy of an entry wins (compaction copies
  entries forward), a delete record forgets the ledger.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TypeAlias

from hedwig.ledger.storage.entry_log import (
    DELETE_ENTRY,
    FENCE_ENTRY,
    RECORD,
    Place,
    ScannedRecord,
    log_of,
    place,
    record_bytes,
)

NOT_FENCED = -1
FENCING = -2  # asked; its record is not on disk yet


@dataclass(slots=True)
class StoredLedger:
    """A ledger stored here."""

    # Where the entries are (``place_of``): None for none, the place of ``last_entry`` alone
    # while it is the only one, else a table by entry id.
    offsets: Place | dict[int, Place] | None = None
    last_entry: int = -1
    lac: int = -1
    # NOT_FENCED, FENCING, or the log its fence record is in
    fence: int = NOT_FENCED

    @property
    def fenced(self) -> bool:
        return self.fence != NOT_FENCED


# A ledger as the index holds it: an int is what ``packed`` made of it.
Held: TypeAlias = StoredLedger | int


def packed(lf: StoredLedger) -> Held:
    """``lf`` as an int if it holds entry 0 alone, its LAC is -1 or 0 and it is not fenced:
    the place of the entry, times two, plus one if the LAC is 0. Else ``lf`` itself."""
    offsets = lf.offsets
    if (
        isinstance(offsets, int)
        and lf.last_entry == 0
        and lf.fence == NOT_FENCED
        and -1 <= lf.lac <= 0
    ):
        return offsets << 1 | (lf.lac + 1)
    return lf


def unpacked(held: Held) -> StoredLedger:
    """What ``packed`` made, as a ``StoredLedger`` (a new one: writes to it are not kept)."""
    if isinstance(held, int):
        return StoredLedger(held >> 1, 0, (held & 1) - 1)
    return held


def places(lf: StoredLedger) -> list[Place]:
    offsets = lf.offsets
    if offsets is None:
        return []
    if isinstance(offsets, int):
        return [offsets]
    return list(offsets.values())


def place_of(lf: Held, entry_id: int) -> Place | None:
    """Where entry ``entry_id`` of ``lf`` (or of what ``packed`` made of it: read without
    making a ``StoredLedger`` of it each time) is, or None if it is not stored here."""
    if isinstance(lf, int):
        return lf >> 1 if entry_id == 0 else None
    offsets = lf.offsets
    if offsets is None:
        return None
    if isinstance(offsets, int):
        return offsets if entry_id == lf.last_entry else None
    return offsets.get(entry_id)


def set_place(lf: StoredLedger, entry_id: int, where: Place) -> Place | None:
    """Record where entry ``entry_id`` is (then the last entry if it is); returns where it
    was before, if it was stored."""
    offsets = lf.offsets
    old: Place | None = None
    if offsets is None:
        lf.offsets = where
    elif isinstance(offsets, int):
        if entry_id == lf.last_entry:
            old, lf.offsets = offsets, where
        else:
            lf.offsets = {lf.last_entry: offsets, entry_id: where}
    else:
        old = offsets.get(entry_id)
        offsets[entry_id] = where
    if entry_id > lf.last_entry:
        lf.last_entry = entry_id
    return old


class EntryIndex:
    """Every ledger stored here, by id."""

    def __init__(self) -> None:
        self.ledgers: dict[int, Held] = {}

    def mutable(self, ledger_id: int) -> StoredLedger:
        """Ledger ``ledger_id`` to change (made if it is not stored; unpacked if it was
        packed: whoever changes it packs it again where it may fit)."""
        held = self.ledgers.get(ledger_id)
        if held is None or isinstance(held, int):
            held = self.ledgers[ledger_id] = StoredLedger() if held is None else unpacked(held)
        return held

    def pack(self, ledger_id: int, lf: StoredLedger) -> None:
        if self.ledgers.get(ledger_id) is lf:
            self.ledgers[ledger_id] = packed(lf)

    def replay(self, log_id: int, records: Iterable[ScannedRecord]) -> None:
        """Index the records of log ``log_id`` (at start, the logs in order)."""
        ledgers = self.ledgers
        for lid, eid, lac, pos, plen in records:
            if eid == DELETE_ENTRY:
                ledgers.pop(lid, None)
                continue
            lf = self.mutable(lid)
            if eid == FENCE_ENTRY:
                lf.fence = log_id
                continue
            set_place(lf, eid, place(log_id, pos, plen))
            if lac > lf.lac:
                lf.lac = lac

    def replayed(self, live: dict[int, int]) -> None:
        """Every log replayed: add each ledger's records to its logs' ``live`` bytes, and pack
        every ledger that fits."""
        ledgers = self.ledgers
        for lid, held in ledgers.items():
            lf = unpacked(held)
            for where in places(lf):
                live[log_of(where)] += record_bytes(where)
            if lf.fence >= 0:
                live[lf.fence] += RECORD.size
            ledgers[lid] = packed(lf)

    def lac(self, ledger_id: int) -> tuple[int, int]:
        """``(lac, last entry)`` of the ledger; -1 for none."""
        held = self.ledgers.get(ledger_id)
        if held is None:
            return -1, -1
        if isinstance(held, int):
            return (held & 1) - 1, 0  # as ``unpacked`` reads it
        return held.lac, held.last_entry

    def learn_lacs(self, lacs: Iterable[tuple[int, int]]) -> None:
        """Raise the LAC of stored ledgers (ledger id, LAC); unknown ones are not made."""
        ledgers = self.ledgers
        for ledger_id, lac in lacs:
            held = ledgers.get(ledger_id)
            if held is None:
                continue
            if isinstance(held, int):
                if lac <= (held & 1) - 1:
                    continue
                if lac == 0:
                    ledgers[ledger_id] = held | 1
                    continue
                held = self.mutable(ledger_id)
            if lac > held.lac:
                held.lac = lac

    def is_fenced(self, ledger_id: int) -> bool:
        held = self.ledgers.get(ledger_id)
        return isinstance(held, StoredLedger) and held.fence != NOT_FENCED
