"""Writing, recovering and reading one ledger over its ensemble of storage replicas.

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
- Recovery (``recover_ledger``) is how anyone but the writer closes a ledger: fence the
  replicas and learn their LAC and last stored entry (enough answers
  that no ack quorum of unfenced replicas can remain), read forward past the LAC up to the last
  entry any of them stores, writing back what is found, and close it with a compare-and-set
  recording the last entry. Afterwards the old writer can never reach
  an ack quorum again, so everything it ever acknowledged is at or below the recorded end.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from msgspec.structs import replace

from hedwig.clock import Clock, SystemClock
from hedwig.errors import (
    BadVersionError,
    HedwigError,
    LedgerClosedError,
    LedgerError,
    LedgerFencedError,
    NoLedgerMetadataError,
    NoSuchEntryError,
    NotEnoughReplicasError,
)
from hedwig.ledger.replicas import Replicas
from hedwig.ledger.storage import LocalStorage
from hedwig.metadata.managers import LedgerMetadataManager
from hedwig.metadata.records import LedgerMetadata, LedgerState, Version, Versioned
from hedwig.shared import shared

log = logging.getLogger(__name__)

# A replica that has not returned an entry in this long is not waited for alone: the next
# replica of the entry's write set is asked too (see ``read_entry``).
SPECULATIVE_READ_S = 0.25

# Chooses replicas to stand in for unreachable ones in a recovery: (how many, names to avoid).
Replacements = Callable[[int, frozenset[str]], Awaitable[list[str]]]
Fragments = tuple[tuple[int, tuple[str, ...]], ...]


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


@dataclass(frozen=True, slots=True, weakref_slot=True)
class _WriterShared:
    """What a hub's ledger writers hold alike (``hedwig.shared``)."""

    ledgers: LedgerMetadataManager
    replicas: Replicas
    clock: Clock
    on_idle: Callable[[LedgerWriter], None] | None


class LedgerWriter:
    """The single writer of an open ledger."""

    __slots__ = (
        "_broken",
        "_closed",
        "_md",
        "_next_entry",
        "_on_replica_failure",
        "_pending",
        "_sh",
        "_version",
        "bytes_added",
        "lac",
        "lac_told",
    )

    def __init__(
        self,
        ledgers: LedgerMetadataManager,
        replicas: Replicas,
        metadata: Versioned[LedgerMetadata],
        *,
        clock: Clock | None = None,
        on_replica_failure: ReplicaFailures | None = None,
        on_idle: Callable[[LedgerWriter], None] | None = None,
    ) -> None:
        # What a hub's writers hold alike, in one object (``hedwig.shared``). On idle: told
        # when every add has been confirmed and the replicas may not know the LAC.
        self._sh = shared(_WriterShared, ledgers, replicas, clock or SystemClock(), on_idle)
        self._on_replica_failure = on_replica_failure
        self._md = metadata.value
        self._version = metadata.version
        self._next_entry = 0
        # Adds in flight by entry id; None while there is none (most writers are idle, one per
        # owned topic, and an empty dictionary is 64 bytes).
        self._pending: dict[int, _Pending] | None = None
        # Replica writes in flight: the loop keeps only weak references to tasks.
        self.lac = -1
        # The LAC last told to the replicas without an add (``untold_lac``).
        self.lac_told = -1
        self._broken: LedgerError | None = None
        self._closed = False
        self.bytes_added = 0

    @property
    def _ledgers(self) -> LedgerMetadataManager:
        return self._sh.ledgers

    @property
    def _replicas(self) -> Replicas:
        return self._sh.replicas

    @property
    def _clock(self) -> Clock:
        return self._sh.clock

    @property
    def _on_idle(self) -> Callable[[LedgerWriter], None] | None:
        return self._sh.on_idle

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
        for address in targets:
            node = self._replicas.node(address)
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
            node = self._replicas.node(address)
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
            if self._on_idle is not None and self.lac > self.lac_told:
                self._on_idle(self)

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
            closed_ms=self._clock.wall_ms(),
        )
        try:
            self._version = await self._ledgers.write_ledger(closed, self._version)
        except BadVersionError as exc:
            # Either someone recovered (and closed) the ledger under us, or this very write
            # landed on an earlier try whose answer was lost (the store's connection dropped;
            # the caller tries again): then the ledger reads closed exactly as we closed it.
            got = await self._ledgers.read_ledger(self.ledger_id)
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


