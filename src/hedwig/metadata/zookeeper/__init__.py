"""The ZooKeeper metadata store (kazoo), the default and reference implementation."""

from hedwig.metadata.zookeeper.store import ZkMetadataStore

__all__ = ["ZkMetadataStore"]
