"""Taking over a topic's storage: what opening its log does (``TopicLog.open``).

Rules:

- Recover and close whatever ledger of the topic's record is still open (this fences its
  writer, whoever it was), create a new ledger, and append it to the topic's ledger list
  with a compare-and-set on the TopicPersistenceManager record. If that compare-and-set
  fails, another hub is taking over the same topic: ``BadVersionError``, and the caller
  steps down.
- Together (``together``), the recovered ledgers' closes, the new ledger and the ledger list
  naming it are one store request (``continue_topic_log``: an etcd transaction or a ZooKeeper
  ``multi``); step by step, each write settles its own race (a recoverer that closed the
  ledger first, a record changed meanwhile), and a new ledger the record could not name is
  deleted again.
- A new topic (no record) starts its log with its first ledger and the record naming it at
  once (``start_topic_log``), or with what its claim made (``started``).
- An open ledger whose metadata is gone was deleted while open: only a deletion of the topic
  does that (retention takes closed ledgers, after the record), cut short by a crash before
  the records went. Its messages are gone; it is taken as empty, so the deletion's retry
  (which claims the topic first) can finish.
- A recovered ledger's last entry, decoded once, is kept in the log's reader (the take-over
  reads it next: the previous owner's last time, the publishers' sequences); its metadata is
  final, kept there too; and it is suspected of under-replication (a replica may have missed
  its end).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from msgspec.structs import replace

from hedwig.errors import BadVersionError, LedgerError, MetadataError, NoLedgerMetadataError
from hedwig.ledger.handle import LedgerWriter, ReplicaFailures
from hedwig.ledger.log_context import LogContext, LogSettings
from hedwig.ledger.log_reader import LogReader
from hedwig.ledger.recovery import Recovered, recover_ledger, recovered_end
from hedwig.metadata.records import (
    NEW_VERSION,
    LedgerMetadata,
    LedgerRanges,
    LedgerState,
    Version,
    Versioned,
)
from hedwig.metadata.topic_logs import first_ranges
from hedwig.protocol import Batch

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Opened:
    """What a take-over ended on: the topic's ledger list naming the new ledger, the version
    of its record, the new ledger's writer, the last sequence id stored before it, and when
    the previous owner stopped writing (``None``: unknown, or a new topic)."""

    ranges: LedgerRanges
    version: Version
    writer: LedgerWriter
    last_seq: int
    previous_end_ms: int | None


async def take_over(
    ctx: LogContext,
    topic: str,
    settings: LogSettings,
    ensemble: Sequence[str],
    *,
    reader: Callable[[], LogReader],
    failures: ReplicaFailures,
    fresh: bool,
    started: tuple[Versioned[LedgerMetadata], Version] | None = None,
    known: Versioned[LedgerRanges] | None = None,
) -> Opened:
    """Recover the open ledgers of ``topic``'s log and start its next on ``ensemble``, all
    recorded in one request; if a record changed meanwhile, again from a fresh read, step
    by step. ``reader``: the log's reader (made at first use); ``failures``: told of the new
    writer's replica failures. The other arguments are ``TopicLog.open``'s."""
    try:
        return await _take_over(
            ctx,
            topic,
            settings,
            ensemble,
            reader=reader,
            failures=failures,
            fresh=fresh,
            together=True,
            started=started,
            known=known,
        )
    except BadVersionError:
        if fresh:
            raise
        log.info("topic %r: its records changed while taking it over; again, step by step", topic)
    return await _take_over(
        ctx,
        topic,
        settings,
        ensemble,
        reader=reader,
        failures=failures,
        fresh=False,
        together=False,
    )


async def _take_over(
    ctx: LogContext,
    topic: str,
    settings: LogSettings,
    ensemble: Sequence[str],
    *,
    reader: Callable[[], LogReader],
    failures: ReplicaFailures,
    fresh: bool,
    together: bool,
    started: tuple[Versioned[LedgerMetadata], Version] | None = None,
    known: Versioned[LedgerRanges] | None = None,
) -> Opened:
    if fresh:
        got = None
    elif known is not None:
        got = known
    else:
        got = await ctx.store.persistence.read_topic_persistence_info(topic)
    ranges = got.value if got else LedgerRanges()
    version = got.version if got else NEW_VERSION
    # Recover every ledger still open (normally at most the tail).
    recovered: dict[int, LedgerMetadata] = {}
    closing: list[Versioned[LedgerMetadata]] = []
    for r in ranges.ranges:
        if r.end_seq is not None:
            continue
        try:
            ended = await _recover(ctx, r.ledger_id, together=together)
        except NoLedgerMetadataError:
            log.warning("topic %r: open ledger %d is gone; taken as empty", topic, r.ledger_id)
            ranges = _ended(ranges, r.ledger_id, r.start_seq - 1)
            continue
        if together and ended.version is not None:
            closing.append(Versioned(ended.metadata, ended.version))
        md = ended.metadata
        recovered[r.ledger_id] = md
        if ended.last is not None and md.last_entry_id >= 0:
            # Decoded once: the take-over reads it next (``_previous_end_ms``, the
            # publishers' sequences), a replica request each otherwise.
            reader().remember(md.ledger_id, md.last_entry_id, ended.last)
        ranges = _ended(
            ranges, r.ledger_id, md.last_seq if md.last_entry_id >= 0 else r.start_seq - 1
        )
    last = ranges.last_seq
    if got is None:
        # A new topic: its first ledger and the record naming it, at once (one request
        # on etcd); a record made meanwhile by anyone else fails this open.
        created, version = started or await ctx.store.persistence.start_topic_log(
            topic, ctx.new_ledger_metadata(topic, settings, ensemble)
        )
        writer = ctx.writer(created, failures)
        new_ranges = first_ranges(writer.ledger_id)
    elif together:
        created, record = await ctx.store.persistence.continue_topic_log(
            topic,
            Versioned(ranges, version),
            closing,
            ctx.new_ledger_metadata(topic, settings, ensemble),
        )
        writer = ctx.writer(created, failures)
        new_ranges, version = record.value, record.version
    else:
        writer = await ctx.new_writer(topic, settings, ensemble, failures)
        new_ranges = ranges.with_tail(writer.ledger_id, last + 1)
        try:
            version = await ctx.store.persistence.write_topic_persistence_info(
                topic, new_ranges, version
            )
        except BadVersionError:
            await ctx.discard(writer)
            raise
    for md in recovered.values():
        # Final now: the read-back of the log's end that follows a take-over finds it
        # here, not in the store.
        reader().closed(md)
        if md.last_entry_id >= 0 and ctx.on_suspect is not None:
            ctx.on_suspect(md.ledger_id, md.fragments)  # a replica may have missed its end
    previous_end_ms = None
    if got is not None:
        try:
            previous_end_ms = await _previous_end_ms(ctx, ranges, recovered, reader)
        except MetadataError as exc:  # for a metric: not worth failing the take-over
            log.info("topic %r: when its previous owner stopped is unknown: %s", topic, exc)
    return Opened(new_ranges, version, writer, last, previous_end_ms)


async def _recover(ctx: LogContext, ledger_id: int, *, together: bool) -> Recovered[Batch]:
    """Ledger ``ledger_id`` recovered; its close recorded too unless ``together`` (then
    the take-over records it with its new ledger)."""
    if together:
        return await recovered_end(
            ctx.store.ledgers,
            ctx.replicas,
            ledger_id,
            decode=Batch.from_stored,
            clock=ctx.clock,
            replacements=ctx.stand_ins,
        )
    return await recover_ledger(
        ctx.store.ledgers,
        ctx.replicas,
        ledger_id,
        decode=Batch.from_stored,
        clock=ctx.clock,
        replacements=ctx.stand_ins,
    )


def _ended(ranges: LedgerRanges, ledger_id: int, end: int) -> LedgerRanges:
    """``ranges`` with ledger ``ledger_id`` ending at ``end``."""
    return LedgerRanges(
        tuple(replace(x, end_seq=end) if x.ledger_id == ledger_id else x for x in ranges.ranges)
    )


async def _previous_end_ms(
    ctx: LogContext,
    ranges: LedgerRanges,
    recovered: dict[int, LedgerMetadata],
    reader: Callable[[], LogReader],
) -> int | None:
    """When the previous owner stopped writing: its close time after a hand-off, else the
    time of its last message (a crash); for the ownerless-time metric."""
    if not ranges.ranges:
        return None
    last = ranges.ranges[-1].ledger_id
    md = recovered.get(last)
    if md is None:  # closed by its owner (a hand-off): when it closed
        got = await ctx.store.ledgers.read_ledger(last)
        if got is None:
            return None
        if got.value.state is LedgerState.CLOSED:
            reader().closed(got.value)
        return got.value.closed_ms or None
    if md.last_entry_id < 0:
        return md.created_ms or None
    try:
        # Through the reader: kept there for the read-back of the end that comes next.
        batch = await reader().entry(md, md.last_entry_id)
        return batch.publish_time_ms
    except LedgerError:
        return None
