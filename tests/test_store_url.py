"""``open_store``: one URL names the metadata store, for every component."""

from __future__ import annotations

import pytest

from hedwig.errors import UsageError
from hedwig.metadata import open_store
from hedwig.metadata.memory import MemoryMetadataStore
from hedwig.metadata.records import HubLoad
from hedwig.metadata.zookeeper import ZkMetadataStore


def test_etcd_urls() -> None:
    from hedwig.metadata.etcd import EtcdMetadataStore

    store = open_store("etcd://127.0.0.1:2379", region="r")
    assert isinstance(store, EtcdMetadataStore)
    assert store.keys.base == "/hedwig/r" and store.etcd.target == "127.0.0.1:2379"
    url = "etcd://u:p@10.0.0.1:1,10.0.0.2:2/apps/hedwig/"
    store = open_store(url, region="r", session_timeout_s=4.5)
    assert isinstance(store, EtcdMetadataStore)
    assert store.keys.base == "/apps/hedwig/r"
    assert store.etcd.target == "ipv4:10.0.0.1:1,10.0.0.2:2"
    assert store.etcd.ttl == 5  # whole seconds, rounded up: never shorter than asked


def test_zookeeper_urls() -> None:
    for url in ("127.0.0.1:2181", "zk://127.0.0.1:2181", "zk://a:1,b:2", "zookeeper://h:3"):
        store = open_store(url, region="r")
        assert isinstance(store, ZkMetadataStore)
        assert store.region == "r"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("", "empty"),
        ("localhost", "HOST:PORT"),
        ("zk://", "needs HOST:PORT"),
        ("zk://h:1/chroot", "no path"),
        ("etcd-ish://h:1", "unknown metadata store"),
        ("etcd://", "needs HOST:PORT"),
        ("etcd://h", "HOST:PORT"),
        ("etcd://alice@h:1", "USER:PASSWORD"),
        ("etcd://a:1,b:2", "IPv4 addresses"),
    ],
)
def test_bad_urls_are_refused(url: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        open_store(url, region="r")


async def test_memory_stores_with_one_name_share_their_data() -> None:
    async with (
        open_store("memory://shared-test", region="r") as a,
        open_store("memory://shared-test", region="r") as b,
        open_store("memory://other-test", region="r") as c,
    ):
        assert isinstance(a, MemoryMetadataStore)
        await a.hubs.register_hub("h:1", HubLoad(timestamp_ms=1))
        assert [h.address for h in await b.hubs.list_hubs()] == ["h:1"]
        assert await c.hubs.list_hubs() == []
