"""Rolling a topic's log over to a new ledger: the half of ``TopicLog`` that watches its
open ledger's replicas and moves the log on (``RollingLog``, the base of ``TopicLog``).

Rules:

- The current ledger is rolled over when it grows past ``ledger_max_bytes`` (the hub may give
  the topic up then: ``LogContext.on_rolled_over``), and when a replica fails a write: the
  failed replica is left out of this topic's new ledgers for ``REPLICA_FAILURE_HOLD_S``, so
  later entries are fully replicated again; the auditor re-replicates what the old ledger
  missed (a ledger closed after a replica failed, or with fewer replicas than wanted, is
  suspected: ``LogContext.on_suspect``).
- One roll-over at a time. It is decided in the turn of the event loop that asks for it
  (``_rolling`` set there), so two failures noticed in one turn start one roll-over, and
  appends wait for it from the moment it is decided.
- A roll-over closes the current ledger once its appends in flight are confirmed, records the
  ledger list's closed tail, makes the next ledger and records the list naming it. Caught by a
  metadata outage half-way it cannot be undone (the old ledger may be closed already), so
  each write waits for the store and goes on (``_stored``); it gives up only when the log
  breaks. With no healthy ensemble to go to, the log keeps writing to the current ledger,
  degraded but available, and ``restore_replication`` (asked periodically) tries again.

``TopicLog`` builds on it: sequence ids, batches, reads and collection over these ledgers.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from hedwig.errors import HedwigError, LedgerError, MetadataUnavailableError
from hedwig.flag import Flag
from hedwig.ledger.handle import LedgerWriter
from hedwig.ledger.log_context import LogContext, LogSettings
from hedwig.ledger.log_reader import LogReader, Unread
from hedwig.metadata.records import NEW_VERSION, LedgerRanges, Version

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


class RollingLog:
    """A topic log's ledgers: their list, the open one's writer and replicas, and its
    roll-overs."""

    # A log per owned topic: without an attribute dictionary each costs about 100 bytes less.
    __slots__ = (
        "_changed",
        "_ctx",
        "_ensemble",
        "_failed_replicas",
        "_inflight",
        "_ledger_bytes",
        "_log_reader",
        "_ranges",
        "_ranges_version",
        "_rolling",
        "_tail_suspect",
        "_writer",
        "broken",
        "last_seq",
        "settings",
        "topic",
    )

    def __init__(
        self, topic: str, context: LogContext, ensemble: tuple[str, ...], settings: LogSettings
    ) -> None:
        self.topic = topic
        self._ctx = context
        self._ensemble = ensemble  # the last ledger's, as ``LogContext.first_fragments`` has it
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
        # could not have again for a read or two (``TopicLog.shed_cache``): what a reader
        # made then must index (``Unread``), of the ledger being written then (a new writer:
        # nothing).
        self._log_reader: LogReader | Unread = Unread.NOTHING
        self.last_seq = 0  # last confirmed
        # Made by the first waiter and dropped when set: most owned topics are idle, nobody
        # waits on them, and an event with its waiter queue is about 760 bytes.
        self._changed: Flag | None = None
        self._rolling: asyncio.Future[None] | None = None
        self._ledger_bytes = 0
        self._inflight = 0
        self.broken: LedgerError | None = None

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

    def _write_to(self, writer: LedgerWriter) -> None:
        """Make ``writer`` the log's: a reader made from now on has nothing of its ledger to
        index but what is confirmed from now on."""
        self._writer = writer
        if not isinstance(self._log_reader, LogReader):
            self._log_reader = Unread.NOTHING

    def replica_failed(self, address: str) -> None:
        """A replica missed a write (the entry still reached its ack quorum, or the writer
        broke). Move on to a ledger whose ensemble avoids it, so later entries are fully
        replicated again; the auditor re-replicates what the old ledger missed."""
        self._tail_suspect = True
        now = self._ctx.clock.monotonic()
        if self._failed_replicas is None:
            self._failed_replicas = {}
        if self._failed_replicas.get(address, 0.0) > now or self.broken is not None:
            return
        self._failed_replicas[address] = now + REPLICA_FAILURE_HOLD_S
        log.warning("topic %r: storage replica %s failed; rolling over", self.topic, address)
        if self._writer is not None:
            self._start_roll_over()

    def _avoided(self) -> frozenset[str]:
        if not self._failed_replicas:
            return _NOBODY  # asked of every owned topic each audit round: no clock read
        now = self._ctx.clock.monotonic()
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
                    self._ctx.replicas.node(address).fenced(ledger_id), timeout_s
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
        if self._ctx.choose_ensemble is None:
            return False
        try:
            full = await self._ctx.choose_ensemble(rep.ensemble, rep.ensemble, self._avoided())
        except Exception:
            return False
        if len(full) < rep.ensemble or self._rolling is not None:
            return False
        self._start_roll_over()
        rolling = self._rolling
        assert rolling is not None
        await asyncio.shield(rolling)
        return True

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
            ensemble = await self._ctx.next_ensemble(
                self.topic, self.settings, self._ensemble, self._avoided()
            )
            if ensemble is None:
                # Keep writing to the current ledger, degraded but available; the periodic
                # check (``restore_replication``) or the next size roll-over tries again.
                return
            await self._close_current()
            if self.broken is None:
                writer = await self._stored(
                    lambda: self._ctx.new_writer(self.topic, self.settings, ensemble, self)
                )
                self._ensemble = self._ctx.first_fragments(ensemble)[0][1]
                ranges = self._ranges.with_tail(writer.ledger_id, self.last_seq + 1)
                version = await self._stored(
                    lambda: self._ctx.store.persistence.write_topic_persistence_info(
                        self.topic, ranges, self._ranges_version
                    )
                )
                self._ranges, self._ranges_version = ranges, version
                self._write_to(writer)
                self._ledger_bytes = 0
                if sized and self._ctx.on_rolled_over is not None:
                    self._ctx.on_rolled_over(self.topic)
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
        if suspect and self._ctx.on_suspect is not None:
            self._ctx.on_suspect(md.ledger_id, md.fragments)
        if isinstance(self._log_reader, LogReader):
            self._log_reader.closed(md)
        ranges = self._ranges.close_tail(self.last_seq)
        version = await self._stored(
            lambda: self._ctx.store.persistence.write_topic_persistence_info(
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
                await self._ctx.clock.sleep(delay)
                delay = min(1.0, delay * 2)
