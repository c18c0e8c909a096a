"""The asynchronous client: publish, subscribe and read through any hub.

``HedwigClient`` is the facade; the work is done by three parts:

- ``routing.Router``: connections, which hub owns which topic, redirects and retries;
- ``publishing.TopicPublisher``: ordered, batched, pipelined publishing to one topic;
- ``subscribing.Subscriber``: one subscription, re-attached by itself after failures and moves.

This module holds the client's options, its lifetime and what hubs push: deliveries,
TOPIC_MOVED, forced closes, lane changes and lost connections, each routed to the publishers
and subscribers it concerns. Its calls are grouped by what they do, one module each:
``publish`` (the per-message path), ``subscribe`` and ``admin`` (reading and administration).
Every wait runs on the injected clock, and the ``network`` decides whether hubs are reached
over TCP or in memory (tests).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Sequence

from hedwig.client.facade.admin import Administration
from hedwig.client.facade.publish import Publishing
from hedwig.client.facade.subscribe import Subscribing
from hedwig.client.publishing import TopicPublisher
from hedwig.client.retry import RetryPolicy
from hedwig.client.routes import SubscriptionRoute
from hedwig.client.routing import Router
from hedwig.client.subscribing import Subscriber
from hedwig.clock import Clock, SystemClock
from hedwig.errors import HedwigError, UsageError
from hedwig.net.connection import CONNECT_TIMEOUT_S, HubConnection
from hedwig.net.transport import TCP, Network, TcpNetwork, split_address
from hedwig.protocol import (
    Deliver,
    Event,
    LanesChanged,
    Redeliver,
    SubscriptionForcedClosed,
    SubscriptionMoved,
    TopicMoved,
    lane_of,
)
from hedwig.protocol.names import ORIGIN_MARK
from hedwig.security.credentials import ClientSecurity


class HedwigClient(Publishing, Subscribing, Administration):
    """Connects to any hub(s); keyword-only options, each with a reasoned default."""

    def __init__(
        self,
        hubs: str | Sequence[str],
        *,
        publisher_id: str | None = None,
        # Batches are cut at this many messages or bytes: large enough to amortise a round
        # trip and an fsync, small enough to keep one batch's latency low.
        max_batch_messages: int = 2000,
        max_batch_bytes: int = 1024 * 1024,
        # Batches in flight per topic: enough to keep a hub's group commit busy.
        max_inflight_batches: int = 16,
        # Wait this long for more messages before cutting a batch (0: cut at once).
        linger_s: float = 0.0,
        max_message_size: int = 1024 * 1024,
        retry: RetryPolicy | None = None,
        # A request not answered in this long fails its attempt (and is retried).
        request_timeout_s: float = 30.0,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
        # A region with fewer hubs than a topic's replication needs (a lone hub with 3/3/2)
        # refuses publishes at once; wait for more hubs instead (up to the retry deadline).
        wait_for_hubs: bool = False,
        # Called (topic, error, seconds so far) whenever a request waits to be retried.
        on_wait: Callable[[str, HedwigError, float], None] | None = None,
        clock: Clock | None = None,
        network: Network | None = None,
        # TLS and credentials (``ClientSecurity.from_env()`` reads HEDWIG_* variables and finds
        # a pod's projected token). None: plaintext and anonymous, which only a hub with
        # security off accepts.
        security: ClientSecurity | None = None,
    ) -> None:
        given = [hubs] if isinstance(hubs, str) else list(hubs)
        addresses = [a.strip() for h in given for a in h.split(",") if a.strip()]
        if not addresses:
            raise UsageError("at least one hub address is needed")
        for address in addresses:
            split_address(address)  # HOST:PORT, or a UsageError now rather than at first use
        self.hubs = addresses
        if publisher_id is not None and publisher_id.startswith(ORIGIN_MARK):
            raise UsageError(
                f"publisher id {publisher_id!r} starts with {ORIGIN_MARK!r}: such ids are kept "
                "for messages replicated from another region"
            )
        self.publisher_id = publisher_id or uuid.uuid4().hex
        self.max_batch_messages = max_batch_messages
        self.max_batch_bytes = max_batch_bytes
        self.max_inflight_batches = max_inflight_batches
        self.linger_s = linger_s
        self.max_message_size = max_message_size
        self.retry = retry or RetryPolicy()
        self.clock = clock or SystemClock()
        self.security = security or ClientSecurity()
        if (
            isinstance(network, TcpNetwork)
            and network.client_tls is None
            and self.security.tls is not None
        ):
            # Plain TCP given with TLS asked for would send the credentials in the clear.
            raise UsageError(
                "security asks for TLS but the network given does none: leave network out, "
                "or give a TcpNetwork with client_tls"
            )
        if network is None:
            reload = self.security.reload
            network = (
                TcpNetwork(
                    client_tls=self.security.tls,
                    before_connect=reload.reload_if_changed if reload else None,
                )
                if self.security.tls
                else TCP
            )
        self.router = Router(
            addresses,
            retry=self.retry,
            request_timeout_s=request_timeout_s,
            connect_timeout_s=connect_timeout_s,
            clock=self.clock,
            network=network,
            on_event=self._on_event,
            on_close=self._on_close,
            wait_for_hubs=wait_for_hubs,
            on_wait=on_wait,
            credentials=self.security.credentials,
        )
        self._publishers: dict[str, TopicPublisher] = {}
        self._subscribers: dict[SubscriptionRoute, Subscriber] = {}
        self._closed = False

    async def __aenter__(self) -> HedwigClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._closed:
            return
        for pub in list(self._publishers.values()):
            with contextlib.suppress(HedwigError):
                await pub.flush()
            pub.stop()
        # Let go of them: a client kept after closing (a tool's, a test's) would otherwise
        # hold every topic's publisher, a few kilobytes each, for as long as it lives.
        self._publishers.clear()
        for sub in list(self._subscribers.values()):
            await sub.close()
        self._subscribers.clear()
        self._closed = True
        self.router.close()

    async def connection(self, address: str) -> HubConnection:
        """The client's connection to the hub at ``address`` (for tools that send raw
        requests)."""
        return await self.router.connection(address)

    def owner_of(self, topic: str) -> str | None:
        """The hub this client last saw owning ``topic``."""
        return self.router.owner_of(topic)

    # what hubs push -------------------------------------------------------------------------

    def _on_event(self, conn: HubConnection, event: Event) -> None:
        if isinstance(event, Deliver | Redeliver):
            sub = self._subscribers.get(SubscriptionRoute(event.topic, event.subscriber))
            if sub is not None:
                sub.on_deliver(conn, event)
        elif isinstance(event, TopicMoved):
            pub = self._publishers.get(event.topic) or self._publishers.get(lane_of(event.topic)[0])
            if pub is not None and pub.target == event.topic:
                pub.barrier()
            for key, sub in list(self._subscribers.items()):
                if key.topic == event.topic:
                    sub.on_moved(conn, event.reason)
        elif isinstance(event, SubscriptionForcedClosed):
            sub = self._subscribers.get(SubscriptionRoute(event.topic, event.subscriber))
            if sub is not None:
                sub.on_forced_close(conn, event)
        elif isinstance(event, LanesChanged):
            for key, sub in list(self._subscribers.items()):
                if key.topic == event.topic:
                    sub.on_lanes_changed()
        elif isinstance(event, SubscriptionMoved):
            sub = self._subscribers.get(SubscriptionRoute(event.topic, event.subscriber))
            if sub is not None:
                sub.on_subscription_moved(
                    conn, f"served by {event.hub or 'the owner'} now: {event.reason}"
                )

    def _on_close(self, conn: HubConnection) -> None:
        for sub in list(self._subscribers.values()):
            sub.on_connection_lost(conn)
