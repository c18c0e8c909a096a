"""Which topics this hub owns: claiming, redirecting, watching and releasing.

The rules follow ``docs/architecture.md`` ("Ownership").

A request on a topic this hub does not serve yet is redirected or leads to a claim by the
rules of ``hedwig.hub.owning.claims``; a claimed topic is taken over
(``hedwig.hub.owning.takeover``) before it is served.

Concurrent requests for the same topic share one claim. Once owned, the hub knows it still owns
a topic from its session and a watch on the owner record (``owner_watch``), not by reading it on
every request: when the watch fires and the record is no longer ours, or the session is lost,
the topic is dropped at once and its clients are told. Until a new session is up (on etcd, for
as long as etcd is out of reach) the hub claims nothing: such requests are refused at once, and
the client tries another hub.

While the hub cannot reach its store (``standing``: the session is suspended), it keeps serving
the topics it owns on their open ledgers: fencing, not the session, is what keeps two hubs from
both acknowledging (a hub that takes a topic over fences the ledger's replicas before anything
else, after which the old owner can no longer reach an ack quorum). So publishing goes on
through a metadata outage; what needs the store waits (claims are refused, roll-overs and
consume marks wait and catch up). Meanwhile it asks other hubs whether the store has ended its
session (``hedwig.hub.owning.witnesses``), and once one that reads the store says so it drops
every topic, as when the store tells it itself: otherwise its clients would stay with it while
nobody took its topics over. Past the session timeout another hub may have taken over: the hub
then asks its open ledgers' replicas whether they were fenced, and drops the topics whose
ledgers were, so their subscribers move on even when nobody publishes.

How claims are made and what is kept of them is the hub's claim policy
(``hedwig.hub.owning.policy``: topic by topic, or by bundle), chosen once when the hub is
built; this module tells it what happens to the topics and never asks which it is.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from hedwig.clock import Clock
from hedwig.errors import (
    NoSuchTopicError,
    NotResponsibleError,
    ServiceUnavailableError,
    TopicMovingError,
)
from hedwig.hub.owning.choices import HubChoices
from hedwig.hub.owning.claims import RELEASES_AT_ONCE, ClaimParts, OwnershipStats
from hedwig.hub.owning.namespaces import NamespaceWatcher
from hedwig.hub.owning.policy import claim_policy
from hedwig.hub.owning.standing import HubStanding
from hedwig.hub.owning.takeover import FirstLog, TakeOver
from hedwig.hub.owning.topic import OwnedTopic, TopicState
from hedwig.hub.reporting.events import HubEvents, LossKind
from hedwig.hub.serving.dead_letters import DeadLetterSink
from hedwig.ledger.replicas import Replicas
from hedwig.ledger.retention import delete_ledger_everywhere
from hedwig.metadata.bundles import Bundle
from hedwig.metadata.managers import MetadataStore, SessionState
from hedwig.metadata.records import (
    HubInfo,
    TopicClaim,
)
from hedwig.protocol import MoveKind
from hedwig.protocol.names import validate_name
from hedwig.settings import HubConfig

log = logging.getLogger(__name__)


# Topics whose ledgers are asked about at once, while suspended (``_drop_fenced``).
FENCED_CHECKS_AT_ONCE = 256


class TopicOwnership:
    """The topics this hub owns, and the rules by which it claims, keeps and lets them go."""

    def __init__(
        self,
        *,
        address: str,
        config: HubConfig,
        store: MetadataStore,
        replicas: Replicas,
        clock: Clock,
        events: HubEvents,
        choices: HubChoices,
        on_change: Callable[[], None] | None = None,
        dead_letters: DeadLetterSink | None = None,
    ) -> None:
        self.address = address
        self.config = config
        self.store = store
        self.replicas = replicas
        self.events = events
        self.clock = clock
        self.choices = choices
        self.epoch = 0
        self.topics: dict[str, OwnedTopic] = {}
        # The owned topics that made a subscriptions table (maybe since let go: checked by
        # whoever walks it). The hub flushes their consume marks every second; walking every
        # owned topic for them was a per-second cost of every idle one.
        self.subscribed: dict[str, OwnedTopic] = {}
        self._claims: dict[str, asyncio.Future[OwnedTopic]] = {}
        self.accepting = True
        # Connected, suspended or over (``hedwig.hub.owning.standing``): whether it may claim.
        self.standing = HubStanding(
            clock=clock,
            session_timeout_s=config.connection.metadata_session_timeout_s,
            drop_all=lambda why: self.drop_all(LossKind.SESSION, why),
            drop_fenced=self._drop_fenced,
            asking=lambda: self.accepting and bool(self.epoch),
            topics=lambda: len(self.topics),
        )
        self._dropping = False
        self.stats = OwnershipStats()
        # Called whenever the set of owned topics changes (the hub reports its load soon after).
        self._on_change = on_change or (lambda: None)
        # Namespaces' policies, kept current, and their count quota (``namespaces``).
        self.namespaces = NamespaceWatcher(store, clock=clock)
        # Settings, log recovery and read-back of a claimed topic (``takeover``).
        self.takeover = TakeOver(
            namespaces=self.namespaces,
            config=config,
            store=store,
            replicas=replicas,
            clock=clock,
            events=events,
            choices=choices,
            me=lambda: HubInfo(self.address, self.epoch),
            on_lost=self.lose,
            on_subscriptions=self._subscribed,
            on_rolled_over=self._give_up,
            dead_letters=dead_letters,
        )
        # Redirect or claim, for a request on a topic this hub does not serve, and what is
        # kept of a claim: topic by topic or by bundle (``policy``), chosen once, here.
        self.claims = claim_policy(
            ClaimParts(
                store=store,
                choices=choices,
                stats=self.stats,
                events=events,
                settings=config.bundles,
                clock=clock,
                me=lambda: HubInfo(self.address, self.epoch),
                first_log=self.takeover.first_log,
                take_over=self._take_over,
                serving=self._serving,
                loaded=lambda: list(self.topics),
                lose=lambda topic, kind, why, to: self.lose(topic, kind, why, to),
                release=lambda topic, why, to: self.release(topic, why, to),
                held=lambda topic: topic in self.topics or topic in self._claims,
                recover=lambda topic: self.acquire(topic, redirected=True, create=False),
            )
        )

    # session ------------------------------------------------------------------------------

    def on_session(self, state: SessionState) -> None:
        self.standing.on_session(state)

    async def _drop_fenced(self) -> None:
        """Drop the topics read here (a subscriber attached, or a delivery hub's long poll)
        whose open ledger another hub has fenced, ``FENCED_CHECKS_AT_ONCE`` at a time. Only
        those: a publish to a topic taken over fails on its fenced ledger, and the topic goes
        then; one nobody reads loses nothing by waiting. Asking the replicas about every
        owned topic, one after another, was a cost of each idle topic every second of an
        outage, and the end of a pass came later the more topics the hub owned."""
        read = [
            owned
            for name, owned in self.topics.items()
            if owned.state is TopicState.OPEN
            and (owned.log.awaited or (name in self.subscribed and owned.subs.any_attached()))
        ]
        for i in range(0, len(read), FENCED_CHECKS_AT_ONCE):
            group = read[i : i + FENCED_CHECKS_AT_ONCE]
            fenced = await asyncio.gather(*(owned.log.fenced_elsewhere() for owned in group))
            for owned, yes in zip(group, fenced, strict=True):
                if yes and self.topics.get(owned.name) is owned:
                    self.lose(
                        owned.name, LossKind.LEDGER, "taken over while ZooKeeper was out of reach"
                    )

    @property
    def suspended(self) -> bool:
        """Whether the hub is without a working session: the store is out of reach, or the
        session was lost and a new one is not up yet. Claims are refused at once meanwhile
        (on etcd each would wait for a call's timeout), so clients try another hub."""
        return not self.standing.claiming

    def drop_all(self, kind: LossKind, reason: str) -> None:
        self.claims.session_ended()
        names = list(self.topics)
        if not names:
            return
        log.warning("dropping all %d topics: %s", len(names), reason)
        self._dropping = True
        try:
            for name in names:
                self.lose(name, kind, reason)
        finally:
            self._dropping = False

    def _serving(self, topic: str) -> bool:
        owned = self.topics.get(topic)
        return owned is not None and owned.state is TopicState.OPEN

    def owned_or_claiming(self) -> int:
        return len(self.topics) + len(self._claims)

    # resolving ----------------------------------------------------------------------------

    async def settled(self, topic: str) -> None:
        """Wait for a claim of ``topic`` under way here to finish (whatever its outcome).

        Between writing its owner record and serving the topic a hub is its owner on record
        but not yet in ``topics``: a move arriving then must wait, not take the topic for
        someone else's (and hand nothing over).
        """
        pending = self._claims.get(topic)
        if pending is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(pending)

    async def acquire(self, topic: str, *, redirected: bool, create: bool = True) -> OwnedTopic:
        """The topic if this hub serves it (claiming it if the rules say so); else raises.

        Only publishing and subscribing create a topic (``create``); a read, a statistics or
        describe request, or a deletion of a topic that does not exist is ``NoSuchTopicError``.
        """
        while True:
            owned = self.topics.get(topic)
            if owned is not None and owned.state is TopicState.OPEN:
                return owned  # even while suspended: see the module docstring
            if owned is not None:
                raise TopicMovingError(f"topic {topic!r} is moving", destination=owned.moved_to)
            validate_name(topic)
            if not self.accepting:
                raise ServiceUnavailableError("hub is shutting down")
            if self.suspended:
                raise ServiceUnavailableError(
                    f"topic {topic!r}: this hub cannot reach the metadata store to find or "
                    "claim its owner"
                )
            pending = self._claims.get(topic)
            if pending is None:
                break
            try:
                return await asyncio.shield(pending)
            except NoSuchTopicError:
                if not create:
                    raise
                # That claim would not create the topic; this request does.
            except NotResponsibleError:
                if not redirected:
                    raise
                # That request was sent elsewhere; this one was told to claim here (a
                # hand-off's destination asked by the old owner, a client redirected by
                # another hub): it claims, rather than share the other's redirect.
            # Look again: another request that waited may have started its claim already,
            # and one claim at a time runs per topic (two would take each other's record).
        fut: asyncio.Future[OwnedTopic] = asyncio.get_running_loop().create_future()
        self._claims[topic] = fut
        try:
            if create:
                await self.namespaces.admit(topic)
            owned = await self.claims.resolve(topic, redirected, create)
        except BaseException as exc:
            self._claims.pop(topic, None)
            fut.set_exception(exc)
            fut.exception()  # retrieved: waiters get it through shield
            # The future keeps the traceback, which holds this frame: without ``fut`` in it
            # there is no cycle (only the cycle collector could free one, and a failover's
            # redirects made thousands a second: ``hedwig.hub.front.server.drop_tracebacks``).
            del fut
            raise
        self._claims.pop(topic, None)
        fut.set_result(owned)
        return owned

    async def _take_over(
        self, topic: str, claim: TopicClaim, first: FirstLog | None = None
    ) -> OwnedTopic:
        """Take the topic over under the owner record ``claim`` wrote (``takeover``), and
        serve it."""
        version = claim.version
        assert version is not None
        self.stats.claims += 1
        began = self.stats.last_claim_at = self.clock.monotonic()
        owned, opened = await self.takeover.open(topic, claim, first)
        tlog = owned.log
        ownerless = None
        if tlog.previous_end_ms:
            ownerless = max(0.0, (self.clock.wall_ms() - tlog.previous_end_ms) / 1000)
        self.events.claimed(topic, ownerless)
        self.topics[topic] = owned
        owned.owner_version = version
        self.choices.claimed(topic)
        self.claims.claimed(topic, version)
        # How long the claim took, and of that the log's recovery and the read-back of its
        # end: where a slow failover spent its time.
        log.info(
            "claimed topic %r (log at %d) in %.3f s (recovery %.3f s, read-back %.3f s)",
            topic,
            tlog.last_seq,
            self.clock.monotonic() - began,
            opened - began,
            self.clock.monotonic() - opened,
        )
        self._changed()
        return owned

    def _subscribed(self, owned: OwnedTopic) -> None:
        self.subscribed[owned.name] = owned

    def subscribed_topics(self) -> list[OwnedTopic]:
        """The owned topics that have a subscriptions table (forgetting those let go)."""
        out = []
        for name, owned in list(self.subscribed.items()):
            if self.topics.get(name) is owned:
                out.append(owned)
            else:
                del self.subscribed[name]
        return out

    def lose(self, topic: str, kind: LossKind, reason: str, new_owner: str | None = None) -> None:
        """Stop serving ``topic`` at once (no hand-off): its clients are told it moved."""
        owned = self.topics.pop(topic, None)
        if owned is None:
            return
        version, owned.owner_version = owned.owner_version, None
        self.stats.losses += 1
        log.log(self._loss_level(kind), "lost topic %r: %s", topic, reason)
        owned.lose(reason, new_owner)
        self.events.lost(topic, kind)
        if kind is LossKind.LEDGER:
            # The log cannot be written here (replicas out of reach, or fenced by a new owner).
            # Give the owner record up at once, so other hubs stop sending clients here and one
            # of them claims the topic, instead of waiting for this hub's session to end.
            self.choices.cannot_store(topic)
            self.claims.cannot_store(topic, version)
        self._changed()

    def _loss_level(self, kind: LossKind) -> int:
        """One warning per loss, unless many topics go at once (a session ends): then each is
        a debug line and ``drop_all`` says it once."""
        return logging.DEBUG if self._dropping else logging.WARNING

    def _changed(self) -> None:
        self.events.owned_changed(len(self.topics))
        self._on_change()

    # releasing ----------------------------------------------------------------------------

    async def release(self, topic: str, reason: str, new_owner: str | None = None) -> bool:
        """Hand the topic over gracefully; True if we owned it."""
        owned = self.topics.get(topic)
        if owned is None:
            return False
        await owned.release(reason, new_owner)
        if new_owner is not None:
            self.choices.handed_over(topic, new_owner)
        self.topics.pop(topic, None)
        version, owned.owner_version = owned.owner_version, None
        await self.claims.released(topic, version)
        self.stats.releases += 1
        self._changed()
        return True

    async def hand_over_bundle(self, bundle: Bundle, destination: str, reason: str) -> bool:
        """Hand ``bundle`` to ``destination`` (``ClaimPolicy.hand_over``); False if the bundle
        is not owned here."""
        return await self.claims.hand_over(bundle, destination, reason)

    async def unload_idle(self, idle_ms: int) -> int:
        """By bundle: let go (``release``, no owner record to delete) every topic nobody
        published to or attached to for ``idle_ms``, ``RELEASES_AT_ONCE`` at a time: its
        ledger is closed and its consume marks flushed, and the next request loads it again.
        How many went. Topic by topic, nothing (a topic let go would be placed afresh)."""
        if not self.claims.unloads_idle:
            return 0
        names = [
            name
            for name, owned in self.topics.items()
            if owned.state is TopicState.OPEN
            and (idle := owned.idle_for_ms()) is not None
            and idle >= idle_ms
        ]
        done = 0
        for i in range(0, len(names), RELEASES_AT_ONCE):
            group = names[i : i + RELEASES_AT_ONCE]
            released = await asyncio.gather(
                *(self.release(n, "idle: unloaded") for n in group), return_exceptions=True
            )
            done += sum(1 for r in released if r is True)
        if done:
            log.info("unloaded %d idle topics", done)
        return done

    async def delete(self, topic: str, *, force: bool, expired: bool = False) -> None:
        """Delete an owned topic: close it (its subscribers told it is deleted, its publishers
        that it moved), then its ledgers, then its records, owner record last."""
        owned = self.topics.get(topic)
        if owned is None:
            raise NotResponsibleError(f"topic {topic!r} is not served here")
        ranges = await owned.close_for_deletion(force=force)
        # Gone from this hub before its owner record goes, so the watch that fires is not
        # taken for a loss.
        self.topics.pop(topic, None)
        owned.owner_version = None
        for r in ranges:
            await delete_ledger_everywhere(self.store.ledgers, self.replicas, r.ledger_id)
        await self.store.topics.delete_topic(topic)
        await self.namespaces.forget(topic)
        owned.notify_deleted()
        log.info("deleted topic %r (%d ledgers)", topic, len(ranges))
        self.events.deleted(topic, expired=expired)
        self._changed()

    def _give_up(self, topic: str) -> None:
        """Its ledger rolled over: hand the topic to whichever hub placement picks next."""

        async def go() -> None:
            if await self.release(topic, "periodic: its ledger was closed"):
                self.events.released(topic, MoveKind.PERIODIC)

        asyncio.get_running_loop().create_task(go())

    async def release_all(self, reason: str) -> None:
        """Hand every topic over, ``RELEASES_AT_ONCE`` at a time (all at once, a hub of
        300,000 topics stopping took gigabytes, and flooded the store)."""
        names = iter(list(self.topics))

        async def one_by_one() -> None:
            for topic in names:
                try:
                    await self.release(topic, reason)
                except Exception as exc:  # one topic's failure must not stop the others
                    log.info("releasing %r failed: %s", topic, exc)

        workers = min(RELEASES_AT_ONCE, len(self.topics))
        await asyncio.gather(*(one_by_one() for _ in range(workers)))
        await self.claims.stopped()
