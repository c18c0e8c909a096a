"""Finding and repairing under-replicated ledgers: when, and which (BookKeeper's auditor).

What is wrong with a closed ledger is ``hedwig.ledger.health``'s to find, its repair
``hedwig.ledger.repair``'s. A hub that is not alive is given ``delay_s`` (BookKeeper's
lost-bookie recovery delay) before its replicas are re-created elsewhere: a hub restarting, as
in every rolling restart, comes back with its disk, and copying its ledgers meanwhile would be
work for nothing. Until then its ledgers are reported as waiting.

The auditor also collects orphans: replicas on this hub's disk whose ledger metadata is gone
(the topic was deleted, or a collection's delete did not reach this hub). And, at most every
``full_interval_s``, ledgers left over in the metadata: made by a claim or a roll-over that
died before the topic's log named them, or let go by a collection that died before deleting
them. Nothing else would ever delete those, and a region where hubs die mid-claim gathers
them. One goes once the store proves it can never be named (``left_over``: the topic's record
does not name it and was written after it was made, so its maker's compare-and-set can only
fail); a ledger younger than ``full_interval_s`` is not asked about.

Open ledgers belong to their writer (or to the recovery of the next owner) and are left
alone. The work is split between hubs without coordination: each alive hub audits the ledgers
whose id modulo the number of alive hubs is its position among them; overlaps after
membership changes are harmless because every metadata change is a compare-and-set.

Reading every ledger of its share is a full audit, and it is not made every round: at 100,000
topics that was thousands of metadata reads and replica questions a second, for ledgers that
had not changed. As BookKeeper's auditor, this one looks at everything when a hub comes (back,
restarted with a new session, or new: whatever a replica can have lost, or a small ensemble
can now grow to), ``DEPARTURE_AUDIT_AFTER_S`` after a hub goes (not at once: nothing of its
can be re-created before the delay, and a full audit then read and asked the replicas of
every ledger of the share while the survivors took the gone hub's topics over; and later
still while this hub goes on taking topics over, up to the delay's end), while a
previous audit left something to do (a repair that failed), when the delay of a gone hub
whose replicas it found ends (not every round until then: after a hub of 100,000 topics
died, each survivor read and inspected its share of every ledger every round, through the
whole failover, for ledgers nothing could be done about yet), and every ``full_interval_s``
in any case. In between it checks the ledgers its hub suspects: ones it closed after a
replica failed a write or with fewer replicas than wanted, and ones it recovered
(``suspect``), except those naming a hub gone within the delay, which the audits look at.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from hedwig.clock import Clock, SystemClock
from hedwig.errors import HedwigError
from hedwig.ledger.handle import Fragments
from hedwig.ledger.health import LedgerHealth, inspect
from hedwig.ledger.repair import Repairs
from hedwig.ledger.replicas import Replicas
from hedwig.ledger.retention import delete_ledger_everywhere
from hedwig.ledger.storage import LocalStorage
from hedwig.metadata.managers import MetadataStore
from hedwig.metadata.records import LedgerMetadata, LedgerState, Version, Versioned

log = logging.getLogger(__name__)

# Wanted ensemble size for a topic (from its configuration and the region's defaults).
WantedSize = Callable[[str], Awaitable[int]]
# Suspected ledgers kept at most until the next audit (more: the next audit is a full one).
MAX_SUSPECTS = 10_000
# A hub's going calls for a full audit this long after it is seen (or at the end of the
# re-replication delay, if sooner): the survivors take the gone hub's topics over first.
DEPARTURE_AUDIT_AFTER_S = 30.0
# And while this hub is still taking topics over (it claimed one within this long), that
# audit waits for a later round, until the delay ends (``Auditor.last_claim_at``).
TAKE_OVERS_QUIET_S = 10.0
# Ledger metadata read at once by a full audit: a hundred thousand read one after the other
# were a call each, half of an idle hub's CPU for a minute; at once, a store pipelines them
# (etcd: a few requests, ``hedwig.metadata.etcd.batches``).
READ_AHEAD = 64


@dataclass
class AuditReport:
    checked: int = 0
    under_replicated: list[LedgerHealth] = field(default_factory=list)
    repaired: int = 0
    failed: int = 0
    waiting: int = 0  # ledgers with a replica on a hub still within the delay
    # Hubs gone within the delay (storage ids), known from the region's membership at
    # once: the ledgers naming them are counted by the full audit their going calls for
    # (``DEPARTURE_AUDIT_AFTER_S`` later).
    hubs_waiting: int = 0
    orphans_deleted: list[int] = field(default_factory=list)
    left_over_deleted: list[int] = field(default_factory=list)


class Auditor:
    def __init__(
        self,
        *,
        address: str,
        store: MetadataStore,
        hub_id: str | None = None,
        replicas: Replicas,
        local: LocalStorage,
        wanted_size: WantedSize,
        rng: random.Random | None = None,
        delay_s: float = 0.0,
        full_interval_s: float = 3600.0,
        clock: Clock | None = None,
        last_claim_at: Callable[[], float] | None = None,
    ) -> None:
        self.address = address
        # How ledgers name this hub's replicas (``hedwig.hub.identity``).
        self.hub_id = hub_id or address
        self.store = store
        self.local = local
        self.replicas = replicas
        self.wanted_size = wanted_size
        self.delay_s = delay_s
        self.full_interval_s = full_interval_s
        self.clock = clock or SystemClock()
        # When this hub last claimed a topic (its monotonic clock). The full audit a hub's
        # going calls for read every ledger of the share while the survivors were taking
        # its topics over: in a failover of 100,000 topics it came 30 s in and took the
        # later half of the take-overs' pace away. It waits for them to end (``_put_off``).
        self.last_claim_at = last_claim_at
        # What the last full audit saw, when, and whether it left anything to do.
        self._membership: frozenset[tuple[str, str, int]] | None = None
        self._last_full = float("-inf")
        self._clean = False
        # When ledgers were last asked about being left over: not at start, after a while.
        self._last_sweep = self.clock.monotonic()
        # When ledgers waiting for a gone hub may be repaired (its delay ends): a full audit
        # then. And how many the last full audit found waiting, still reported meanwhile.
        self._due: float | None = None
        # The latest a departure's audit may be put off to: the end of its delay.
        self._due_by: float | None = None
        self._carried_waiting = 0
        # Suspected ledgers by the replicas they name (few distinct sets), how many in all,
        # and the replica sets of those not kept (past ``MAX_SUSPECTS``).
        self._suspects: dict[frozenset[str], set[int]] = {}
        self._suspect_count = 0
        self._overflowed: set[frozenset[str]] = set()
        self.full_audits = 0
        self.last = AuditReport()
        # Hubs seen in ledgers but not alive, since when (this hub's clock).
        self._missing_since: dict[str, float] = {}
        # Hubs (storage ids) seen leaving the region, since when: counted as waiting hubs
        # for the whole delay, from the moment they leave (their ledgers are counted from
        # the full audit ``DEPARTURE_AUDIT_AFTER_S`` later on).
        self._departed: dict[str, float] = {}
        self._repairs = Repairs(store.ledgers, replicas, rng or random.Random())

    @property
    def copied_bytes(self) -> dict[str, int]:
        """Bytes written to replicas by repairs, by kind (replace, catch-up, grow)."""
        return self._repairs.copied_bytes

    def _gone(self, left: frozenset[tuple[str, str, int]], alive: set[str], now: float) -> None:
        """Hubs that ``left`` the region, none having come: nothing of theirs may be
        re-created before the delay ends, so the full audit their going calls for waits
        ``DEPARTURE_AUDIT_AFTER_S`` (BookKeeper's auditor delays its audit by the whole
        lost-bookie recovery delay; here the ledgers are counted as waiting sooner, for the
        under-replication alert). At once, it read and asked the replicas of every ledger of
        the share while the survivors took the gone hub's topics over, a tenth of their
        work. The audit then sets the next one for the delay's end, as any that finds
        ledgers waiting."""
        for storage_id, _, _ in left:
            if storage_id not in alive:
                self._missing_since.setdefault(storage_id, now)
        end = now + min(self.delay_s, DEPARTURE_AUDIT_AFTER_S)
        self._due = end if self._due is None else min(self._due, end)
        by = now + self.delay_s
        self._due_by = by if self._due_by is None else min(self._due_by, by)

    def _put_off(self, now: float) -> bool:
        """Whether a departure's audit, due now, waits for a later round: this hub is still
        taking topics over (it claimed one within ``TAKE_OVERS_QUIET_S``), and the gone
        hub's delay has not ended (its end calls for an audit anyway, and repairs may
        begin). A hub that claims topics all the time (new ones made steadily) so counts
        the gone hub's ledgers as waiting at the delay's end; the gone hub itself is
        counted at once (``AuditReport.hubs_waiting``)."""
        return (
            self._due_by is not None
            and now < self._due_by
            and self.last_claim_at is not None
            and now - self.last_claim_at() < TAKE_OVERS_QUIET_S
        )

    def _waiting(self, alive: set[str], seen: set[str], *, full: bool) -> set[str]:
        """Of the hubs ``seen`` in ledgers but not alive, those still within the delay.

        A hub back alive starts afresh next time. A round that read only suspects forgets
        no gone hub (it saw few ledgers); a full one forgets those no ledger names now."""
        now = self.clock.monotonic()
        missing = seen - alive
        if full:
            self._missing_since = {a: self._missing_since.get(a, now) for a in missing}
        else:
            since = {a: s for a, s in self._missing_since.items() if a not in alive}
            for a in missing:
                since.setdefault(a, now)
            self._missing_since = since
        return {a for a, since in self._missing_since.items() if now - since < self.delay_s}

    def _waiting_ends(self) -> float:
        """When the first hub still within the delay leaves it."""
        now = self.clock.monotonic()
        return min(
            (s + self.delay_s for s in self._missing_since.values() if s + self.delay_s > now),
            default=now,
        )

    def suspect(self, ledger_id: int, fragments: Fragments = ()) -> None:
        """A ledger this hub closed that may be under-replicated (a replica failed a write, its
        ensemble was short) or recovered: checked at the next audit, whatever its share.

        ``fragments`` (the ledger's) name its replicas: one naming a hub gone within the
        re-replication delay, while a full audit is due (``_gone``), is left to that audit
        (``run_once``).
        After a hub died, every ledger its survivors recovered was suspected, each read
        again with its replicas asked, for nothing that could be done before the delay ended.
        """
        key = frozenset(a for _, ensemble in fragments for a in ensemble)
        if self._suspect_count < MAX_SUSPECTS:
            group = self._suspects.setdefault(key, set())
            if ledger_id not in group:
                group.add(ledger_id)
                self._suspect_count += 1
        else:
            self._overflowed.add(key)

    async def run_once(self) -> AuditReport:
        report = AuditReport()
        hubs = [h for h in await self.store.hubs.list_hubs() if h.alive and h.storage_id]
        # Ensembles name replicas by hub id.
        alive = {h.storage_id for h in hubs}
        order = sorted(alive)
        if self.hub_id not in order:
            return report
        membership = frozenset((h.storage_id, h.address, h.epoch) for h in hubs)
        now = self.clock.monotonic()
        if self._membership is not None:
            left = self._membership - membership
            for storage_id, _, _ in left:
                if storage_id not in alive:
                    self._departed.setdefault(storage_id, now)
            if left and membership < self._membership:
                self._gone(left, alive, now)
                self._membership = membership
        # Hubs gone within the delay: while the full audit their going calls for is due
        # (``_gone``), a suspect naming one of them is looked at by it, not now.
        waiting_for = (
            frozenset(a for a, since in self._missing_since.items() if now - since < self.delay_s)
            - alive
        )

        self._departed = {
            h: since
            for h, since in self._departed.items()
            if h not in alive and now - since < self.delay_s
        }
        report.hubs_waiting = len(self._departed)

        def deferred(replicas: frozenset[str]) -> bool:
            return self._due is not None and not replicas.isdisjoint(waiting_for)

        full = (
            not self._clean
            or any(not deferred(r) for r in self._overflowed)
            or membership != self._membership
            or now - self._last_full >= self.full_interval_s
            or (self._due is not None and now >= self._due and not self._put_off(now))
        )
        groups, self._suspects, self._suspect_count = self._suspects, {}, 0
        self._overflowed = set()
        suspected = {lid for r, ids in groups.items() if not deferred(r) for lid in ids}
        todo = set(suspected)
        position, members = order.index(self.hub_id), len(order)
        mine: list[tuple[LedgerMetadata, Version]] = []
        sweep = full and now - self._last_sweep >= self.full_interval_s
        made_before = self.clock.wall_ms() - int(self.full_interval_s * 1000) if sweep else 0
        old: list[tuple[int, str]] = []
        if full:
            self.full_audits += 1
            report.orphans_deleted = await self.collect_orphans()
            for lid in await self.store.ledgers.list_ledgers():
                if lid % members == position:
                    todo.add(lid)
        ordered = sorted(todo)
        for start in range(0, len(ordered), READ_AHEAD):
            chunk = ordered[start : start + READ_AHEAD]
            read = await asyncio.gather(*(self.store.ledgers.read_ledger(lid) for lid in chunk))
            for lid, got in zip(chunk, read, strict=True):
                if got is not None:
                    self._sort(lid, got, suspected, mine)
                    if sweep and got.value.created_ms <= made_before:
                        old.append((lid, got.value.topic))
        seen = {a for md, _ in mine for _, e in md.fragments for a in e}
        waiting = self._waiting(alive, seen, full=full)
        for md, version in mine:
            lid = md.ledger_id
            report.checked += 1
            try:
                wanted = await self.wanted_size(md.topic)
            except HedwigError:
                wanted = md.ensemble_size
            health = await inspect(md, self.replicas, alive, wanted, waiting)
            if not health.under_replicated:
                continue
            report.under_replicated.append(health)
            if not health.repairable:
                report.waiting += 1
                continue
            try:
                await self._repairs.repair(md, version, health, alive)
                report.repaired += 1
            except HedwigError as exc:
                report.failed += 1
                log.warning("ledger %d of %r stays under-replicated: %s", lid, md.topic, exc)
        if sweep:
            self._last_sweep = now
            report.left_over_deleted = await self.collect_left_over(old)
        # Only waiting: nothing to do before the delay ends, and a full audit then.
        only_waiting = not report.failed and not any(h.repairable for h in report.under_replicated)
        if full:
            self._membership = membership
            self._last_full = now
            self._clean = only_waiting
            self._due = self._due_by = None
            self._carried_waiting = report.waiting
        elif not only_waiting:
            self._clean = False  # look at everything again next time, until it is healthy
        else:
            report.waiting += self._carried_waiting
        if report.under_replicated and only_waiting:
            end = self._waiting_ends()
            self._due = end if self._due is None else min(self._due, end)
        self.last = report
        return report

    def _sort(
        self,
        lid: int,
        got: Versioned[LedgerMetadata],
        suspected: set[int],
        mine: list[tuple[LedgerMetadata, Version]],
    ) -> None:
        """A closed ledger is checked now; a suspected one still open, once it is closed."""
        if got.value.state is LedgerState.CLOSED:
            mine.append((got.value, got.version))
        elif lid in suspected:
            self.suspect(lid, got.value.fragments)

    async def collect_orphans(self) -> list[int]:
        """Delete this hub's replicas of ledgers whose metadata is gone.

        The replicas held here are listed first, the metadata after: a ledger's metadata is
        written before any replica of it, so a replica listed here had its metadata then, and
        is an orphan only if the metadata is gone by the later listing. The other order
        relied on ledger ids growing in the order ledgers are made (a replica above the
        highest listed id was kept as being made): with ids handed out in blocks per hub
        (``hedwig.metadata.etcd``) a ledger made during the listing has a lower id than
        others of the listing, and its replicas were deleted with its entries acknowledged
        (a region of 300,000 topics lost the first message of 28)."""
        held = self.local.ledgers()
        if not held:
            return []
        known = set(await self.store.ledgers.list_ledgers())
        orphans = [lid for lid in held if lid not in known]
        for lid in orphans:
            await self.local.delete_ledger(lid)
        if orphans:
            log.info("deleted %d orphan ledger replicas: %s", len(orphans), orphans[:10])
        return orphans

    async def collect_left_over(self, ledgers: list[tuple[int, str]]) -> list[int]:
        """Delete those of ``ledgers`` (id, topic) the store proves left over: replicas
        first, then the metadata (``delete_ledger_everywhere``), as a collection does."""
        gone: list[int] = []
        for start in range(0, len(ledgers), READ_AHEAD):
            chunk = ledgers[start : start + READ_AHEAD]
            found = await asyncio.gather(
                *(self.store.ledgers.left_over(lid, topic) for lid, topic in chunk),
                return_exceptions=True,
            )
            for (lid, topic), left in zip(chunk, found, strict=True):
                if isinstance(left, BaseException):
                    if not isinstance(left, HedwigError):
                        raise left
                    continue  # asked again at the next sweep
                if not left:
                    continue
                try:
                    await delete_ledger_everywhere(self.store.ledgers, self.replicas, lid)
                except HedwigError as exc:
                    log.info("left-over ledger %d of %r not deleted yet: %s", lid, topic, exc)
                    continue
                gone.append(lid)
        if gone:
            log.info("deleted %d left-over ledgers: %s", len(gone), gone[:10])
        return gone
