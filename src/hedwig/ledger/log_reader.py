"""Reading a topic's log by sequence id: the newest batches from memory, older ones from ledgers.

The owner keeps its newest confirmed batches in memory (up to ``cache_bytes``), so subscribers
that keep up are served without touching a disk: once the log is read (or waited on), until
it sheds them. A topic only ever published to keeps none: nobody would read them from there,
and at a hub owning 100,000 such topics they were most of a kilobyte each. Older batches are
read from the ledgers' replicas through a per-ledger index of where each entry's first sequence
id is, built when the owner wrote the entry or, for ledgers written by earlier owners, by
reading the ledger once.
Batches come back with their stored bytes (``Batch.raw``), which are what is sent on.

Entries are read up to ``READ_AHEAD`` at a time, as many as the read needs (an index says how
many messages each entry holds): one by one, each a round trip to a replica, a new owner
reading back the last 5,000 messages of a log of small batches spent most of a second of its
failover on it, and building a ledger's index as long again.

The last few entries read from ledgers are kept too (``RECENT_ENTRIES``): a subscriber
catching up reads a stored batch once for each window it spans (its window ends inside the
batch, and the next delivery starts there), and the same ``Batch`` keeps where its messages
start, so each is read from a replica and scanned once.
"""

from __future__ import annotations

import asyncio
import bisect
import struct
from dataclasses import dataclass, field
from enum import Enum

from hedwig.errors import LedgerGoneError
from hedwig.ledger.reads import read_entry
from hedwig.ledger.replicas import Replicas
from hedwig.metadata.managers import LedgerMetadataManager
from hedwig.metadata.records import LedgerMetadata, LedgerRange, LedgerState
from hedwig.protocol import Batch

_FIRST_SEQ = struct.Struct(">Q")
# Entries read from ledgers and kept, per topic (a few windows' worth of 2,000-message batches).
RECENT_ENTRIES = 8
# Entries of one ledger asked for at once (from their replicas, in parallel).
READ_AHEAD = 16


@dataclass(slots=True)
class LedgerIndex:
    """Where each entry of a ledger starts, in sequence ids."""

    metadata: LedgerMetadata
    first_seqs: list[int] = field(default_factory=list)


class Unread(Enum):
    """A log without a reader, and what a reader made now must index of the ledger being
    written (the rest it reads back from the ledgers' replicas, or knows from their ranges)."""

    NOTHING = "nothing"  # none of its entries (none confirmed, or all indexed before)
    # Its first entry, confirmed with no reader (or indexed before the reader went): it
    # starts where the ledger's range starts. Entries confirmed since are indexed as the
    # appends that made them go on, in order, as always.
    FIRST_ENTRY = "first entry"


