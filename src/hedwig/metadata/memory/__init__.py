"""An in-process metadata store: the second implementation of the managers.

It exists for two reasons: unit tests of hub logic that should not wait for ZooKeeper, and as
proof that the manager interfaces do not lean on ZooKeeper's tree. It is a key/value store
with per-key versions and sessions whose records vanish when the session is expired, and it
supports partial subscription updates (preferences and state are separate fields). Several
``MemoryMetadataStore`` objects sharing one ``MemoryBackend`` behave like hubs sharing one
store; ``expire`` plays a session expiry. Where things are:

- ``backend``: the state a simulated cluster shares (records, watches, sessions);
- ``session``: one store's session, and the versioned reads and writes every manager uses;
- one module per manager: ``ownership``, ``persistence``, ``ledgers``, ``subscriptions``,
  ``catalog`` (``TopicCatalog``), ``hubs``, ``acls``, ``plans``;
- ``store``: ``MemoryMetadataStore``, all of them as one object.
"""

from hedwig.metadata.memory.backend import MemoryBackend
from hedwig.metadata.memory.store import MemoryMetadataStore

__all__ = ["MemoryBackend", "MemoryMetadataStore"]
