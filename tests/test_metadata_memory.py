from __future__ import annotations

import pytest

from hedwig.metadata import MetadataStore
from hedwig.metadata.memory import MemoryBackend, MemoryMetadataStore
from tests.bundle_conformance import BundleConformance
from tests.metadata_conformance import MetadataConformance
from tests.namespace_conformance import NamespaceConformance


@pytest.fixture
def backend() -> MemoryBackend:
    return MemoryBackend()


@pytest.fixture
async def store(backend: MemoryBackend) -> MetadataStore:
    s = MemoryMetadataStore(backend, "r")
    await s.start()
    return s


@pytest.fixture
async def other(backend: MemoryBackend) -> MetadataStore:
    s = MemoryMetadataStore(backend, "r")
    await s.start()
    return s


class TestMemoryStore(MetadataConformance, BundleConformance, NamespaceConformance):
    async def expire(self, store: MetadataStore) -> None:
        assert isinstance(store, MemoryMetadataStore)
        store.expire()
