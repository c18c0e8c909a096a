"""Per-topic logs made of ledgers (``docs/architecture.md``, and the invariants in ledgers.md).

``storage`` is the replica role (entries on disk), ``handle`` writes, recovers and reads one
ledger over its ensemble, ``topic_log`` strings a topic's ledgers together, and ``pool`` maps
storage addresses to replicas.
"""

from hedwig.ledger.handle import LedgerWriter, StoragePool, read_entry, recover_ledger
from hedwig.ledger.pool import HubPool, LocalPool
from hedwig.ledger.storage import LocalStorage, StorageNode
from hedwig.ledger.topic_log import LogSettings, TopicLog

__all__ = [
    "HubPool",
    "LedgerWriter",
    "LocalPool",
    "LocalStorage",
    "LogSettings",
    "StorageNode",
    "StoragePool",
    "TopicLog",
    "read_entry",
    "recover_ledger",
]
