"""The owned topic a request is for, and what each connection touched.

A topic request finds its topic through ``TopicOwnership.acquire``, which serves it, claims it,
or raises ``NotResponsibleError`` naming the owner. Only publishing and subscribing create a
topic that does not exist yet; with authorization on that needs the ``create`` permission too
(``AccessControl.check_create``, which allows everything with authorization off).

Each connection remembers the topics it published or subscribed to, so that its disconnection
detaches it from each (its publishers' and subscribers' places), up to ``TOPICS_KEPT`` of
them; past that, its disconnection looks at every owned topic.
"""

from __future__ import annotations

from hedwig.hub.front.access import AccessControl
from hedwig.hub.front.server import ClientConnection
from hedwig.hub.owning.ownership import TopicOwnership
from hedwig.hub.owning.topic import OwnedTopic
from hedwig.hub.spreading.fanout import FanOut
from hedwig.metadata.managers import MetadataStore

# The topics a connection's disconnection detaches it from, by name, up to this many; past
# it, every owned topic (``ClientConnection.topics``).
TOPICS_KEPT = 1_024


class OwnedTopics:
    def __init__(
        self,
        *,
        ownership: TopicOwnership,
        fanout: FanOut,
        access: AccessControl,
        store: MetadataStore,
    ) -> None:
        self.ownership = ownership
        self._fanout = fanout
        self._access = access
        self._store = store

    async def acquire(
        self, conn: ClientConnection, topic: str, redirected: bool, *, create: bool = False
    ) -> OwnedTopic:
        """The owned topic; only publishing and subscribing ``create`` it (and need the
        ``create`` permission for a topic that does not exist yet, with authorization on)."""
        if create and topic not in self.ownership.topics:
            await self._access.check_create(
                conn, topic, lambda: self._store.topics.topic_exists(topic)
            )
        owned = await self.ownership.acquire(topic, redirected=redirected, create=create)
        touched(conn, topic)
        return owned

    def disconnected(self, conn: ClientConnection) -> None:
        """Detach ``conn`` from everything it published or subscribed to here."""
        self._fanout.detach_peer(conn)
        seen = conn.topics
        if seen is None:
            for each in list(self.ownership.topics.values()):
                each.detach_peer(conn)
            return
        for topic in seen:
            owned = self.ownership.topics.get(topic)
            if owned is not None:
                owned.detach_peer(conn)


def touched(conn: ClientConnection, topic: str) -> None:
    """``conn`` published or subscribed to ``topic``."""
    seen = conn.topics
    if seen is None or topic in seen:
        return
    if len(seen) >= TOPICS_KEPT:
        conn.topics = None
    else:
        seen.add(topic)
