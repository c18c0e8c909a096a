"""Hedwig's ZooKeeper client: ZooKeeper's protocol on the event loop, batching built in.

``ZkClient`` (``client``) is what the ZooKeeper store uses; the modules here are its parts,
from the pure codec up (``docs/zookeeper-layout.md``, "The client"). Only
``hedwig.metadata.zookeeper`` uses it (an import-linter contract in ``pyproject.toml``).
"""

from hedwig.metadata.zookeeper.client.client import OPEN_ACL_UNSAFE, ZkClient
from hedwig.metadata.zookeeper.client.codes import (
    NoAuth,
    NodeExists,
    NoNode,
    NotEmpty,
    Perm,
    RolledBack,
    ZooKeeperError,
)
from hedwig.metadata.zookeeper.client.records import Acl, Id, Stat
from hedwig.metadata.zookeeper.client.session import Phase
from hedwig.metadata.zookeeper.client.writes import Op

__all__ = [
    "OPEN_ACL_UNSAFE",
    "Acl",
    "Id",
    "NoAuth",
    "NoNode",
    "NodeExists",
    "NotEmpty",
    "Op",
    "Perm",
    "Phase",
    "RolledBack",
    "Stat",
    "ZkClient",
    "ZooKeeperError",
]
