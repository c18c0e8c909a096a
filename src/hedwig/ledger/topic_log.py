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
  served without touching the disk.
- The current ledger is rolled over when it grows past ``ledger_max_bytes``; closed ledgers are
  collected by ``collect`` once every subscriber has consumed them and retention allows.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace

from hedwig.clock import Clock, SystemClock
from hedwig.errors import BadVersionError, LedgerError, NoSuchEntryError
from hedwig.ledger.handle import LedgerWriter, StoragePool, read_entry, recover_ledger
from hedwig.metadata.managers import MetadataStore
from hedwig.metadata.records import (
    NEW_VERSION,
    LedgerMetadata,
    LedgerRange,
    LedgerRanges,
    ReplicationConfig,
    Versioned,
)
from hedwig.protocol.frames import Batch

# Chooses storage replicas for a new ledger: (wanted size, smallest acceptable size,
# replicas to avoid) -> addresses.
EnsembleChooser = Callable[[int, int, frozenset[str]], Awaitable[list[str]]]

log = logging.getLogger(__name__)

_FIRST_SEQ = struct.Struct(">Q")


def last_seq_of(entry: bytes) -> int:
    b = Batch.decode(entry)
    return b.last_seq


@dataclass
class _Cached:
    batch: Batch
    raw: bytes


@dataclass
class _LedgerIndex:
    """Where each entry of a ledger starts, in sequence ids (for reads by sequence id)."""

    metadata: LedgerMetadata
    first_seqs: list[int] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class LogSettings:
    """Knobs of a topic log; the hub fills them from its configuration."""

    replication: ReplicationConfig = field(default_factory=ReplicationConfig)
    ledger_max_bytes: int = 64 * 1024 * 1024  # roll over past this: bounds recovery and GC units
    cache_bytes: int = 16 * 1024 * 1024  # newest batches served from memory


