"""The operator's connections to a secured etcd: opened with what the pool's access Secret holds
(read through the API), refused clearly when the Secret is missing or etcd refuses it."""

from __future__ import annotations

import base64
import time
from pathlib import Path
from typing import Any

import pytest
from hedwig_operator.metadata import MetadataConnections
from hedwig_operator.ownership import SecretRefusedError, read_access
from hedwig_operator.pools import apply_children
from hedwig_operator.specs import AccessSecret, parse_pool
from hedwig_operator.workers import PoolWorker

from hedwig.devcluster.etcd import EtcdServer
from hedwig.devcluster.security import DevSecurity
from hedwig.errors import MetadataUnavailableError
from tests.operator.fakes import World, pool_body, ready_condition
from tests.secured_etcd import access_files, change_password, secured_etcd
from tests.waiting import succeeds


@pytest.mark.integration
async def test_a_pool_store_is_opened_with_its_secret(
    secured_etcd_server: tuple[DevSecurity, EtcdServer],
) -> None:
    security, server = secured_etcd_server
    secrets = {
        ("ns", "good"): access_files(security),
        ("ns", "wrong"): {**access_files(security), "credentials": b"hedwig:wrong"},
    }
    asked: list[tuple[str, str]] = []

    async def read_secret(secret: AccessSecret) -> dict[str, bytes]:
        asked.append((secret.namespace, secret.name))
        return secrets.get((secret.namespace, secret.name), {})

    connections = MetadataConnections(read_secret=read_secret, connect_timeout_s=5.0)
    try:
        store = await connections.get(server.url, "pool-a", AccessSecret("ns", "good", "pool-a"))
        await store.topics.ensure_topic("t")
        assert await store.topics.list_topics() == ["t"]
        assert (
            await connections.get(server.url, "pool-a", AccessSecret("ns", "good", "pool-a"))
            is store
        )
        assert asked == [("ns", "good")], "the Secret is read when the store is opened"

        with pytest.raises(MetadataUnavailableError, match="refused user 'hedwig'"):
            await connections.get(server.url, "pool-b", AccessSecret("ns", "wrong", "pool-b"))
        with pytest.raises(MetadataUnavailableError, match="ns/missing does not exist"):
            await connections.get(server.url, "pool-c", AccessSecret("ns", "missing", "pool-c"))
        # Corrected, the Secret is read again: refusals are not kept.
        secrets[("ns", "wrong")] = access_files(security)
        fixed = await connections.get(server.url, "pool-b", AccessSecret("ns", "wrong", "pool-b"))
        await fixed.topics.ensure_topic("u")
    finally:
        await connections.close()


@pytest.mark.integration
async def test_an_open_pool_store_follows_its_secret_through_a_rotation(
    tmp_path: Path,
) -> None:
    """A password rotated in etcd and in the pool's Secret: etcd refuses the store's token,
    and the store reads the Secret's credentials again through the API, without being opened
    again."""
    security, server = secured_etcd(str(tmp_path))
    secrets = {("ns", "s"): access_files(security)}

    async def read_secret(secret: AccessSecret) -> dict[str, bytes]:
        return secrets.get((secret.namespace, secret.name), {})

    connections = MetadataConnections(read_secret=read_secret, connect_timeout_s=5.0)
    try:
        store = await connections.get(server.url, "rotating", AccessSecret("ns", "s", "rotating"))
        await store.topics.ensure_topic("before")
        secrets[("ns", "s")] = {**access_files(security), "credentials": b"hedwig:rotated"}
        await change_password(server, security, "hedwig", "rotated")
        await store.topics.ensure_topic("after")
        assert (
            await connections.get(server.url, "rotating", AccessSecret("ns", "s", "rotating"))
            is store
        )
        assert await store.topics.list_topics() == ["after", "before"]
    finally:
        await connections.close()
        server.stop()


