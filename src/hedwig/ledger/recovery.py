"""Recovering a ledger: how anyone but its writer closes it (BookKeeper's recovery).

Rules:

- Fence the replicas of the ledger's last ensemble and learn their LAC and last stored entry,
  until enough have answered that no ack quorum of unfenced replicas can remain
  (``E - Qa + 1``); the others get ``FENCE_STRAGGLER_S`` more, then are left fencing in the
  background. A replica that failed lately is asked only if the others cannot make up the
  answers needed.
- Read forward past the highest LAC up to the last entry any answering replica stores (no
  entry past it can have been acknowledged: it would be on an ack quorum, which includes one
  of them), writing back what is found on its write set, with stand-in replicas where too few
  of them answered (an entry seen once may have been acknowledged, so it must not be
  dropped).
- Close the ledger on the last entry found, with a compare-and-set recording it. Afterwards
  the old writer can never reach an ack quorum again, so everything it ever acknowledged is at
  or below the recorded end.
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
    NoLedgerMetadataError,
    NoSuchEntryError,
    NotEnoughReplicasError,
)
from hedwig.ledger.handle import Fragments, write_set
from hedwig.ledger.reads import read_entry
from hedwig.ledger.replicas import Replicas
from hedwig.metadata.managers import LedgerMetadataManager
from hedwig.metadata.records import LedgerMetadata, LedgerState, Version

log = logging.getLogger(__name__)

# Chooses replicas to stand in for unreachable ones in a recovery: (how many, names to avoid).
Replacements = Callable[[int, frozenset[str]], Awaitable[list[str]]]


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
# Fences running in the background, of every ledger (the event loop keeps only weak
# references to tasks).
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
