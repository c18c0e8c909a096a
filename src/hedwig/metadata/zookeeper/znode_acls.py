"""The ACLs of the znodes Hedwig creates, when its store has ZooKeeper digest credentials.

With ``USER:PASSWORD`` the session authenticates by ZooKeeper's digest scheme on every
connection, and every znode it creates gets "everything for that user, read for anyone"
(Kafka's ``zookeeper.set.acl``): another client can read the tree, not change or delete it.
The node shared by the regions (``/hedwig``) lets anyone create under it as well, so pools
with their own digests share one ensemble, each region a protected subtree. Without
credentials, znodes are open (ZooKeeper's ``OPEN_ACL_UNSAFE``).

A region is protected only if its znodes were made so. Someone who reached ZooKeeper before a
pool's first hub could make the region's node, or its ``acls`` node, writable by anyone, and
a secured hub that found them there used them as they were: an ACL entry planted by an
unauthenticated client was obeyed within seconds, and the ``ledger-ids`` counter could be
deleted and made again at 1. So a secured store makes its region's node with its ACL, and
checks the node and every child of it that exists (``topics``, ``acls``, ``ledgers``,
``ledger-ids``, ...) when it starts: if any identity but its own may do more than read one,
the region is refused with ``RegionNotProtectedError``, which names the znode and its ACL and
is not retried. Below a node that is the store's alone only the store can create, so the
region's node and its children are enough: whatever is deeper was made by its hubs.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
from collections.abc import Sequence

from hedwig.errors import MetadataError, RegionNotProtectedError
from hedwig.metadata.zookeeper.client import (
    OPEN_ACL_UNSAFE,
    Acl,
    Id,
    NodeExists,
    NoNode,
    Perm,
    ZkClient,
)

READ_ACL_UNSAFE = (Acl(int(Perm.READ), Id("world", "anyone")),)


def digest_id(user: str, password: str) -> Id:
    """The identity ZooKeeper's digest scheme gives ``user`` with ``password``:
    ``user:base64(sha1(user:password))``."""
    hashed = hashlib.sha1(f"{user}:{password}".encode()).digest()
    return Id("digest", f"{user}:{base64.b64encode(hashed).decode()}")


def _written(acl: Sequence[Acl]) -> str:
    return ", ".join(f"{a.id.scheme}:{a.id.id}:{_perms(a.perms)}" for a in acl) or "(none)"


def _perms(perms: int) -> str:
    return "".join(c for c, p in zip("rwcda", _PERMS, strict=True) if perms & p)


_PERMS = (Perm.READ, Perm.WRITE, Perm.CREATE, Perm.DELETE, Perm.ADMIN)


class ZnodeAcls:
    """The credentials a store presents and the ACLs it writes (see the module docstring)."""

    def __init__(self, digest: str | None) -> None:
        self.auth: tuple[tuple[str, bytes], ...] = ()
        self.default: tuple[Acl, ...] = OPEN_ACL_UNSAFE
        self.shared: tuple[Acl, ...] | None = None
        self.mine: Id | None = None
        if not digest:
            return
        user, sep, password = digest.partition(":")
        if not sep or not user or not password:
            raise MetadataError("ZooKeeper digest credentials are USER:PASSWORD")
        self.mine = digest_id(user, password)
        mine = Acl(int(Perm.ALL), self.mine)
        self.auth = (("digest", digest.encode()),)
        self.default = (mine, *READ_ACL_UNSAFE)
        # A node several regions live under: this user may do everything, anyone may read
        # it and create under it (each region its own, protected, subtree).
        self.shared = (mine, Acl(int(Perm.READ | Perm.CREATE), Id("world", "anyone")))

    async def ensure_shared(self, zk: ZkClient, path: str) -> None:
        """A node several regions live under (``/hedwig``): anyone may create a child (another
        pool's region, with its own digest); only its creator may change or delete it. One made
        before by a single region's digest, where no other pool could create its region, is
        opened up by that region's hubs, which hold ADMIN on it."""
        acl = self.shared
        if acl is None:
            await zk.ensure_path(path)
            return
        if await zk.exists(path) is None:
            with contextlib.suppress(NodeExists):
                await zk.create(path, b"", acl=acl, makepath=True)
            return
        current, _ = await zk.get_acls(path)
        if any(a.id.scheme == "world" and a.perms & Perm.CREATE for a in current):
            return
        with contextlib.suppress(MetadataError):  # not ours to change: its owner opens it
            await zk.set_acls(path, [*current, acl[1]])

    async def ensure_region(self, zk: ZkClient, base: str) -> None:
        """The region's node ``base``, made with this store's ACL if missing; with
        credentials, it and each child of it checked: ``RegionNotProtectedError`` if anyone
        else may write one (see the module docstring)."""
        if self.mine is None:
            await zk.ensure_path(base)
            return
        if await zk.exists(base) is None:
            with contextlib.suppress(NodeExists):
                await zk.create(base, b"", acl=self.default)
        await self._check(zk, base)
        for child in sorted(await zk.children(base)):
            await self._check(zk, f"{base}/{child}")

    async def _check(self, zk: ZkClient, path: str) -> None:
        try:
            acl, _ = await zk.get_acls(path)
        except NoNode:
            return  # deleted since listed: only this store's digest could have
        others = [a for a in acl if a.id != self.mine and a.perms & ~int(Perm.READ)]
        if not others:
            return
        written = _written(acl)
        raise RegionNotProtectedError(
            f"the region's znode {path} may be changed by others ({written}): it was made "
            "before this region's hubs, by another ZooKeeper client or without digest "
            "credentials, and what is in it cannot be trusted. Check it and delete the "
            "region's tree with ZooKeeper's super-user (or use another region name), then "
            "start the hubs again",
            path=path,
            acl=written,
        )