async def read_entry(
    replicas: Replicas,
    md: LedgerMetadata,
    entry_id: int,
    *,
    among: Collection[str] | None = None,
) -> bytes:
    """Read one entry from the first replica of its write set that has it.

    Replicas are tried local first and recently failed ones last; ``among`` limits the
    replicas asked (recovery asks only those that answered its fence). A replica that has
    not answered within ``SPECULATIVE_READ_S`` is not waited for alone: the next one is asked
    too and the first answer wins (BookKeeper's speculative reads). Without this a read
    waited out a whole storage timeout for a hub that was cut off but not yet known to be,
    e.g. a new owner reading the end of a log back while one replica's hub was partitioned.
    """
    targets = replicas.preferred(
        [a for a in write_set(md, entry_id) if among is None or a in among]
    )
    last: BaseException | None = None
    if targets and isinstance(first := replicas.node(targets[0]), LocalStorage):
        # This hub's own disk (tried first) answers at once, nothing to speculate past: read
        # directly, not through a task and a timed wait. Every take-over reads the last
        # entry of the ledger it recovered, from its own replica; the wait was most of that.
        try:
            return await first.read_entry(md.ledger_id, entry_id)
        except HedwigError as failed:
            if not isinstance(failed, NoSuchEntryError):
                replicas.suspect(targets[0])
            last, targets = failed, targets[1:]
    pending: dict[asyncio.Future[bytes], str] = {}
    untried = iter(targets)

    def ask_next() -> bool:
        address = next(untried, None)
        if address is None:
            return False
        read = replicas.node(address).read_entry(md.ledger_id, entry_id)
        pending[asyncio.ensure_future(read)] = address
        return True

    try:
        ask_next()
        while pending:
            done, _ = await asyncio.wait(
                pending, timeout=SPECULATIVE_READ_S, return_when=asyncio.FIRST_COMPLETED
            )
            if not done:
                ask_next()  # the slow one stays asked
                continue
            for fut in done:
                address = pending.pop(fut)
                exc = fut.exception()
                if exc is None:
                    for slow in pending.values():
                        # Outrun by a replica asked after it: tried last for a while, so the
                        # next reads do not each wait for it first.
                        replicas.suspect(slow)
                    return fut.result()
                if not isinstance(exc, NoSuchEntryError):
                    replicas.suspect(address)
                last = exc
            if not pending:
                ask_next()
    finally:
        for fut in pending:
            fut.cancel()
    if isinstance(last, NoSuchEntryError) or last is None:
        raise last or NoSuchEntryError(f"ledger {md.ledger_id} entry {entry_id}: no replica")
    raise NotEnoughReplicasError(
        f"no replica of ledger {md.ledger_id} returned entry {entry_id}: {last}"
    ) from last


class LastEntry(Protocol):
    """A ledger's last entry as the ledger's user decodes it (a topic log's batch): a closed
    ledger records the last sequence it holds."""

    @property
    def last_seq(self) -> int: ...


E = TypeVar("E", bound=LastEntry)


@dataclass(frozen=True, slots=True)
class Recovered(Generic[E]):
    """What a recovery ended on: the ledger's closed metadata; the version to record it at
    (``None``: it was closed already, by its writer or another recoverer); its last entry as
    ``decode`` made it, if recovery read one (a take-over reads it next: the previous owner's
    last time, the publishers' sequences; kept, it is not asked of a replica again)."""

    metadata: LedgerMetadata
    version: Version | None
    last: E | None = None


async def recover_ledger(
    ledgers: LedgerMetadataManager,
    replicas: Replicas,
    ledger_id: int,
    *,
    decode: Callable[[bytes], E] | None = None,
    clock: Clock | None = None,
    replacements: Replacements | None = None,
) -> Recovered[E]:
    """Fence, recover and close ``ledger_id``, and record the close.

    ``decode`` turns the last entry into what its last sequence is read from;
    ``replacements`` chooses replicas to stand in for ones that did not answer, when an entry
    past the LAC must be written back and too few of its replicas are reachable.
    """
    while True:
        got = await recovered_end(
            ledgers, replicas, ledger_id, decode=decode, clock=clock, replacements=replacements
        )
        if got.version is None:
            return got
        try:
            await ledgers.write_ledger(got.metadata, got.version)
        except BadVersionError:
            continue  # another recoverer got there first; read what it recorded
        return got


