"""What is wrong with a closed ledger: its replicas asked for their last entry.

A closed ledger is under-replicated when one of its replicas is on a hub that is not alive
(``dead``, or ``waiting`` while the hub is within the re-replication delay: a hub restarting
comes back with its disk), when a live replica is missing entries of its own write sets
(``lagging``: its hub was down during the writes, or came back with an empty disk; on a
striped ledger, every few entries are a replica's), or when it was written with a smaller
ensemble than its topic wants (ledgers created while hubs were down). Replicas write their
entries in order, so one that missed writes ends before the last entry of its write sets.
Ensembles name replicas by hub id (``HubStatus.storage_id``).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

from hedwig.errors import HedwigError
from hedwig.ledger.handle import write_set
from hedwig.ledger.replicas import Replicas
from hedwig.metadata.records import LedgerMetadata


@dataclass
class LedgerHealth:
    ledger_id: int
    topic: str
    ensemble: tuple[str, ...]
    dead: list[str] = field(default_factory=list)
    lagging: dict[str, int] = field(default_factory=dict)  # replica -> entries missing
    wanted: int = 0
    waiting: list[str] = field(default_factory=list)  # not alive, still within the delay

    @property
    def under_replicated(self) -> bool:
        return bool(self.dead or self.lagging or self.waiting) or len(self.ensemble) < self.wanted

    @property
    def repairable(self) -> bool:
        return bool(self.dead or self.lagging) or len(self.ensemble) < self.wanted


def fragments_of(md: LedgerMetadata) -> list[tuple[int, int, tuple[str, ...]]]:
    """``(first_entry, last_entry, ensemble)`` of each non-empty fragment of a closed ledger."""
    out = []
    frags = list(md.fragments)
    for i, (first, ensemble) in enumerate(frags):
        last = frags[i + 1][0] - 1 if i + 1 < len(frags) else md.last_entry_id
        if last >= first:
            out.append((first, last, ensemble))
    return out


def entries_of(md: LedgerMetadata, address: str, first: int, last: int) -> list[int]:
    """The entries of ``first..last`` whose write set includes ``address`` (all of them on a
    ledger whose every entry goes to every replica; every few on a striped one)."""
    return [e for e in range(first, last + 1) if address in write_set(md, e)]


async def inspect(
    md: LedgerMetadata,
    replicas: Replicas,
    alive: set[str],
    wanted: int,
    waiting: Collection[str] = (),
) -> LedgerHealth:
    """What is wrong with a closed ledger (asks live replicas for their last entry).

    Replicas write their entries in order, so one that missed writes (its hub was down, or
    restarted empty) ends before the last entry of its own write sets.
    """
    current = md.fragments[-1][1] if md.fragments else ()
    health = LedgerHealth(md.ledger_id, md.topic, tuple(current), wanted=wanted)
    for first, last, ensemble in fragments_of(md):
        for address in ensemble:
            if address not in alive:
                listed = health.waiting if address in waiting else health.dead
                if address not in listed:
                    listed.append(address)
                continue
            mine = entries_of(md, address, first, last)
            if not mine:
                continue
            try:
                _, stored = await replicas.node(address).read_lac(md.ledger_id, fence=False)
            except HedwigError:
                continue
            missing = sum(1 for e in mine if e > stored)
            if missing:
                health.lagging[address] = health.lagging.get(address, 0) + missing
    return health
