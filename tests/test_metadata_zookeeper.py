"""The conformance suite against a real ZooKeeper server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.security import make_digest_acl

from hedwig.devcluster.zookeeper import ZooKeeperServer
from hedwig.errors import MetadataError
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


async def test_pools_with_their_own_digests_share_one_ensemble(tmp_path: Path) -> None:
    """Two secured pools (regions, each with its own ZooKeeper digest) on one ensemble: the
    first to start makes ``/hedwig`` so that the second may create its region beside it, and
    neither can change the other's tree. A ``/hedwig`` made only for the first pool's digest
    (as before) is opened up by that pool's next start."""
    with ZooKeeperServer(data_dir=str(tmp_path / "zk")) as zk:
        # As an older version left it: only pool a's digest may create under /hedwig.
        old = KazooClient(hosts=zk.address, auth_data=[("digest", "hedwig:a")])
        old.start(timeout=10)
        old.create("/hedwig", b"", acl=[make_digest_acl("hedwig", "a", all=True)])
        old.stop()
        old.close()
        a = ZkMetadataStore(zk.address, "pool-a", session_timeout=2.0, digest="hedwig:a")
        b = ZkMetadataStore(zk.address, "pool-b", session_timeout=2.0, digest="hedwig:b")
        await a.start()
        try:
            await b.start()  # refused (NoAuth at /hedwig/pool-b) before the root was opened
            try:
                await b.topics.ensure_topic("b-topic")
                assert await b.topics.topic_exists("b-topic")
                with pytest.raises(MetadataError, match="NoAuth"):
                    await b.zk.create("/hedwig/pool-a/topics/intruder")
                with pytest.raises(MetadataError, match="NoAuth"):
                    await b.zk.delete("/hedwig/pool-a/topics")
            finally:
                await b.close()
        finally:
            await a.close()
