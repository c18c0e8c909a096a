"""The ACLs of the znodes Hedwig creates, when its store has ZooKeeper digest credentials.

With ``USER:PASSWORD`` the session authenticates by ZooKeeper's digest scheme on every
connection, and every znode it creates gets "everything for that user, read for anyone"
(Kafka's ``zookeeper.set.acl``): another client can read the tree, not change or delete it.
The node shared by the regions (``/hedwig``) lets anyone create under it as well, so pools
with their own digests share one ensemble, each region a protected subtree. Without
credentials, znodes are open (ZooKeeper's ``OPEN_ACL_UNSAFE``).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib

from hedwig.errors import MetadataError
from hedwig.metadata.zookeeper.client import OPEN_ACL_UNSAFE, Acl, Id, NodeExists, Perm, ZkClient

READ_ACL_UNSAFE = (Acl(int(Perm.READ), Id("world", "anyone")),)


def digest_id(user: str, password: str) -> Id:
    """The identity ZooKeeper's digest scheme gives ``user`` with ``password``:
    ``user:base64(sha1(user:password))``."""
    hashed = hashlib.sha1(f"{user}:{password}".encode()).digest()
    return Id("digest", f"{user}:{base64.b64encode(hashed).decode()}")


class ZnodeAcls:
    """The credentials a store presents and the ACLs it writes (see the module docstring)."""

    def __init__(self, digest: str | None) -> None:
        self.auth: tuple[tuple[str, bytes], ...] = ()
        self.default: tuple[Acl, ...] = OPEN_ACL_UNSAFE
        self.shared: tuple[Acl, ...] | None = None
        if not digest:
            return
        user, sep, password = digest.partition(":")
        if not sep or not user or not password:
            raise MetadataError("ZooKeeper digest credentials are USER:PASSWORD")
        mine = Acl(int(Perm.ALL), digest_id(user, password))
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