@pytest.mark.integration
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

    async def read_secret(secret: AccessSecret) -> dict[str, bytes]:
        reads.append(secret.name)
        return secrets.get((secret.namespace, secret.name), {})

    connections = MetadataConnections(read_secret=read_secret, connect_timeout_s=5.0)
    try:
        store = await connections.get(server.url, "pool", AccessSecret("ns", "s", "pool"))
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
        left = 15 - (time.monotonic() - down)  # within 15 s of the outage's end
        await succeeds(lambda: store.topics.ensure_topic("after"), MetadataUnavailableError, left)
        assert await store.topics.list_topics() == ["after", "before", "during"]
        assert await connections.get(server.url, "pool", AccessSecret("ns", "s", "pool")) is store
    finally:
        await connections.close()
        server.stop()


# ------------------------------------------------------- the Secret's owner binds it to a pool


def _secret(name: str, labels: dict[str, str] | None = None, **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": "ns", "labels": labels or {}, **meta},
        "data": {"credentials": base64.b64encode(b"hedwig:their-password").decode()},
    }


def _etcd_pool(secret: str) -> dict[str, Any]:
    body = pool_body(spec={"metadata": {"url": "etcd://etcd.attacker:2379", "secretName": secret}})
    return body


@pytest.mark.parametrize(
    ("secret", "problem"),
    [
        (None, r"ns/payments-db does not exist \(yet\): create it with the label"),
        (_secret("payments-db"), "is not bound to pool pool"),
        (
            _secret("payments-db", {"hedwig.io/store-access-for": "other"}),
            "bound to 'other'",
        ),
        (
            _secret(
                "payments-db",
                {"hedwig.io/store-access-for": "pool"},
                ownerReferences=[
                    {
                        "apiVersion": "hedwig.io/v1alpha1",
                        "kind": "HubPool",
                        "name": "pool",
                        "uid": "pool-uid",
                        "controller": True,
                    }
                ],
            ),
            "is one the operator made",
        ),
    ],
    ids=["missing", "unlabelled", "another-pool", "operators-own"],
)
async def test_a_pool_cannot_name_a_secret_its_owner_did_not_bind_to_it(
    secret: dict[str, Any] | None, problem: str
) -> None:
    """A HubPool naming another app's Secret as its etcd access: the operator neither reads
    its credentials (to send them to the etcd the pool names) nor mounts it into the pool's
    hubs: the pool applies nothing, says why in its condition and a Warning Event."""
    w = await World().start()
    if secret is not None:
        w.kube.put(secret)
    body = _etcd_pool("payments-db")
    w.kube.put(body)
    pool = parse_pool(body)
    assert pool.store_secret is not None
    with pytest.raises(SecretRefusedError, match=problem) as refused:
        await apply_children(w.kube, pool)
    assert refused.value.reason == "SecretNotBound"
    assert not w.kube.applied, "no StatefulSet mounts it"
    opened: list[str] = []

    def opener(url: str, region: str) -> Any:
        opened.append(url)
        raise AssertionError("the store must not be opened")

    connections = MetadataConnections(opener, read_secret=lambda s: read_access(w.kube, s))
    with pytest.raises(MetadataUnavailableError, match=problem):
        await connections.get(pool.metadata_url, pool.region, pool.store_secret)
    assert opened == []

    w.ctx.metadata = connections
    worker = PoolWorker(w.ctx, body, lambda key: [])
    await worker.refresh(pool)
    cond = ready_condition(w.kube.objects[("HubPool", "ns", "pool")])
    assert (cond["status"], cond["reason"]) == ("False", "SecretNotBound")
    (event,) = w.kube.events_for("HubPool", "pool")
    assert (event["type"], event["reason"]) == ("Warning", "SecretNotBound")


async def test_a_secret_bound_to_the_pool_is_mounted_and_read() -> None:
    w = await World().start()
    w.kube.put(_secret("etcd-access", {"hedwig.io/store-access-for": "pool"}))
    body = _etcd_pool("etcd-access")
    pool = parse_pool(body)
    await apply_children(w.kube, pool)
    assert "StatefulSet" in {m["kind"] for m in w.kube.applied}
    assert pool.store_secret is not None
    data = await read_access(w.kube, pool.store_secret)
    assert data["credentials"] == b"hedwig:their-password"
    # Unbound later: an open store's next credentials read gets none from it.
    w.kube.put(_secret("etcd-access"))
    with pytest.raises(SecretRefusedError):
        await read_access(w.kube, pool.store_secret)
