"""Writing one ledger over its ensemble of storage replicas (BookKeeper's ledger handle).

Rules (BookKeeper's, see ``docs/architecture.md``):

- A ledger has one writer. Entry ``i`` goes to the write set: ``write_quorum`` replicas taken
  round-robin from the ensemble starting at ``i mod ensemble_size``.
- ``add`` returns once the entry has ``ack_quorum`` acknowledgements *and* every earlier entry
  has been confirmed: confirmations are in order. The last confirmed entry (LAC) rides on
  every later write so replicas learn it; a writer with nothing left in flight tells its
  replicas its LAC on its own (``hedwig.ledger.lac_notices``), or a topic that went idle
  would leave its last entry for every recovery to write back.
- If too many replicas of a write set fail (more than ``write_quorum - ack_quorum``), or one
  answers that the ledger is fenced, the writer is broken: every pending and later ``add``
  fails and the owner must stop using the ledger.
- The writer closes its ledger with a compare-and-set on the version it was made with; anyone
  else closes it by recovering it (``hedwig.ledger.recovery``), which fences the writer first.

A hub has a writer per owned topic, so a writer keeps little: what every writer of the hub
shares (the ledgers' store, the replicas, the clock, the idle callback) is one
``WriterContext``, made once by whoever makes the writers and handed to each.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from msgspec.structs import replace

from hedwig.clock import Clock, SystemClock
from hedwig.errors import (
    BadVersionError,
    LedgerClosedError,
    LedgerError,
    LedgerFencedError,
    NotEnoughReplicasError,
)
from hedwig.ledger.replicas import Replicas
from hedwig.ledger.storage import LocalStorage
from hedwig.metadata.managers import LedgerMetadataManager
from hedwig.metadata.records import LedgerMetadata, LedgerState, Versioned

log = logging.getLogger(__name__)

# A ledger's fragments: (first entry, ensemble), as its metadata records them.
Fragments = tuple[tuple[int, tuple[str, ...]], ...]
# Entry sends running in the background, of every writer (the event loop keeps only weak
# references to tasks; one set for all rather than an empty one per writer).
_background: set[asyncio.Task[None]] = set()


def write_set(md: LedgerMetadata, entry_id: int) -> list[str]:
    ensemble = md.ensemble_for(entry_id)
    e = len(ensemble)
    return [ensemble[(entry_id + k) % e] for k in range(md.write_quorum)]


@dataclass
class _Pending:
    entry_id: int
    future: asyncio.Future[int]
    acks: int = 0
    failures: int = 0


class ReplicaFailures(Protocol):
    """Told when a replica misses a write. An object, not a callable: a topic's log passes
    itself, where a bound method made for each writer was 64 bytes per owned topic."""

    def replica_failed(self, address: str) -> None: ...


@dataclass(frozen=True, slots=True)
class WriterContext:
    """What every ledger writer of a hub holds alike: one object, made by whoever makes the
    writers (a hub's topic logs share their ``LogContext``'s) and handed to each, where each
    writer held its own references (eight bytes each, a writer per owned topic)."""

    ledgers: LedgerMetadataManager
    replicas: Replicas
    clock: Clock = field(default_factory=SystemClock)
    # Told when a writer has every add confirmed and its replicas may not know its LAC
    # (``hedwig.ledger.lac_notices``); None: nobody tells them.
    on_idle: Callable[[LedgerWriter], None] | None = None


class LedgerWriter:
    """The single writer of an open ledger."""

    __slots__ = (
        "_broken",
        "_closed",
        "_ctx",
        "_md",
        "_next_entry",
        "_on_replica_failure",
        "_pending",
        "_version",
        "bytes_added",
        "lac",
        "lac_told",
    )

    def __init__(
        self,
        context: WriterContext,
        metadata: Versioned[LedgerMetadata],
        *,
        on_replica_failure: ReplicaFailures | None = None,
    ) -> None:
        self._ctx = context
        self._on_replica_failure = on_replica_failure
        self._md = metadata.value
        self._version = metadata.version
        self._next_entry = 0
        # Adds in flight by entry id; None while there is none (most writers are idle, one per
        # owned topic, and an empty dictionary is 64 bytes).
        self._pending: dict[int, _Pending] | None = None
        self.lac = -1
        # The LAC last told to the replicas without an add (``untold_lac``).
        self.lac_told = -1
        self._broken: LedgerError | None = None
        self._closed = False
        self.bytes_added = 0

    @property
    def ledger_id(self) -> int:
        return self._md.ledger_id

    @property
    def metadata(self) -> LedgerMetadata:
        return self._md

    @property
    def broken(self) -> LedgerError | None:
        return self._broken

    async def add(self, payload: bytes) -> int:
        """Append ``payload``; returns its entry id once it is confirmed."""
        if self._broken is not None:
            raise self._broken
        if self._closed:
            raise LedgerClosedError(f"ledger {self.ledger_id} is closed")
        entry_id = self._next_entry
        self._next_entry += 1
        self.bytes_added += len(payload)
        loop = asyncio.get_running_loop()
        pending = _Pending(entry_id, loop.create_future())
        if self._pending is None:
            self._pending = {}
        self._pending[entry_id] = pending
        targets = write_set(self._md, entry_id)
        wq = len(targets)
        replicas = self._ctx.replicas
        for address in targets:
            node = replicas.node(address)
            if isinstance(node, LocalStorage):
                # This hub's own disk: its write as a future, answered by a callback, not a
                # task (one per entry; the replicas over the wire keep theirs).
                written = node.add_entry_soon(self.ledger_id, entry_id, self.lac, payload)
                if written is not None:
                    written.add_done_callback(
                        functools.partial(self._written, address, pending, wq)
                    )
                    continue
            task = loop.create_task(self._send(address, pending, payload, wq))
            _background.add(task)
            task.add_done_callback(_background.discard)
        return await pending.future

    async def _send(self, address: str, pending: _Pending, payload: bytes, wq: int) -> None:
        try:
            node = self._ctx.replicas.node(address)
            await node.add_entry(self.ledger_id, pending.entry_id, self.lac, payload)
        except Exception as exc:
            self._answered(address, pending, wq, exc)
            return
        self._answered(address, pending, wq, None)

    def _written(
        self, address: str, pending: _Pending, wq: int, written: asyncio.Future[None]
    ) -> None:
        if written.cancelled():
            self._answered(address, pending, wq, asyncio.CancelledError())
        else:
            self._answered(address, pending, wq, written.exception())

    def _answered(
        self, address: str, pending: _Pending, wq: int, exc: BaseException | None
    ) -> None:
        """A replica's answer to an entry: an acknowledgement, or a failure against the
        quorum (a fence breaks the writer)."""
        if isinstance(exc, LedgerFencedError):
            self._break(exc)
            return
        if exc is not None:
            # Any replica failure counts against the quorum; the log rolls over to a healthy
            # ensemble so later entries are fully replicated again.
            pending.failures += 1
            if self._on_replica_failure is not None:
                self._on_replica_failure.replica_failed(address)
            if pending.failures > wq - self._md.ack_quorum:
                self._break(
                    NotEnoughReplicasError(
                        f"ledger {self.ledger_id} entry {pending.entry_id}: {pending.failures} of "
                        f"{wq} replicas failed (last: {exc})"
                    )
                )
            return
        pending.acks += 1
        if pending.acks == self._md.ack_quorum:
            self._advance()

    def _advance(self) -> None:
        pending = self._pending
        if pending is None:
            return
        while True:
            nxt = pending.get(self.lac + 1)
            if nxt is None or nxt.acks < self._md.ack_quorum:
                break
            del pending[nxt.entry_id]
            self.lac = nxt.entry_id
            if not nxt.future.done():
                nxt.future.set_result(nxt.entry_id)
        if not pending:
            # Dropped: a table emptied keeps its slots (160 bytes).
            self._pending = None
            on_idle = self._ctx.on_idle
            if on_idle is not None and self.lac > self.lac_told:
                on_idle(self)

    def untold_lac(self) -> int | None:
        """The LAC to tell the replicas: when nothing is in flight (else the next adds carry
        a later one), the ledger is open and writable, and they have not been told it."""
        if self._pending or self._closed or self._broken is not None:
            return None
        return self.lac if self.lac > self.lac_told else None

    def _break(self, exc: LedgerError) -> None:
        if self._broken is None:
            self._broken = exc
            log.warning("ledger %d writer broken: %s", self.ledger_id, exc)
        for p in (self._pending or {}).values():
            if not p.future.done():
                p.future.set_exception(self._broken)
        self._pending = None

    async def close(self, *, last_seq: int = 0) -> LedgerMetadata:
        """Wait for pending adds, then record the end of the ledger (CAS on its metadata)."""
        while self._pending and self._broken is None:
            await asyncio.wait([p.future for p in self._pending.values()])
        if self._broken is not None:
            raise self._broken
        self._closed = True
        closed = replace(
            self._md,
            state=LedgerState.CLOSED,
            last_entry_id=self.lac,
            last_seq=last_seq,
            length=self.bytes_added,
            closed_ms=self._ctx.clock.wall_ms(),
        )
        try:
            self._version = await self._ctx.ledgers.write_ledger(closed, self._version)
        except BadVersionError as exc:
            # Either someone recovered (and closed) the ledger under us, or this very write
            # landed on an earlier try whose answer was lost (the store's connection dropped;
            # the caller tries again): then the ledger reads closed exactly as we closed it.
            got = await self._ctx.ledgers.read_ledger(self.ledger_id)
            if got is None or not _same_end(got.value, closed):
                raise LedgerFencedError(
                    f"ledger {self.ledger_id} was recovered by another hub"
                ) from exc
            log.info("ledger %d: closed by an earlier try whose answer was lost", self.ledger_id)
            self._version = got.version
            closed = got.value
        self._md = closed
        return closed


def _same_end(stored: LedgerMetadata, closed: LedgerMetadata) -> bool:
    """Whether ``stored`` is closed where ``closed`` ends (whoever wrote it, nothing this
    writer acknowledged is past it)."""
    return (
        stored.state is LedgerState.CLOSED
        and stored.last_entry_id == closed.last_entry_id
        and stored.last_seq == closed.last_seq
    )
