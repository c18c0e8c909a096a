"""A topic this hub owns: its log, duplicate detection for publishers, and subscriptions.

Rules:

- Only an OPEN topic accepts publishes, subscribes and reads. Ownership decisions (claim,
  watch, release) are made by ``hedwig.hub.ownership``; this object only obeys them: it is
  created OPEN after a successful claim and log take-over, and moves to CLOSED through
  ``release`` (graceful: flush marks, close the ledger, tell clients where the topic went) or
  ``lose`` (sudden: the ownership record or the session is gone; stop at once, tell clients).
- A publish with a publisher id and publisher sequence is a duplicate when that publisher's
  last stored sequence already covers it; duplicates are answered, not stored again.
- A write that fails breaks the log: the topic reports itself lost (another hub may have taken
  over) and the publisher is told the topic is moving, so it finds the new owner.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from enum import Enum

from hedwig.clock import Clock
from hedwig.errors import (
    HedwigError,
    InvalidRequestError,
    LedgerError,
    MessagesUnavailableError,
    MessageTooLargeError,
    NoSuchSubscriptionError,
    SubscriptionBusyError,
    SubscriptionExistsError,
    TopicMovingError,
)
from hedwig.hub.config import TopicSettings
from hedwig.hub.dedup import RECENT, Known, PublisherTable
from hedwig.hub.events import HubEvents, LossKind
from hedwig.hub.peer import Peer
from hedwig.hub.subscription import Subscription
from hedwig.ledger.topic_log import TopicLog
from hedwig.metadata.managers import MetadataStore
from hedwig.metadata.records import (
    SubscriptionData,
    SubscriptionPreferences,
    SubscriptionState,
    TopicConfig,
    Version,
)
from hedwig.protocol import (
    Batch,
    CloseReason,
    Messages,
    Publish,
    Published,
    Read,
    Subscribe,
    Subscribed,
    SubscribeMode,
    TopicMoved,
)

log = logging.getLogger(__name__)

# Told (topic, why, text) when the topic's log fails under it.
LostCallback = Callable[[str, LossKind, str], None]


class TopicState(Enum):
    OPEN = "open"
    CLOSING = "closing"
    CLOSED = "closed"


class OwnedTopic:
    def __init__(
        self,
        name: str,
        log_: TopicLog,
        store: MetadataStore,
        config: TopicConfig,
        *,
        settings: TopicSettings,
        clock: Clock,
        events: HubEvents,
        on_lost: LostCallback,
    ) -> None:
        self.name = name
        self.log = log_
        self.store = store
        self.config = config
        self.settings = settings
        self.clock = clock
        self.state = TopicState.OPEN
        self.subscriptions: dict[str, Subscription] = {}
        self.publishers: set[Peer] = set()
        self.publisher_table = PublisherTable()
        self._events = events
        self._on_lost = on_lost
        self.moved_to: str | None = None
        # Cumulative counts, for the load report's rates.
        self.msg_in = 0
        self.bytes_in = 0
        self.msg_out = 0
        self.bytes_out = 0

    def _check_open(self) -> None:
        if self.state is not TopicState.OPEN:
            raise TopicMovingError(f"topic {self.name!r} is moving", destination=self.moved_to)
        if self.log.broken is not None:
            raise TopicMovingError(f"topic {self.name!r} lost its log: {self.log.broken}")

    # publish ------------------------------------------------------------------------------

    async def publish(self, peer: Peer, req: Publish) -> Published:
        self._check_open()
        messages = req.messages
        if messages.count <= 0:
            raise InvalidRequestError("a publish must carry at least one message")
        limit = self.settings.max_message_size
        if messages.largest is not None and messages.largest > limit:
            raise MessageTooLargeError(
                f"message of {messages.largest} bytes exceeds the limit of {limit}",
                size=messages.largest,
                limit=limit,
            )
        self.publishers.add(peer)
        pid, pseq, count = req.publisher_id, req.publisher_seq, messages.count
        table = self.publisher_table
        if pseq:
            try:
                known = await table.check(pid, pseq, count)
            except asyncio.CancelledError:
                known = None  # the original write failed: this one is the real attempt
            if known is not None:
                if not known.first_seq:
                    log.warning(
                        "topic %r: publisher %s seq %d..%d is older than the %d batches "
                        "remembered; answered as a duplicate",
                        self.name,
                        pid,
                        pseq,
                        pseq + count - 1,
                        RECENT,
                    )
                return Published(
                    request_id=req.request_id,
                    first_seq=known.first_seq,
                    last_seq=known.last_seq,
                    duplicate=True,
                )
            table.begin(pid, pseq, count)
        stored: Known | None = None
        try:
            batch = await self.log.append(pid, pseq, messages)
            stored = Known(batch.first_seq, batch.last_seq)
        except LedgerError as exc:
            self._on_lost(self.name, LossKind.LEDGER, f"ledger failed: {exc}")
            raise TopicMovingError(f"topic {self.name!r} lost its log: {exc}") from None
        finally:
            if pseq:
                if stored is not None:
                    table.learn(pid, pseq, count, stored.first_seq)
                table.end(pid, pseq, stored)
        size = len(messages.payload)
        self.msg_in += count
        self.bytes_in += size
        self._events.published(self.name, count, size)
        return Published(
            request_id=req.request_id, first_seq=batch.first_seq, last_seq=batch.last_seq
        )

    def remember_publishers(self, batches: list[Batch]) -> None:
        """Learn publishers' sequences from batches read back (after a take-over)."""
        for b in batches:
            if b.publisher_seq:
                self.publisher_table.learn(b.publisher_id, b.publisher_seq, b.count, b.first_seq)

    # subscriptions ------------------------------------------------------------------------

    async def subscribe(self, peer: Peer, req: Subscribe) -> Subscribed:
        self._check_open()
        prefs = SubscriptionPreferences(req.message_window, req.message_bound)
        sub = await self._find_or_create(req)
        if (
            sub.peer is not None
            and sub.peer is not peer
            and not sub.peer.closed
            and not req.force_attach
        ):
            raise SubscriptionBusyError(
                f"subscription {req.subscriber!r} is attached to another connection "
                "(subscribe with force-attach to take it over)"
            )
        answer = Subscribed(
            request_id=req.request_id, consumed_seq=sub.consumed_seq, last_seq=self.log.last_seq
        )
        sub.attach(peer, prefs)
        return answer

    async def _find_or_create(self, req: Subscribe) -> Subscription:
        """The subscription ``req`` names, read from the store or created as its mode says."""
        while True:
            sub = self.subscriptions.get(req.subscriber)
            if sub is None:
                got = await self.store.subscriptions.read_subscription_data(
                    self.name, req.subscriber
                )
                self._check_open()
                sub = self.subscriptions.get(req.subscriber)  # raced with another subscribe
                if sub is None and got is not None:
                    sub = self._make_sub(req.subscriber, got.value, got.version)
            if sub is not None:
                if req.mode is SubscribeMode.CREATE:
                    raise SubscriptionExistsError(
                        f"subscription {req.subscriber!r} exists on topic {self.name!r}"
                    )
                return sub
            if req.mode is SubscribeMode.ATTACH:
                raise NoSuchSubscriptionError(
                    f"no subscription {req.subscriber!r} on topic {self.name!r}"
                )
            prefs = SubscriptionPreferences(req.message_window, req.message_bound)
            data = SubscriptionData(
                prefs, SubscriptionState(self.log.last_seq, self.clock.wall_ms())
            )
            try:
                version = await self.store.subscriptions.create_subscription_data(
                    self.name, req.subscriber, data
                )
            except SubscriptionExistsError:
                if req.mode is SubscribeMode.CREATE:
                    raise
                continue  # created concurrently: attach to that one
            self._check_open()
            existing = self.subscriptions.get(req.subscriber)
            return existing or self._make_sub(req.subscriber, data, version)

    def _make_sub(self, name: str, data: SubscriptionData, version: Version) -> Subscription:
        sub = Subscription(
            self.name,
            name,
            data,
            version,
            log_=self.log,
            store=self.store,
            clock=self.clock,
            batch_messages=self.settings.delivery_batch_messages,
            flush_messages=self.settings.consume_flush_messages,
            on_lost=lambda why: self._on_lost(self.name, LossKind.LEDGER, why),
            on_delivered=self._delivered,
        )
        self.subscriptions[name] = sub
        return sub

    def _delivered(self, count: int, size: int) -> None:
        self.msg_out += count
        self.bytes_out += size
        self._events.delivered(self.name, count, size)

    def _attached(self, peer: Peer, subscriber: str) -> Subscription:
        sub = self.subscriptions.get(subscriber)
        if sub is None or sub.peer is not peer:
            raise NoSuchSubscriptionError(
                f"subscription {subscriber!r} on topic {self.name!r} is not attached here"
            )
        return sub

    def consume(self, peer: Peer, subscriber: str, seq: int) -> None:
        sub = self._attached(peer, subscriber)
        if sub.consume(seq):
            asyncio.get_running_loop().create_task(sub.flush())

    async def close_subscription(self, peer: Peer, subscriber: str) -> None:
        sub = self._attached(peer, subscriber)
        sub.detach_quietly()
        await sub.flush()

    async def unsubscribe(self, peer: Peer, subscriber: str) -> None:
        self._check_open()
        sub = self.subscriptions.pop(subscriber, None)
        if sub is not None:
            if sub.peer is not peer:
                sub.force_close(CloseReason.UNSUBSCRIBED, "unsubscribed by another connection")
            sub.detach_quietly()
            version = sub.version
        else:
            got = await self.store.subscriptions.read_subscription_data(self.name, subscriber)
            if got is None:
                raise NoSuchSubscriptionError(
                    f"no subscription {subscriber!r} on topic {self.name!r}"
                )
            version = got.version
        await self.store.subscriptions.delete_subscription_data(self.name, subscriber, version)

    def detach_peer(self, peer: Peer) -> None:
        self.publishers.discard(peer)
        for sub in self.subscriptions.values():
            if sub.peer is peer:
                sub.detach_quietly()
                asyncio.get_running_loop().create_task(sub.flush())

    async def flush_marks(self) -> None:
        for sub in list(self.subscriptions.values()):
            if sub.dirty:
                await sub.flush()

    # reads --------------------------------------------------------------------------------

    async def read(self, req: Read) -> Messages:
        self._check_open()
        first = self.log.first_seq
        if req.start_seq and req.start_seq < first:
            raise MessagesUnavailableError(
                f"messages before {first} of topic {self.name!r} were collected by retention",
                first_available=first,
            )
        batches = await self.log.read(
            max(req.start_seq, first), max(1, min(req.max_messages, 100_000)), max(1, req.max_bytes)
        )
        return Messages(
            request_id=req.request_id,
            first_available=first,
            last_seq=self.log.last_seq,
            batches=tuple(batches),
        )

    async def keep_from_seq(self) -> int:
        """The first sequence id some subscriber (attached or not) still needs."""
        subs = await self.store.subscriptions.read_subscriptions(self.name)
        marks = [v.value.state.consumed_seq for v in subs.values() if v.value.state is not None]
        marks += [s.consumed_seq for s in self.subscriptions.values()]
        return (min(marks) if marks else self.log.last_seq) + 1

    # leaving ------------------------------------------------------------------------------

    def _notify_moved(self, reason: str) -> None:
        peers = set(self.publishers)
        for sub in self.subscriptions.values():
            if sub.peer is not None:
                peers.add(sub.peer)
                sub.detach_quietly()
        moved = TopicMoved(topic=self.name, new_owner=self.moved_to, reason=reason)
        for peer in peers:
            if not peer.closed:
                peer.send(moved)
        self.publishers.clear()

    async def release(self, reason: str, new_owner: str | None = None) -> None:
        """Graceful hand-off: stop, flush marks, close the ledger, then tell clients."""
        if self.state is not TopicState.OPEN:
            return
        self.state = TopicState.CLOSING
        self.moved_to = new_owner
        for sub in self.subscriptions.values():
            sub.detach_quietly()
        try:
            await self.flush_marks()
            await self.log.close()
        except HedwigError as exc:  # the hand-off goes on: the next owner recovers the ledger
            log.warning("topic %r: closing the log on release failed: %s", self.name, exc)
        self.state = TopicState.CLOSED
        self._notify_moved(reason)

    def lose(self, reason: str, new_owner: str | None = None) -> None:
        """Ownership is gone (record deleted, session lost): stop at once."""
        if self.state is TopicState.CLOSED:
            return
        self.state = TopicState.CLOSED
        self.moved_to = new_owner
        if self.log.broken is None:
            self.log.broken = LedgerError(f"ownership lost: {reason}")
        self._notify_moved(reason)
