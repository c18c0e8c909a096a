"""The conformance suite against a real ZooKeeper server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from kazoo.client import KazooClient

from hedwig.devcluster.zookeeper import ZooKeeperServer
from hedwig.metadata import MetadataStore
from hedwig.metadata.zookeeper import ZkMetadataStore
from tests.metadata_conformance import MetadataConformance

pytestmark = pytest.mark.integration


@pytest.fixture
async def store(zk_server: ZooKeeperServer, region: str) -> AsyncIterator[MetadataStore]:
    s = ZkMetadataStore(zk_server.address, region, session_timeout=2.0)
    await s.start()
    yield s
    await s.close()


@pytest.fixture
async def other(zk_server: ZooKeeperServer, region: str) -> AsyncIterator[MetadataStore]:
    s = ZkMetadataStore(zk_server.address, region, session_timeout=2.0)
    await s.start()
    yield s
    await s.close()


async def expire_session(store: ZkMetadataStore) -> None:
    """Expire a session the way ZooKeeper's own tests do: a second client with its id closes."""
    sid, passwd = store.zk._client.client_id
    loop = asyncio.get_running_loop()

    def kill() -> None:
        twin = KazooClient(hosts=store.zk.hosts, client_id=(sid, passwd), timeout=2.0)
        twin.start(timeout=10)
        twin.stop()
        twin.close()

    await loop.run_in_executor(None, kill)


class TestZooKeeperStore(MetadataConformance):
    async def expire(self, store: MetadataStore) -> None:
        assert isinstance(store, ZkMetadataStore)
        await expire_session(store)

    async def test_layout_paths(self, store: MetadataStore, zk_server: ZooKeeperServer) -> None:
        """The tree is the one docs/zookeeper-layout.md describes."""
        assert isinstance(store, ZkMetadataStore)
        await store.topics.ensure_topic("a/b")
        base = store.layout.base
        names = await store.zk.children(f"{base}/topics")
        assert names == ["a%2Fb"]
        assert await store.zk.children(f"{base}/topics/a%2Fb") == ["subscribers"]
