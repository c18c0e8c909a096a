"""A topic's log: its ledgers in order, as the owning hub sees them.

Rules:

- Opening the log is taking over the topic's storage (``hedwig.ledger.take_over``): recover
  and close whatever ledger is still open (this fences its writer, whoever it was), create a
  new ledger, and append it to the topic's ledger list with a compare-and-set. If that fails,
  another hub is taking over the same topic: ``BadVersionError``, and the caller steps down.
- Sequence ids are assigned when a batch is appended, before the write is sent, so batches are
  contiguous and ordered; a failed write breaks the log (``broken``), and no later batch can be
  confirmed, so there is never a gap below an acknowledged message.
- Readers see only confirmed batches (up to the LAC).
- The newest batches are kept in memory (``cache_bytes``) so subscribers that keep up are
  served without touching the disk (``hedwig.ledger.log_reader``).
- The current ledger is rolled over when it grows past ``ledger_max_bytes``, and when a
  replica fails a write (to an ensemble avoiding it for ``REPLICA_FAILURE_HOLD_S``); closed
  ledgers are collected by ``collect`` once every subscriber has consumed them and retention
  allows (``hedwig.ledger.retention``).

A hub owns a log per owned topic, up to a million: a log keeps what is its own in slots and
nothing it need not hold. What every log of the hub shares is one ``LogContext``
(``hedwig.ledger.log_context``), handed to each. An idle log holds no reader
(``Unread``): one is made by the second append or the first read, and let go again once the
topic is idle and the reader holds nothing it could not have again for a read or two.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from hedwig.errors import LedgerError, MetadataError
from hedwig.ledger.log_context import LogContext, LogSettings
from hedwig.ledger.log_reader import LogReader, Unread
from hedwig.ledger.retention import Quiet, collectable_prefix, delete_ledger_everywhere
from hedwig.ledger.roll_over import RollingLog
from hedwig.ledger.take_over import take_over
from hedwig.metadata.records import LedgerMetadata, LedgerRanges, Version, Versioned
from hedwig.protocol import Batch, EncodedMessages

log = logging.getLogger(__name__)


class TopicLog(RollingLog):
    """A topic's log as its owner serves it: batches appended and read by sequence id over
    the ledgers ``RollingLog`` holds."""

    # (Slots, as ``RollingLog``'s: a log per owned topic.)
    __slots__ = ("_next_seq", "_quiet", "_waiting", "previous_end_ms")

    def __init__(
        self,
        topic: str,
        context: LogContext,
        *,
        ensemble: Sequence[str],
        settings: LogSettings,
    ) -> None:
        super().__init__(topic, context, context.first_fragments(ensemble)[0][1], settings)
        self._next_seq = 1
        # The last append waiting to take its sequence ids (``_take_turn``); None: none waits.
        self._waiting: asyncio.Future[None] | None = None
        # What the last collection that found nothing saw (``collect_due``).
        self._quiet: Quiet | None = None
        self.previous_end_ms: int | None = None

    # opening ------------------------------------------------------------------------------

    async def open(
        self,
        *,
        fresh: bool = False,
        started: tuple[Versioned[LedgerMetadata], Version] | None = None,
        known: Versioned[LedgerRanges] | None = None,
    ) -> None:
        """Recover the topic's open ledgers and start a new one for it. ``fresh``: a topic
        just created, with no persistence record to read (its first is created, so a record
        made meanwhile by anyone else fails this open). ``started``: a fresh topic's first
        ledger and the version of the record naming it, made with its claim. ``known``: the
        persistence record as the claim read it (``TopicClaim.ranges``), not read again; a
        record changed since fails the open's compare-and-set like any other.

        A take-over records the recovered ledgers' close, its new ledger and the ledger list
        naming it in one store request (``continue_topic_log``); if one of those records
        changed meanwhile (another recoverer closed the ledger first), it starts again from a
        fresh read and takes each step alone, each settling its own race."""
        opened = await take_over(
            self._ctx,
            self.topic,
            self.settings,
            self._ensemble,
            reader=self._reader,
            failures=self,
            fresh=fresh,
            started=started,
            known=known,
        )
        self.previous_end_ms = opened.previous_end_ms
        self._ranges, self._ranges_version = opened.ranges, opened.version
        self._write_to(opened.writer)
        self._next_seq = opened.last_seq + 1
        self.last_seq = opened.last_seq
        self._ledger_bytes = 0

    # the reader -----------------------------------------------------------------------------

    def _reader(self) -> LogReader:
        held = self._log_reader
        if isinstance(held, LogReader):
            return held
        ctx = self._ctx
        reader = LogReader(self.topic, ctx.store.ledgers, ctx.replicas, self.settings.cache_bytes)
        writer = self._writer
        if held is Unread.FIRST_ENTRY and writer is not None:
            # The writer's ledger is always the last range.
            last = self._ranges.ranges[-1]
            assert last.ledger_id == writer.ledger_id
            reader.index_for(writer.metadata).first_seqs.append(last.start_seq)
        self._log_reader = reader
        return reader

    def shed_cache(self) -> None:
        """Drop the batches kept in memory for readers (``LogReader.shed``), and the reader
        itself when what it still holds is at most one entry's index per ledger and nothing
        is being written: the log's first read or append makes it again, reading a closed
        ledger's index back from its replicas (one entry) and knowing the open ledger's from
        its range. A reader and its index were about 300 bytes of every idle owned topic;
        a busy topic's index (an entry each) is kept, reading it back would cost a read per
        entry."""
        reader = self._log_reader
        if not isinstance(reader, LogReader):
            return
        reader.shed()
        writer = self._writer
        if (
            writer is None
            or self._inflight
            or self._rolling is not None
            or not reader.small(writer.ledger_id, writer.lac + 1)
        ):
            return
        self._log_reader = Unread.FIRST_ENTRY if writer.lac == 0 else Unread.NOTHING

    @property
    def first_seq(self) -> int:
        """The first sequence id still stored (later ones may be collected, never earlier)."""
        ranges = self._ranges.ranges
        return ranges[0].start_seq if ranges else 1

    @property
    def ranges(self) -> LedgerRanges:
        return self._ranges

    @property
    def ledger_id(self) -> int:
        return self._writer.ledger_id if self._writer else -1

    async def wait_beyond(self, seq: int, timeout: float | None = None) -> bool:
        """Wait until a batch past ``seq`` is confirmed (or the log breaks); True if one is."""
        while self.last_seq <= seq and self.broken is None:
            try:
                await asyncio.wait_for(self._change().wait(), timeout)
            except TimeoutError:
                return False
        return self.last_seq > seq

    # appending ----------------------------------------------------------------------------

    async def append(
        self, publisher_id: str, publisher_seq: int, messages: EncodedMessages
    ) -> Batch:
        """Durably append one batch; returns it with its sequence ids (and its stored bytes).

        Batches take their sequence ids in the order of the calls: the owner's per-publisher
        order check (``hedwig.hub.dedup``) lets a publisher's next batch in once the one
        before is being written, so the log must not let it overtake that one."""
        if self._rolling is not None or self._waiting is not None:
            await self._take_turn()
        if self.broken is not None:
            raise self.broken
        writer = self._writer
        assert writer is not None, "append before open"
        batch = Batch(
            first_seq=self._next_seq,
            publish_time_ms=self._ctx.clock.wall_ms(),
            publisher_id=publisher_id,
            publisher_seq=publisher_seq,
            messages=messages,
        ).with_raw()
        self._next_seq += messages.count
        raw = batch.encode()
        self._ledger_bytes += len(raw)
        self._inflight += 1
        try:
            entry = await writer.add(raw)
        except LedgerError as exc:
            self.broken = exc
            self._notify()
            raise
        finally:
            self._inflight -= 1
        # Confirmation is in order, so this batch directly follows the previous confirmed one.
        self.last_seq = batch.last_seq
        if entry == 0 and self._changed is None and not isinstance(self._log_reader, LogReader):
            # A ledger's first entry, nobody waiting to read it: no reader is made for it
            # (most topics of a claim wave are published to once; a reader made and let go
            # a minute later still left the process that much larger). Where it starts is
            # where the ledger's range starts (``_reader``).
            self._log_reader = Unread.FIRST_ENTRY
        else:
            self._reader().written(writer.metadata, batch, awaited=self._changed is not None)
        self._notify()
        if self._ledger_bytes >= self.settings.ledger_max_bytes:
            self._start_roll_over(sized=True)
        return batch

    async def _take_turn(self) -> None:
        """Wait until no roll-over runs and every append that came earlier and waited has
        taken its sequence ids. Waiting for the roll-over alone was not enough: the appends
        it held are woken a few turns of the loop after it ends, and one called in between
        found nothing to wait for and took its ids first."""
        ahead = self._waiting
        mine: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting = mine
        try:
            if ahead is not None:
                await asyncio.shield(ahead)
            while self._rolling is not None:
                await asyncio.shield(self._rolling)
        finally:
            # The caller takes its ids before it next yields; the one behind runs after that.
            if self._waiting is mine:
                self._waiting = None
            mine.set_result(None)

    async def abandon(self) -> None:
        """Give up a log just opened, before anything was appended: its new ledger is taken
        out of the topic's record again and deleted (``close`` if something was appended).

        A take-over that cannot read back the log's end gives the topic up, and the next
        claim opens the log again. Closing each time left an empty ledger in the record per
        attempt: a topic whose end stayed unreadable (its replicas out of reach) grew its
        record and the ledgers' metadata by one ledger per client retry (about a hundred in
        four minutes)."""
        writer, ranges = self._writer, self._ranges.ranges
        if (
            writer is None
            or self._rolling is not None
            or not ranges
            or ranges[-1].ledger_id != writer.ledger_id
            or self._next_seq != ranges[-1].start_seq
        ):
            await self.close()
            return
        self._writer = None
        self.broken = self.broken or LedgerError("topic log abandoned")
        self._notify()
        kept = LedgerRanges(ranges[:-1])
        try:
            version = await self._ctx.store.persistence.write_topic_persistence_info(
                self.topic, kept, self._ranges_version
            )
        except MetadataError:
            return  # changed meanwhile (someone else has the topic) or out of reach: leave it
        self._ranges, self._ranges_version = kept, version
        await self._ctx.discard(writer)

    async def close(self) -> None:
        """Graceful end of ownership: flush, close the ledger and record where the log ends."""
        while self._rolling is not None:
            await asyncio.shield(self._rolling)
        if self.broken is None:
            await self._close_current()
        self._writer = None
        self.broken = self.broken or LedgerError("topic log closed")
        self._notify()

    # reading ------------------------------------------------------------------------------

    async def read(self, start_seq: int, max_messages: int, max_bytes: int) -> list[Batch]:
        """Confirmed batches holding ``start_seq`` onwards, within the limits (at least one)."""
        return await self._reader().read(
            self._ranges.ranges,
            max(start_seq, self.first_seq),
            self.last_seq,
            max_messages,
            max_bytes,
        )

    # garbage collection -------------------------------------------------------------------

    def collect_due(self, keep_from_seq: int | None = None) -> bool:
        """Whether ``collect`` could find anything now: not while the ranges and the first
        sequence id needed (``None``: as last time, when nothing can have changed it) are
        what the last collection that found nothing saw and no ledger of it has grown old
        enough. A hub owning 100,000 topics taken over (two ledgers each) read every one's
        closed ledger every minute for nothing."""
        quiet = self._quiet
        return quiet is None or quiet.due(self._ranges, keep_from_seq, self._ctx.clock.wall_ms)

    async def collect(
        self, keep_from_seq: int, *, retention_ms: int | None, retention_bytes: int | None
    ) -> list[int]:
        """Delete closed ledgers wholly below ``keep_from_seq`` (the first sequence id some
        subscriber still needs) that retention lets go; returns their ids."""
        ranges = self._ranges.ranges
        prefix, next_ms = await collectable_prefix(
            self._ctx.store.ledgers,
            ranges,
            keep_from_seq,
            now_ms=self._ctx.clock.wall_ms(),
            retention_ms=retention_ms,
            retention_bytes=retention_bytes,
        )
        if not prefix:
            self._quiet = Quiet(self._ranges, keep_from_seq, next_ms)
            return []
        gone = set(prefix)
        remaining = LedgerRanges(tuple(r for r in ranges if r.ledger_id not in gone))
        version = await self._ctx.store.persistence.write_topic_persistence_info(
            self.topic, remaining, self._ranges_version
        )
        self._ranges, self._ranges_version = remaining, version
        for lid in prefix:
            if isinstance(self._log_reader, LogReader):
                self._log_reader.forget(lid)
            await delete_ledger_everywhere(self._ctx.store.ledgers, self._ctx.replicas, lid)
        return prefix
