"""Claims: what a request for a topic this hub does not serve leads to, a redirect or a claim.

The rules (``hedwig.hub.owning.ownership`` holds the topics once claimed):

1. Create the topic's node if missing (topics are created lazily, on first use; only publishing
   and subscribing create one).
2. Read the topic's owner record. Another hub's record: redirect the client there. A record with
   our address but an older epoch is ours from a previous session: delete it (version-checked)
   and go on as if there were none. In a claim wave or a failover, where the read finds
   nothing, a topic placement would keep here is claimed first, and the read made only if the
   claim fails (``CLAIM_FIRST``).
3. No owner and the request was not redirected: choose a hub with the placement policy. If the
   choice is another hub, redirect there; the client comes back with the redirected flag.
4. No owner and the request was redirected (or we chose ourselves): claim, by creating the
   ephemeral owner record test-and-set. If that fails, someone else won: redirect to them.
5. Take the topic over (``hedwig.hub.owning.takeover``).

A topic this call created has nothing yet (no owner, configuration or ledgers): its claim skips
reading them. While claims make their topics (a wave of first publishes), each brings the
topic's first ledger along in its own request.

No claim is made while an alive hub of the region owns topics the other way (by bundle, or
one by one): two such hubs would each believe they own a topic (``refuse_mixed``).

These rules are ``TopicClaims``, one of the two claim policies (``hedwig.hub.owning.policy``);
the other, by bundle, is ``hedwig.hub.owning.bundle_claims``. What both are made of
(``ClaimParts``) and share (the stats, a redirect counted, the mixed-region refusal) is here.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, replace

from hedwig.clock import Clock
from hedwig.errors import (
    BadVersionError,
    HedwigError,
    NoSuchTopicError,
    NoTopicOwnerInfoError,
    NotResponsibleError,
    ServiceUnavailableError,
)
from hedwig.hub.owning.choices import HubChoices
from hedwig.hub.owning.owner_watch import OwnerWatch
from hedwig.hub.owning.takeover import FirstLog
from hedwig.hub.owning.topic import OwnedTopic
from hedwig.hub.reporting.events import HubEvents, LossKind
from hedwig.metadata.bundles import Bundle
from hedwig.metadata.managers import MetadataStore
from hedwig.metadata.records import NEW_VERSION, HubInfo, TopicClaim, Version, Versioned
from hedwig.settings import BundleSettings

log = logging.getLogger(__name__)

# A topic this hub would keep by the local placement rule (``HubChoices.keeps``) is claimed
# before its owner record is read while at least this share of the requests for topics it did
# not serve lately found them unowned: a claim wave or a failover, where the read found nothing
# every time (a ZooKeeper round trip of the four or eight a claim or take-over makes). The
# claim of a topic owned elsewhere fails and says by whom (etcd, in the claim's own request)
# or costs the read it saved and one request more (ZooKeeper: the failed create, then the
# read): where most topics asked about are owned, the read goes first as before.
CLAIM_FIRST = 0.5
UNOWNED_WEIGHT = 1 / 16
# Topics handed over at once (a hub draining or stopping, a bundle handed over).
RELEASES_AT_ONCE = 256


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


@dataclass(frozen=True, slots=True)
class ClaimParts:
    """What a claim policy is made of: the hub's store, placement and counters, and the
    ownership's callbacks (``hedwig.hub.owning.ownership`` holds the topics once claimed)."""

    store: MetadataStore
    choices: HubChoices
    stats: OwnershipStats
    events: HubEvents
    settings: BundleSettings
    clock: Clock
    me: Callable[[], HubInfo]  # this hub's address and epoch, as they are now
    first_log: Callable[[str], Awaitable[FirstLog | None]]
    take_over: Callable[[str, TopicClaim, FirstLog | None], Awaitable[OwnedTopic]]
    serving: Callable[[str], bool]  # whether a topic is owned here and open
    loaded: Callable[[], Iterable[str]]  # the topics owned here now
    lose: Callable[[str, LossKind, str, str | None], None]  # stop serving one at once
    release: Callable[[str, str, str | None], Awaitable[bool]]  # hand one over
    held: Callable[[str], bool]  # whether a topic is owned or being claimed here
    recover: Callable[[str], Awaitable[object]]  # take one of an owned bundle over now

    def redirected(self, topic: str) -> None:
        self.stats.redirects += 1
        self.events.redirected(topic)

    async def refuse_mixed(self, topic: str, by_bundle: bool) -> None:
        """Refuse a claim while an alive hub of the region owns topics the other way."""
        if (other := await self.choices.other_kind(by_bundle)) is not None:
            raise ServiceUnavailableError(
                f"topic {topic!r}: hub {other} owns topics "
                f"{'one by one' if by_bundle else 'by bundle'} and this one "
                f"{'by bundle' if by_bundle else 'one by one'}: no claim while the region "
                "mixes the two (run every hub alike, docs/zookeeper-layout.md)"
            )


