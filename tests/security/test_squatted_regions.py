"""A region can be squatted no more: its znodes are made with the digest's ACL and checked.

Against a real ZooKeeper, with kazoo as the attacker's client (unauthenticated, as anyone who
reaches ZooKeeper is): a region whose node, or ``acls`` node, someone made writable before
its first hub is refused, with an error that names the znode and is not retried, and no ACL
entry planted there is ever read; a region made by its hubs cannot be written by anyone else:
no ACL entry added, no ``ledger-ids`` counter deleted or set back, its ACLs not changed.
Before, a secured hub used the nodes it found as they were (an ACL entry planted by an
unauthenticated client was obeyed within seconds) and the counter could be deleted and made
again at 1.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import OPEN_ACL_UNSAFE, make_digest_acl

from hedwig.devcluster.zookeeper import ZooKeeperServer
from hedwig.errors import RegionNotProtectedError
from hedwig.hub import Hub
from hedwig.metadata.layout import Layout
from hedwig.metadata.zookeeper import ZkMetadataStore
from tests.security.conftest import secure_config
from tests.security.fixtures import Pki, TokenIssuer

pytestmark = pytest.mark.integration

DIGEST = "hedwig:s3cret"
# An ACL entry giving a principal nothing would need: every operation on every topic.
PLANTED = json.dumps(
    {
        "rules": [
            {
                "principal": "mallory",
                "operations": ["create", "publish", "subscribe", "read", "describe", "admin"],
                "resource": "topic",
                "name": "",
                "pattern": "prefix",
                "effect": "allow",
            }
        ],
        "source": "planted",
    }
).encode()


@pytest.fixture
def attacker(zk_server: ZooKeeperServer) -> Iterator[KazooClient]:
    zk = KazooClient(hosts=zk_server.address, timeout=10)
    zk.start(timeout=10)
    yield zk
    zk.stop()
    zk.close()


def region_name(request: pytest.FixtureRequest) -> str:
    return f"sq-{request.node.name[-40:].replace('[', '-').replace(']', '')}-{time.time_ns()}"


@pytest.mark.parametrize("planted_at", ["region", "acls"])
async def test_a_region_others_made_writable_is_refused(
    zk_server: ZooKeeperServer,
    attacker: KazooClient,
    request: pytest.FixtureRequest,
    planted_at: str,
) -> None:
    layout = Layout(region_name(request))
    attacker.ensure_path("/hedwig")
    if planted_at == "region":
        attacker.create(layout.base, b"", acl=OPEN_ACL_UNSAFE)
    else:
        # Its acls node, and so the region's node above it (open), with an entry in it.
        attacker.create(layout.acls, b"", acl=OPEN_ACL_UNSAFE, makepath=True)
        attacker.create(f"{layout.acls}/planted", PLANTED, acl=OPEN_ACL_UNSAFE)
    store = ZkMetadataStore(zk_server.address, layout.region, session_timeout=4.0, digest=DIGEST)
    with pytest.raises(RegionNotProtectedError, match="may be changed by others") as refused:
        await store.start()
    await store.close()
    # The region's node is checked first: whatever is under a node others made is suspect.
    assert refused.value.path == layout.base and "world:anyone:rwcda" in refused.value.acl
    assert not refused.value.retriable


async def test_a_child_of_the_region_others_may_write_is_refused(
    zk_server: ZooKeeperServer, request: pytest.FixtureRequest
) -> None:
    """The region's node is the digest's, one of its children (made with that digest, but
    open, as an older tool might have) is not: refused at the child."""
    layout = Layout(region_name(request))
    user, _, password = DIGEST.partition(":")
    insider = KazooClient(hosts=zk_server.address, timeout=10, auth_data=[("digest", DIGEST)])
    insider.start(timeout=10)
    try:
        ours = make_digest_acl(user, password, all=True)
        insider.ensure_path("/hedwig")
        insider.create(layout.base, b"", acl=[ours])
        insider.create(layout.ledger_ids, b"1", acl=OPEN_ACL_UNSAFE)
    finally:
        insider.stop()
        insider.close()
    store = ZkMetadataStore(zk_server.address, layout.region, session_timeout=4.0, digest=DIGEST)
    with pytest.raises(RegionNotProtectedError) as refused:
        await store.start()
    await store.close()
    assert refused.value.path == layout.ledger_ids


async def test_a_hub_refuses_a_squatted_region_at_once(
    zk_server: ZooKeeperServer,
    attacker: KazooClient,
    request: pytest.FixtureRequest,
    pki: Pki,
    issuer: TokenIssuer,
) -> None:
    layout = Layout(region_name(request))
    attacker.create(layout.acls, b"", acl=OPEN_ACL_UNSAFE, makepath=True)
    attacker.create(f"{layout.acls}/planted", PLANTED, acl=OPEN_ACL_UNSAFE)
    store = ZkMetadataStore(zk_server.address, layout.region, session_timeout=4.0, digest=DIGEST)
    hub = Hub(secure_config(pki, issuer, region=layout.region), store=store)
    started = time.monotonic()
    try:
        with pytest.raises(RegionNotProtectedError, match=layout.base):
            await hub.start()
        assert time.monotonic() - started < 10, "refused, not retried"
    finally:
        await hub.stop()
        shutil.rmtree(hub.config.storage.data_dir, ignore_errors=True)


async def test_a_region_its_hubs_made_is_theirs_alone(
    zk_server: ZooKeeperServer, attacker: KazooClient, request: pytest.FixtureRequest
) -> None:
    layout = Layout(region_name(request))
    store = ZkMetadataStore(zk_server.address, layout.region, session_timeout=4.0, digest=DIGEST)
    await store.start()
    try:
        await store.ledgers.new_id()  # the ledger-ids counter exists now
        counter, _ = attacker.get(layout.ledger_ids)
        with pytest.raises(NoAuthError):
            attacker.create(f"{layout.acls}/planted", PLANTED)
        with pytest.raises(NoAuthError):
            attacker.delete(layout.ledger_ids)
        with pytest.raises(NoAuthError):
            attacker.set(layout.ledger_ids, b"1")
        with pytest.raises(NoAuthError):
            attacker.set_acls(layout.base, OPEN_ACL_UNSAFE)
        with pytest.raises(NoAuthError):
            attacker.create(f"{layout.base}/intruder", b"")
        assert attacker.get(layout.ledger_ids)[0] == counter
        assert await store.acls.list_acls() == {}
    finally:
        await store.close()
    # Its hubs start on it again: their own nodes pass the check.
    again = ZkMetadataStore(zk_server.address, layout.region, session_timeout=4.0, digest=DIGEST)
    await again.start()
    await again.close()
