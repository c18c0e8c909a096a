"""``/hedwig`` is closed to creation by others, on a real ZooKeeper.

The regions' node once let anyone create under it: an unauthenticated client (kazoo here, the
attacker's) could take a region's name before its pool's first hub, or make znodes there
without limit. Now a secured store that makes ``/hedwig`` makes it its digest's alone; several
pools share an ensemble through the admin digest (the operator's, ZooKeeper's super-user in
the chart), which closes a ``/hedwig`` whoever made it and makes each pool's region with that
pool's ACL; a pool's own digest may not make another region under it. One ZooKeeper of this
module's own, with the admin as its super-user, wiped between tests (the suite's shared one
keeps ``/hedwig`` open for its open regions).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import OPEN_ACL_UNSAFE, Permissions, make_digest_acl

from hedwig.devcluster.zookeeper import ZooKeeperServer
from hedwig.errors import MetadataRefusedError
from hedwig.metadata.layout import ROOT, Layout
from hedwig.metadata.zookeeper import ZkMetadataStore
from hedwig.metadata.zookeeper.regions import make_region

pytestmark = pytest.mark.integration

ADMIN = "hedwig-admin:adm1n-s3cret"
POOL_A = "hedwig:pool-a-s3cret"
POOL_B = "hedwig:pool-b-s3cret"


def kazoo(address: str, digest: str | None = None) -> KazooClient:
    zk = KazooClient(hosts=address, timeout=10, auth_data=[("digest", digest)] if digest else None)
    zk.start(timeout=10)
    return zk


@pytest.fixture(scope="module")
def ensemble(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    server = ZooKeeperServer(data_dir=str(tmp_path_factory.mktemp("zk-root")), super_digest=ADMIN)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def attacker(ensemble: ZooKeeperServer) -> Iterator[KazooClient]:
    admin = kazoo(ensemble.address, ADMIN)  # the super-user: a fresh ensemble for each test
    if admin.exists(ROOT):
        admin.delete(ROOT, recursive=True)
    admin.stop()
    admin.close()
    zk = kazoo(ensemble.address)
    yield zk
    zk.stop()
    zk.close()


async def started(address: str, region: str, digest: str) -> ZkMetadataStore:
    store = ZkMetadataStore(address, region, session_timeout=4.0, digest=digest)
    await store.start()
    return store


async def test_a_secured_store_makes_the_root_closed(
    ensemble: ZooKeeperServer, attacker: KazooClient
) -> None:
    store = await started(ensemble.address, "alone", POOL_A)
    try:
        with pytest.raises(NoAuthError):
            attacker.create(f"{ROOT}/squat", b"")  # a region name taken before its pool
        with pytest.raises(NoAuthError):
            attacker.create(f"{ROOT}/filler-", b"", sequence=True)
        with pytest.raises(NoAuthError):
            attacker.set_acls(ROOT, OPEN_ACL_UNSAFE)
        # Another pool's digest may not make its region there either: the admin makes it.
        other = ZkMetadataStore(ensemble.address, "other", session_timeout=4.0, digest=POOL_B)
        with pytest.raises(MetadataRefusedError, match="closed to its digest") as refused:
            await other.start()
        await other.close()
        assert not refused.value.retriable
        assert attacker.get_children(ROOT) == ["alone"]
    finally:
        await store.close()
    # Its hubs start on it again, and leave it closed.
    again = await started(ensemble.address, "alone", POOL_A)
    await again.close()
    assert all(a.id.scheme != "world" or a.perms == 1 for a in attacker.get_acls(ROOT)[0])


async def test_the_admin_closes_a_squatted_root_and_makes_each_pools_region(
    ensemble: ZooKeeperServer, attacker: KazooClient
) -> None:
    # Before the operator: the root made open, and a region's name taken with it.
    attacker.create(ROOT, b"", acl=OPEN_ACL_UNSAFE)
    attacker.create(Layout("taken").base, b"", acl=OPEN_ACL_UNSAFE)
    assert await make_region(ensemble.address, "a", admin_digest=ADMIN, region_digest=POOL_A)
    url = f"zk://{ensemble.address}"
    assert await make_region(url, "b", admin_digest=ADMIN, region_digest=POOL_B)
    assert not await make_region(url, "a", admin_digest=ADMIN, region_digest=POOL_A)
    with pytest.raises(NoAuthError):
        attacker.create(f"{ROOT}/squat", b"")
    a = await started(ensemble.address, "a", POOL_A)
    b = await started(ensemble.address, "b", POOL_B)
    try:
        await a.ledgers.new_id()
        await b.ledgers.new_id()
        # Each region its own pool's alone: not the other pool's, not the attacker's.
        pool_a = kazoo(ensemble.address, POOL_A)
        try:
            with pytest.raises(NoAuthError):
                pool_a.create(f"{Layout('b').acls}/planted", b"{}", makepath=False)
            with pytest.raises(NoAuthError):
                pool_a.create(f"{ROOT}/c", b"")
        finally:
            pool_a.stop()
            pool_a.close()
        # Made with pool b's own ACL (digest ids are shown to a holder of ADMIN alone).
        user, _, password = POOL_B.partition(":")
        acl, _ = await b.zk.get_acls(Layout("b").base)
        ours = make_digest_acl(user, password, all=True)
        assert {(a.perms, a.id.scheme, a.id.id) for a in acl} == {
            (ours.perms, "digest", ours.id.id),
            (Permissions.READ, "world", "anyone"),
        }
    finally:
        await a.close()
        await b.close()


async def test_an_admin_who_is_not_the_super_user_cannot_take_anothers_root(
    ensemble: ZooKeeperServer, attacker: KazooClient
) -> None:
    store = await started(ensemble.address, "first", POOL_A)  # the root made POOL_A's
    await store.close()
    with pytest.raises(MetadataRefusedError, match="superDigest"):
        await make_region(
            ensemble.address, "second", admin_digest="other-admin:pw", region_digest=POOL_B
        )
    assert attacker.get_children(ROOT) == ["first"]
