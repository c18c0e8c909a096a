"""The metadata managers on etcd v3: versions are mod revisions, ownership is lease-bound.

Keys (``docs/zookeeper-layout.md``, "etcd"), under ``/hedwig/<region>`` or the URL's prefix,
names encoded as in ZooKeeper (``a/b`` is ``a%2Fb``, so a name never reaches into another key):

    topics/<T>             the topic exists; its configuration (JSON, empty for defaults)
    owners/<T>             owner record, attached to one of the owner's leases
    persistence/<T>        ledger ranges
    subscribers/<T>/<S>    subscription (preferences and state, whole)
    hosts/<H>              a hub that joined the region (persistent)
    alive/<H>              its load report, attached to its lease
    ledgers/L<id>          ledger metadata; ids handed out in blocks from ``ledger-ids``
    ledger-ids             the first ledger id no hub has taken yet
    acls/<name>            access control entries
    plans/<T>              a spread topic's plan (the prefix lists the planned topics)
    bundle-map             the region's bundle map (``hedwig.metadata.bundles``)
    bundle-owners/<B>      an owned bundle's owner record, attached to one of its owner's leases
    defaults               region defaults
    namespaces/<N>         a namespace's policy (``N``: ``tenant%2Fnamespace``)
    namespace-counts/<N>   how many of its topics are counted
    namespace-topics/<N>/<T>  a marker per topic counted

Each family has a prefix of its own, so listing topics reads topic keys only (page by page),
and a topic's subscriptions are one range. Every conditional write is one transaction that
compares the key's mod revision (``Version``) or its absence, and reads the key back when the
comparison fails, so the caller learns whether it was missing or changed.

The managers, a module each (or two to a module where they are small): ``ownership``
(owner records and their watches), ``ledgers`` (ledger metadata and the persistence records
naming them), ``topics`` (the catalog and subscriptions), ``hubs`` (the registry), ``acls``,
``plans``, ``bundles``, ``namespaces``; all on one ``client.EtcdClient``, its session the store's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from hedwig.clock import Clock
from hedwig.errors import MetadataError
from hedwig.metadata.etcd.acls import EtcdAcls
from hedwig.metadata.etcd.bundles import EtcdBundles
from hedwig.metadata.etcd.client import EtcdClient
from hedwig.metadata.etcd.connection import NO_CREDENTIALS, EtcdCredentials
from hedwig.metadata.etcd.hubs import EtcdHubs
from hedwig.metadata.etcd.keys import Keys
from hedwig.metadata.etcd.ledgers import EtcdLedgers, EtcdPersistence
from hedwig.metadata.etcd.namespaces import EtcdNamespaces
from hedwig.metadata.etcd.ownership import EtcdOwnership
from hedwig.metadata.etcd.plans import EtcdPlans
from hedwig.metadata.etcd.topics import EtcdSubscriptions, EtcdTopics
from hedwig.metadata.layout import ROOT
from hedwig.metadata.managers import SessionState


class EtcdSession:
    def __init__(self, etcd: EtcdClient) -> None:
        self._etcd = etcd

    @property
    def state(self) -> SessionState:
        return self._etcd.state

    def add_listener(self, listener: Callable[[SessionState], None]) -> None:
        self._etcd.add_listener(listener)


class EtcdMetadataStore:
    """Every manager of one region on one etcd client and its lease."""

    def __init__(
        self,
        target: str,
        region: str,
        *,
        prefix: str = ROOT,
        session_timeout: float = 6.0,
        credentials: EtcdCredentials = NO_CREDENTIALS,
        clock: Clock | None = None,
    ) -> None:
        self.region = region
        self.keys = Keys(region, prefix)
        self.etcd = EtcdClient(target, ttl_s=session_timeout, credentials=credentials, clock=clock)
        self.ledgers = EtcdLedgers(self.etcd, self.keys)
        self.ownership = EtcdOwnership(self.etcd, self.keys, self.ledgers)
        self.persistence = EtcdPersistence(self.etcd, self.keys, self.ledgers)
        self.subscriptions = EtcdSubscriptions(self.etcd, self.keys)
        self.topics = EtcdTopics(self.etcd, self.keys)
        self.hubs = EtcdHubs(self.etcd, self.keys)
        self.acls = EtcdAcls(self.etcd, self.keys)
        self.plans = EtcdPlans(self.etcd, self.keys)
        self.namespaces = EtcdNamespaces(self.etcd, self.keys)
        self.bundles = EtcdBundles(self.etcd, self.keys)
        self.session = EtcdSession(self.etcd)

    async def start(self) -> None:
        await self.etcd.start()

    async def close(self) -> None:
        await self.ownership.watches.close()
        await self.plans.watches.close()
        await self.bundles.watches.close()
        with contextlib.suppress(MetadataError):
            await self.etcd.close()

    async def __aenter__(self) -> EtcdMetadataStore:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


__all__ = ["EtcdMetadataStore", "Keys"]
