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
from hedwig.protocol import (
    BackoffStep,
    CreateSubscription,
    Subscribed,
    SubscribeMode,
    SubscriptionType,
    Unsubscribe,
    lane_name,
    validate_name,
)


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
        type: SubscriptionType = SubscriptionType.EXCLUSIVE,
    ) -> Subscriber:
        """Attach to ``subscriber`` of ``topic``, creating it as ``mode`` says. An exclusive
        subscription (the default) has one consumer and consumes cumulatively; with ``type``
        failover or shared this is one of several consumers, each acknowledging its messages
        (``Subscriber.ack``, ``nack``), ``message_window`` the most it holds unacknowledged."""
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
            kind=type,
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

    async def create_subscription(
        self,
        topic: str,
        subscriber: str,
        *,
        type: SubscriptionType,
        ack_timeout: float = 30.0,
        max_deliveries: int = 0,
        backoff: tuple[float, ...] = (),
        dead_letter: str | None = None,
        delay: float = 0.0,
    ) -> int:
        """Create a subscription of ``type`` with its delivery policy, which its owner applies
        to every consumer alike: a message not acknowledged ``ack_timeout`` seconds after its
        delivery comes again (0: only when its consumer leaves); one nacked or timed out waits
        its ``backoff`` step (seconds, by delivery, the last repeating); past
        ``max_deliveries`` (0: no limit) it is published to the ``dead_letter`` topic (which
        must exist; its creator needs ``publish`` there) and acknowledged, or without one
        dropped and counted; every message is delivered no earlier than ``delay`` seconds
        after it was published (a retry subscription; at most a week). Starts after the topic's
        last message (``reset_subscription`` moves it); returns the consume mark.
        ``SubscriptionExistsError`` if it exists."""
        validate_name(topic)
        validate_name(subscriber, what="subscriber")
        steps = tuple(BackoffStep(round(s * 1000)) for s in backoff)
        answer, _ = await self.router.topic_request(
            topic,
            lambda rid, redirected: CreateSubscription(
                request_id=rid,
                topic=topic,
                subscriber=subscriber,
                type=type,
                ack_timeout_ms=round(ack_timeout * 1000),
                max_deliveries=max_deliveries,
                backoff=steps,
                dead_letter=dead_letter,
                delay_ms=round(delay * 1000),
                redirected=redirected,
            ),
            route=SubscriptionRoute(topic, subscriber),
        )
        assert isinstance(answer, Subscribed)
        return answer.consumed_seq

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