class TopicClaims:
    """Topic by topic: an owner record per topic, claimed, watched and given up on its own."""

    by_bundle = False  # (what its alive record says)
    unloads_idle = False  # a topic let go would be placed afresh, not loaded again here

    def __init__(self, parts: ClaimParts) -> None:
        self._parts = parts
        self._store = parts.store
        self._choices = parts.choices
        self._stats = parts.stats
        self._me = parts.me
        self._first_log = parts.first_log
        self._take_over = parts.take_over
        # The owner records of the topics it owns, watched (``owner_watch``).
        self.owners = OwnerWatch(
            parts.store,
            serving=parts.serving,
            me=parts.me,
            lost=lambda topic, new_owner: parts.lose(
                topic, LossKind.OWNERSHIP_REMOVED, "ownership record removed", new_owner
            ),
        )
        # How often lately a first request here for a topic this hub does not serve found it
        # unowned (an average, newest weighing ``UNOWNED_WEIGHT``): claims go first while
        # most do (``CLAIM_FIRST``).
        self._unowned_lately = CLAIM_FIRST
        # Whether this hub's last claim made its topic: claims come in waves of one kind, and
        # while they make their topics, each brings the topic's first ledger along (``_claim``).
        self._claims_create = True

    # what the ownership tells it ---------------------------------------------------------

    def claimed(self, topic: str, version: Version) -> None:
        self.owners.watch(topic, version)

    def cannot_store(self, topic: str, version: Version | None) -> None:
        if version is not None:
            self.owners.give_up(topic, version)

    async def released(self, topic: str, version: Version | None) -> None:
        if version is None:
            return
        try:
            await self._store.ownership.delete_owner_info(topic, version)
        except HedwigError as exc:
            log.info("releasing %r: owner record already gone (%s)", topic, exc)

    def session_ended(self) -> None:
        return None  # the owner records went with the session

    async def stopped(self) -> None:
        return None  # each record was deleted as its topic was released

    async def hand_over(self, bundle: Bundle, destination: str, reason: str) -> bool:
        return False  # no bundle is owned here

    async def region_map(self) -> tuple[tuple[int, ...], tuple[str, ...]]:
        return (), ()  # clients route topic by topic

    # resolving ----------------------------------------------------------------------------

    async def resolve(self, topic: str, redirected: bool, create: bool) -> OwnedTopic:
        await self._parts.refuse_mixed(topic, by_bundle=False)
        # A topic this call created has nothing yet (no owner, configuration or ledgers): its
        # claim skips reading them, three store round trips of about nine. It is created
        # together with its owner record (``claim_topic``: one request, not two or three);
        # if it exists already, it is claimed as any other (the owner record's
        # compare-and-set settles a race), and a record in the way is learnt from the claim
        # where the store can tell (etcd), not from a read after it. A hub sent here to claim
        # tries that first; any other only once it knows it is to claim the topic, not
        # before redirecting the client elsewhere.
        me = self._me()
        fresh = ensured = False
        known: Versioned[HubInfo] | None = None  # the owner record as the claim found it
        if not create:
            if not await self._store.topics.topic_exists(topic):
                raise NoSuchTopicError(f"topic {topic!r} does not exist")
            ensured = True
        elif redirected and self._choices.can_store(topic):
            handed = await self._choices.handed_to(topic)
            if handed is None or handed == me.address:
                claim, first = await self._claim(topic)
                if claim.version is not None:
                    return await self._take_over(topic, claim, first)
                known = claim.owner
            ensured = True
        elif redirected:
            fresh = await self._store.topics.ensure_topic(topic)
            ensured = True
        elif self._unowned_lately >= CLAIM_FIRST and await self._choices.keeps(topic):
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
                owner = await self._store.ownership.read_owner_info(topic)
                if not redirected and attempt == 0:
                    self._found_unowned(owner is None)
            if owner is not None:
                info = owner.value
                if info.address != me.address:
                    self._choices.owned_by(topic, info.address)
                    self._redirect(topic)
                    raise NotResponsibleError(
                        f"topic {topic!r} is owned by {info.address}", owner=info.address
                    )
                # Our own record but not a topic we serve: left by an earlier session of
                # ours, or by a take-over that failed. Remove it and claim afresh.
                try:
                    await self._store.ownership.delete_owner_info(topic, owner.version)
                except (BadVersionError, NoTopicOwnerInfoError):
                    continue
            handed = await self._choices.handed_to(topic) if redirected else None
            if handed is not None and handed != me.address:
                self._redirect(topic)
                raise NotResponsibleError(
                    f"topic {topic!r} was just handed to {handed}", owner=handed
                )
            if not redirected or not self._choices.can_store(topic):
                target = await self._choices.owner_for(topic)
                if target is not None and target != me.address:
                    self._redirect(topic)
                    raise NotResponsibleError(
                        f"topic {topic!r} is assigned to {target}", owner=target
                    )
                if not self._choices.can_store(topic):  # as of the hubs owner_for just read
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
                self._stats.claim_conflicts += 1
                known, redirected = claim.owner, True  # someone claimed it: seen, or read next
                continue
            try:
                version = await self._store.ownership.write_owner_info(
                    topic, self._me(), NEW_VERSION
                )
            except BadVersionError:
                self._stats.claim_conflicts += 1
                redirected = True  # someone claimed it: the next read finds them
                continue
            return await self._take_over(topic, TopicClaim(version, new=fresh), None)
        raise ServiceUnavailableError(f"topic {topic!r}: its ownership is changing")

    def _found_unowned(self, unowned: bool) -> None:
        """One more request for a topic this hub does not serve found it ``unowned`` (or not)."""
        self._unowned_lately += UNOWNED_WEIGHT * (unowned - self._unowned_lately)

    async def _claim(self, topic: str) -> tuple[TopicClaim, FirstLog | None]:
        """The claim; while claims make their topics (a wave of first publishes), with the
        topic's first ledger, made in the claim's request if the claim creates the topic."""
        first = await self._first_log(topic) if self._claims_create else None
        claim = await self._store.ownership.claim_topic(
            topic, self._me(), first.ledger if first else None
        )
        if claim.version is not None:
            self._claims_create = claim.new
        if first is None or claim.log is None:
            return claim, None
        return claim, replace(first, started=claim.log)

    def _redirect(self, topic: str) -> None:
        self._parts.redirected(topic)