async def recovered_end(
    ledgers: LedgerMetadataManager,
    replicas: Replicas,
    ledger_id: int,
    *,
    decode: Callable[[bytes], E] | None = None,
    clock: Clock | None = None,
    replacements: Replacements | None = None,
) -> Recovered[E]:
    """``recover_ledger`` up to its last write: the ledger fenced and its end written back;
    the close, a compare-and-set on the version read here, is left for the caller to record.

    A take-over records the close in the same store request as the topic's next ledger and
    its ledger list (``TopicPersistenceManager.continue_topic_log``): three writes in one.

    The ledger is not marked IN_RECOVERY first (BookKeeper's first step; a ledger marked so
    by earlier versions is recovered alike). The mark makes a writer's own metadata change
    fail while a recovery runs; BookKeeper's writer changes its ensemble when a replica fails,
    Hedwig's never does (it rolls over to a new ledger), and its one change, the close,
    compare-and-sets the same version the recovery's close does: whichever is second fails
    and reads what the first recorded (a writer closes only on what it acknowledged, a
    recovery past all of it). The quorum rule, not the mark, keeps the fenced writer from
    acknowledging anything more. The mark was a store write and a round trip of every
    take-over: a fifth of ZooKeeper's writes in a failover.
    """
    clock = clock or SystemClock()
    got = await ledgers.read_ledger(ledger_id)
    if got is None:
        raise NoLedgerMetadataError(str(ledger_id))
    md, version = got.value, got.version
    if md.state is LedgerState.CLOSED:
        return Recovered(md, None)
    last_entry, last_payload, fragments = await _fence_and_read_forward(replicas, md, replacements)
    last = None if last_payload is None or decode is None else decode(last_payload)
    closed = replace(
        md,
        state=LedgerState.CLOSED,
        last_entry_id=last_entry,
        last_seq=md.last_seq if last is None else last.last_seq,
        closed_ms=clock.wall_ms(),
        fragments=fragments,
    )
    return Recovered(closed, version, last)


# Once enough replicas have answered a fence, the others get this long to answer too (more
# answers mean more places to read from) before recovery goes on without them.
FENCE_STRAGGLER_S = 0.1
# Entry sends and straggling fences running in the background, of every ledger (the event loop
# keeps only weak references to tasks; one set for all rather than an empty one per writer).
_background: set[asyncio.Task[object]] = set()


async def _enough_fenced(
    ledger_id: int,
    ensemble: Collection[str],
    needed: int,
    fence: Callable[[str], Awaitable[tuple[int, int] | None]],
) -> dict[str, tuple[int, int]]:
    """Fence every replica of ledger ``ledger_id``; return the answers once ``needed`` of
    them are in (plus whatever arrives within ``FENCE_STRAGGLER_S``), or once every replica
    has answered or failed.

    A replica that is down or cut off may take a whole storage timeout to fail; waiting for it
    would make every take-over of its topics that slow, when the quorum rules do not need it.
    Its fence request goes on in the background, so it is fenced if it comes back.

    Each answer is counted as its request ends, into one future the caller waits on; only
    when replicas are still out once enough have answered is there a timed wait. A take-over
    fences a ledger per topic: ``asyncio.wait`` made sets of tasks, wrapped them and
    added and removed a callback on each at every round, for every ensemble.
    """
    loop = asyncio.get_running_loop()
    answers: dict[str, tuple[int, int]] = {}
    enough: asyncio.Future[None] = loop.create_future()  # ``needed`` in, or every one
    every: asyncio.Future[None] = loop.create_future()
    out = len(ensemble)

    def ended(address: str, task: asyncio.Future[tuple[int, int] | None]) -> None:
        nonlocal out
        _background.discard(task)
        out -= 1
        if task.cancelled():
            pass
        elif (exc := task.exception()) is not None:
            log.info("fencing ledger %d on %s failed: %s", ledger_id, address, exc)
        elif r := task.result():
            answers[address] = r
        if out == 0:
            _settle(every)
            _settle(enough)
        elif len(answers) >= needed:
            _settle(enough)

    for address in ensemble:
        task = asyncio.ensure_future(fence(address))
        _background.add(task)
        task.add_done_callback(functools.partial(ended, address))
    await enough
    if out:
        late = loop.call_later(FENCE_STRAGGLER_S, _settle, every)
        try:
            await every
        finally:
            late.cancel()
    return dict(answers)  # a copy: a straggler's answer may still come in


