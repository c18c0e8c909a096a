"""The operator's connections to a secured etcd: opened with what the pool's access Secret holds
(read through the API), refused clearly when the Secret is missing or etcd refuses it."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from hedwig_operator.metadata import MetadataConnections

from hedwig.devcluster.etcd import EtcdServer
from hedwig.devcluster.security import DevSecurity
from hedwig.errors import MetadataUnavailableError
from tests.secured_etcd import access_files, change_password, secured_etcd

pytestmark = pytest.mark.integration


async def test_a_pool_store_is_opened_with_its_secret(
    secured_etcd_server: tuple[DevSecurity, EtcdServer],
) -> None:
    security, server = secured_etcd_server
    secrets = {
        ("ns", "good"): access_files(security),
        ("ns", "wrong"): {**access_files(security), "credentials": b"hedwig:wrong"},
    }
    asked: list[tuple[str, str]] = []

    async def read_secret(namespace: str, name: str) -> dict[str, bytes]:
        asked.append((namespace, name))
        return secrets.get((namespace, name), {})

    connections = MetadataConnections(read_secret=read_secret, connect_timeout_s=5.0)
    try:
        store = await connections.get(server.url, "pool-a", ("ns", "good"))
        await store.topics.ensure_topic("t")
        assert await store.topics.list_topics() == ["t"]
        assert await connections.get(server.url, "pool-a", ("ns", "good")) is store
        assert asked == [("ns", "good")], "the Secret is read when the store is opened"

        with pytest.raises(MetadataUnavailableError, match="refused user 'hedwig'"):
            await connections.get(server.url, "pool-b", ("ns", "wrong"))
        with pytest.raises(MetadataUnavailableError, match="ns/missing does not exist"):
            await connections.get(server.url, "pool-c", ("ns", "missing"))
        # Corrected, the Secret is read again: refusals are not kept.
        secrets[("ns", "wrong")] = access_files(security)
        fixed = await connections.get(server.url, "pool-b", ("ns", "wrong"))
        await fixed.topics.ensure_topic("u")
    finally:
        await connections.close()


async def test_an_open_pool_store_follows_its_secret_through_a_rotation(
    tmp_path: Path,
) -> None:
    """A password rotated in etcd and in the pool's Secret: etcd refuses the store's token,
    and the store reads the Secret's credentials again through the API, without being opened
    again."""
    security, server = secured_etcd(str(tmp_path))
    secrets = {("ns", "s"): access_files(security)}

    async def read_secret(namespace: str, name: str) -> dict[str, bytes]:
        return secrets.get((namespace, name), {})

    connections = MetadataConnections(read_secret=read_secret, connect_timeout_s=5.0)
    try:
        store = await connections.get(server.url, "rotating", ("ns", "s"))
        await store.topics.ensure_topic("before")
        secrets[("ns", "s")] = {**access_files(security), "credentials": b"hedwig:rotated"}
        await change_password(server, security, "hedwig", "rotated")
        await store.topics.ensure_topic("after")
        assert await connections.get(server.url, "rotating", ("ns", "s")) is store
        assert await store.topics.list_topics() == ["after", "before"]
    finally:
        await connections.close()
        server.stop()


async def test_an_open_pool_store_waits_out_a_wrong_or_deleted_secret_and_an_etcd_restart(
    tmp_path: Path,
) -> None:
    """The operator's store of a pool whose access goes wrong while it is open: the password
    changes in etcd while the Secret is deleted, then holds the old password: every call fails
    as retriable (the reconcile is tried again), never as a refusal that would mark the Topics
    failed for good, and goes on once the Secret is right. Then etcd restarts: calls fail as
    retriable while it is down, and after it the store authenticates again (etcd forgot its
    token) with the Secret's credentials and goes on, its session kept."""
    security, server = secured_etcd(str(tmp_path))
    secrets = {("ns", "s"): access_files(security)}
    reads: list[str] = []

    async def read_secret(namespace: str, name: str) -> dict[str, bytes]:
        reads.append(name)
        return secrets.get((namespace, name), {})

    connections = MetadataConnections(read_secret=read_secret, connect_timeout_s=5.0)
    try:
        store = await connections.get(server.url, "pool", ("ns", "s"))
        await store.topics.ensure_topic("before")
        del secrets[("ns", "s")]
        await change_password(server, security, "hedwig", "second")
        with pytest.raises(MetadataUnavailableError, match="waiting for its new credentials"):
            await store.topics.ensure_topic("during")
        secrets[("ns", "s")] = {**access_files(security), "credentials": b"hedwig:first"}
        with pytest.raises(MetadataUnavailableError, match="waiting for its new credentials"):
            await store.topics.ensure_topic("during")
        secrets[("ns", "s")] = {**access_files(security), "credentials": b"hedwig:second"}
        await store.topics.ensure_topic("during")
        assert len(reads) >= 4, "the Secret was read again at each refusal"

        server.stop()
        with pytest.raises(MetadataUnavailableError):
            await store.topics.ensure_topic("down")
        down = time.monotonic()
        server.start()
        # As the operator's reconcile does: again until etcd answers (gRPC reconnects within
        # two seconds; its default waits grow to two minutes).
        while True:
            try:
                await store.topics.ensure_topic("after")
                break
            except MetadataUnavailableError:
                assert time.monotonic() - down < 15, "etcd is back but the store is not"
                await asyncio.sleep(0.2)
        assert await store.topics.list_topics() == ["after", "before", "during"]
        assert await connections.get(server.url, "pool", ("ns", "s")) is store
    finally:
        await connections.close()
        server.stop()
