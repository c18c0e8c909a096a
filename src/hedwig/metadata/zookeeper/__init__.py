"""The ZooKeeper metadata store, the default and reference implementation, on Hedwig's own
ZooKeeper client (``hedwig.metadata.zookeeper.client``)."""

from hedwig.metadata.zookeeper.store import ZkMetadataStore

__all__ = ["ZkMetadataStore"]
