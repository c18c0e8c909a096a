"""A topic's log: its ledgers in order, as the owning hub sees them.

Rules:

- Opening the log is taking over the topic's storage: recover and close whatever ledger is
  still open (this fences its writer, whoever it was), create a new ledger, and append it to the
  topic's ledger list with a compare-and-set on the TopicPersistenceManager record. If that CAS
  fails, another hub is taking over the same topic: raise ``BadVersionError`` and let the caller
  step down.
- Sequence ids are assigned when a batch is appended, before the write is sent, so batches are
  contiguous and ordered; a failed write breaks the log (``broken``), and no later batch can be
  confirmed, so there is never a gap below an acknowledged message.
- Readers see only confirmed batches (up to the LAC).
- The newest batches are kept in memory (``cache_bytes``) so subscribers that keep up are
  served without touching the disk (``hedwig.ledger.log_reader``).
- The current ledger is rolled over when it grows past ``ledger_max_bytes``; closed ledgers are
  collected by ``collect`` once every subscriber has consumed them and retention allows
  (``hedwig.ledger.retention``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from msgspec.structs import replace

from hedwig.clock import Clock, SystemClock
from hedwig.errors import (
    BadVersionError,
    HedwigError,
    LedgerError,
    MetadataError,
    MetadataUnavailableError,
    NoLedgerMetadataError,
)
from hedwig.flag import Flag
from hedwig.ledger.handle import Fragments, LedgerWriter, recover_ledger, recovered_end
from hedwig.ledger.log_reader import LogReader
from hedwig.ledger.replicas import Replicas
from hedwig.ledger.retention import collectable_prefix, delete_ledger_everywhere
from hedwig.metadata.managers import MetadataStore
from hedwig.metadata.records import (
    NEW_VERSION,
    LedgerMetadata,
    LedgerRanges,
    LedgerState,
    ReplicationConfig,
    Version,
    Versioned,
)
from hedwig.metadata.topic_logs import first_ranges
from hedwig.protocol import Batch, EncodedMessages
from hedwig.shared import shared

# Chooses storage replicas for a new ledger: (wanted size, smallest acceptable size,
# replicas to avoid) -> addresses.
EnsembleChooser = Callable[[int, int, frozenset[str]], Awaitable[list[str]]]

log = logging.getLogger(__name__)
# Roll-overs running in the background (the event loop keeps only weak references to tasks).
_background: set[asyncio.Task[None]] = set()
T = TypeVar("T")

# A replica that failed a write is left out of this topic's new ledgers for this long: longer
# than a session timeout, so a hub that died has left the registry by then, and short enough
# that hubs restarted one after the other (a rolling restart) do not all stay avoided and
# shrink new ledgers below the wanted ensemble.
REPLICA_FAILURE_HOLD_S = 10.0


_NOBODY: frozenset[str] = frozenset()

# A new ledger's fragments, one object per ensemble: a region of three hubs has a handful of
# ensembles and a hub writes a ledger per owned topic (a tuple each, three with the copies
# of its ensemble, was 250 bytes a topic).
_FIRST_FRAGMENTS: dict[tuple[str, ...], Fragments] = {}
_MAX_FIRST_FRAGMENTS = 4096


def first_fragments(ensemble: Sequence[str]) -> Fragments:
    """The fragments of a new ledger on ``ensemble``, shared with every other such ledger."""
    key = tuple(ensemble)
    got = _FIRST_FRAGMENTS.get(key)
    if got is None:
        if len(_FIRST_FRAGMENTS) >= _MAX_FIRST_FRAGMENTS:
            _FIRST_FRAGMENTS.clear()
        got = _FIRST_FRAGMENTS[key] = ((0, key),)
    return got


@dataclass(frozen=True, slots=True)
class LogSettings:
    """Knobs of a topic log; the hub fills them from its configuration."""

    replication: ReplicationConfig = field(default_factory=ReplicationConfig)
    ledger_max_bytes: int = 64 * 1024 * 1024  # roll over past this: bounds recovery and GC units
    cache_bytes: int = 16 * 1024 * 1024  # newest batches served from memory


@dataclass(frozen=True, slots=True, weakref_slot=True)
class _LogShared:
    """What a hub's topic logs hold alike (``hedwig.shared``)."""

    store: MetadataStore
    replicas: Replicas
    owner: str
    epoch: int
    choose_ensemble: EnsembleChooser | None
    clock: Clock
    on_rolled_over: Callable[[], None] | None
    on_suspect: Callable[[int, Fragments], None] | None
    on_idle: Callable[[LedgerWriter], None] | None


