"""The metadata store on etcd v3 (``etcd://HOST:PORT[/PREFIX]``).

``store.EtcdMetadataStore`` is the store; ``client.EtcdClient`` its connection, session,
watches and transactions (each a module of this package: see ``client``); ``admin`` sets a
secured etcd's users up for Hedwig. Only this package talks to etcd, and only it imports
``grpc`` and ``aetcd`` (an import contract in ``pyproject.toml``).
"""

from hedwig.metadata.etcd.admin import PrefixUser, set_up_authentication
from hedwig.metadata.etcd.connection import EtcdCredentials
from hedwig.metadata.etcd.store import EtcdMetadataStore

__all__ = ["EtcdCredentials", "EtcdMetadataStore", "PrefixUser", "set_up_authentication"]
