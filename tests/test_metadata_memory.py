from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from hedwig.metadata import MetadataStore
from hedwig.metadata.memory import MemoryBackend, MemoryMetadataStore
from tests.metadata_conformance import MetadataConformance


@pytest.fixture
def backend() -> MemoryBackend:
    return MemoryBackend()


@pytest.fixture
async def store(backend: MemoryBackend) -> AsyncIterator[MetadataStore]:
    s = MemoryMetadataStore(backend, "r")
    await s.start()
    yield s


@pytest.fixture
async def other(backend: MemoryBackend) -> AsyncIterator[MetadataStore]:
    s = MemoryMetadataStore(backend, "r")
    await s.start()
    yield s


class TestMemoryStore(MetadataConformance):
    async def expire(self, store: MetadataStore) -> None:
        assert isinstance(store, MemoryMetadataStore)
        store.expire()