def _settle(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


async def _fence_and_read_forward(
    replicas: Replicas, md: LedgerMetadata, replacements: Replacements | None
) -> tuple[int, bytes | None, Fragments]:
    """Fence, read forward past the LAC and write back; returns the last entry, its payload,
    and the ledger's fragments (with one more if write-backs needed stand-in replicas)."""
    ensemble = md.fragments[-1][1]
    needed = len(ensemble) - md.ack_quorum + 1

    def fence(address: str) -> Awaitable[tuple[int, int] | None]:
        # A future, no task: this hub's own disk, or a replica that gets the turn's fences
        # in one request. ``_enough_fenced`` logs a failure.
        return replicas.node(address).fence_soon(md.ledger_id)

    # Replicas that failed lately are fenced only if the others cannot make ``needed``: no
    # quorum of unfenced replicas is left either way (the quorum rule, not the number asked,
    # is what stops the old writer), and one that is down made every take-over of its topics
    # a request, a failure and its task (after a hub died: each of its topics' recoveries).
    doubtful = [a for a in ensemble if replicas.suspected(a)]
    if doubtful and len(ensemble) - len(doubtful) >= needed:
        trusted = [a for a in ensemble if a not in doubtful]
        replies = await _enough_fenced(md.ledger_id, trusted, needed, fence)
        if len(replies) < needed:
            replies.update(
                await _enough_fenced(md.ledger_id, doubtful, needed - len(replies), fence)
            )
    else:
        replies = await _enough_fenced(md.ledger_id, ensemble, needed, fence)
    responders = set(replies)
    if len(replies) < needed:
        raise NotEnoughReplicasError(
            f"recovering ledger {md.ledger_id}: {len(replies)} of {len(ensemble)} replicas "
            f"answered, {needed} needed"
        )
    lac = max(r[0] for r in replies.values())
    # No entry past what the answering replicas store can have been acknowledged: it would be
    # on an ack quorum, which always includes one of them. Stopping there spares the reads
    # that would each learn that no replica has the next entry.
    stored = max(r[1] for r in replies.values())
    # Everything up to the LAC reached an ack quorum; past it, take what any replica has and
    # write it back so it becomes fully replicated before the ledger is closed on it. Reads
    # follow the ledger as written (``md``); write-backs follow ``written``, which gains a
    # fragment with stand-ins when too few of an entry's replicas answered (as BookKeeper's
    # recovery changes the ensemble): an entry seen on one replica may have been acknowledged,
    # so it must not be dropped, and cannot be closed on until it has an ack quorum.
    written = md
    usable = set(responders)
    entry = lac + 1
    last_payload: bytes | None = None
    while entry <= stored:
        try:
            payload = await read_entry(replicas, md, entry, among=responders)
        except (NoSuchEntryError, NotEnoughReplicasError):
            break
        targets = [a for a in write_set(written, entry) if a in usable]
        if len(targets) < md.ack_quorum and replacements is not None:
            written = await _stand_ins(written, entry, usable, replacements)
            targets = [a for a in write_set(written, entry) if a in usable]
        results = await asyncio.gather(
            *(
                replicas.node(a).add_entry(md.ledger_id, entry, lac, payload, recovery=True)
                for a in targets
            ),
            return_exceptions=True,
        )
        if sum(1 for r in results if not isinstance(r, BaseException)) < md.ack_quorum:
            raise NotEnoughReplicasError(f"writing back ledger {md.ledger_id} entry {entry}")
        last_payload = payload
        entry += 1
    last_entry = entry - 1
    if last_payload is None and last_entry >= 0:
        last_payload = await read_entry(replicas, md, last_entry, among=responders)
    return last_entry, last_payload, written.fragments


async def _stand_ins(
    md: LedgerMetadata, entry: int, usable: set[str], replacements: Replacements
) -> LedgerMetadata:
    """``md`` with a fragment from ``entry`` on in which the replicas that did not answer are
    replaced by others (added to ``usable``); ``md`` unchanged if there are not enough."""
    current = md.ensemble_for(entry)
    missing = [a for a in current if a not in usable]
    try:
        chosen = await replacements(len(missing), frozenset(current) | usable)
    except Exception as exc:
        log.info("ledger %d: no stand-in replicas for recovery: %s", md.ledger_id, exc)
        return md
    chosen = [a for a in chosen if a not in current][: len(missing)]
    if len(chosen) < len(missing):
        return md
    stand_in = dict(zip(missing, chosen, strict=True))
    ensemble = tuple(stand_in.get(a, a) for a in current)
    usable.update(chosen)
    kept = tuple(f for f in md.fragments if f[0] < entry)
    log.info(
        "ledger %d: recovery writes entry %d on, on %s (standing in for %s)",
        md.ledger_id,
        entry,
        ",".join(ensemble),
        ",".join(missing),
    )
    return replace(md, fragments=(*kept, (entry, ensemble)))
