"""The conformance suite against a real ZooKeeper server."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.security import make_digest_acl

from hedwig.devcluster.zookeeper import ZooKeeperServer
from hedwig.errors import BadVersionError, MetadataError
from hedwig.metadata import MetadataStore
from hedwig.metadata.plans import TopicPlan
from hedwig.metadata.records import NEW_VERSION
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

    async def test_plans_from_before_the_index_are_marked(
        self, store: MetadataStore, other: MetadataStore
    ) -> None:
        """A region written before ``planned/`` existed has plans under their topics and no
        marks: the first ``planned_topics`` marks them, once, and later deletions keep the
        index true."""
        assert isinstance(store, ZkMetadataStore)
        assert isinstance(other, ZkMetadataStore)
        layout = store.layout
        for t in ("old/1", "old/2", "plain"):
            await store.topics.ensure_topic(t)
            if t != "plain":  # as an older version wrote them: no mark
                await store.zk.create(
                    layout.plan(t), TopicPlan.fan_out(["h:1"], generation=1).to_json()
                )
        assert await store.zk.exists(layout.planned) is None
        assert await other.plans.planned_topics() == {"old/1", "old/2"}
        data, _ = await store.zk.get(layout.planned)
        assert data == b"indexed"
        got = await store.plans.read_plan("old/1")
        assert got is not None
        await store.plans.delete_plan("old/1", got.version)
        assert await store.plans.planned_topics() == {"old/2"}
        assert await store.zk.children(layout.planned) == ["old%2F2"]

    async def test_a_plan_is_never_left_without_its_mark(self, store: MetadataStore) -> None:
        """Plans created and deleted by two writers at once, over and over: whenever a plan
        exists, its topic is marked in ``planned/`` (hubs would not see it otherwise)."""
        assert isinstance(store, ZkMetadataStore)
        await store.topics.ensure_topic("race")
        plan = TopicPlan.fan_out(["h:1"], generation=1)

        rng = random.Random(7)

        async def churn(times: int) -> None:
            for _ in range(times):
                if rng.random() < 0.5:
                    with contextlib.suppress(BadVersionError, MetadataError):
                        await store.plans.write_plan("race", plan, NEW_VERSION)
                    continue
                got = await store.plans.read_plan("race")
                if got is not None:
                    with contextlib.suppress(BadVersionError, MetadataError):
                        await store.plans.delete_plan("race", got.version)

        ends = set()
        for _ in range(25):
            await asyncio.gather(churn(8), churn(8), churn(8))
            planned = await store.plans.read_plan("race") is not None
            ends.add(planned)
            if planned:
                assert "race" in await store.plans.planned_topics()
        assert ends == {True, False}  # both ends were reached


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
