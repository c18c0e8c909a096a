"""Starting a topic's log: its first ledger and the persistence record that names it.

A first publish's claim writes both. Where the store can write them in one request
(etcd: the ledger's id is taken from a block this process holds), it does; elsewhere
(ZooKeeper numbers ledgers by sequential znodes, so the record cannot name the id in the same
``multi``) they are two steps, and a ledger whose record lost the race is deleted again.
"""

from __future__ import annotations

import logging

from hedwig.errors import BadVersionError, MetadataError
from hedwig.metadata.managers import LedgerMetadataManager, TopicPersistenceManager
from hedwig.metadata.records import NEW_VERSION, LedgerMetadata, LedgerRanges, Version, Versioned

log = logging.getLogger(__name__)


def holds_ledger(ranges: LedgerRanges, ledger_id: int) -> bool:
    """Whether the topic's log ``ranges`` holds ledger ``ledger_id``."""
    return any(r.ledger_id == ledger_id for r in ranges.ranges)


def first_ranges(ledger_id: int) -> LedgerRanges:
    """A new topic's ledger list: ``ledger_id`` from sequence 1."""
    return LedgerRanges(()).with_tail(ledger_id, 1)


def next_ranges(ranges: LedgerRanges, ledger_id: int) -> LedgerRanges:
    """A taken-over topic's ledger list: ``ranges`` (its ledgers closed) with ``ledger_id``
    from the sequence after their last."""
    return ranges.with_tail(ledger_id, ranges.last_seq + 1)


async def start_in_steps(
    ledgers: LedgerMetadataManager,
    persistence: TopicPersistenceManager,
    topic: str,
    first: LedgerMetadata,
) -> tuple[Versioned[LedgerMetadata], Version]:
    """``start_topic_log`` as two writes: the ledger, then the record (created, so a topic
    that has one already fails with ``BadVersionError``, and the ledger goes again)."""
    created = await ledgers.create_ledger(first)
    try:
        version = await persistence.write_topic_persistence_info(
            topic, first_ranges(created.value.ledger_id), NEW_VERSION
        )
    except BadVersionError:
        try:
            await ledgers.delete_ledger(created.value.ledger_id, created.version)
        except MetadataError:
            log.debug("could not delete unused ledger %d", created.value.ledger_id, exc_info=True)
        raise
    return created, version
