"""A topic this hub owns: its log, duplicate detection for publishers, and subscriptions.

Rules:

- Only an OPEN topic accepts publishes, subscribes and reads. Ownership decisions (claim,
  watch, release) are made by ``hedwig.hub.owning.ownership``; this object only obeys them: it is
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
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from types import MappingProxyType

from hedwig.clock import Clock
from hedwig.errors import (
    HedwigError,
    InvalidRequestError,
    LedgerError,
    MessagesUnavailableError,
    MessageTooLargeError,
    NoSuchSubscriptionError,
    OutOfOrderError,
    TopicInUseError,
    TopicMovingError,
)
from hedwig.hub.owning.dedup import RECENT, Known, PublisherTable
from hedwig.hub.reporting.events import HubEvents, LossKind
from hedwig.hub.serving.dead_letters import DeadLetterSink
from hedwig.hub.serving.delays import check_published
from hedwig.hub.serving.peer import Peer
from hedwig.hub.serving.topic_subscriptions import Served, TopicSubscriptions, keep_from_seq_of
from hedwig.ledger.topic_log import TopicLog
from hedwig.metadata.managers import MetadataStore
from hedwig.metadata.records import LedgerRange, SubscriptionData, TopicConfig, Version
from hedwig.protocol import (
    Ack,
    Batch,
    CloseReason,
    CreateSubscription,
    DescribeTopic,
    JoinSubscription,
    Messages,
    Nack,
    Publish,
    Published,
    Read,
    ResetSubscription,
    Subscribe,
    Subscribed,
    TopicDescription,
    TopicMoved,
)
from hedwig.protocol.messages.delivery_time import may_hold
from hedwig.settings import TopicSettings

log = logging.getLogger(__name__)

# Told (topic, why, text) when the topic's log fails under it.
LostCallback = Callable[[str, LossKind, str], None]
# What ``OwnedTopic.subscriptions`` is before its first subscription (never written to).
_NONE: Mapping[str, Served] = MappingProxyType({})


class TopicState(Enum):
    OPEN = "open"
    CLOSING = "closing"
    CLOSED = "closed"


@dataclass(frozen=True, slots=True)
class TopicContext:
    """What a hub's owned topics hold alike, made once by the hub and handed to each (a
    reference each instead of five: a hub may own a million topics)."""

    store: MetadataStore
    clock: Clock
    events: HubEvents
    # Told (topic, why, text) when the topic's log fails under it.
    on_lost: LostCallback
    # Told when a topic makes its subscriptions table.
    on_subscriptions: Callable[[OwnedTopic], None]
    # How its subscriptions are made (within their namespace's quota).
    create_subscription: Callable[[str, str, SubscriptionData], Awaitable[Version]]
    # Where its queues publish their dead letters (None: nowhere; they wait).
    dead_letters: DeadLetterSink | None = None


class OwnedTopic:
    # One per owned topic: without an attribute dictionary each costs about 100 bytes less.
    __slots__ = (
        "_publisher_table",
        "_subs",
        "bytes_in",
        "bytes_out",
        "config",
        "context",
        "last_active_ms",
        "log",
        "moved_to",
        "msg_in",
        "msg_out",
        "name",
        "owner_version",
        "publishers",
        "settings",
        "state",
    )

    def __init__(
        self,
        name: str,
        log_: TopicLog,
        config: TopicConfig,
        *,
        settings: TopicSettings,
        context: TopicContext,
    ) -> None:
        self.name = name
        self.log = log_
        self.context = context
        self.config = config
        self.settings = settings
        self.state = TopicState.OPEN
        # The subscriptions table and the publishers' duplicate detection are made when first
        # needed: most owned topics are idle, and the two with their callbacks were about
        # 800 bytes a topic.
        self._subs: TopicSubscriptions | None = None
        # The connections that published here: None until one has, the one connection while
        # it is the only one (most topics have one publisher; a set of one is 216 bytes).
        self.publishers: Peer | set[Peer] | None = None
        self._publisher_table: PublisherTable | None = None
        self.moved_to: str | None = None
        # The version of this hub's owner record of the topic (set by the hub's ownership;
        # None once let go).
        self.owner_version: Version | None = None
        # When somebody last published or attached (for inactive-topic expiry); taking the
        # topic over counts, so a topic is never expired just because it moved.
        self.last_active_ms = context.clock.wall_ms()
        # Cumulative counts, for the load report's rates.
        self.msg_in = 0
        self.bytes_in = 0
        self.msg_out = 0
        self.bytes_out = 0

    @property
    def subs(self) -> TopicSubscriptions:
        if self._subs is None:
            self._subs = TopicSubscriptions(
                self.name,
                log_=self.log,
                store=self.context.store,
                settings=self.settings,
                clock=self.context.clock,
                check_open=self._check_open,
                on_lost=self._ledger_lost,
                on_delivered=self._delivered,
                create=self.context.create_subscription,
                dead_letters=self.context.dead_letters,
            )
            self.context.on_subscriptions(self)
        return self._subs

    @property
    def publisher_table(self) -> PublisherTable:
        if self._publisher_table is None:
            self._publisher_table = PublisherTable()
        return self._publisher_table

    @property
    def subscriptions(self) -> Mapping[str, Served]:
        """The subscriptions this owner has in memory, by name."""
        return _NONE if self._subs is None else self._subs.by_name

    def _check_open(self) -> None:
        if self.state is not TopicState.OPEN:
            raise TopicMovingError(f"topic {self.name!r} is moving", destination=self.moved_to)
        if self.log.broken is not None:
            # Broken with no publish waiting on it (a roll-over that failed in the
            # background): give the topic up now, as a failed append does, so that a claim
            # recovers the log; left owned, the topic would refuse every request.
            self.context.on_lost(self.name, LossKind.LEDGER, f"ledger failed: {self.log.broken}")
            raise TopicMovingError(f"topic {self.name!r} lost its log: {self.log.broken}")

    # publish ------------------------------------------------------------------------------

    async def publish(
        self, peer: Peer, req: Publish, check: Callable[[str], None] | None = None
    ) -> Published:
        """Store a batch once. ``check`` (a lane's, ``hedwig.hub.spreading.lanes``) may refuse its
        publisher, but only after the duplicate check: a batch stored here is answered as
        stored whatever the check would say now."""
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
        if may_hold(messages.payload):  # a hedwig-deliver-at header, checked before storing
            check_published(messages.payload, self.context.clock.wall_ms(), self.settings.queues)
        seen = self.publishers
        if seen is None:
            self.publishers = peer
        elif isinstance(seen, set):
            seen.add(peer)
        elif seen is not peer:
            self.publishers = {seen, peer}
        pid, pseq, count = req.publisher_id, req.publisher_seq, messages.count
        table = self.publisher_table
        if pseq:
            try:
                known = await table.check(pid, pseq, count)
            except asyncio.CancelledError:
                known = None  # the original write failed: this one is the real attempt
            except OutOfOrderError:
                # Beyond a gap, so not stored here: a publisher the lane check refuses is told
                # its lane. The gap is usually its batch the check has just refused, which
                # will never be stored here; OUT_OF_ORDER would have it retry this one until
                # its deadline, holding its move to the lane (made once every batch settled).
                if check is not None:
                    check(pid)
                raise
            if known is not None:
                if not known.first_seq:
                    # A late copy of a batch stored long ago (a connection the client gave up
                    # on, delivering at last): handled, nothing to worry an operator with.
                    log.debug(
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
            if check is not None:
                check(pid)
            table.begin(pid, pseq, count)
        elif check is not None:
            check(pid)
        stored: Known | None = None
        try:
            batch = await self.log.append(pid, pseq, messages)
            stored = Known(batch.first_seq, batch.last_seq)
        except LedgerError as exc:
            self._lost(LossKind.LEDGER, f"ledger failed: {exc}")
            raise TopicMovingError(f"topic {self.name!r} lost its log: {exc}") from None
        finally:
            if pseq:
                if stored is not None:
                    table.learn(pid, pseq, count, stored.first_seq)
                table.end(pid, pseq, stored)
        size = len(messages.payload)
        self.last_active_ms = batch.publish_time_ms
        self.msg_in += count
        self.bytes_in += size
        self.context.events.published(self.name, count, size)
        return Published(
            request_id=req.request_id, first_seq=batch.first_seq, last_seq=batch.last_seq
        )

    def remember_publishers(self, batches: list[Batch]) -> None:
        """Learn publishers' sequences from batches read back (after a take-over)."""
        for b in batches:
            if b.publisher_seq:
                self.publisher_table.learn(b.publisher_id, b.publisher_seq, b.count, b.first_seq)

    # subscriptions (``hedwig.hub.serving.topic_subscriptions``) ---------------------------

    async def subscribe(self, peer: Peer, req: Subscribe) -> Subscribed:
        self._check_open()
        answer = await self.subs.subscribe(peer, req)
        self.last_active_ms = self.context.clock.wall_ms()
        return answer

    def consume(self, peer: Peer, subscriber: str, seq: int) -> None:
        if self.state is not TopicState.OPEN:
            raise NoSuchSubscriptionError(
                f"topic {self.name!r} is not served here; subscribe again"
            )
        self.subs.consume(peer, subscriber, seq)

    async def create_subscription(self, req: CreateSubscription, owner: str | None) -> Subscribed:
        self._check_open()
        return await self.subs.create(req, owner)

    async def join(self, peer: Peer, req: JoinSubscription) -> Subscribed:
        self._check_open()
        answer = await self.subs.join(peer, req)
        self.last_active_ms = self.context.clock.wall_ms()
        return answer

    def ack(self, peer: Peer, req: Ack) -> None:
        self._check_serving(req.subscriber)
        self.subs.ack(peer, req)

    def nack(self, peer: Peer, req: Nack) -> None:
        self._check_serving(req.subscriber)
        self.subs.nack(peer, req)

    def _check_serving(self, subscriber: str) -> None:
        if self.state is not TopicState.OPEN:
            raise NoSuchSubscriptionError(
                f"topic {self.name!r} is not served here; join {subscriber!r} again"
            )

    async def close_subscription(self, peer: Peer, subscriber: str) -> None:
        await self.subs.close(peer, subscriber)

    async def unsubscribe(self, peer: Peer, subscriber: str) -> None:
        self._check_open()
        await self.subs.unsubscribe(peer, subscriber)

    async def reset_subscription(self, req: ResetSubscription) -> Subscribed:
        self._check_open()
        return await self.subs.reset(req.request_id, req.subscriber, req.to, req.seq)

    def detach_peer(self, peer: Peer) -> None:
        seen = self.publishers
        if seen is peer:
            self.publishers = None
        elif isinstance(seen, set):
            seen.discard(peer)
        if self._subs is not None:
            self._subs.detach_peer(peer)

    async def flush_marks(self) -> None:
        if self._subs is not None:
            await self._subs.flush_marks()

    async def keep_from_seq(self) -> int:
        if self._subs is None:
            # Nobody subscribed here since the claim: the stored marks are all there is (and
            # no subscriptions table is made for it, on every topic the collector looks at).
            return await keep_from_seq_of(self.context.store, self.name, self.log.last_seq)
        return await self._subs.keep_from_seq()

    def collect_due(self) -> bool:
        """Whether a collection of the log could find anything now. With nobody subscribed
        here since the claim the marks cannot have changed, so only the log's ranges and the
        time can (``TopicLog.collect_due``)."""
        return self._subs is not None or self.log.collect_due()

    def _delivered(self, count: int, size: int) -> None:
        self.msg_out += count
        self.bytes_out += size
        self.context.events.delivered(self.name, count, size)

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

    async def describe(self, req: DescribeTopic) -> TopicDescription:
        self._check_open()
        return TopicDescription(
            request_id=req.request_id,
            first_available=self.log.first_seq,
            last_seq=self.log.last_seq,
            subscriptions=await self.subs.describe(),
        )

    def idle_for_ms(self) -> int | None:
        """How long nobody published or attached (``None`` while a subscriber is attached)."""
        if self._subs is not None and self._subs.any_attached():
            return None
        return self.context.clock.wall_ms() - self.last_active_ms

    # leaving ------------------------------------------------------------------------------

    def _ledger_lost(self, why: str) -> None:
        self._lost(LossKind.LEDGER, why)

    def _lost(self, kind: LossKind, why: str) -> None:
        """Report that this topic cannot go on here, if it is still the one being served.

        Once lost or released, the hub may claim the topic again under the same name; a late
        failure of this old incarnation (an append in flight fenced by the new one's recovery,
        a consume mark it wrote first) must not take the new one down: that loop of claims and
        losses left subscribers receiving nothing while publishing went on.
        """
        if self.state is TopicState.OPEN:
            self.context.on_lost(self.name, kind, why)

    def _clients(self) -> set[Peer]:
        """The connections publishing to or subscribed to this topic."""
        seen = self.publishers
        peers = set() if seen is None else set(seen) if isinstance(seen, set) else {seen}
        for sub in self.subscriptions.values():
            peers.update(sub.peers)
        return peers

    def _notify_moved(self, reason: str, peers: set[Peer] | None = None) -> None:
        """Tell every client of the topic it moved. ``peers``: the clients as they were
        before subscriptions were detached (a hand-off detaches them first)."""
        peers = (peers or set()) | self._clients()
        if self._subs is not None:
            self._subs.detach_all()
        moved = TopicMoved(topic=self.name, new_owner=self.moved_to, reason=reason)
        for peer in peers:
            if not peer.closed:
                peer.send(moved)
        self.publishers = None

    async def release(self, reason: str, new_owner: str | None = None) -> None:
        """Graceful hand-off: stop, flush marks, close the ledger, then tell clients (the
        subscribers too, though their deliveries stopped first: a subscriber that is not
        also publishing would otherwise wait for ever at a hub that no longer serves it)."""
        if self.state is not TopicState.OPEN:
            return
        self.state = TopicState.CLOSING
        self.moved_to = new_owner
        clients = self._clients()
        if self._subs is not None:
            self._subs.detach_all()
        try:
            await self.flush_marks()
            await self.log.close()
        except HedwigError as exc:  # the hand-off goes on: the next owner recovers the ledger
            log.warning("topic %r: closing the log on release failed: %s", self.name, exc)
        self.state = TopicState.CLOSED
        self._notify_moved(reason, clients)

    def lose(self, reason: str, new_owner: str | None = None) -> None:
        """Ownership is gone (record deleted, session lost): stop at once."""
        if self.state is TopicState.CLOSED:
            return
        self.state = TopicState.CLOSED
        self.moved_to = new_owner
        if self.log.broken is None:
            self.log.broken = LedgerError(f"ownership lost: {reason}")
        self._notify_moved(reason)
        self.subs.stop_all()

    async def close_for_deletion(self, *, force: bool) -> tuple[LedgerRange, ...]:
        """Stop the topic so it can be deleted; its ledgers, to delete next.

        ``TopicInUseError`` while a subscriber is attached, unless ``force``: attached
        subscribers are then closed with TOPIC_DELETED (they stop; nothing is left to read).
        """
        self._check_open()
        if self.subs.any_attached() and not force:
            raise TopicInUseError(
                f"topic {self.name!r} has attached subscribers (delete with force to close them)"
            )
        self.state = TopicState.CLOSING
        self.subs.close_all(CloseReason.TOPIC_DELETED, "topic deleted")
        try:
            await self.log.close()
        except HedwigError as exc:  # its ledgers are deleted anyway
            log.info("topic %r: closing the log before deletion: %s", self.name, exc)
        return self.log.ranges.ranges

    def notify_deleted(self) -> None:
        """The topic is gone: its publishers are told it moved (a later publish creates it
        afresh, its sequence ids from 1)."""
        self.state = TopicState.CLOSED
        self.moved_to = None
        self._notify_moved("topic deleted")
