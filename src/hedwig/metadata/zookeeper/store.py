"""The metadata store on ZooKeeper: every manager of one region on one session of
``hedwig.metadata.zookeeper.client.ZkClient``.

Versions are znode versions, ownership and liveness are ephemeral znodes of the session
(``docs/zookeeper-layout.md``). Each kind of record has its manager in a module of its own
(``ownership``, ``persistence``, ``subscriptions``, ``ledgers``, ``topics``, ``hubs``,
``acl_entries``, ``plans``, ``bundles``, ``namespaces``); this one holds what they share: the
client, the session as the hub sees it (``ZkSession``: the client's phases as
``SessionState``), and the znode ACLs a store given digest credentials writes (``znode_acls``).
"""

from __future__ import annotations

from collections.abc import Callable

from hedwig.clock import Clock, SystemClock
from hedwig.metadata.layout import ROOT, Layout
from hedwig.metadata.managers import SessionState
from hedwig.metadata.zookeeper.acl_entries import ZkAcls
from hedwig.metadata.zookeeper.bundles import ZkBundles
from hedwig.metadata.zookeeper.client import Phase, ZkClient
from hedwig.metadata.zookeeper.hubs import ZkHubs
from hedwig.metadata.zookeeper.ledgers import ZkLedgers
from hedwig.metadata.zookeeper.namespaces import ZkNamespaces
from hedwig.metadata.zookeeper.ownership import ZkOwnership
from hedwig.metadata.zookeeper.persistence import ZkPersistence
from hedwig.metadata.zookeeper.plans import ZkPlans
from hedwig.metadata.zookeeper.subscriptions import ZkSubscriptions
from hedwig.metadata.zookeeper.topics import ZkTopics
from hedwig.metadata.zookeeper.znode_acls import ZnodeAcls

DEFAULT_SESSION_TIMEOUT = 6.0

# What the hub is told of each phase of the client's session (``None``: nothing). Closed
# counts as lost for whoever still asks.
_REPORTED: dict[Phase, SessionState | None] = {
    Phase.CONNECTING: None,
    Phase.CONNECTED: SessionState.CONNECTED,
    Phase.SUSPENDED: SessionState.SUSPENDED,
    Phase.EXPIRED: SessionState.LOST,
    Phase.CLOSED: None,
}
_STATE: dict[Phase, SessionState] = {
    Phase.CONNECTING: SessionState.SUSPENDED,
    Phase.CONNECTED: SessionState.CONNECTED,
    Phase.SUSPENDED: SessionState.SUSPENDED,
    Phase.EXPIRED: SessionState.LOST,
    Phase.CLOSED: SessionState.LOST,
}


class ZkSession:
    """The hub's liveness lease: the client's ZooKeeper session."""

    def __init__(self, zk: ZkClient) -> None:
        self._zk = zk

    @property
    def state(self) -> SessionState:
        return _STATE[self._zk.phase]

    def add_listener(self, listener: Callable[[SessionState], None]) -> None:
        def changed(phase: Phase) -> None:
            state = _REPORTED[phase]
            if state is not None:
                listener(state)

        self._zk.add_listener(changed)


class ZkMetadataStore:
    """Every manager of one region on one ZooKeeper session.

    ``digest``: ``USER:PASSWORD`` credentials for ZooKeeper's digest authentication; every
    znode created is then that user's to change, readable by all (``znode_acls``).
    ``clock``: what the session's pings and timeouts are timed by."""

    def __init__(
        self,
        hosts: str,
        region: str,
        *,
        session_timeout: float = DEFAULT_SESSION_TIMEOUT,
        digest: str | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.region = region
        self.layout = Layout(region)
        self.znode_acls = ZnodeAcls(digest)
        self.zk = ZkClient(
            hosts,
            session_timeout=session_timeout,
            auth=self.znode_acls.auth,
            default_acl=self.znode_acls.default,
            clock=clock or SystemClock(),
        )
        # An owner watch is filed by its topic's name, not a path of its own.
        self.zk.file_watches_by_end(f"{self.layout.topics}/", f"/{Layout.OWNER}")
        self.ledgers = ZkLedgers(self.zk, self.layout)
        self.ownership = ZkOwnership(self.zk, self.layout, self.ledgers)
        self.persistence = ZkPersistence(self.zk, self.layout, self.ledgers)
        self.subscriptions = ZkSubscriptions(self.zk, self.layout)
        self.topics = ZkTopics(self.zk, self.layout)
        self.hubs = ZkHubs(self.zk, self.layout)
        self.acls = ZkAcls(self.zk, self.layout)
        self.plans = ZkPlans(self.zk, self.layout)
        self.namespaces = ZkNamespaces(self.zk, self.layout)
        self.bundles = ZkBundles(self.zk, self.layout)
        self.session = ZkSession(self.zk)

    async def start(self) -> None:
        await self.zk.start()
        # Several pools (regions, each with its own digest) share one ensemble under ROOT.
        await self.znode_acls.ensure_shared(self.zk, ROOT)
        # The region's own node made with the digest's ACL, and checked with its children.
        await self.znode_acls.ensure_region(self.zk, self.layout.base)
        for path in (
            self.layout.topics,
            self.layout.hosts,
            self.layout.ledgers,
            self.layout.acls,
        ):
            await self.zk.ensure_path(path)

    async def close(self) -> None:
        await self.zk.close()

    async def __aenter__(self) -> ZkMetadataStore:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
