"""Per-topic logs made of ledgers (``docs/architecture.md``, "Logs and ledgers").

``storage`` is the replica role (entries on disk: its interface, the entry log, the index,
group commit, compaction), ``remote`` reaches another hub's replica, ``replicas`` maps storage
addresses to replicas. ``handle`` writes one ledger over its ensemble, ``reads`` reads an entry
back, ``recovery`` fences and closes a ledger its writer left open, ``lac_notices`` tells
replicas the last confirmed entry of ledgers whose writer went idle. ``topic_log`` strings a
topic's ledgers together (``log_context``: what a hub's logs share; ``take_over``: opening a
log; ``roll_over``: moving it to a new ledger), ``log_reader`` reads them back by sequence id,
``retention`` decides which may go. ``auditor`` finds under-replicated ledgers (``health``),
repairs them (``repair``) and collects orphaned replicas.
"""

from hedwig.ledger.handle import LedgerWriter, WriterContext
from hedwig.ledger.lac_notices import LacNotices
from hedwig.ledger.log_context import LogContext, LogSettings
from hedwig.ledger.reads import read_entry
from hedwig.ledger.recovery import recover_ledger
from hedwig.ledger.replicas import LocalFirstReplicas, RemoteReplicas, Replicas
from hedwig.ledger.storage import LocalStorage, StorageNode
from hedwig.ledger.topic_log import TopicLog

__all__ = [
    "LacNotices",
    "LedgerWriter",
    "LocalFirstReplicas",
    "LocalStorage",
    "LogContext",
    "LogSettings",
    "RemoteReplicas",
    "Replicas",
    "StorageNode",
    "TopicLog",
    "WriterContext",
    "read_entry",
    "recover_ledger",
]
