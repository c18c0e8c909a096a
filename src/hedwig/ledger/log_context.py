"""What a topic log is made with: the hub's ``LogContext``, shared by every log it owns, and
the topic's ``LogSettings``.

A hub owns a topic log per owned topic, up to a million of them, and each held its own
reference to the hub's store, replicas, identity, clock and callbacks: eight bytes a
reference, the same values in every log. Whoever makes the logs (the hub's ownership) makes
one ``LogContext`` instead, for as long as those values hold (a new session is a new owner
epoch: a new context), and hands it to each; a log keeps one reference to it. The writers of
the logs' ledgers share its ``WriterContext`` alike.

The context also holds what only needs those values: making a log's next ledger (its
metadata and its writer), choosing an ensemble for it away from failed replicas, stand-ins
for a recovery's write-backs, and the fragments of new ledgers, one object per ensemble
(``first_fragments``): a region of three hubs has a handful of ensembles and a hub writes a
ledger per owned topic (a tuple each, three with the copies of its ensemble, was 250 bytes a
topic).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from hedwig.clock import Clock, SystemClock
from hedwig.ledger.handle import Fragments, LedgerWriter, ReplicaFailures, WriterContext
from hedwig.ledger.replicas import Replicas
from hedwig.metadata.managers import MetadataStore
from hedwig.metadata.records import LedgerMetadata, ReplicationConfig, Versioned

log = logging.getLogger(__name__)

# Chooses storage replicas for a new ledger: (wanted size, smallest acceptable size,
# replicas to avoid) -> addresses.
EnsembleChooser = Callable[[int, int, frozenset[str]], Awaitable[list[str]]]

# Ensembles whose first fragments a context keeps; past it, the table starts again.
_MAX_FIRST_FRAGMENTS = 4096


@dataclass(frozen=True, slots=True)
class LogSettings:
    """Knobs of a topic log; the hub fills them from its configuration."""

    replication: ReplicationConfig = field(default_factory=ReplicationConfig)
    ledger_max_bytes: int = 64 * 1024 * 1024  # roll over past this: bounds recovery and GC units
    cache_bytes: int = 16 * 1024 * 1024  # newest batches served from memory


@dataclass(frozen=True, slots=True)
class LogContext:
    """What every topic log of a hub shares (see the module's account)."""

    store: MetadataStore
    replicas: Replicas
    # The hub the logs' new ledgers name as their owner, and its session's epoch.
    owner: str
    epoch: int
    clock: Clock = field(default_factory=SystemClock)
    # Chooses the replicas of a log's next ledger; None: the log's first ensemble, less the
    # replicas that failed lately.
    choose_ensemble: EnsembleChooser | None = None
    # Told the topic whose ledger rolled over for its size (a hub giving topics up then).
    on_rolled_over: Callable[[str], None] | None = None
    # Told the ledgers a log closed or recovered that may be under-replicated (the auditor
    # checks them; it no longer reads every ledger every round).
    on_suspect: Callable[[int, Fragments], None] | None = None
    # Told when a ledger's writer has nothing in flight (``hedwig.ledger.lac_notices``).
    on_idle: Callable[[LedgerWriter], None] | None = None
    writers: WriterContext = field(init=False)
    _fragments: dict[tuple[str, ...], Fragments] = field(
        init=False, default_factory=dict, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        writers = WriterContext(self.store.ledgers, self.replicas, self.clock, self.on_idle)
        object.__setattr__(self, "writers", writers)

    def first_fragments(self, ensemble: Sequence[str]) -> Fragments:
        """The fragments of a new ledger on ``ensemble``, shared with every other such ledger
        of this context's logs."""
        key = tuple(ensemble)
        table = self._fragments
        got = table.get(key)
        if got is None:
            if len(table) >= _MAX_FIRST_FRAGMENTS:
                table.clear()
            got = table[key] = ((0, key),)
        return got

    def new_ledger_metadata(
        self, topic: str, settings: LogSettings, ensemble: Sequence[str]
    ) -> LedgerMetadata:
        """A new ledger of ``topic`` on ``ensemble`` (its id is the store's to give): a log's
        next one, or a new topic's first, made with its claim (``hedwig.hub.ownership``)."""
        rep = settings.replication
        ensemble = ensemble[: rep.ensemble]
        return LedgerMetadata(
            ledger_id=0,
            topic=topic,
            ensemble_size=len(ensemble),
            write_quorum=min(rep.write_quorum, len(ensemble)),
            ack_quorum=rep.ack_quorum,
            fragments=self.first_fragments(ensemble),
            owner=self.owner,
            owner_epoch=self.epoch,
            created_ms=self.clock.wall_ms(),
        )

    def writer(self, created: Versioned[LedgerMetadata], failures: ReplicaFailures) -> LedgerWriter:
        """The writer of ledger ``created``, telling ``failures`` of its replicas' failures."""
        return LedgerWriter(self.writers, created, on_replica_failure=failures)

    async def new_writer(
        self,
        topic: str,
        settings: LogSettings,
        ensemble: Sequence[str],
        failures: ReplicaFailures,
    ) -> LedgerWriter:
        """A new ledger of ``topic`` on ``ensemble``, made in the store, and its writer."""
        md = self.new_ledger_metadata(topic, settings, ensemble)
        return self.writer(await self.store.ledgers.create_ledger(md), failures)

    async def discard(self, writer: LedgerWriter) -> None:
        """Delete the ledger of ``writer``, made and never named by its topic's record."""
        try:
            got = await self.store.ledgers.read_ledger(writer.ledger_id)
            if got is not None:
                await self.store.ledgers.delete_ledger(writer.ledger_id, got.version)
        except Exception:
            log.debug("could not discard unused ledger %d", writer.ledger_id, exc_info=True)

    async def next_ensemble(
        self,
        topic: str,
        settings: LogSettings,
        current: Sequence[str],
        avoid: frozenset[str],
    ) -> list[str] | None:
        """An ensemble for a log's next ledger, avoiding failed replicas; None if none is
        possible."""
        rep = settings.replication
        if self.choose_ensemble is None:
            healthy = [a for a in current if a not in avoid]
            return healthy if len(healthy) >= rep.ack_quorum else None
        try:
            return await self.choose_ensemble(rep.ensemble, rep.ack_quorum, avoid)
        except Exception as exc:
            log.warning("topic %r: no healthy ensemble for a new ledger: %s", topic, exc)
            return None

    async def stand_ins(self, count: int, avoid: frozenset[str]) -> list[str]:
        """Replicas for a recovery to write back on, in place of unreachable ones."""
        if self.choose_ensemble is None:
            return []
        return await self.choose_ensemble(count, count, avoid)