class LogReader:
    """One per owned topic that was written or read, so most of a hub's are idle: the
    batches kept go when it sheds them, and what stays is small (slots; the newest ledger's
    index on its own, a table only for older ones; no empty containers: a dictionary of one
    entry is 224 bytes)."""

    __slots__ = (
        "_cache",
        "_cache_seqs",
        "_cache_size",
        "_caching",
        "_index",
        "_ledgers",
        "_older",
        "_recent",
        "_replicas",
        "_topic",
        "cache_bytes",
    )

    def __init__(
        self, topic: str, ledgers: LedgerMetadataManager, replicas: Replicas, cache_bytes: int
    ) -> None:
        self._topic = topic
        self._ledgers = ledgers
        self._replicas = replicas
        self.cache_bytes = cache_bytes
        # The newest batches (None: none kept), and their first sequence ids.
        self._cache: list[Batch] | None = None
        self._cache_seqs: list[int] | None = None
        self._cache_size = 0
        # Whether written batches are kept: someone read since the last shed.
        self._caching = False
        # The index last made or asked for (the ledger being written, mostly), and the
        # others by ledger id (None: no other).
        self._index: LedgerIndex | None = None
        self._older: dict[int, LedgerIndex] | None = None
        self._recent: dict[tuple[int, int], Batch] | None = None

    # what the writer tells it -----------------------------------------------------------------

    def written(self, md: LedgerMetadata, batch: Batch, *, awaited: bool = False) -> None:
        """A batch was confirmed as the next entry of ledger ``md`` (``awaited``: someone
        waits for it, a subscriber at the end of the log)."""
        self.index_for(md).first_seqs.append(batch.first_seq)
        if not (self._caching or awaited):
            return
        self._caching = True
        raw = batch.raw or b""
        if self._cache is None or self._cache_seqs is None:
            self._cache, self._cache_seqs = [], []
        self._cache.append(batch)
        self._cache_seqs.append(batch.first_seq)
        self._cache_size += len(raw)
        if self._cache_size > self.cache_bytes:
            drop = 0
            while self._cache_size > self.cache_bytes // 2 and drop < len(self._cache) - 1:
                self._cache_size -= len(self._cache[drop].raw or b"")
                drop += 1
            del self._cache[:drop]
            del self._cache_seqs[:drop]

    def index_for(self, md: LedgerMetadata) -> LedgerIndex:
        idx = self._index_of(md.ledger_id)
        if idx is None:
            idx = LedgerIndex(md)
            self._keep_index(idx)
        return idx

    def _index_of(self, ledger_id: int) -> LedgerIndex | None:
        idx = self._index
        if idx is not None and idx.metadata.ledger_id == ledger_id:
            return idx
        return None if self._older is None else self._older.get(ledger_id)

    def _keep_index(self, idx: LedgerIndex) -> None:
        """Keep ``idx`` as the newest (replacing any of its ledger)."""
        lid = idx.metadata.ledger_id
        last = self._index
        if last is not None and last.metadata.ledger_id != lid:
            if self._older is None:
                self._older = {}
            self._older[last.metadata.ledger_id] = last
        if self._older is not None:
            self._older.pop(lid, None)
        self._index = idx

    def closed(self, md: LedgerMetadata) -> None:
        """Ledger ``md`` is closed (by this hub, or just recovered): its metadata is final, so
        reading it needs no trip to the store."""
        self.index_for(md).metadata = md

    def shed(self) -> None:
        """Let the batches kept in memory go (the topic went idle): reads after this go to
        the ledgers, whose index is kept. An idle topic held its last batches, the frames they
        came in and the entries last read: most of a kilobyte each, on hundreds of thousands
        of topics nobody reads."""
        self._cache = None
        self._cache_seqs = None
        self._cache_size = 0
        self._caching = False
        self._recent = None

    def small(self, open_ledger: int, confirmed: int) -> bool:
        """Whether this reader, shed, holds at most one entry's index of any ledger, and of
        ledger ``open_ledger`` (being written, ``confirmed`` entries so far, at most one)
        exactly those: all that ``TopicLog.shed_cache`` can let go and have again cheaply."""
        if self._recent is not None or self._cache is not None or confirmed > 1:
            return False
        held = [self._index] if self._older is None else [self._index, *self._older.values()]
        open_indexed = 0
        for idx in held:
            if idx is None:
                continue
            if len(idx.first_seqs) > 1:
                return False
            if idx.metadata.ledger_id == open_ledger:
                open_indexed = len(idx.first_seqs)
        return open_indexed == confirmed

    def forget(self, ledger_id: int) -> None:
        if self._index is not None and self._index.metadata.ledger_id == ledger_id:
            self._index = None
        if self._older is not None:
            self._older.pop(ledger_id, None)
            if not self._older:
                self._older = None
        if self._recent is not None:
            for key in [k for k in self._recent if k[0] == ledger_id]:
                del self._recent[key]

    # reading --------------------------------------------------------------------------------

    async def read(
        self,
        ranges: tuple[LedgerRange, ...],
        start_seq: int,
        last_seq: int,
        max_messages: int,
        max_bytes: int,
    ) -> list[Batch]:
        """Confirmed batches (up to ``last_seq``) holding ``start_seq`` onwards, within the
        limits; at least one if there is one."""
        self._caching = True
        if start_seq > last_seq:
            return []
        if self._cache and self._cache_seqs and start_seq >= self._cache_seqs[0]:
            i = bisect.bisect_right(self._cache_seqs, start_seq) - 1
            out: list[Batch] = []
            msgs = size = 0
            for b in self._cache[i:]:
                out.append(b)
                msgs += b.count
                size += len(b.raw or b"")
                if msgs >= max_messages or size >= max_bytes:
                    break
            return out
        return await self._read_ledgers(ranges, start_seq, last_seq, max_messages, max_bytes)

    async def _read_ledgers(
        self,
        ranges: tuple[LedgerRange, ...],
        start_seq: int,
        last_seq: int,
        max_messages: int,
        max_bytes: int,
    ) -> list[Batch]:
        out: list[Batch] = []
        msgs = size = 0
        starts = [r.start_seq for r in ranges]
        ri = max(0, bisect.bisect_right(starts, start_seq) - 1)
        seq = start_seq
        while ri < len(ranges) and seq <= last_seq:
            r = ranges[ri]
            if r.end_seq is not None and r.end_seq < seq:
                ri += 1
                continue
            idx = await self._load_index(r)
            firsts = idx.first_seqs
            ei = max(0, bisect.bisect_right(firsts, seq) - 1)
            # Entries that start at or before last_seq and before the message limit is met.
            end = min(
                bisect.bisect_right(firsts, last_seq),
                bisect.bisect_left(firsts, seq + max_messages - msgs),
            )
            while ei < len(firsts):
                count = max(1, min(READ_AHEAD, end - ei))
                batches = await asyncio.gather(
                    *(self.entry(idx.metadata, e) for e in range(ei, ei + count))
                )
                for batch in batches:
                    if batch.first_seq > last_seq:
                        return out
                    out.append(batch)
                    msgs += batch.count
                    size += len(batch.raw or b"")
                    seq = batch.last_seq + 1
                    if msgs >= max_messages or size >= max_bytes:
                        return out
                ei += count
            ri += 1
        return out

    async def entry(self, md: LedgerMetadata, entry: int) -> Batch:
        """Entry ``entry`` of ledger ``md`` as a batch, from the recent ones if it is there
        (and kept there: a take-over reads the last entry for its time, then again for the
        publishers' sequences)."""
        key = (md.ledger_id, entry)
        batch = None if self._recent is None else self._recent.get(key)
        if batch is None:
            batch = Batch.from_stored(await read_entry(self._replicas, md, entry))
            self._keep(key, batch)
        return batch

    def remember(self, ledger_id: int, entry: int, batch: Batch) -> None:
        """Entry ``entry`` of a closed ledger, read elsewhere: a recovery reads its ledger's
        last entry, which the take-over that follows reads again (for the previous owner's
        last time, then the publishers' sequences)."""
        self._keep((ledger_id, entry), batch)

    def _keep(self, key: tuple[int, int], batch: Batch) -> None:
        if self._recent is None:
            self._recent = {}
        self._recent[key] = batch
        if len(self._recent) > RECENT_ENTRIES:
            del self._recent[next(iter(self._recent))]

    async def _load_index(self, r: LedgerRange) -> LedgerIndex:
        idx = self._index_of(r.ledger_id)
        if idx is not None and (idx.first_seqs or r.end_seq == r.start_seq - 1):
            return idx
        if idx is not None and idx.metadata.state is LedgerState.CLOSED:
            md = idx.metadata  # closed here or just recovered: final
        else:
            got = await self._ledgers.read_ledger(r.ledger_id)
            if got is None:
                raise LedgerGoneError(f"ledger {r.ledger_id} of topic {self._topic!r} is gone")
            md = got.value
        idx = LedgerIndex(md)
        for first in range(0, md.last_entry_id + 1, READ_AHEAD):
            entries = range(first, min(first + READ_AHEAD, md.last_entry_id + 1))
            if len(entries) == 1:
                # A take-over's read-back indexes a ledger of one entry, nearly always: awaited
                # as it is, not as a task (``gather``'s), which was most of what that cost.
                idx.first_seqs.append(await self._first_seq(md, first))
            else:
                idx.first_seqs.extend(
                    await asyncio.gather(*(self._first_seq(md, e) for e in entries))
                )
        self._keep_index(idx)
        return idx

    async def _first_seq(self, md: LedgerMetadata, entry: int) -> int:
        """Where entry ``entry`` starts, read to index its ledger; the entry is kept among the
        recent ones only near the end (what reads after a take-over ask for next)."""
        key = (md.ledger_id, entry)
        batch = None if self._recent is None else self._recent.get(key)
        if batch is not None:
            return batch.first_seq
        raw = await read_entry(self._replicas, md, entry)
        if entry > md.last_entry_id - RECENT_ENTRIES:
            self._keep(key, Batch.from_stored(raw))
        return int(_FIRST_SEQ.unpack_from(raw)[0])
