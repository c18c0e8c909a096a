"""The metadata store on etcd v3 (``etcd://HOST:PORT[/PREFIX]``)."""

from hedwig.metadata.etcd.store import EtcdMetadataStore

__all__ = ["EtcdMetadataStore"]
