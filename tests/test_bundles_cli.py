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