class TopicLog:
    def __init__(
        self,
        topic: str,
        store: MetadataStore,
        pool: StoragePool,
        *,
        owner: str,
        owner_epoch: int,
        ensemble: list[str],
        settings: LogSettings,
        choose_ensemble: EnsembleChooser | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.topic = topic
        self._store = store
        self._pool = pool
        self._owner = owner
        self._epoch = owner_epoch
        self._ensemble = ensemble
        self._choose_ensemble = choose_ensemble
        self._failed_replicas: set[str] = set()
        self.settings = settings
        self._clock = clock or SystemClock()
        self._ranges: Versioned[LedgerRanges] = Versioned(LedgerRanges(), NEW_VERSION)
        self._writer: LedgerWriter | None = None
        self._indexes: dict[int, _LedgerIndex] = {}
        self._next_seq = 1
        self.last_seq = 0  # last confirmed
        self._cache: list[_Cached] = []
        self._cache_seqs: list[int] = []
        self._cache_size = 0
        self._changed = asyncio.Event()
        self._rolling: asyncio.Future[None] | None = None
        self._ledger_bytes = 0
        self._inflight = 0
        self.broken: LedgerError | None = None
        self.previous_end_ms: int | None = None

    # opening ------------------------------------------------------------------------------

    async def open(self) -> None:
        got = await self._store.persistence.read_topic_persistence_info(self.topic)
        ranges = got.value if got else LedgerRanges()
        version = got.version if got else NEW_VERSION
        # Recover every ledger still open (normally at most the tail).
        recovered: set[int] = set()
        for r in ranges.ranges:
            if r.end_seq is None:
                recovered.add(r.ledger_id)
                md = await recover_ledger(
                    self._store.ledgers,
                    self._pool,
                    r.ledger_id,
                    last_seq_of=last_seq_of,
                    clock=self._clock,
                )
                end = md.last_seq if md.last_entry_id >= 0 else r.start_seq - 1
                ranges = LedgerRanges(
                    tuple(
                        replace(x, end_seq=end) if x.ledger_id == r.ledger_id else x
                        for x in ranges.ranges
                    )
                )
        last = ranges.last_seq
        self.previous_end_ms = await self._previous_end_ms(ranges, recovered)
        writer = await self._new_writer(self._ensemble)
        new_ranges = ranges.with_tail(writer.ledger_id, last + 1)
        try:
            version = await self._store.persistence.write_topic_persistence_info(
                self.topic, new_ranges, version
            )
        except BadVersionError:
            await self._discard(writer)
            raise
        self._ranges = Versioned(new_ranges, version)
        self._writer = writer
        self._next_seq = last + 1
        self.last_seq = last
        self._ledger_bytes = 0

    async def _previous_end_ms(self, ranges: LedgerRanges, recovered: set[int]) -> int | None:
        """When the previous owner stopped writing: its close time after a hand-off, else the
        time of its last message (a crash); for the ownerless-time metric."""
        if not ranges.ranges:
            return None
        got = await self._store.ledgers.read_ledger(ranges.ranges[-1].ledger_id)
        if got is None:
            return None
        md = got.value
        if md.ledger_id not in recovered:
            return md.closed_ms or None
        if md.last_entry_id < 0:
            return md.created_ms or None
        try:
            return Batch.decode(await read_entry(self._pool, md, md.last_entry_id)).publish_time_ms
        except LedgerError:
            return None

    async def _new_writer(self, ensemble: list[str]) -> LedgerWriter:
        rep = self.settings.replication
        ensemble = ensemble[: rep.ensemble]
        md = LedgerMetadata(
            ledger_id=0,
            topic=self.topic,
            ensemble_size=len(ensemble),
            write_quorum=min(rep.write_quorum, len(ensemble)),
            ack_quorum=rep.ack_quorum,
            fragments=((0, tuple(ensemble)),),
            owner=self._owner,
            owner_epoch=self._epoch,
            created_ms=self._clock.wall_ms(),
        )
        created = await self._store.ledgers.create_ledger(md)
        return LedgerWriter(
            self._store.ledgers,
            self._pool,
            created,
            clock=self._clock,
            on_replica_failure=self._replica_failed,
        )

    def _replica_failed(self, address: str) -> None:
        """A replica missed a write (the entry still reached its ack quorum, or the writer
        broke). Move on to a ledger whose ensemble avoids it, so later entries are fully
        replicated again; the auditor re-replicates what the old ledger missed."""
        if address in self._failed_replicas or self.broken is not None:
            return
        self._failed_replicas.add(address)
        log.warning("topic %r: storage replica %s failed; rolling over", self.topic, address)
        if self._rolling is None and self._writer is not None:
            asyncio.get_running_loop().create_task(self._roll_over())

    async def _discard(self, writer: LedgerWriter) -> None:
        try:
            got = await self._store.ledgers.read_ledger(writer.ledger_id)
            if got is not None:
                await self._store.ledgers.delete_ledger(writer.ledger_id, got.version)
        except Exception:
            log.debug("could not discard unused ledger %d", writer.ledger_id, exc_info=True)

    # properties ---------------------------------------------------------------------------

    @property
    def first_seq(self) -> int:
        """The first sequence id still stored (later ones may be collected, never earlier)."""
        ranges = self._ranges.value.ranges
        return ranges[0].start_seq if ranges else 1

    @property
    def ranges(self) -> LedgerRanges:
        return self._ranges.value

    @property
    def ledger_id(self) -> int:
        return self._writer.ledger_id if self._writer else -1

    async def wait_beyond(self, seq: int, timeout: float | None = None) -> bool:
        """Wait until a batch past ``seq`` is confirmed (or the log breaks); True if one is."""
        while self.last_seq <= seq and self.broken is None:
            try:
                await asyncio.wait_for(self._changed.wait(), timeout)
            except TimeoutError:
                return False
        return self.last_seq > seq

    # appending ----------------------------------------------------------------------------

    async def append(
        self,
        publisher_id: str,
        publisher_seq: int,
        count: int,
        payload: bytes,
    ) -> Batch:
        """Durably append one batch; returns it with its sequence ids."""
        while self._rolling is not None:
            await asyncio.shield(self._rolling)
        if self.broken is not None:
            raise self.broken
        writer = self._writer
        assert writer is not None, "append before open"
        batch = Batch(
            self._next_seq, self._clock.wall_ms(), publisher_id, publisher_seq, count, payload
        )
        self._next_seq += count
        raw = batch.encode()
        self._ledger_bytes += len(raw)
        self._inflight += 1
        try:
            await writer.add(raw)
        except LedgerError as exc:
            self.broken = exc
            self._notify()
            raise
        finally:
            self._inflight -= 1
        # Confirmation is in order, so this batch directly follows the previous confirmed one.
        self.last_seq = batch.last_seq
        self._index_for(writer.metadata).first_seqs.append(batch.first_seq)
        self._remember(batch, raw)
        self._notify()
        if self._ledger_bytes >= self.settings.ledger_max_bytes and self._rolling is None:
            asyncio.get_running_loop().create_task(self._roll_over())
        return batch

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def _remember(self, batch: Batch, raw: bytes) -> None:
        self._cache.append(_Cached(batch, raw))
        self._cache_seqs.append(batch.first_seq)
        self._cache_size += len(raw)
        if self._cache_size > self.settings.cache_bytes:
            drop = 0
            while self._cache_size > self.settings.cache_bytes // 2 and drop < len(self._cache) - 1:
                self._cache_size -= len(self._cache[drop].raw)
                drop += 1
            del self._cache[:drop]
            del self._cache_seqs[:drop]

    def _index_for(self, md: LedgerMetadata) -> _LedgerIndex:
        idx = self._indexes.get(md.ledger_id)
        if idx is None:
            idx = self._indexes[md.ledger_id] = _LedgerIndex(md)
        return idx

    @property
    def degraded(self) -> bool:
        """The open ledger has fewer replicas than the topic wants (made while hubs were down)."""
        writer = self._writer
        return (
            writer is not None
            and writer.metadata.ensemble_size < self.settings.replication.ensemble
        )

    async def restore_replication(self) -> bool:
        """Roll over to a full-size ensemble if enough hubs are back; True if it did."""
        if not self.degraded or self._rolling is not None or self.broken is not None:
            return False
        rep = self.settings.replication
        if self._choose_ensemble is None:
            return False
        try:
            full = await self._choose_ensemble(rep.ensemble, rep.ensemble, frozenset())
        except Exception:
            return False
        if len(full) < rep.ensemble:
            return False
        await self._roll_over()
        return True

    async def _next_ensemble(self) -> list[str] | None:
        """An ensemble for the next ledger, avoiding failed replicas; None if none is possible."""
        rep = self.settings.replication
        if self._choose_ensemble is None:
            healthy = [a for a in self._ensemble if a not in self._failed_replicas]
            return healthy if len(healthy) >= rep.ack_quorum else None
        try:
            return await self._choose_ensemble(
                rep.ensemble, rep.ack_quorum, frozenset(self._failed_replicas)
            )
        except Exception as exc:
            log.warning("topic %r: no healthy ensemble for a new ledger: %s", self.topic, exc)
            return None

    async def _roll_over(self) -> None:
        loop = asyncio.get_running_loop()
        self._rolling = loop.create_future()
        try:
            ensemble = await self._next_ensemble()
            if ensemble is None:
                # Keep writing to the current ledger, degraded but available; the next failure
                # or size roll-over tries again.
                self._failed_replicas.clear()
                return
            await self._close_current()
            if self.broken is None:
                writer = await self._new_writer(ensemble)
                self._ensemble = ensemble
                ranges = self._ranges.value.with_tail(writer.ledger_id, self.last_seq + 1)
                version = await self._store.persistence.write_topic_persistence_info(
                    self.topic, ranges, self._ranges.version
                )
                self._ranges = Versioned(ranges, version)
                self._writer = writer
                self._ledger_bytes = 0
        except Exception as exc:
            log.warning("topic %r: ledger roll-over failed: %s", self.topic, exc)
            if self.broken is None:
                self.broken = exc if isinstance(exc, LedgerError) else LedgerError(str(exc))
            self._notify()
        finally:
            fut, self._rolling = self._rolling, None
            fut.set_result(None)

    async def _close_current(self) -> None:
        writer = self._writer
        if writer is None:
            return
        while self._inflight and self.broken is None:
            await self._changed.wait()
        md = await writer.close(last_seq=self.last_seq)
        self._index_for(md).metadata = md
        ranges = self._ranges.value.close_tail(self.last_seq)
        version = await self._store.persistence.write_topic_persistence_info(
            self.topic, ranges, self._ranges.version
        )
        self._ranges = Versioned(ranges, version)

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

    async def read(self, start_seq: int, max_messages: int, max_bytes: int) -> list[_Cached]:
        """Confirmed batches holding ``start_seq`` onwards, within the limits (at least one)."""
        start_seq = max(start_seq, self.first_seq)
        if start_seq > self.last_seq:
            return []
        if self._cache_seqs and start_seq >= self._cache_seqs[0]:
            i = bisect.bisect_right(self._cache_seqs, start_seq) - 1
            out: list[_Cached] = []
            msgs = size = 0
            for c in self._cache[i:]:
                out.append(c)
                msgs += c.batch.count
                size += len(c.raw)
                if msgs >= max_messages or size >= max_bytes:
                    break
            return out
        return await self._read_ledgers(start_seq, max_messages, max_bytes)

    async def _read_ledgers(
        self, start_seq: int, max_messages: int, max_bytes: int
    ) -> list[_Cached]:
        out: list[_Cached] = []
        msgs = size = 0
        ranges = self._ranges.value.ranges
        starts = [r.start_seq for r in ranges]
        ri = max(0, bisect.bisect_right(starts, start_seq) - 1)
        seq = start_seq
        while ri < len(ranges) and seq <= self.last_seq:
            r = ranges[ri]
            if r.end_seq is not None and r.end_seq < seq:
                ri += 1
                continue
            idx = await self._load_index(r)
            ei = max(0, bisect.bisect_right(idx.first_seqs, seq) - 1)
            while ei < len(idx.first_seqs):
                raw = await read_entry(self._pool, idx.metadata, ei)
                batch = Batch.decode(raw)
                if batch.first_seq > self.last_seq:
                    return out
                out.append(_Cached(batch, raw))
                msgs += batch.count
                size += len(raw)
                seq = batch.last_seq + 1
                if msgs >= max_messages or size >= max_bytes:
                    return out
                ei += 1
            ri += 1
        return out

    async def _load_index(self, r: LedgerRange) -> _LedgerIndex:
        idx = self._indexes.get(r.ledger_id)
        if idx is not None and (idx.first_seqs or r.end_seq == r.start_seq - 1):
            return idx
        got = await self._store.ledgers.read_ledger(r.ledger_id)
        if got is None:
            raise NoSuchEntryError(f"ledger {r.ledger_id} of topic {self.topic!r} is gone")
        md = got.value
        idx = _LedgerIndex(md)
        for eid in range(md.last_entry_id + 1):
            raw = await read_entry(self._pool, md, eid)
            idx.first_seqs.append(_FIRST_SEQ.unpack_from(raw)[0])
        self._indexes[r.ledger_id] = idx
        return idx

    # garbage collection -------------------------------------------------------------------

    async def collect(
        self, keep_from_seq: int, *, retention_ms: int | None, retention_bytes: int | None
    ) -> list[int]:
        """Delete closed ledgers wholly below ``keep_from_seq`` that retention lets go.

        ``keep_from_seq`` is the first sequence id some subscriber still needs. Retention keeps
        consumed ledgers for late readers: a ledger goes once it is older than
        ``retention_ms`` *or* the consumed ledgers after it already hold ``retention_bytes``.
        ``None`` means no limit of that kind.
        """
        ranges = self._ranges.value.ranges
        now = self._clock.wall_ms()
        candidates: list[tuple[LedgerRange, LedgerMetadata]] = []
        for r in ranges[:-1]:
            if r.end_seq is None or r.end_seq >= keep_from_seq:
                break
            got = await self._store.ledgers.read_ledger(r.ledger_id)
            if got is None:
                continue
            candidates.append((r, got.value))
        doomed: set[int] = set()
        newer_bytes = 0
        for r, md in reversed(candidates):
            size = md.length or 0
            too_old = (
                retention_ms is not None and now - (md.closed_ms or md.created_ms) >= retention_ms
            )
            too_big = retention_bytes is not None and newer_bytes >= retention_bytes
            if too_old or too_big:
                doomed.add(r.ledger_id)
            newer_bytes += size
        # Only a prefix of the log may go: never leave a hole.
        prefix: list[int] = []
        for r, _ in candidates:
            if r.ledger_id not in doomed:
                break
            prefix.append(r.ledger_id)
        if not prefix:
            return []
        remaining = LedgerRanges(tuple(r for r in ranges if r.ledger_id not in set(prefix)))
        version = await self._store.persistence.write_topic_persistence_info(
            self.topic, remaining, self._ranges.version
        )
        self._ranges = Versioned(remaining, version)
        for lid in prefix:
            self._indexes.pop(lid, None)
            got = await self._store.ledgers.read_ledger(lid)
            if got is None:
                continue
            for address in {a for _, ens in got.value.fragments for a in ens}:
                try:
                    await self._pool.node(address).delete_ledger(lid)
                except Exception:
                    log.info("could not delete ledger %d on %s", lid, address)
            await self._store.ledgers.delete_ledger(lid, got.version)
        return prefix
