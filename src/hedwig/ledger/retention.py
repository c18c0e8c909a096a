"""Which closed ledgers of a topic may go, and deleting them.

A ledger may go once every subscriber has consumed past it *and* retention lets it go:
consumed ledgers are kept for late readers until they are older than ``retention_ms`` or the
consumed ledgers after them already hold ``retention_bytes`` (``None``: no limit of that kind).
Only a prefix of the log ever goes, so the log never has a hole. A log remembers what its last
collection that found nothing saw (``Quiet``): until its ledgers, the first sequence id needed
or the age of one of them changes, the answer is the same, and it reads nothing (a hub owning
100,000 topics taken over, two ledgers each, read every one's closed ledger every minute for
nothing).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from hedwig.ledger.replicas import Replicas
from hedwig.metadata.managers import LedgerMetadataManager
from hedwig.metadata.records import LedgerMetadata, LedgerRange, LedgerRanges

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Quiet:
    """What a collection that found nothing saw: the ledger list (the very object, kept while
    the list is unchanged), the first sequence id needed, and when a ledger of it grows old
    enough to go (``None``: none does by age)."""

    ranges: LedgerRanges
    keep_from_seq: int
    next_ms: int | None

    def due(
        self, ranges: LedgerRanges, keep_from_seq: int | None, now_ms: Callable[[], int]
    ) -> bool:
        """Whether a collection could find anything now, with ``ranges`` and
        ``keep_from_seq`` (``None``: as last time) and the wall clock ``now_ms``."""
        if ranges is not self.ranges:
            return True
        if keep_from_seq is not None and keep_from_seq != self.keep_from_seq:
            return True
        return self.next_ms is not None and now_ms() >= self.next_ms


async def collectable_prefix(
    ledgers: LedgerMetadataManager,
    ranges: tuple[LedgerRange, ...],
    keep_from_seq: int,
    *,
    now_ms: int,
    retention_ms: int | None,
    retention_bytes: int | None,
) -> tuple[list[int], int | None]:
    """Ids of the leading ledgers that may be deleted (never the open tail), and when the
    first of the others read grows old enough to go (``None``: none does by age). Until then,
    with the same ranges and ``keep_from_seq``, the answer is the same."""
    candidates: list[tuple[LedgerRange, LedgerMetadata]] = []
    for r in ranges[:-1]:
        if r.end_seq is None or r.end_seq >= keep_from_seq:
            break
        got = await ledgers.read_ledger(r.ledger_id)
        if got is None:
            continue
        candidates.append((r, got.value))
    doomed: set[int] = set()
    newer_bytes = 0
    for r, md in reversed(candidates):
        too_old = (
            retention_ms is not None and now_ms - (md.closed_ms or md.created_ms) >= retention_ms
        )
        too_big = retention_bytes is not None and newer_bytes >= retention_bytes
        if too_old or too_big:
            doomed.add(r.ledger_id)
        newer_bytes += md.length or 0
    prefix: list[int] = []
    for r, _ in candidates:
        if r.ledger_id not in doomed:
            break
        prefix.append(r.ledger_id)
    ages = [
        (md.closed_ms or md.created_ms) + retention_ms
        for r, md in candidates
        if retention_ms is not None and r.ledger_id not in doomed
    ]
    return prefix, min(ages, default=None)


async def delete_ledger_everywhere(
    ledgers: LedgerMetadataManager, replicas: Replicas, ledger_id: int
) -> None:
    """Delete every replica of a ledger, then its metadata. A replica that cannot be reached
    keeps its copy; the auditor of its hub collects it as an orphan later."""
    got = await ledgers.read_ledger(ledger_id)
    if got is None:
        return
    for address in {a for _, ens in got.value.fragments for a in ens}:
        try:
            await replicas.node(address).delete_ledger(ledger_id)
        except Exception:
            log.info("could not delete ledger %d on %s", ledger_id, address)
    await ledgers.delete_ledger(ledger_id, got.version)