def new_ledger_metadata(
    topic: str,
    settings: LogSettings,
    ensemble: Sequence[str],
    owner: str,
    owner_epoch: int,
    created_ms: int,
) -> LedgerMetadata:
    """A new ledger of ``topic`` on ``ensemble`` (its id is the store's to give): a log's next
    one, or a new topic's first, made with its claim (``hedwig.hub.ownership``)."""
    rep = settings.replication
    ensemble = ensemble[: rep.ensemble]
    return LedgerMetadata(
        ledger_id=0,
        topic=topic,
        ensemble_size=len(ensemble),
        write_quorum=min(rep.write_quorum, len(ensemble)),
        ack_quorum=rep.ack_quorum,
        fragments=first_fragments(ensemble),
        owner=owner,
        owner_epoch=owner_epoch,
        created_ms=created_ms,
    )


class TopicLog:
    # A log per owned topic: without an attribute dictionary each costs about 100 bytes less.
    __slots__ = (
        "_changed",
        "_ensemble",
        "_failed_replicas",
        "_inflight",
        "_ledger_bytes",
        "_log_reader",
        "_next_seq",
        "_quiet",
        "_ranges",
        "_ranges_version",
        "_rolling",
        "_sh",
        "_tail_suspect",
        "_waiting",
        "_writer",
        "broken",
        "last_seq",
        "previous_end_ms",
        "settings",
        "topic",
    )

    def __init__(
        self,
        topic: str,
        store: MetadataStore,
        replicas: Replicas,
        *,
        owner: str,
        owner_epoch: int,
        ensemble: Sequence[str],
        settings: LogSettings,
        choose_ensemble: EnsembleChooser | None = None,
        clock: Clock | None = None,
        on_rolled_over: Callable[[], None] | None = None,
        on_suspect: Callable[[int, Fragments], None] | None = None,
        on_idle: Callable[[LedgerWriter], None] | None = None,
    ) -> None:
        self.topic = topic
        # What every log of the hub holds alike, in one object (``hedwig.shared``). On
        # suspects: told the ledgers this log closed or recovered that may be
        # under-replicated (the auditor checks them; it no longer reads every ledger every
        # round). On idle: told when the ledger's writer has nothing in flight
        # (``hedwig.ledger.lac_notices``).
        self._sh = shared(
            _LogShared,
            store,
            replicas,
            owner,
            owner_epoch,
            choose_ensemble,
            clock or SystemClock(),
            on_rolled_over,
            on_suspect,
            on_idle,
        )
        self._ensemble = first_fragments(ensemble)[0][1]
        self._tail_suspect = False  # a replica of the open ledger failed a write
        # Replicas that failed a write lately -> until when new ledgers avoid them.
        self._failed_replicas: dict[str, float] | None = None  # made at the first failure
        self.settings = settings
        # The ledger list and its record's version (two slots: a ``Versioned`` was 64 bytes
        # more on every owned topic).
        self._ranges = LedgerRanges()
        self._ranges_version: Version = NEW_VERSION
        self._writer: LedgerWriter | None = None
        # Made by the second append or the first read: an idle topic holds no cache (about
        # 400 bytes). Before it, or once the topic is idle and its reader holds nothing it
        # could not have again for a read or two (``shed_cache``), an int instead: the ledger
        # being written then, times two, plus the entries of it indexed (0 or 1).
        self._log_reader: LogReader | int | None = None
        self._next_seq = 1
        self.last_seq = 0  # last confirmed
        # Made by the first waiter and dropped when set: most owned topics are idle, nobody
        # waits on them, and an event with its waiter queue is about 760 bytes.
        self._changed: Flag | None = None
        self._rolling: asyncio.Future[None] | None = None
        # The last append waiting to take its sequence ids (``_take_turn``); None: none waits.
        self._waiting: asyncio.Future[None] | None = None
        # What the last collection that found nothing saw: the ranges, the first sequence id
        # needed, and when a ledger of them grows old enough (``collect_due``).
        self._quiet: tuple[LedgerRanges, int, int | None] | None = None
        self._ledger_bytes = 0
        self._inflight = 0
        self.broken: LedgerError | None = None
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
        try:
            await self._open(fresh=fresh, together=True, started=started, known=known)
        except BadVersionError:
            if fresh:
                raise
            log.info(
                "topic %r: its records changed while taking it over; again, step by step",
                self.topic,
            )
            await self._open(fresh=False, together=False)

    async def _open(
        self,
        *,
        fresh: bool,
        together: bool,
        started: tuple[Versioned[LedgerMetadata], Version] | None = None,
        known: Versioned[LedgerRanges] | None = None,
    ) -> None:
        if fresh:
            got = None
        elif known is not None:
            got = known
        else:
            got = await self._store.persistence.read_topic_persistence_info(self.topic)
        ranges = got.value if got else LedgerRanges()
        version = got.version if got else NEW_VERSION
        # Recover every ledger still open (normally at most the tail).
        recovered: dict[int, LedgerMetadata] = {}
        closing: list[Versioned[LedgerMetadata]] = []
        for r in ranges.ranges:
            if r.end_seq is None:
                try:
                    if together:
                        ended = await recovered_end(
                            self._store.ledgers,
                            self._replicas,
                            r.ledger_id,
                            decode=Batch.from_stored,
                            clock=self._clock,
                            replacements=self._stand_ins,
                        )
                        if ended.version is not None:
                            closing.append(Versioned(ended.metadata, ended.version))
                    else:
                        ended = await recover_ledger(
                            self._store.ledgers,
                            self._replicas,
                            r.ledger_id,
                            decode=Batch.from_stored,
                            clock=self._clock,
                            replacements=self._stand_ins,
                        )
                except NoLedgerMetadataError:
                    # Deleted while open: only a deletion of the topic does that (retention
                    # takes closed ledgers, after the record), cut short by a crash before
                    # the records went. Its messages are gone; taken as empty, so the
                    # deletion's retry (which claims the topic first) can finish.
                    log.warning(
                        "topic %r: open ledger %d is gone; taken as empty", self.topic, r.ledger_id
                    )
                    ranges = LedgerRanges(
                        tuple(
                            replace(x, end_seq=r.start_seq - 1) if x.ledger_id == r.ledger_id else x
                            for x in ranges.ranges
                        )
                    )
                    continue
                md = ended.metadata
                recovered[r.ledger_id] = md
                if ended.last is not None and md.last_entry_id >= 0:
                    # Decoded once: the take-over reads it next (``_previous_end_ms``, the
                    # publishers' sequences), a replica request each otherwise.
                    self._reader().remember(md.ledger_id, md.last_entry_id, ended.last)
                end = md.last_seq if md.last_entry_id >= 0 else r.start_seq - 1
                ranges = LedgerRanges(
                    tuple(
                        replace(x, end_seq=end) if x.ledger_id == r.ledger_id else x
                        for x in ranges.ranges
                    )
                )
        last = ranges.last_seq
        if got is None:
            # A new topic: its first ledger and the record naming it, at once (one request
            # on etcd); a record made meanwhile by anyone else fails this open.
            created, version = started or await self._store.persistence.start_topic_log(
                self.topic, self._ledger_metadata(self._ensemble)
            )
            writer = self._writer_for(created)
            new_ranges = first_ranges(writer.ledger_id)
        elif together:
            created, record = await self._store.persistence.continue_topic_log(
                self.topic,
                Versioned(ranges, version),
                closing,
                self._ledger_metadata(self._ensemble),
            )
            writer = self._writer_for(created)
            new_ranges, version = record.value, record.version
        else:
            writer = await self._new_writer(self._ensemble)
            new_ranges = ranges.with_tail(writer.ledger_id, last + 1)
            try:
                version = await self._store.persistence.write_topic_persistence_info(
                    self.topic, new_ranges, version
                )
            except BadVersionError:
                await self._discard(writer)
                raise
        for md in recovered.values():
            # Final now: the read-back of the log's end that follows a take-over finds it
            # here, not in the store.
            self._reader().closed(md)
            if md.last_entry_id >= 0 and self._on_suspect is not None:
                self._on_suspect(md.ledger_id, md.fragments)  # a replica may have missed its end
        if got is not None:
            try:
                self.previous_end_ms = await self._previous_end_ms(ranges, recovered)
            except MetadataError as exc:  # for a metric: not worth failing the take-over
                log.info(
                    "topic %r: when its previous owner stopped is unknown: %s", self.topic, exc
                )
        self._ranges, self._ranges_version = new_ranges, version
        self._writer = writer
        self._next_seq = last + 1
        self.last_seq = last
        self._ledger_bytes = 0

    async def _stand_ins(self, count: int, avoid: frozenset[str]) -> list[str]:
        """Replicas for a recovery to write back on, in place of unreachable ones."""
        if self._choose_ensemble is None:
            return []
        return await self._choose_ensemble(count, count, avoid)

    async def _previous_end_ms(
        self, ranges: LedgerRanges, recovered: dict[int, LedgerMetadata]
    ) -> int | None:
        """When the previous owner stopped writing: its close time after a hand-off, else the
        time of its last message (a crash); for the ownerless-time metric."""
        if not ranges.ranges:
            return None
        last = ranges.ranges[-1].ledger_id
        md = recovered.get(last)
        if md is None:  # closed by its owner (a hand-off): when it closed
            got = await self._store.ledgers.read_ledger(last)
            if got is None:
                return None
            if got.value.state is LedgerState.CLOSED:
                self._reader().closed(got.value)
            return got.value.closed_ms or None
        if md.last_entry_id < 0:
            return md.created_ms or None
        try:
            # Through the reader: kept there for the read-back of the end that comes next.
            batch = await self._reader().entry(md, md.last_entry_id)
            return batch.publish_time_ms
        except LedgerError:
            return None

    @property
    def _store(self) -> MetadataStore:
        return self._sh.store

    @property
    def _replicas(self) -> Replicas:
        return self._sh.replicas

    @property
    def _owner(self) -> str:
        return self._sh.owner

    @property
    def _epoch(self) -> int:
        return self._sh.epoch

    @property
    def _choose_ensemble(self) -> EnsembleChooser | None:
        return self._sh.choose_ensemble

    @property
    def _clock(self) -> Clock:
        return self._sh.clock

    @property
    def _on_rolled_over(self) -> Callable[[], None] | None:
        return self._sh.on_rolled_over

    @property
    def _on_suspect(self) -> Callable[[int, Fragments], None] | None:
        return self._sh.on_suspect

    @property
    def _on_idle(self) -> Callable[[LedgerWriter], None] | None:
        return self._sh.on_idle

    async def _new_writer(self, ensemble: Sequence[str]) -> LedgerWriter:
        return self._writer_for(
            await self._store.ledgers.create_ledger(self._ledger_metadata(ensemble))
        )

    def _ledger_metadata(self, ensemble: Sequence[str]) -> LedgerMetadata:
        """A new ledger of this topic on ``ensemble`` (its id is the store's to give)."""
        return new_ledger_metadata(
            self.topic, self.settings, ensemble, self._owner, self._epoch, self._clock.wall_ms()
        )

    def _writer_for(self, created: Versioned[LedgerMetadata]) -> LedgerWriter:
        return LedgerWriter(
            self._store.ledgers,
            self._replicas,
            created,
            clock=self._clock,
            on_replica_failure=self,
            on_idle=self._on_idle,
        )

    def replica_failed(self, address: str) -> None:
        """A replica missed a write (the entry still reached its ack quorum, or the writer
        broke). Move on to a ledger whose ensemble avoids it, so later entries are fully
        replicated again; the auditor re-replicates what the old ledger missed."""
        self._tail_suspect = True
        now = self._clock.monotonic()
        if self._failed_replicas is None:
            self._failed_replicas = {}
        if self._failed_replicas.get(address, 0.0) > now or self.broken is not None:
            return
        self._failed_replicas[address] = now + REPLICA_FAILURE_HOLD_S
        log.warning("topic %r: storage replica %s failed; rolling over", self.topic, address)
        if self._writer is not None:
            self._start_roll_over()

    async def _discard(self, writer: LedgerWriter) -> None:
        try:
            got = await self._store.ledgers.read_ledger(writer.ledger_id)
            if got is not None:
                await self._store.ledgers.delete_ledger(writer.ledger_id, got.version)
        except Exception:
            log.debug("could not discard unused ledger %d", writer.ledger_id, exc_info=True)

    # properties ---------------------------------------------------------------------------

    def _reader(self) -> LogReader:
        held = self._log_reader
        if isinstance(held, LogReader):
            return held
        reader = LogReader(
            self.topic, self._store.ledgers, self._replicas, self.settings.cache_bytes
        )
        writer = self._writer
        if held is not None and held & 1 and writer is not None and writer.ledger_id == held >> 1:
            # The first entry of the ledger being written, confirmed with no reader (or
            # indexed before the reader went): it starts where the ledger's range starts.
            # (Entries confirmed since are indexed as the appends that made them go on, in
            # order, as always.) The writer's ledger is always the last range.
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
        self._log_reader = writer.ledger_id << 1 | (writer.lac + 1)

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
            publish_time_ms=self._clock.wall_ms(),
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
            self._log_reader = writer.ledger_id << 1 | 1
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

    @property
    def awaited(self) -> bool:
        """Whether a reader has waited for the log's next change (a delivery hub's long poll)
        since its last one."""
        return self._changed is not None

    def _change(self) -> Flag:
        """What a waiter for the next change waits on."""
        if self._changed is None:
            self._changed = Flag()
        return self._changed

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    def _avoided(self) -> frozenset[str]:
        if not self._failed_replicas:
            return _NOBODY  # asked of every owned topic each audit round: no clock read
        now = self._clock.monotonic()
        self._failed_replicas = {a: u for a, u in self._failed_replicas.items() if u > now} or None
        return frozenset(self._failed_replicas or ())

    @property
    def degraded(self) -> bool:
        """The open ledger has fewer replicas than the topic wants (made while hubs were down),
        or one that failed lately (a roll-over could not move away from it then)."""
        writer = self._writer
        if writer is None:
            return False
        ensemble = writer.metadata.fragments[-1][1]
        return writer.metadata.ensemble_size < self.settings.replication.ensemble or bool(
            self._avoided() & set(ensemble)
        )

    async def fenced_elsewhere(self, timeout_s: float = 2.0) -> bool:
        """Whether a replica of the open ledger has been fenced, i.e. another hub has begun to
        recover this log. Asked when this hub cannot reach the metadata store to find out
        through its owner record; a replica that does not answer counts as not fenced."""
        writer = self._writer
        if writer is None:
            return False
        ledger_id = writer.ledger_id

        async def ask(address: str) -> bool:
            try:
                return await asyncio.wait_for(
                    self._replicas.node(address).fenced(ledger_id), timeout_s
                )
            except (TimeoutError, HedwigError):
                return False

        ensemble = writer.metadata.fragments[-1][1]
        return any(await asyncio.gather(*(ask(a) for a in ensemble)))

    async def restore_replication(self) -> bool:
        """Roll over to a full-size ensemble if enough hubs are back; True if it did."""
        if not self.degraded or self._rolling is not None or self.broken is not None:
            return False
        rep = self.settings.replication
        if self._choose_ensemble is None:
            return False
        try:
            full = await self._choose_ensemble(rep.ensemble, rep.ensemble, self._avoided())
        except Exception:
            return False
        if len(full) < rep.ensemble or self._rolling is not None:
            return False
        self._start_roll_over()
        rolling = self._rolling
        assert rolling is not None
        await asyncio.shield(rolling)
        return True

    async def _next_ensemble(self) -> list[str] | None:
        """An ensemble for the next ledger, avoiding failed replicas; None if none is possible."""
        rep = self.settings.replication
        avoid = self._avoided()
        if self._choose_ensemble is None:
            healthy = [a for a in self._ensemble if a not in avoid]
            return healthy if len(healthy) >= rep.ack_quorum else None
        try:
            return await self._choose_ensemble(rep.ensemble, rep.ack_quorum, avoid)
        except Exception as exc:
            log.warning("topic %r: no healthy ensemble for a new ledger: %s", self.topic, exc)
            return None

    def _start_roll_over(self, *, sized: bool = False) -> None:
        """Start a roll-over unless one is running. ``_rolling`` is set here, in the caller's
        turn of the event loop, so two failures noticed in the same turn start one roll-over,
        and appends wait for it from the moment it is decided."""
        if self._rolling is not None:
            return
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        self._rolling = done
        task = loop.create_task(self._roll_over(done, sized=sized))
        _background.add(task)
        task.add_done_callback(_background.discard)

    async def _roll_over(self, done: asyncio.Future[None], *, sized: bool = False) -> None:
        try:
            ensemble = await self._next_ensemble()
            if ensemble is None:
                # Keep writing to the current ledger, degraded but available; the periodic
                # check (``restore_replication``) or the next size roll-over tries again.
                return
            await self._close_current()
            if self.broken is None:
                writer = await self._stored(lambda: self._new_writer(ensemble))
                self._ensemble = first_fragments(ensemble)[0][1]
                ranges = self._ranges.with_tail(writer.ledger_id, self.last_seq + 1)
                version = await self._stored(
                    lambda: self._store.persistence.write_topic_persistence_info(
                        self.topic, ranges, self._ranges_version
                    )
                )
                self._ranges, self._ranges_version = ranges, version
                self._writer = writer
                self._ledger_bytes = 0
                if sized and self._on_rolled_over is not None:
                    self._on_rolled_over()
        except Exception as exc:
            log.warning("topic %r: ledger roll-over failed: %s", self.topic, exc)
            if self.broken is None:
                self.broken = exc if isinstance(exc, LedgerError) else LedgerError(str(exc))
            self._notify()
        finally:
            self._rolling = None
            done.set_result(None)

    async def _close_current(self) -> None:
        writer = self._writer
        if writer is None:
            return
        while self._inflight and self.broken is None:
            await self._change().wait()
        suspect = (
            self._tail_suspect or writer.metadata.ensemble_size < self.settings.replication.ensemble
        )
        md = await self._stored(lambda: writer.close(last_seq=self.last_seq))
        self._tail_suspect = False
        if suspect and self._on_suspect is not None:
            self._on_suspect(md.ledger_id, md.fragments)
        if isinstance(self._log_reader, LogReader):
            self._log_reader.closed(md)
        ranges = self._ranges.close_tail(self.last_seq)
        version = await self._stored(
            lambda: self._store.persistence.write_topic_persistence_info(
                self.topic, ranges, self._ranges_version
            )
        )
        self._ranges, self._ranges_version = ranges, version

    async def _stored(self, write: Callable[[], Awaitable[T]]) -> T:
        """``write()``, tried again while the metadata store is out of reach.

        A roll-over caught by a metadata outage half-way cannot be undone (the old ledger may
        already be closed), so it waits for the store and then completes; appends wait for it.
        It gives up only when the log breaks (this hub lost the topic meanwhile).
        """
        delay = 0.05
        while True:
            try:
                return await write()
            except MetadataUnavailableError as exc:
                if self.broken is not None:
                    raise self.broken from exc
                log.info("topic %r: metadata store unavailable; retrying (%s)", self.topic, exc)
                await self._clock.sleep(delay)
                delay = min(1.0, delay * 2)

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
            version = await self._store.persistence.write_topic_persistence_info(
                self.topic, kept, self._ranges_version
            )
        except MetadataError:
            return  # changed meanwhile (someone else has the topic) or out of reach: leave it
        self._ranges, self._ranges_version = kept, version
        await self._discard(writer)

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
        if quiet is None or quiet[0] is not self._ranges:
            return True
        if keep_from_seq is not None and keep_from_seq != quiet[1]:
            return True
        return quiet[2] is not None and self._clock.wall_ms() >= quiet[2]

    async def collect(
        self, keep_from_seq: int, *, retention_ms: int | None, retention_bytes: int | None
    ) -> list[int]:
        """Delete closed ledgers wholly below ``keep_from_seq`` (the first sequence id some
        subscriber still needs) that retention lets go; returns their ids."""
        ranges = self._ranges.ranges
        prefix, next_ms = await collectable_prefix(
            self._store.ledgers,
            ranges,
            keep_from_seq,
            now_ms=self._clock.wall_ms(),
            retention_ms=retention_ms,
            retention_bytes=retention_bytes,
        )
        if not prefix:
            self._quiet = (self._ranges, keep_from_seq, next_ms)
            return []
        gone = set(prefix)
        remaining = LedgerRanges(tuple(r for r in ranges if r.ledger_id not in gone))
        version = await self._store.persistence.write_topic_persistence_info(
            self.topic, remaining, self._ranges_version
        )
        self._ranges, self._ranges_version = remaining, version
        for lid in prefix:
            if isinstance(self._log_reader, LogReader):
                self._log_reader.forget(lid)
            await delete_ledger_everywhere(self._store.ledgers, self._replicas, lid)
        return prefix
