"""A topic this hub owns: its log, duplicate detection for publishers, and subscriptions.

Rules:

- Only an OPEN topic accepts publishes, subscribes and reads. Ownership decisions (claim,
  watch, release) are made by ``hedwig.hub.ownership``; this object only obeys them: it is
  created OPEN after a successful claim and log take-over, and moves to CLOSED through
  ``release`` (graceful: flush marks, close the ledger, tell clients where the topic went) or
  ``lose`` (sudden: the ownership znode or the session is gone; stop at once, tell clients).
- A publish with a publisher id and publisher sequence is a duplicate when that publisher's
  last stored sequence already covers it; duplicates are answered, not stored again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from enum import Enum

from hedwig.clock import Clock
from hedwig.errors import HedwigError, LedgerError, ProtocolError
from hedwig.hub.dedup import RECENT, Known, PublisherTable
from hedwig.hub.peer import Peer
from hedwig.hub.subscription import Subscription
from hedwig.ledger.topic_log import TopicLog
from hedwig.metadata.managers import MetadataStore
from hedwig.metadata.records import (
    SubscriptionData,
    SubscriptionPreferences,
    SubscriptionState,
    TopicConfig,
)
from hedwig.protocol import status
from hedwig.protocol.frames import (
    Batch,
    Messages,
    Publish,
    Published,
    Read,
    Subscribe,
    Subscribed,
    SubscribeMode,
    TopicMoved,
    scan_messages,
)

log = logging.getLogger(__name__)


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
        clock: Clock,
        hub_settings: object,
        on_lost: Callable[[str, str], None],
        stats: Callable[[str, int, int], None] | None = None,
    ) -> None:
        from hedwig.hub.config import HubConfig

        assert isinstance(hub_settings, HubConfig)
        self.name = name
        self.log = log_
        self.store = store
        self.config = config
        self.clock = clock
        self.settings = hub_settings
        self.state = TopicState.OPEN
        self.subscriptions: dict[str, Subscription] = {}
        self.publishers: set[Peer] = set()
        self.publisher_table = PublisherTable()
        self._on_lost = on_lost
        self._stats = stats
        self.moved_to: str | None = None
        self.msg_in = 0
        self.bytes_in = 0
        self.msg_out = 0
        self.bytes_out = 0

    @property
    def max_message_size(self) -> int:
        return self.config.max_message_size or self.settings.max_message_size

    def _check_open(self) -> None:
        if self.state is not TopicState.OPEN:
            raise status.TopicMovingError(f"topic {self.name!r} is moving", detail=self.moved_to)
        if self.log.broken is not None:
            raise status.TopicMovingError(f"topic {self.name!r} lost its log: {self.log.broken}")

    # publish ------------------------------------------------------------------------------

    async def publish(self, peer: Peer, req: Publish) -> Published:
        self._check_open()
        if req.count <= 0:
            raise status.InvalidRequestError("a publish must carry at least one message")
        try:
            scan_messages(req.payload, req.count, self.max_message_size)
        except ValueError as exc:
            raise status.MessageTooLargeError(
                f"message of {exc.args[0]} bytes exceeds the limit of {self.max_message_size}"
            ) from None
        except ProtocolError as exc:
            raise status.InvalidRequestError(f"malformed batch: {exc}") from None
        self.publishers.add(peer)
        pid, pseq = req.publisher_id, req.publisher_seq
        table = self.publisher_table
        if pseq:
            try:
                known = await table.check(pid, pseq, req.count)
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
                        pseq + req.count - 1,
                        RECENT,
                    )
                return Published(req.request_id, known.first_seq, known.last_seq, True)
            table.begin(pid, pseq)
        stored: Known | None = None
        try:
            batch = await self.log.append(pid, pseq, req.count, req.payload)
            stored = Known(batch.first_seq, batch.last_seq)
        except LedgerError as exc:
            self._on_lost(self.name, f"ledger failed: {exc}")
            raise status.TopicMovingError(f"topic {self.name!r} lost its log: {exc}") from None
        finally:
            if pseq:
                if stored is not None:
                    table.learn(pid, pseq, req.count, stored.first_seq)
                table.end(pid, pseq, stored)
        self.msg_in += req.count
        self.bytes_in += len(req.payload)
        if self._stats is not None:
            self._stats("in", req.count, len(req.payload))
        return Published(req.request_id, batch.first_seq, batch.last_seq)

    def remember_publishers(self, batches: list[Batch]) -> None:
        """Learn publishers' sequences from batches read back (after a take-over)."""
        for b in batches:
            if b.publisher_seq:
                self.publisher_table.learn(b.publisher_id, b.publisher_seq, b.count, b.first_seq)

    # subscriptions ------------------------------------------------------------------------

    async def subscribe(self, peer: Peer, req: Subscribe) -> Subscribed:
        self._check_open()
        prefs = SubscriptionPreferences(req.message_window, req.message_bound)
        sub = self.subscriptions.get(req.subscriber)
        if sub is None:
            got = await self.store.subscriptions.read_subscription_data(self.name, req.subscriber)
            self._check_open()
            sub = self.subscriptions.get(req.subscriber)  # raced with another subscribe
            if sub is None and got is not None:
                sub = self._make_sub(req.subscriber, got.value, got.version)
        if sub is None:
            if req.mode is SubscribeMode.ATTACH:
                raise status.NoSuchSubscriptionError(
                    f"no subscription {req.subscriber!r} on topic {self.name!r}"
                )
            data = SubscriptionData(
                prefs, SubscriptionState(self.log.last_seq, self.clock.wall_ms())
            )
            try:
                version = await self.store.subscriptions.create_subscription_data(
                    self.name, req.subscriber, data
                )
            except HedwigError as exc:
                from hedwig.errors import SubscriptionStateExistsError

                if isinstance(exc, SubscriptionStateExistsError):
                    raise status.ServiceUnavailableError(
                        "subscription created concurrently; retry"
                    ) from exc
                raise
            self._check_open()
            sub = self._make_sub(req.subscriber, data, version)
        elif req.mode is SubscribeMode.CREATE:
            raise status.SubscriptionExistsError(
                f"subscription {req.subscriber!r} exists on topic {self.name!r}"
            )
        if (
            sub.peer is not None
            and sub.peer is not peer
            and not sub.peer.closed
            and not req.force_attach
        ):
            raise status.SubscriptionBusyError(
                f"subscription {req.subscriber!r} is attached to another connection "
                "(subscribe with force-attach to take it over)"
            )
        answer = Subscribed(req.request_id, sub.consumed_seq, self.log.last_seq)
        sub.attach(peer, prefs)
        return answer

    def _make_sub(self, name: str, data: SubscriptionData, version: int) -> Subscription:
        from hedwig.metadata.records import Version

        sub = Subscription(
            self.name,
            name,
            data,
            Version(version),
            log_=self.log,
            store=self.store,
            batch_messages=self.settings.delivery_batch_messages,
            flush_messages=self.settings.consume_flush_messages,
            on_lost=lambda reason: self._on_lost(self.name, reason),
            on_delivered=self._delivered,
        )
        self.subscriptions[name] = sub
        return sub

    def _delivered(self, count: int, size: int) -> None:
        self.msg_out += count
        self.bytes_out += size
        if self._stats is not None:
            self._stats("out", count, size)

    def _attached(self, peer: Peer, subscriber: str) -> Subscription:
        sub = self.subscriptions.get(subscriber)
        if sub is None or sub.peer is not peer:
            raise status.NoSuchSubscriptionError(
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
                sub.force_close("unsubscribed by another connection")
            sub.detach_quietly()
            version = sub.version
        else:
            got = await self.store.subscriptions.read_subscription_data(self.name, subscriber)
            if got is None:
                raise status.NoSuchSubscriptionError(
                    f"no subscription {subscriber!r} on topic {self.name!r}"
                )
            version = got.version
        from hedwig.errors import NoSubscriptionStateError

        try:
            await self.store.subscriptions.delete_subscription_data(self.name, subscriber, version)
        except NoSubscriptionStateError:
            raise status.NoSuchSubscriptionError(
                f"no subscription {subscriber!r} on topic {self.name!r}"
            ) from None

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
            raise status.MessagesUnavailableError(
                f"messages before {first} of topic {self.name!r} were collected by retention",
                detail=str(first),
            )
        cached = await self.log.read(
            max(req.start_seq, first), max(1, min(req.max_messages, 100_000)), max(1, req.max_bytes)
        )
        return Messages(req.request_id, first, self.log.last_seq, tuple(c.batch for c in cached))

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
        for peer in peers:
            if not peer.closed:
                peer.send(TopicMoved(self.name, self.moved_to, reason))
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
        except HedwigError as exc:
            log.warning("topic %r: closing the log on release failed: %s", self.name, exc)
        self.state = TopicState.CLOSED
        self._notify_moved(reason)

    def lose(self, reason: str, new_owner: str | None = None) -> None:
        """Ownership is gone (znode deleted, session lost): stop at once."""
        if self.state is TopicState.CLOSED:
            return
        self.state = TopicState.CLOSED
        self.moved_to = new_owner
        if self.log.broken is None:
            self.log.broken = LedgerError(f"ownership lost: {reason}")
        self._notify_moved(reason)
