"""The in-process metadata store: the memory implementation of every manager, as one object.

``MemoryMetadataStore`` is each of the managers (``ownership``, ``persistence``,
``subscriptions``, ``ledgers``, ``topics``, ``hubs``, ``acls``, ``plans``, ``bundles``,
``namespaces`` and ``session`` are itself), assembled from one class per manager, each in the
module named after it.
"""

from __future__ import annotations

from hedwig.metadata.memory.acls import MemoryAcls
from hedwig.metadata.memory.backend import MemoryBackend
from hedwig.metadata.memory.bundles import MemoryBundles
from hedwig.metadata.memory.catalog import MemoryCatalog
from hedwig.metadata.memory.hubs import MemoryHubs
from hedwig.metadata.memory.namespaces import MemoryNamespaces
from hedwig.metadata.memory.ownership import MemoryOwnership
from hedwig.metadata.memory.plans import MemoryPlans
from hedwig.metadata.memory.subscriptions import MemorySubscriptions


class MemoryMetadataStore(
    MemoryOwnership,
    MemorySubscriptions,
    MemoryCatalog,
    MemoryHubs,
    MemoryAcls,
    MemoryPlans,
    MemoryBundles,
    MemoryNamespaces,
):
    def __init__(self, backend: MemoryBackend, region: str) -> None:
        super().__init__(backend, region)
        self.ownership = self
        self.persistence = self
        self.subscriptions = self
        self.ledgers = self
        self.topics = self
        self.hubs = self
        self.acls = self
        self.plans = self
        self.namespaces = self
        self.bundles = self
        self.session = self
