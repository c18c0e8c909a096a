"""The client's subscribing calls: a ``Subscriber`` per subscription, filed by its key.

The client files each subscriber under its ``SubscriptionRoute`` (and a topic's subscriber
files its lanes' subscriptions there too: ``_lane_registry``), so what hubs push about a
subscription reaches it (``client``). One subscriber per subscription and client at a time.
``unsubscribe`` deletes the subscription, its lanes' after it, by the removal rule of
``admin``.
"""

from __future__ import annotations

import contextlib

from hedwig.client.facade.admin import Administration
from hedwig.client.routes import SubscriptionRoute
from hedwig.client.subscribing import Subscriber
from hedwig.errors import NoSuchSubscriptionError, NoSuchTopicError, UsageError
from hedwig.protocol import SubscribeMode, Unsubscribe, lane_name, validate_name


class Subscribing(Administration):
    """``HedwigClient``'s subscribing calls."""

    _subscribers: dict[SubscriptionRoute, Subscriber]
    _closed: bool

    async def subscribe(
        self,
        topic: str,
        subscriber: str,
        *,
        mode: SubscribeMode = SubscribeMode.CREATE_OR_ATTACH,
        message_window: int = 1000,
        message_bound: int = 0,
        force_attach: bool = False,
        auto_consume: bool = False,
    ) -> Subscriber:
        if self._closed:
            raise UsageError("client is closed")
        validate_name(topic)
        validate_name(subscriber, what="subscriber")
        key = SubscriptionRoute(topic, subscriber)
        existing = self._subscribers.get(key)
        if existing is not None and not existing.closed:
            raise UsageError(f"already subscribed to {topic!r} as {subscriber!r}")
        sub = Subscriber(
            self.router,
            topic,
            subscriber,
            mode=mode,
            window=message_window,
            bound=message_bound,
            auto_consume=auto_consume,
            registry=self._lane_registry,
        )
        self._subscribers[key] = sub
        try:
            await sub.attach(force=force_attach)
            # A topic served by lanes is read from every lane before this returns, so
            # nothing published to a lane after it returns is missed.
            await sub.follow_lanes()
        except BaseException:
            self._subscribers.pop(key, None)
            await sub.close()
            raise
        return sub

    def _lane_registry(self, sub: Subscriber, add: bool) -> None:
        """Lanes' subscriptions get the events of their lane's topic."""
        key = SubscriptionRoute(sub.topic, sub.name)
        if add:
            self._subscribers[key] = sub
        elif self._subscribers.get(key) is sub:
            del self._subscribers[key]

    async def close_subscription(self, topic: str, subscriber: str) -> None:
        sub = self._subscribers.pop(SubscriptionRoute(topic, subscriber), None)
        if sub is not None:
            await sub.close()

    async def unsubscribe(self, topic: str, subscriber: str) -> None:
        """Delete the subscription (and its lanes' subscriptions, for a topic with lanes)."""
        await self.close_subscription(topic, subscriber)
        lanes = await self._other_lanes(topic, NoSuchTopicError)
        await self._unsubscribe(topic, subscriber)
        for index in lanes:
            with contextlib.suppress(NoSuchSubscriptionError, NoSuchTopicError):
                await self._unsubscribe(lane_name(topic, index), subscriber)

    async def _unsubscribe(self, topic: str, subscriber: str) -> None:
        await self._request_once(
            topic,
            lambda rid, _: Unsubscribe(request_id=rid, topic=topic, subscriber=subscriber),
            already_done=NoSuchSubscriptionError,
            route=SubscriptionRoute(topic, subscriber),
        )
