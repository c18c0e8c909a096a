"""Per-topic logs made of ledgers (``docs/architecture.md``, "Storage: ledgers and fencing").

``storage`` is the replica role (entries on disk), ``remote`` reaches another hub's replica,
``replicas`` maps storage addresses to replicas, ``handle`` writes, recovers and reads one
ledger over its ensemble, ``lac_notices`` tells replicas the last confirmed entry of ledgers
whose writer went idle, ``topic_log`` strings a topic's ledgers together, ``log_reader``
reads them back by sequence id, ``retention`` decides which may go, and ``auditor`` repairs
under-replicated ledgers and collects orphaned replicas.
"""

from hedwig.ledger.handle import LedgerWriter, read_entry, recover_ledger
from hedwig.ledger.lac_notices import LacNotices
from hedwig.ledger.replicas import LocalFirstReplicas, RemoteReplicas, Replicas
from hedwig.ledger.storage import LocalStorage, StorageNode
from hedwig.ledger.topic_log import LogSettings, TopicLog

__all__ = [
    "LacNotices",
    "LedgerWriter",
    "LocalFirstReplicas",
    "LocalStorage",
    "LogSettings",
    "RemoteReplicas",
    "Replicas",
    "StorageNode",
    "TopicLog",
    "read_entry",
    "recover_ledger",
]
