"""The ACLs of the znodes Hedwig creates, when its store has ZooKeeper digest credentials.

With ``USER:PASSWORD`` the session authenticates by ZooKeeper's digest scheme on every
connection, and every znode it creates gets "everything for that user, read for anyone"
(Kafka's ``zookeeper.set.acl``): another client can read the tree, not change or delete it.
Without credentials, znodes are open (ZooKeeper's ``OPEN_ACL_UNSAFE``).

The node the regions live under (``/hedwig``) is closed to creation as well: a secured store
that finds it missing makes it with its own ACL, so nobody else may make a region, or any
znode, there. A ``/hedwig`` that anyone may create under once let a client that reached
ZooKeeper take a region's name before its pool's first hub, and make znodes without limit.
Several pools with their own digests share an ensemble through an admin digest that knows
them all (``regions``: the operator makes each pool's region node before its hubs start); a
store finds its region made so, and never opens ``/hedwig`` up. One that finds ``/hedwig``
open (made by an older version, or without credentials) leaves it so and logs a warning:
closing it is for whoever made it, or the ensemble's super-user. A region it may not create
(``/hedwig`` closed to its digest) is ``MetadataRefusedError``, naming who may.

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
import logging
from collections.abc import Sequence

from hedwig.errors import MetadataError, MetadataRefusedError, RegionNotProtectedError
from hedwig.metadata.zookeeper.client import (
    OPEN_ACL_UNSAFE,
    Acl,
    Id,
    NoAuth,
    NodeExists,
    NoNode,
    Perm,
    ZkClient,
)

log = logging.getLogger(__name__)

READ_ACL_UNSAFE = (Acl(int(Perm.READ), Id("world", "anyone")),)


def digest_id(user: str, password: str) -> Id:
    """The identity ZooKeeper's digest scheme gives ``user`` with ``password``:
    ``user:base64(sha1(user:password))``."""
    hashed = hashlib.sha1(f"{user}:{password}".encode()).digest()
    return Id("digest", f"{user}:{base64.b64encode(hashed).decode()}")


def acl_text(acl: Sequence[Acl]) -> str:
    """An ACL as ZooKeeper's CLI writes it: ``scheme:id:rwcda, ...``."""
    return ", ".join(f"{a.id.scheme}:{a.id.id}:{_perms(a.perms)}" for a in acl) or "(none)"


def _perms(perms: int) -> str:
    return "".join(c for c, p in zip("rwcda", _PERMS, strict=True) if perms & p)


_PERMS = (Perm.READ, Perm.WRITE, Perm.CREATE, Perm.DELETE, Perm.ADMIN)


class ZnodeAcls:
    """The credentials a store presents and the ACLs it writes (see the module docstring)."""

    def __init__(self, digest: str | None) -> None:
        self.auth: tuple[tuple[str, bytes], ...] = ()
        self.default: tuple[Acl, ...] = OPEN_ACL_UNSAFE
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

    async def ensure_shared(self, zk: ZkClient, path: str) -> None:
        """The node the regions live under (``/hedwig``): with credentials, made with this
        store's ACL if missing (closed to creation by others), left as it is if found; a
        warning if anyone may create under it (see the module docstring)."""
        if self.mine is None:
            await zk.ensure_path(path)
            return
        if await zk.exists(path) is None:
            with contextlib.suppress(NodeExists):
                await zk.create(path, b"", acl=self.default, makepath=True)
            return
        current, _ = await zk.get_acls(path)
        if any(a.id.scheme == "world" and a.perms & Perm.CREATE for a in current):
            log.warning(
                "%s lets anyone create under it (%s): anyone who reaches ZooKeeper may take "
                "a region's name there; its maker or ZooKeeper's super-user should close it "
                "(docs/security.md)",
                path,
                acl_text(current),
            )

    async def ensure_region(self, zk: ZkClient, base: str) -> None:
        """The region's node ``base``, made with this store's ACL if missing; with
        credentials, it and each child of it checked: ``RegionNotProtectedError`` if anyone
        else may write one (see the module docstring)."""
        if self.mine is None:
            await zk.ensure_path(base)
            return
        if await zk.exists(base) is None:
            try:
                await zk.create(base, b"", acl=self.default)
            except NodeExists:
                pass
            except NoAuth as exc:
                parent = base.rpartition("/")[0]
                acl, _ = await zk.get_acls(parent)
                raise MetadataRefusedError(
                    f"the region's node {base} does not exist and this store may not make it: "
                    f"{parent} is closed to its digest ({acl_text(acl)}). On an ensemble "
                    "shared by pools, regions are made by the admin digest (the operator "
                    "makes a pool's before its hubs start)"
                ) from exc
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
        written = acl_text(acl)
        raise RegionNotProtectedError(
            f"the region's znode {path} may be changed by others ({written}): it was made "
            "before this region's hubs, by another ZooKeeper client or without digest "
            "credentials, and what is in it cannot be trusted. Check it and delete the "
            "region's tree with ZooKeeper's super-user (or use another region name), then "
            "start the hubs again",
            path=path,
            acl=written,
        )
