"""Regions made by the ensemble's administrator: ``/hedwig`` closed to creation by others.

A node's ACL says who may create its children, and ZooKeeper's digest scheme can name only
identities whose hash the ACL's writer knows. So a ``/hedwig`` that every pool's hubs may
create under is one anybody may create under (a region name taken before its pool starts, or
znodes without limit), unless one party knows every pool: the operator does (it makes their
digests). Here that party holds an *admin digest*: ``/hedwig`` is made (or set) readable by all
and the admin's alone, and each region's node is made by the admin, before its pool's first
hub, with the region's own ACL (everything for the region's digest, read for anyone: what its
hubs would have made, and what they check, ``znode_acls``). The admin needs only the region
digest's hash for that, and none of the region's rights below it.

Where ZooKeeper is configured with the admin as its super-user
(``-Dzookeeper.DigestAuthenticationProvider.superDigest``, as the chart's ZooKeeper is), the
admin may also set ``/hedwig``'s ACL whoever made it (a squatter before the operator, or hubs
of an older version that left it open): ``make_region`` then closes it. Without that, a
``/hedwig`` the admin may not administer is reported (``MetadataRefusedError``), not used.

A region that is already there is left as it is: its hubs check it (``RegionNotProtectedError``
for one others may write). One ensemble, one admin: a second admin digest cannot share a
``/hedwig`` the first one closed.
"""

from __future__ import annotations

import contextlib
from urllib.parse import urlsplit

from hedwig.errors import MetadataRefusedError, UsageError
from hedwig.metadata.layout import ROOT, Layout
from hedwig.metadata.zookeeper.client import Acl, NoAuth, NodeExists, Perm, ZkClient
from hedwig.metadata.zookeeper.znode_acls import READ_ACL_UNSAFE, ZnodeAcls, acl_text, digest_id


def admin_acl(admin_digest: str) -> tuple[Acl, ...]:
    """``/hedwig``'s ACL under an admin: everything for the admin, read for anyone."""
    mine = ZnodeAcls(admin_digest).mine
    if mine is None:
        raise UsageError("the ZooKeeper admin digest is USER:PASSWORD")
    return (Acl(int(Perm.ALL), mine), *READ_ACL_UNSAFE)


def region_acl(region_digest: str) -> tuple[Acl, ...]:
    """A region node's ACL: everything for the region's digest, read for anyone."""
    user, sep, password = region_digest.partition(":")
    if not sep or not user or not password:
        raise UsageError("a region's ZooKeeper digest is USER:PASSWORD")
    return (Acl(int(Perm.ALL), digest_id(user, password)), *READ_ACL_UNSAFE)


def zookeeper_hosts(url: str) -> str:
    """``HOST:PORT[,...]`` of a ZooKeeper URL (``zk://[USER:PASSWORD@]HOST:PORT``) or of a
    bare connection string; credentials in the URL are not the admin's and are dropped."""
    url = url.strip()
    if "://" not in url:
        return url
    parts = urlsplit(url)
    if parts.scheme.lower() not in ("zk", "zookeeper") or not parts.netloc:
        raise UsageError(f"{url!r} is not a ZooKeeper URL (zk://HOST:PORT)")
    return parts.netloc.rpartition("@")[2]


async def make_region(
    url: str,
    region: str,
    *,
    admin_digest: str,
    region_digest: str,
    session_timeout_s: float = 10.0,
) -> bool:
    """``/hedwig`` closed under ``admin_digest``, and ``region``'s node made with
    ``region_digest``'s ACL if it is not there; True if it was made now. ``MetadataError``
    subclasses: unreachable (``MetadataUnavailableError``), or ``MetadataRefusedError`` if
    the admin may not administer ``/hedwig`` (made by someone else, on an ensemble whose
    super-user is not the admin)."""
    closed = admin_acl(admin_digest)
    made_acl = region_acl(region_digest)
    base = Layout(region).base
    zk = ZkClient(
        zookeeper_hosts(url),
        session_timeout=session_timeout_s,
        auth=(("digest", admin_digest.encode()),),
        default_acl=closed,
    )
    await zk.start()
    try:
        await _close_root(zk, closed)
        if await zk.exists(base) is not None:
            return False
        with contextlib.suppress(NodeExists):
            await zk.create(base, b"", acl=made_acl)
            return True
        return False
    finally:
        await zk.close()


async def _close_root(zk: ZkClient, closed: tuple[Acl, ...]) -> None:
    if await zk.exists(ROOT) is None:
        with contextlib.suppress(NodeExists):
            await zk.create(ROOT, b"", acl=closed)
    current, _ = await zk.get_acls(ROOT)
    if {_key(a) for a in current} == {_key(a) for a in closed}:
        return
    try:
        await zk.set_acls(ROOT, closed)
    except NoAuth as exc:
        written = acl_text(current)
        raise MetadataRefusedError(
            f"{ROOT} was made by someone else ({written}) and this ZooKeeper's super-user is "
            "not the admin digest, so it cannot be closed to creation by others: set "
            "zookeeper.DigestAuthenticationProvider.superDigest to the admin's digest, or "
            f"have ZooKeeper's administrator set {ROOT}'s ACL to the admin's alone"
        ) from exc


def _key(acl: Acl) -> tuple[int, str, str]:
    return (acl.perms, acl.id.scheme, acl.id.id)
