"""The storage role: ledger entries on a hub's disk (BookKeeper's bookie, in miniature).

One interface, one class per component behind it, as BookKeeper splits its bookie:

- ``node``: ``StorageNode``, what a ledger's writer, recovery and readers ask of a replica
  (this hub's disk, or another hub's storage role over the wire).
- ``local``: ``LocalStorage``, the replicas on this hub's disk, answering those questions
  over the components below.
- ``entry_log``: the one append-only, checksummed log every ledger stored here shares (its
  record format, its files, the write and sync of a group).
- ``index``: where each stored entry is, in memory (an int per entry), rebuilt from the logs
  at start.
- ``group_commit``: nothing acknowledged before it is on disk; whatever arrives while a group
  is written forms the next, one write and one ``fdatasync`` for many ledgers.
- ``compaction``: closed logs mostly of deleted ledgers copied forward and removed.
"""

from hedwig.ledger.storage.local import LocalStorage
from hedwig.ledger.storage.node import StorageNode

__all__ = ["LocalStorage", "StorageNode"]
