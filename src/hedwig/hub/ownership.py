"""Which topics this hub owns: claiming, redirecting, watching and releasing.

The rules follow ``docs/architecture.md`` ("Ownership").

Rules, for a request on topic T that this hub does not already serve:

1. Create T's node if missing (topics are created lazily, on first use).
2. Read T's owner record. Another hub's record: redirect the client there. A record with our
   address but an older epoch is ours from a previous session: delete it (version-checked)
   and go on as if there were none. (In a claim wave or a failover, where the read finds
   nothing, a topic placement would keep here is claimed first, and the read made only if the
   claim fails: ``CLAIM_FIRST``.)
3. No owner and the request was not redirected: choose a hub with the placement policy. If the
   choice is another hub, redirect there; the client comes back with the redirected flag.
4. No owner and the request was redirected (or we chose ourselves): claim, by creating the
   ephemeral owner record test-and-set. If that fails, someone else won: redirect to them.
5. Take over the log (recover the previous ledger, open a new one, CAS the ledger list). If
   that fails, release the claim and answer "unavailable, retry": never serve a topic whose
   history we could not recover.

Concurrent requests for the same topic share one claim. Once owned, the hub knows it still
owns T from its ZooKeeper session and a watch on the owner record, not by reading it on every
request: when the watch fires and the record is no longer ours, or the session is lost, the
topic is dropped at once and its clients are told. Until a new session is up (on etcd, for as
long as etcd is out of reach) the hub claims nothing: such requests are refused at once, and
the client tries another hub.

While the hub cannot reach ZooKeeper (the session is suspended), it keeps serving the topics
it owns on their open ledgers: fencing, not the session, is what keeps two hubs from both
acknowledging (a hub that takes a topic over fences the ledger's replicas before anything
else, after which the old owner can no longer reach an ack quorum). So publishing goes on
through a metadata outage; what needs the store waits (claims are refused, roll-overs and
consume marks wait and catch up). Meanwhile it asks other hubs whether the store has ended
its session (``hedwig.hub.witnesses``), and once one that reads the store says so it drops
every topic, as when the store tells it itself: otherwise its clients would stay with it
while nobody took its topics over. Past the session timeout another hub may have taken over:
the hub then asks its open ledgers' replicas whether they were fenced, and drops the topics
whose ledgers were, so their subscribers move on even when nobody publishes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, replace

from hedwig.clock import Clock, Throttle
from hedwig.errors import (
    BadVersionError,
    HedwigError,
    LedgerGoneError,
    MetadataError,
    NoSuchTopicError,
    NotEnoughHubsError,
    NoTopicOwnerInfoError,
    NotResponsibleError,
    ServiceUnavailableError,
    TopicMovingError,
)
from hedwig.hub.choices import HubChoices
from hedwig.hub.config import HubConfig, TopicSettings
from hedwig.hub.events import HubEvents, LossKind
from hedwig.hub.topic import OwnedTopic, TopicState
from hedwig.ledger.handle import Fragments
from hedwig.ledger.lac_notices import LacNotices
from hedwig.ledger.log_context import LogContext, LogSettings
from hedwig.ledger.replicas import Replicas
from hedwig.ledger.retention import delete_ledger_everywhere
from hedwig.ledger.topic_log import TopicLog
from hedwig.metadata.managers import MetadataStore, SessionState
from hedwig.metadata.records import (
    NEW_VERSION,
    HubInfo,
    LedgerMetadata,
    TopicClaim,
    TopicConfig,
    Version,
    Versioned,
)
from hedwig.protocol import MoveKind
from hedwig.protocol.names import validate_name

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _FirstLog:
    """A new topic's log as a claim starts it: its settings (``_settings_for``), the ensemble
    chosen, its first ledger (id given by the store), and once the claim made them, that
    ledger's metadata and the persistence record's version (``TopicClaim.log``)."""

    settings: tuple[TopicConfig, TopicSettings, LogSettings]
    ensemble: Sequence[str]
    ledger: LedgerMetadata
    started: tuple[Versioned[LedgerMetadata], Version] | None = None


# A topic this hub would keep by the local placement rule (``HubChoices.keeps``) is claimed
# before its owner record is read while at least this share of the requests for topics it did
# not serve lately found them unowned: a claim wave or a failover, where the read found nothing
# every time (a ZooKeeper round trip of the four or eight a claim or take-over makes). The
# claim of a topic owned elsewhere fails and says by whom (etcd, in the claim's own request)
# or costs the read it saved and one request more (ZooKeeper: the failed create, then the
# read): where most topics asked about are owned, the read goes first as before.
CLAIM_FIRST = 0.5
UNOWNED_WEIGHT = 1 / 16

# Messages at the end of a topic's log read back on take-over to rebuild duplicate detection.
DEDUP_WINDOW = 5000
# While ZooKeeper is out of reach past the session timeout, how often the hub asks its open
# ledgers' replicas whether another hub has fenced them.
FENCING_CHECK_S = 1.0
# While it is out of reach at all, how often the hub asks other hubs whether the store still
# has its session (``hedwig.hub.witnesses``).
WITNESS_CHECK_S = 0.5
# Owner records checked at once after their watches fired. A watch stream that breaks fires
# every watch of the hub at once (etcd also cancels, at a compaction, the watches it had not
# caught up yet): a task each for 300,000 owned topics took gigabytes.
OWNER_CHECKS_AT_ONCE = 256
# Topics handed over at once when the hub drains or stops.
RELEASES_AT_ONCE = 256
# A failure that repeats for one topic (every client retry) is a warning at most this often.
WARN_EVERY_S = 10.0
# Distinct topic configurations whose settings are kept to share (more: start afresh).
MAX_SHARED_CONFIGS = 1000


@dataclass
class OwnershipStats:
    claims: int = 0
    # When the last claim began (this hub's monotonic clock): the ledger auditor puts a
    # gone hub's audit off while the take-overs of its topics go on.
    last_claim_at: float = float("-inf")
    claim_conflicts: int = 0
    redirects: int = 0
    releases: int = 0
    losses: int = 0


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
    ) -> None:
        self.address = address
        self.config = config
        self.store = store
        self.replicas = replicas
        self.events = events
        self.clock = clock
        self.choices = choices
        self.lac_notices = LacNotices(replicas, clock=clock)
        self._lac_idle = self.lac_notices.idle  # one bound method for every topic's log
        self._on_owner_changed = self._owner_changed  # and one for every owner watch
        self.epoch = 0
        self.topics: dict[str, OwnedTopic] = {}
        # The owned topics that made a subscriptions table (maybe since let go: checked by
        # whoever walks it). The hub flushes their consume marks every second; walking every
        # owned topic for them was a per-second cost of every idle one.
        self.subscribed: dict[str, OwnedTopic] = {}
        self._claims: dict[str, asyncio.Future[OwnedTopic]] = {}
        # How often lately a first request here for a topic this hub does not serve found it
        # unowned (an average, newest weighing ``UNOWNED_WEIGHT``): claims go first while
        # most do (``CLAIM_FIRST``).
        self._unowned_lately = CLAIM_FIRST
        # Whether this hub's last claim made its topic: claims come in waves of one kind, and
        # while they make their topics, each brings the topic's first ledger along (``_claim``).
        self._claims_create = True
        self._suspended_since: float | None = None
        # The session was lost and no new one is up yet (on etcd, for as long as it cannot
        # be reached): the hub can claim nothing, and says so at once.
        self._session_lost = False
        self._fencing_task: asyncio.Task[None] | None = None
        # Asks other hubs whether the store has ended the session of (address, epoch)
        # (``hedwig.hub.witnesses``); None: nobody to ask.
        self.session_over: Callable[[str, int], Awaitable[bool]] | None = None
        self.accepting = True
        self._dropping = False
        self._warn_throttle = Throttle(WARN_EVERY_S, clock)
        self._tasks: set[asyncio.Task[None]] = set()  # the loop keeps only weak references
        # Topics whose owner-record watch fired, checked ``OWNER_CHECKS_AT_ONCE`` at a time.
        self._to_check: dict[str, None] = {}
        self._checking: asyncio.Task[None] | None = None
        self.stats = OwnershipStats()
        # Called whenever the set of owned topics changes (the hub reports its load soon after).
        self._on_change = on_change or (lambda: None)
        self.defaults = TopicConfig()
        # ``_defaults_merged``: what it made, and of which ``defaults``.
        self._merged_of: TopicConfig | None = None
        self._merged = self.defaults
        # Told the ledgers a topic's log closed or recovered that may be under-replicated
        # (the hub's auditor); one callable shared by every log.
        self.suspect: Callable[[int, Fragments], None] | None = None
        # Callbacks and settings every owned topic holds, made once and shared (a bound
        # method is 64 bytes, a topic's merged configuration and settings about 400).
        self._lose_cb: Callable[[str, LossKind, str], None] = self.lose
        self._subscribed_cb: Callable[[OwnedTopic], None] = self._subscribed
        self._ensemble_cb = choices.ensemble
        self._shared: dict[TopicConfig, tuple[TopicConfig, TopicSettings, LogSettings]] = {}
        self._log_ctx: LogContext | None = None  # ``_log_context``

    # session ------------------------------------------------------------------------------

    def on_session(self, state: SessionState) -> None:
        if state is SessionState.SUSPENDED:
            if self._suspended_since is None:
                log.warning(
                    "metadata store unreachable: serving the %d owned topics on their open ledgers "
                    "(claims wait)",
                    len(self.topics),
                )
            self._suspended_since = self.clock.monotonic()
            if self._fencing_task is None or self._fencing_task.done():
                self._fencing_task = asyncio.get_running_loop().create_task(self._watch_fencing())
        elif state is SessionState.CONNECTED:
            self._session_lost = False
            if self._suspended_since is not None:
                log.warning(
                    "ZooKeeper reachable again after %.1f s",
                    self.clock.monotonic() - self._suspended_since,
                )
            self._stop_suspension()
        elif state is SessionState.LOST:
            self._stop_suspension()
            self._session_lost = True
            self.drop_all(
                LossKind.SESSION, "metadata session expired (ZooKeeper session or etcd lease)"
            )

    def _stop_suspension(self) -> None:
        self._suspended_since = None
        if self._fencing_task is not None:
            self._fencing_task.cancel()
            self._fencing_task = None

    async def _watch_fencing(self) -> None:
        """While suspended, ask other hubs every ``WITNESS_CHECK_S`` whether the store has
        ended this hub's session, and end it here too if one says so; past the session
        timeout, also drop the topics whose open ledger another hub has fenced (it took them
        over), checking every ``FENCING_CHECK_S``."""
        fencing_at = self.clock.monotonic() + self.config.zk_session_timeout_s
        while self._suspended_since is not None:
            if (
                self.session_over is not None
                # A hub draining or stopping took its own registration out: "not alive" from
                # a witness says nothing about its session then. It hands its topics over
                # once back in reach; the ledgers' fencing covers it until then.
                and self.accepting
                and self.epoch
                and await self.session_over(self.address, self.epoch)
                and self._suspended_since is not None
            ):
                self._session_ended_elsewhere()
                return
            if self.clock.monotonic() >= fencing_at:
                await self._drop_fenced()
                fencing_at = self.clock.monotonic() + FENCING_CHECK_S
            await self.clock.sleep(WITNESS_CHECK_S)

    async def _drop_fenced(self) -> None:
        """Drop the topics read here (a subscriber attached, or a delivery hub's long poll)
        whose open ledger another hub has fenced, ``OWNER_CHECKS_AT_ONCE`` at a time. Only
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
        for i in range(0, len(read), OWNER_CHECKS_AT_ONCE):
            group = read[i : i + OWNER_CHECKS_AT_ONCE]
            fenced = await asyncio.gather(*(owned.log.fenced_elsewhere() for owned in group))
            for owned, yes in zip(group, fenced, strict=True):
                if yes and self.topics.get(owned.name) is owned:
                    self.lose(
                        owned.name, LossKind.LEDGER, "taken over while ZooKeeper was out of reach"
                    )

    def _session_ended_elsewhere(self) -> None:
        """Another hub read the registry and found this hub's session over: act as when the
        store says so itself (``on_session(LOST)``), before it can. Until a new session is up
        the hub claims nothing; the topics' new owners fence its ledgers as they take them."""
        log.warning(
            "another hub finds this hub's metadata session over (its registration is gone): "
            "dropping its topics"
        )
        self._session_lost = True
        self.drop_all(LossKind.SESSION, "metadata session over, as another hub reads the store")

    @property
    def suspended(self) -> bool:
        """Whether the hub is without a working session: the store is out of reach, or the
        session was lost and a new one is not up yet. Claims are refused at once meanwhile
        (on etcd each would wait for a call's timeout), so clients try another hub."""
        return self._suspended_since is not None or self._session_lost

    def drop_all(self, kind: LossKind, reason: str) -> None:
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
            owned = await self._resolve(topic, redirected, create)
        except BaseException as exc:
            self._claims.pop(topic, None)
            fut.set_exception(exc)
            fut.exception()  # retrieved: waiters get it through shield
            # The future keeps the traceback, which holds this frame: without ``fut`` in it
            # there is no cycle (only the cycle collector could free one, and a failover's
            # redirects made thousands a second: ``hedwig.hub.server.drop_tracebacks``).
            del fut
            raise
        self._claims.pop(topic, None)
        fut.set_result(owned)
        return owned

    async def _resolve(self, topic: str, redirected: bool, create: bool) -> OwnedTopic:
        # A topic this call created has nothing yet (no owner, configuration or ledgers): its
        # claim skips reading them, three store round trips of about nine. It is created
        # together with its owner record (``claim_topic``: one request, not two or three);
        # if it exists already, it is claimed as any other (the owner record's
        # compare-and-set settles a race), and a record in the way is learnt from the claim
        # where the store can tell (etcd), not from a read after it. A hub sent here to claim
        # tries that first; any other only once it knows it is to claim the topic, not
        # before redirecting the client elsewhere.
        fresh = ensured = False
        known: Versioned[HubInfo] | None = None  # the owner record as the claim found it
        if not create:
            if not await self.store.topics.topic_exists(topic):
                raise NoSuchTopicError(f"topic {topic!r} does not exist")
            ensured = True
        elif redirected and self.choices.can_store(topic):
            handed = await self.choices.handed_to(topic)
            if handed is None or handed == self.address:
                claim, first = await self._claim(topic)
                if claim.version is not None:
                    return await self._take_over(topic, claim, first)
                known = claim.owner
            ensured = True
        elif redirected:
            fresh = await self.store.topics.ensure_topic(topic)
            ensured = True
        elif self._unowned_lately >= CLAIM_FIRST and await self.choices.keeps(topic):
            claim, first = await self._claim(topic)
            self._found_unowned(claim.version is not None)
            if claim.version is not None:
                return await self._take_over(topic, claim, first)
            known, ensured = claim.owner, True
        for attempt in range(3):
            fresh = fresh and attempt == 0
            if known is not None:
                owner, known = known, None
            elif fresh:
                owner = None
            else:
                owner = await self.store.ownership.read_owner_info(topic)
                if not redirected and attempt == 0:
                    self._found_unowned(owner is None)
            if owner is not None:
                info = owner.value
                if info.address != self.address:
                    self.choices.owned_by(topic, info.address)
                    self._redirect(topic)
                    raise NotResponsibleError(
                        f"topic {topic!r} is owned by {info.address}", owner=info.address
                    )
                # Our own record but not a topic we serve: left by an earlier session of
                # ours, or by a take-over that failed. Remove it and claim afresh.
                try:
                    await self.store.ownership.delete_owner_info(topic, owner.version)
                except (BadVersionError, NoTopicOwnerInfoError):
                    continue
            handed = await self.choices.handed_to(topic) if redirected else None
            if handed is not None and handed != self.address:
                self._redirect(topic)
                raise NotResponsibleError(
                    f"topic {topic!r} was just handed to {handed}", owner=handed
                )
            if not redirected or not self.choices.can_store(topic):
                target = await self.choices.owner_for(topic)
                if target is not None and target != self.address:
                    self._redirect(topic)
                    raise NotResponsibleError(
                        f"topic {topic!r} is assigned to {target}", owner=target
                    )
                if not self.choices.can_store(topic):  # as of the hubs owner_for just read
                    raise ServiceUnavailableError(
                        f"topic {topic!r}: this hub cannot reach the topic's storage now and "
                        "no other hub is alive"
                    )
            if not ensured:
                # None had an owner a moment ago; created now, it has nothing else either.
                ensured = True
                claim, first = await self._claim(topic)
                if claim.version is not None:
                    return await self._take_over(topic, claim, first)
                self.stats.claim_conflicts += 1
                known, redirected = claim.owner, True  # someone claimed it: seen, or read next
                continue
            try:
                version = await self.store.ownership.write_owner_info(
                    topic, HubInfo(self.address, self.epoch), NEW_VERSION
                )
            except BadVersionError:
                self.stats.claim_conflicts += 1
                redirected = True  # someone claimed it: the next read finds them
                continue
            return await self._take_over(topic, TopicClaim(version, new=fresh))
        raise ServiceUnavailableError(f"topic {topic!r}: its ownership is changing")

    def _found_unowned(self, unowned: bool) -> None:
        """One more request for a topic this hub does not serve found it ``unowned`` (or not)."""
        self._unowned_lately += UNOWNED_WEIGHT * (unowned - self._unowned_lately)

    async def _claim(self, topic: str) -> tuple[TopicClaim, _FirstLog | None]:
        """The claim; while claims make their topics (a wave of first publishes), with the
        topic's first ledger, made in the claim's request if the claim creates the topic."""
        first = await self._first_log(topic) if self._claims_create else None
        claim = await self.store.ownership.claim_topic(
            topic, HubInfo(self.address, self.epoch), first.ledger if first else None
        )
        if claim.version is not None:
            self._claims_create = claim.new
        if first is None or claim.log is None:
            return claim, None
        return claim, replace(first, started=claim.log)

    async def _first_log(self, topic: str) -> _FirstLog | None:
        """What a new topic's log starts with, as its take-over would choose it (``None``
        if that fails now: the claim goes alone, and its take-over says why)."""
        try:
            shared, ensemble = await self._log_plan(topic, fresh=True)
        except HedwigError:
            return None
        ledger = self._log_context().new_ledger_metadata(topic, shared[2], ensemble)
        return _FirstLog(shared, ensemble, ledger)

    async def _log_plan(
        self, topic: str, *, fresh: bool = False, known: Versioned[TopicConfig] | None = None
    ) -> tuple[tuple[TopicConfig, TopicSettings, LogSettings], Sequence[str]]:
        """A topic's settings (``_settings_for``) and the ensemble its next ledger goes to:
        what a take-over, or a claim that starts the topic's log, works out first."""
        shared = self._settings_for(await self.topic_config(topic, fresh=fresh, known=known))
        replication = shared[2].replication
        return shared, await self.choices.ensemble(replication.ensemble, replication.ack_quorum)

    def _redirect(self, topic: str) -> None:
        self.stats.redirects += 1
        self.events.redirected(topic)

    async def topic_config(
        self, topic: str, *, fresh: bool = False, known: Versioned[TopicConfig] | None = None
    ) -> TopicConfig:
        """The topic's configuration over the region's defaults over this hub's (``fresh``:
        a topic just created, which has none of its own; ``known``: its own as read with the
        claim)."""
        got = (
            known
            if known is not None or fresh
            else await self.store.topics.read_topic_config(topic)
        )
        base = self._defaults_merged()
        return got.value.merged(base) if got else base

    def _defaults_merged(self) -> TopicConfig:
        """The region's defaults over this hub's: merged once for each the region sets, not
        for every claim (most topics have no configuration of their own, and take this as
        it is)."""
        if self._merged_of is not self.defaults:
            c = self.config
            self._merged = self.defaults.merged(
                TopicConfig(
                    replication=c.replication_config,
                    retention_ms=c.default_retention_ms,
                    retention_bytes=c.default_retention_bytes,
                    max_message_size=c.max_message_size,
                    inactive_topic_expiry_ms=c.default_inactive_topic_expiry_ms,
                    subscription_expiry_ms=c.default_subscription_expiry_ms,
                )
            )
            self._merged_of = self.defaults
        return self._merged

    async def _take_over(
        self, topic: str, claim: TopicClaim, first: _FirstLog | None = None
    ) -> OwnedTopic:
        """Take the topic over under the owner record ``claim`` wrote: recover its log (from
        the ledger list, if the claim read it), read back its tail, and serve it; on failure
        the record is given up. ``claim.config``: its configuration, if the claim read it;
        ``first``: the new topic's first ledger, made with the claim (``_claim``)."""
        version, fresh, known, ranges = claim.version, claim.new, claim.config, claim.ranges
        assert version is not None
        self.stats.claims += 1
        began = self.stats.last_claim_at = self.clock.monotonic()
        opened = began
        try:
            if first is not None:
                (config, settings, log_settings), ensemble = first.settings, first.ensemble
            else:
                (config, settings, log_settings), ensemble = await self._log_plan(
                    topic, fresh=fresh, known=known
                )
            tlog = TopicLog(topic, self._log_context(), ensemble=ensemble, settings=log_settings)
            await tlog.open(fresh=fresh, started=first.started if first else None, known=ranges)
            opened = self.clock.monotonic()
        except HedwigError as exc:
            level = logging.WARNING if self._warn_throttle.allow(topic) else logging.DEBUG
            log.log(level, "taking over topic %r failed: %s", topic, exc)
            with contextlib.suppress(HedwigError):
                await self.store.ownership.delete_owner_info(topic, version)
            if isinstance(exc, NotEnoughHubsError):
                raise
            if isinstance(exc, BadVersionError):
                raise ServiceUnavailableError(
                    f"topic {topic!r} was taken over concurrently"
                ) from None
            raise ServiceUnavailableError(f"cannot recover topic {topic!r} now: {exc}") from None
        owned = OwnedTopic(
            topic,
            tlog,
            self.store,
            config,
            settings=settings,
            clock=self.clock,
            events=self.events,
            on_lost=self._lose_cb,
            on_subscriptions=self._subscribed_cb,
        )
        try:
            # Learn the publishers' last sequences from the end of the log, so a publish
            # retried through this change of owner is still recognised as a duplicate.
            # To the very end: the last batches are the ones most likely re-sent, since
            # their acknowledgements are what the previous owner could not send.
            start = max(1, tlog.last_seq - DEDUP_WINDOW + 1)
            while start <= tlog.last_seq:
                try:
                    recent = await tlog.read(start, DEDUP_WINDOW, 8 << 20)
                except LedgerGoneError as exc:
                    # Deleted with its messages: a deletion of this topic cut short by a crash
                    # (ledgers first, records last). Nothing is left there to recognise a
                    # duplicate of; refusing the claim would leave the topic impossible to
                    # delete (the deletion's retry claims it too) or to use.
                    log.warning("taking over topic %r: %s; not read back", topic, exc)
                    break
                if not recent:
                    break
                owned.remember_publishers(recent)
                start = recent[-1].last_seq + 1
        except HedwigError as exc:
            # Serving without them would store again every batch whose acknowledgement the
            # previous owner could not send (its clients retry them here): duplicates. Give
            # the topic up; the next claim tries again.
            level = logging.WARNING if self._warn_throttle.allow(topic) else logging.DEBUG
            log.log(level, "taking over topic %r failed: reading back its tail: %s", topic, exc)
            with contextlib.suppress(HedwigError):
                await tlog.abandon()
            with contextlib.suppress(HedwigError):
                await self.store.ownership.delete_owner_info(topic, version)
            raise ServiceUnavailableError(
                f"cannot read back the end of topic {topic!r} now: {exc}"
            ) from None
        ownerless = None
        if tlog.previous_end_ms:
            ownerless = max(0.0, (self.clock.wall_ms() - tlog.previous_end_ms) / 1000)
        self.events.claimed(topic, ownerless)
        self.topics[topic] = owned
        owned.owner_version = version
        self.choices.claimed(topic)
        self._watch(topic, version)
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

    def _settings_for(self, config: TopicConfig) -> tuple[TopicConfig, TopicSettings, LogSettings]:
        """The topic's configuration, its settings and its log's, one shared object each for
        every topic configured alike (nearly all are)."""
        shared = self._shared.get(config)
        if shared is None:
            if len(self._shared) >= MAX_SHARED_CONFIGS:
                self._shared.clear()
            shared = (
                config,
                self.config.topic_settings(config),
                LogSettings(
                    replication=config.replication or self.config.replication_config,
                    ledger_max_bytes=self.config.ledger_max_bytes,
                    cache_bytes=self.config.cache_bytes,
                ),
            )
            self._shared[config] = shared
        return shared

    # watching -----------------------------------------------------------------------------

    def _watch(self, topic: str, version: Version | None = None) -> None:
        self.store.ownership.watch_owner(topic, self._on_owner_changed, version)

    def _owner_changed(self, topic: str) -> None:
        """A topic's owner-record watch fired: check the record soon (with the others)."""
        self._to_check[topic] = None
        if self._checking is None or self._checking.done():
            self._checking = asyncio.get_running_loop().create_task(self._check_owners())

    async def _check_owners(self) -> None:
        while self._to_check:
            batch = []
            for topic in self._to_check:
                batch.append(topic)
                if len(batch) == OWNER_CHECKS_AT_ONCE:
                    break
            for topic in batch:
                del self._to_check[topic]
            await asyncio.gather(*(self._check_owner(t) for t in batch), return_exceptions=True)

    async def _check_owner(self, topic: str) -> None:
        owned = self.topics.get(topic)
        if owned is None or owned.state is not TopicState.OPEN:
            return
        try:
            got = await self.store.ownership.read_owner_info(topic)
        except MetadataError:
            # Disconnected: the session listener decides what happens.
            self._watch(topic)
            return
        if got is not None and got.value == HubInfo(self.address, self.epoch):
            self._watch(topic, got.version)
            return
        new_owner = got.value.address if got is not None else None
        self.lose(topic, LossKind.OWNERSHIP_REMOVED, "ownership record removed", new_owner)

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
            if version is not None:
                self._spawn(self._give_up_record(topic, version))
        self._changed()

    def _loss_level(self, kind: LossKind) -> int:
        """One warning per loss, unless many topics go at once (a session ends): then each is
        a debug line and ``drop_all`` says it once."""
        return logging.DEBUG if self._dropping else logging.WARNING

    async def _give_up_record(self, topic: str, version: Version) -> None:
        try:
            await self.store.ownership.delete_owner_info(topic, version)
            log.info("topic %r: gave its owner record up (its log failed here)", topic)
        except (BadVersionError, NoTopicOwnerInfoError):
            pass  # a new owner already replaced it (it fenced our ledger)
        except HedwigError as exc:
            log.info("topic %r: could not give the owner record up: %s", topic, exc)

    def _spawn(self, coro: Coroutine[object, object, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

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
        if version is not None:
            try:
                await self.store.ownership.delete_owner_info(topic, version)
            except HedwigError as exc:
                log.info("releasing %r: owner record already gone (%s)", topic, exc)
        self.stats.releases += 1
        self._changed()
        return True

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
        owned.notify_deleted()
        log.info("deleted topic %r (%d ledgers)", topic, len(ranges))
        self.events.deleted(topic, expired=expired)
        self._changed()

    def _log_context(self) -> LogContext:
        """What every topic log of this hub shares, made again for a new session (its epoch
        names the owner of new ledgers) or a new auditor to tell."""
        ctx = self._log_ctx
        if ctx is None or ctx.epoch != self.epoch or ctx.on_suspect is not self.suspect:
            ctx = self._log_ctx = LogContext(
                self.store,
                self.replicas,
                self.address,
                self.epoch,
                self.clock,
                choose_ensemble=self._ensemble_cb,
                on_rolled_over=self._give_up if self.config.release_on_rollover else None,
                on_suspect=self.suspect,
                on_idle=self._lac_idle,
            )
        return ctx

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
