"""``hedwig bundles`` against a real ZooKeeper: the map and each bundle's owner, one bundle
for ``--topic``, nothing for a region without a map, a clear refusal of a bad store."""

from __future__ import annotations

import asyncio
import json
import subprocess

import pytest

from hedwig.devcluster.zookeeper import ZooKeeperServer
from hedwig.metadata import NEW_VERSION, HubInfo, open_store
from hedwig.metadata.bundles import BundleMap
from tests.cluster_helpers import hedwig

pytestmark = pytest.mark.integration


async def run(*args: str) -> subprocess.CompletedProcess[str]:
    """The command in a thread: the loop keeps the store's session (and its owner record)."""
    return await asyncio.to_thread(hedwig, *args)


async def test_bundles_lists_the_map_and_owners(zk_server: ZooKeeperServer, region: str) -> None:
    listed = await run("bundles", "--zk", zk_server.address, "--region", region, "--json")
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == []
    m = BundleMap.uniform(4)
    async with open_store(zk_server.address, region=region) as store:
        await store.bundles.write_bundle_map(m, NEW_VERSION)
        assert (await store.bundles.claim_bundle(m.bundles[2].name, HubInfo("h1:1", 1))).claimed
        listed = await run("bundles", "--zk", zk_server.address, "--region", region, "--json")
        assert listed.returncode == 0, listed.stderr
        rows = json.loads(listed.stdout)
        assert [r["bundle"] for r in rows] == [b.name for b in m.bundles]
        assert [r["owner"] for r in rows] == ["-", "-", "h1:1", "-"]
        assert {r["share"] for r in rows} == {"25%"}
        topic = await run(
            "bundles", "--zk", zk_server.address, "--region", region, "--topic", "a/b", "--json"
        )
        assert [r["bundle"] for r in json.loads(topic.stdout)] == [m.bundle_of("a/b").name]
        table = await run("bundles", "--zk", zk_server.address, "--region", region)
        assert "h1:1" in table.stdout and "BUNDLE" in table.stdout.upper()


async def test_topics_lists_pages_with_each_topics_bundle_owner(
    zk_server: ZooKeeperServer, region: str
) -> None:
    names = [f"p/{i}" for i in range(5)]
    m = BundleMap.uniform(2)
    async with open_store(zk_server.address, region=region) as store:
        for t in names:
            await store.topics.ensure_topic(t)
        await store.bundles.write_bundle_map(m, NEW_VERSION)
        owned = m.bundles[0]
        # An owner nobody can reach: the listing says so and shows the store's figures.
        assert (await store.bundles.claim_bundle(owned.name, HubInfo("127.0.0.1:9", 1))).claimed
        base = ["topics", "--zk", zk_server.address, "--region", region, "--json"]
        first = await run(*base, "--limit", "2")
        assert first.returncode == 0, first.stderr
        page = json.loads(first.stdout)
        assert [r["topic"] for r in page] == names[:2]
        rest = json.loads((await run(*base, "--after", names[1])).stdout)
        assert [r["topic"] for r in rest] == names[2:]
        for r in page + rest:
            expected = "127.0.0.1:9" if owned.holds(r["topic"]) else None
            assert r["owner"] == expected, r
        bad = await run(*base, "--limit", "0")
        assert bad.returncode == 2 and "--limit" in bad.stderr


async def test_move_names_a_topic_or_a_bundle_and_a_bundle_goes_to_a_named_hub(
    zk_server: ZooKeeperServer, region: str
) -> None:
    """Used wrongly, ``hedwig move`` says how and exits 2, before reaching anything."""
    common = ["--zk", zk_server.address, "--region", region]
    neither = await run("move", *common)
    assert neither.returncode == 2 and "name a topic, or a bundle" in neither.stderr
    nowhere = await run("move", "--bundle", "00000000_ffffffff", *common)
    assert nowhere.returncode == 2 and "--bundle B --to H" in nowhere.stderr
    both = await run("move", "t", "--bundle", "00000000_ffffffff", "--to", "h:1", *common)
    assert both.returncode == 2 and "--bundle B --to H" in both.stderr
