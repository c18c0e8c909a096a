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
one by one): two such hubs would each believe they own a topic.

With bundles on (``hedwig.hub.owning.bundles``) the owner is the topic's bundle's:

1. The bundle owned here: the topic is loaded (created first if publishing or subscribing
   asks for one that does not exist) and taken over, with no owner record of its own.
2. Owned by another hub, as known here, or just handed over by this one: redirect there.
3. Unowned and the request not redirected: the bundle's place on the consistent-hash ring of
   the alive hubs (``HubChoices.bundle_place``); another hub's place, redirect there.
4. Unowned and redirected here (or placed here): claim the bundle; lost to another hub,
   redirect there; won, go on as in 1.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

from hedwig.errors import (
    BadVersionError,
    NoSuchTopicError,
    NoTopicOwnerInfoError,
    NotResponsibleError,
    ServiceUnavailableError,
)
from hedwig.hub.owning.bundles import HubBundles
from hedwig.hub.owning.choices import HubChoices
from hedwig.hub.owning.takeover import FirstLog
from hedwig.hub.owning.topic import OwnedTopic
from hedwig.hub.reporting.events import HubEvents
from hedwig.metadata.managers import MetadataStore
from hedwig.metadata.records import NEW_VERSION, HubInfo, LedgerRanges, TopicClaim, Versioned

# A topic this hub would keep by the local placement rule (``HubChoices.keeps``) is claimed
# before its owner record is read while at least this share of the requests for topics it did
# not serve lately found them unowned: a claim wave or a failover, where the read found nothing
# every time (a ZooKeeper round trip of the four or eight a claim or take-over makes). The
# claim of a topic owned elsewhere fails and says by whom (etcd, in the claim's own request)
# or costs the read it saved and one request more (ZooKeeper: the failed create, then the
# read): where most topics asked about are owned, the read goes first as before.
CLAIM_FIRST = 0.5
UNOWNED_WEIGHT = 1 / 16


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


class ClaimRules:
    def __init__(
        self,
        *,
        store: MetadataStore,
        choices: HubChoices,
        stats: OwnershipStats,
        events: HubEvents,
        me: Callable[[], HubInfo],
        first_log: Callable[[str], Awaitable[FirstLog | None]],
        take_over: Callable[[str, TopicClaim, FirstLog | None], Awaitable[OwnedTopic]],
        bundles: HubBundles | None = None,
    ) -> None:
        self._store = store
        self._choices = choices
        self._stats = stats
        self._events = events
        self._me = me  # this hub's address and epoch, as they are now
        self._first_log = first_log
        self._take_over = take_over
        self._bundles = bundles  # owning by bundle (``None``: topic by topic)
        # How often lately a first request here for a topic this hub does not serve found it
        # unowned (an average, newest weighing ``UNOWNED_WEIGHT``): claims go first while
        # most do (``CLAIM_FIRST``).
        self._unowned_lately = CLAIM_FIRST
        # Whether this hub's last claim made its topic: claims come in waves of one kind, and
        # while they make their topics, each brings the topic's first ledger along (``_claim``).
        self._claims_create = True

    async def resolve(self, topic: str, redirected: bool, create: bool) -> OwnedTopic:
        by_bundle = self._bundles is not None
        if (other := await self._choices.other_kind(by_bundle)) is not None:
            raise ServiceUnavailableError(
                f"topic {topic!r}: hub {other} owns topics "
                f"{'one by one' if by_bundle else 'by bundle'} and this one "
                f"{'by bundle' if by_bundle else 'one by one'}: no claim while the region "
                "mixes the two (run every hub alike, docs/zookeeper-layout.md)"
            )
        if self._bundles is not None:
            return await self._resolve_by_bundle(self._bundles, topic, redirected, create)
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

    async def _resolve_by_bundle(
        self, bundles: HubBundles, topic: str, redirected: bool, create: bool
    ) -> OwnedTopic:
        me = self._me().address
        bundle = (await bundles.current_map()).bundle_of(topic)
        handed = bundles.handed_to(bundle)
        if handed is not None:
            self._redirect(topic)
            raise NotResponsibleError(
                f"topic {topic!r} is in bundle {bundle.name}, just handed to {handed}",
                owner=handed,
            )
        owner = await bundles.owner_of(bundle)
        if owner is None:
            place = None if redirected else await self._choices.bundle_place(bundle.name)
            if place is not None and place != me:
                self._redirect(topic)
                raise NotResponsibleError(
                    f"topic {topic!r} is in bundle {bundle.name}, placed on {place}", owner=place
                )
            owner = await bundles.claim(bundle)
        if owner is None:
            raise ServiceUnavailableError(f"bundle {bundle.name}: its ownership is changing")
        if owner != me:
            self._redirect(topic)
            raise NotResponsibleError(
                f"topic {topic!r} is in bundle {bundle.name}, owned by {owner}", owner=owner
            )
        claim = await self._load(topic, create)
        version = bundles.owned.get(bundle.name)
        if version is None:  # lost while the topic was looked up
            raise ServiceUnavailableError(f"bundle {bundle.name}: its ownership is changing")
        return await self._take_over(topic, replace(claim, version=version), None)

    async def _load(self, topic: str, create: bool) -> TopicClaim:
        """What loading ``topic`` in an owned bundle finds, in as few store requests as loads
        come in (``TopicClaim``, its version left to the caller): loads come in waves of one
        kind, as claims do. While they make their topics (first publishes), the topic is
        created first (``new``: nothing else of it to read). While they find them (a take-over
        of a dead hub's bundles), its configuration and ledger list are read together (one
        ``multiRead`` or etcd request), which the take-over then does not read again; a topic
        found missing is made then, if the request may make one."""
        if create and self._claims_create:
            if await self._store.topics.ensure_topic(topic):
                return TopicClaim(None, new=True)
            self._claims_create = False
        config, ranges = await asyncio.gather(
            self._store.topics.read_topic_config(topic),
            self._store.persistence.read_topic_persistence_info(topic),
        )
        if config is None:
            if not create:
                raise NoSuchTopicError(f"topic {topic!r} does not exist")
            self._claims_create = True
            return TopicClaim(None, new=await self._store.topics.ensure_topic(topic))
        return TopicClaim(
            None, config=config, ranges=ranges or Versioned(LedgerRanges(), NEW_VERSION)
        )

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
        self._stats.redirects += 1
        self._events.redirected(topic)
