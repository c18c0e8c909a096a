"""Repairing an under-replicated closed ledger, as ``hedwig.ledger.health`` found it.

Repairs, in order:

- a dead replica is replaced: its entries are copied from the surviving replicas to an alive
  hub outside the ledger's ensembles, then the fragment's ensemble is changed;
- a live replica missing entries is caught up by copying them to it;
- a small ensemble (every replica holding every entry) grows by copying all entries to new
  replicas, recorded with the ensemble's new size.

Copies use the storage role's recovery adds, so they work on fenced ledgers too. The change
is one compare-and-set of the ledger's metadata: a repair overlapping another hub's (after a
membership change) or a change made meanwhile fails it, and the next audit looks again.
"""

from __future__ import annotations

import logging
import random

from msgspec.structs import replace

from hedwig.errors import BadVersionError, HedwigError
from hedwig.ledger.handle import write_set
from hedwig.ledger.health import LedgerHealth, entries_of, fragments_of
from hedwig.ledger.reads import read_entry
from hedwig.ledger.replicas import Replicas
from hedwig.metadata.managers import LedgerMetadataManager
from hedwig.metadata.records import LedgerMetadata, Version

log = logging.getLogger(__name__)


class Repairs:
    """Repairs one hub's auditor makes, and the bytes they copied by kind."""

    def __init__(
        self, ledgers: LedgerMetadataManager, replicas: Replicas, rng: random.Random
    ) -> None:
        self._ledgers = ledgers
        self.replicas = replicas
        self.rng = rng
        # Bytes written to replicas by repairs, by kind (replace, catch-up, grow).
        self.copied_bytes: dict[str, int] = {"replace": 0, "catch-up": 0, "grow": 0}

    async def _copy(
        self, md: LedgerMetadata, entries: list[int], to: str, sources: set[str], kind: str
    ) -> None:
        """Copy ``entries`` of ledger ``md`` from ``sources`` to replica ``to``."""
        target = self.replicas.node(to)
        for entry in entries:
            payload = await read_entry(self.replicas, md, entry, among=sources)
            await target.add_entry(md.ledger_id, entry, md.last_entry_id, payload, recovery=True)
            self.copied_bytes[kind] += len(payload)

    async def repair(
        self, md: LedgerMetadata, version: Version, health: LedgerHealth, alive: set[str]
    ) -> None:
        """Repair closed ledger ``md`` (at ``version``) as ``health`` found it; ``alive``:
        the ids of the alive hubs."""
        everyone = {a for _, e in md.fragments for a in e}
        healthy = alive - set(health.dead)
        # 1. replace dead replicas, fragment by fragment
        fragments = list(md.fragments)
        for first, last, ensemble in fragments_of(md):
            for dead in [a for a in ensemble if a in health.dead]:
                spare = sorted(alive - everyone)
                if not spare:
                    raise HedwigError(f"no spare hub to replace {dead}")
                new = self.rng.choice(spare)
                entries = [e for e in range(first, last + 1) if dead in write_set(md, e)]
                await self._copy(md, entries, new, healthy & set(ensemble), "replace")
                everyone.add(new)
                idx = next(j for j, (f, _) in enumerate(fragments) if f == first)
                fragments[idx] = (first, tuple(new if a == dead else a for a in fragments[idx][1]))
                log.info(
                    "ledger %d: replica %s replaced by %s (%d entries)",
                    md.ledger_id,
                    dead,
                    new,
                    len(entries),
                )
        # 2. catch up lagging live replicas
        for address, _missing in health.lagging.items():
            for first, last, ensemble in fragments_of(md):
                if address not in ensemble:
                    continue
                _, stored = await self.replicas.node(address).read_lac(md.ledger_id, fence=False)
                entries = [e for e in entries_of(md, address, first, last) if e > stored]
                await self._copy(
                    md, entries, address, healthy & set(ensemble) - {address}, "catch-up"
                )
                log.info(
                    "ledger %d: caught %s up by %d entries", md.ledger_id, address, len(entries)
                )
        # 3. grow a full-copy ledger that was written with too few replicas
        grown = md
        current = fragments[-1][1] if fragments else ()
        if (
            len(fragments) == 1
            and md.ensemble_size == md.write_quorum
            and len(current) < health.wanted
        ):
            spare = sorted(alive - set(current) - set(health.dead))
            extra = spare[: health.wanted - len(current)]
            for new in extra:
                await self._copy(
                    md, list(range(md.last_entry_id + 1)), new, healthy & set(current), "grow"
                )
            if extra:
                current = (*current, *extra)
                fragments[0] = (fragments[0][0], current)
                grown = replace(md, ensemble_size=len(current), write_quorum=len(current))
        changed = replace(grown, fragments=tuple(fragments))
        if changed != md:
            try:
                await self._ledgers.write_ledger(changed, version)
            except BadVersionError as exc:
                raise HedwigError(
                    f"ledger {md.ledger_id} changed during repair; next round"
                ) from exc
