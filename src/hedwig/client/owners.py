"""Which hub a client last saw owning each topic (and serving each routed subscription).

The router forgets by hub as often as it learns by topic: a connection that closes drops every
topic that hub owned, and a topic that moves drops its subscriptions' routes to the old hub.
A plain dictionary answers those by walking every entry: at a million topics published to, each
closed connection (a hub killed, a rolling restart: one per hub) and each TOPIC_MOVED of a
rebalancing walked a million entries on the client's event loop. So the entries are also indexed
by hub, and subscription routes by their topic: forgetting costs what is forgotten.
"""

from __future__ import annotations

from hedwig.client.routes import RouteKey, SubscriptionRoute


class Owners:
    """A mapping of routing key (``routes.RouteKey``) to hub address, indexed the other way
    round too."""

    __slots__ = ("_by_hub", "_hub_of", "_routes_of")

    def __init__(self) -> None:
        self._hub_of: dict[RouteKey, str] = {}
        self._by_hub: dict[str, set[RouteKey]] = {}
        # topic -> the subscription routes of that topic that have an entry
        self._routes_of: dict[str, set[SubscriptionRoute]] = {}

    def __len__(self) -> int:
        return len(self._hub_of)

    def get(self, key: RouteKey) -> str | None:
        return self._hub_of.get(key)

    def set(self, key: RouteKey, hub: str) -> None:
        old = self._hub_of.get(key)
        if old == hub:
            return
        if old is not None:
            self._unindex(key, old)
        self._hub_of[key] = hub
        self._by_hub.setdefault(hub, set()).add(key)
        if isinstance(key, SubscriptionRoute):
            self._routes_of.setdefault(key.topic, set()).add(key)

    def setdefault(self, key: RouteKey, hub: str) -> None:
        if key not in self._hub_of:
            self.set(key, hub)

    def pop(self, key: RouteKey) -> str | None:
        hub = self._hub_of.pop(key, None)
        if hub is not None:
            self._unindex(key, hub)
            if isinstance(key, SubscriptionRoute):
                routes = self._routes_of[key.topic]
                routes.discard(key)
                if not routes:
                    del self._routes_of[key.topic]
        return hub

    def drop_hub(self, hub: str) -> None:
        """Forget everything ``hub`` was seen owning or serving."""
        for key in list(self._by_hub.get(hub, ())):
            self.pop(key)

    def drop_routes(self, topic: str, hub: str) -> None:
        """Forget the routes of ``topic``'s subscriptions that lead to ``hub``."""
        for key in list(self._routes_of.get(topic, ())):
            if self._hub_of.get(key) == hub:
                self.pop(key)

    def _unindex(self, key: RouteKey, hub: str) -> None:
        keys = self._by_hub[hub]
        keys.discard(key)
        if not keys:
            del self._by_hub[hub]
