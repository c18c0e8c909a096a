"""Claims by bundle: the claim policy (``hedwig.hub.owning.policy``) of a hub owning by bundle.

A topic's owner is its bundle's (``hedwig.hub.owning.bundles`` keeps the bundles this hub owns
and what it knows of the others'). A request for a topic this hub does not serve leads to:

1. The bundle owned here: the topic is loaded (created first if publishing or subscribing
   asks for one that does not exist) and taken over, with no owner record of its own.
2. Owned by another hub, as known here, or just handed over by this one: redirect there.
3. Unowned and the request not redirected: the bundle's place on the consistent-hash ring of
   the alive hubs (``HubChoices.bundle_place``); another hub's place, redirect there.
4. Unowned and redirected here (or placed here): claim the bundle; lost to another hub,
   redirect there; won, go on as in 1.

A topic of an owned bundle has no owner record, so nothing of it is watched, given up or
deleted on release: the bundle's record is watched instead, and its loss loses every topic of
it. Losing the session forgets every bundle (their records went with it); stopping deletes
their records once every topic was let go. A topic idle long enough is let go
(``unloads_idle``) and loaded again by its next request.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace

from hedwig.errors import (
    HedwigError,
    NoSuchTopicError,
    NotResponsibleError,
    ServiceUnavailableError,
)
from hedwig.hub.owning.bundle_recovery import BundleRecovery
from hedwig.hub.owning.bundles import HubBundles
from hedwig.hub.owning.claims import RELEASES_AT_ONCE, ClaimParts
from hedwig.hub.owning.takeover import FirstLog
from hedwig.hub.owning.topic import OwnedTopic
from hedwig.hub.reporting.events import LossKind
from hedwig.metadata.bundles import Bundle
from hedwig.metadata.records import NEW_VERSION, LedgerRanges, TopicClaim, Version, Versioned

log = logging.getLogger(__name__)


class BundleClaims:
    """By bundle: one owner record per bundle, claimed, watched and released as a whole."""

    by_bundle = True  # (what its alive record says)
    unloads_idle = True  # a topic let go is loaded again here by its next request

    def __init__(self, parts: ClaimParts) -> None:
        self._parts = parts
        self._store = parts.store
        self.bundles = HubBundles(
            store=parts.store,
            settings=parts.settings,
            me=parts.me,
            on_lost=self._bundle_lost,
            on_won=lambda bundle: self.recovery.won(bundle),
            clock=parts.clock,
        )
        # A won bundle's topics that the previous owner left open, taken over at once.
        self.recovery = BundleRecovery(
            store=parts.store,
            clock=parts.clock,
            events=parts.events,
            loaded=parts.held,
            recover=parts.recover,
        )
        # Whether this hub's last load made its topic: loads come in waves of one kind
        # (``_load``).
        self._loads_create = True

    # what the ownership tells it ---------------------------------------------------------

    def claimed(self, topic: str, version: Version) -> None:
        return None  # the bundle's record is watched, not the topic's

    def cannot_store(self, topic: str, version: Version | None) -> None:
        return None  # no record of the topic's to give up: its next request loads it again

    async def released(self, topic: str, version: Version | None) -> None:
        return None  # no record of the topic's to delete

    def session_ended(self) -> None:
        self.recovery.stop()
        self.bundles.forget_all()

    async def stopped(self) -> None:
        self.recovery.stop()
        await self.bundles.release_all()  # every log closed first

    async def hand_over(self, bundle: Bundle, destination: str, reason: str) -> bool:
        """Hand ``bundle`` to ``destination`` (make-before-break, as a topic's hand-off):
        held for it from now on, every loaded topic of it let go naming it (its ledger closed,
        its clients told where to go), then its owner record deleted, so the destination
        claims it at its clients' first request and finds every log closed. False if the
        bundle is not owned here."""
        version = self.bundles.hand_off(bundle, destination)
        if version is None:
            return False
        names = [t for t in self._parts.loaded() if bundle.holds(t)]
        for i in range(0, len(names), RELEASES_AT_ONCE):
            group = names[i : i + RELEASES_AT_ONCE]
            await asyncio.gather(
                *(self._parts.release(t, reason, destination) for t in group),
                return_exceptions=True,
            )
        try:
            await self._store.bundles.release_bundle(bundle.name, version)
        except HedwigError as exc:
            log.info("handing bundle %s over: its record: %s", bundle.name, exc)
        log.info(
            "handed bundle %s (%d topics loaded) to %s: %s",
            bundle.name,
            len(names),
            destination,
            reason,
        )
        return True

    async def region_map(self) -> tuple[tuple[int, ...], tuple[str, ...]]:
        """The bundle map's boundaries and each bundle's owner as known here ("" unowned)."""
        known = await self.bundles.known_owners()
        bmap = await self.bundles.current_map()
        return bmap.boundaries, tuple(known.get(b.name, "") for b in bmap.bundles)

    def _bundle_lost(self, bundle: Bundle, new_owner: str | None) -> None:
        """A bundle's owner record is gone or another's: every topic of it goes."""
        for topic in [t for t in self._parts.loaded() if bundle.holds(t)]:
            self._parts.lose(
                topic, LossKind.OWNERSHIP_REMOVED, "bundle's owner record removed", new_owner
            )

    # resolving ----------------------------------------------------------------------------

    async def resolve(self, topic: str, redirected: bool, create: bool) -> OwnedTopic:
        parts = self._parts
        await parts.refuse_mixed(topic, by_bundle=True)
        bundles = self.bundles
        me = parts.me().address
        bundle = (await bundles.current_map()).bundle_of(topic)
        handed = bundles.handed_to(bundle)
        if handed is not None:
            parts.redirected(topic)
            raise NotResponsibleError(
                f"topic {topic!r} is in bundle {bundle.name}, just handed to {handed}",
                owner=handed,
            )
        owner = await bundles.owner_of(bundle)
        if owner is None:
            place = None if redirected else await parts.choices.bundle_place(bundle.name)
            if place is not None and place != me:
                parts.redirected(topic)
                raise NotResponsibleError(
                    f"topic {topic!r} is in bundle {bundle.name}, placed on {place}", owner=place
                )
            owner = await bundles.claim(bundle)
        if owner is None:
            raise ServiceUnavailableError(f"bundle {bundle.name}: its ownership is changing")
        if owner != me:
            parts.redirected(topic)
            raise NotResponsibleError(
                f"topic {topic!r} is in bundle {bundle.name}, owned by {owner}", owner=owner
            )
        claim, first = await self._load(topic, create)
        version = bundles.owned.get(bundle.name)
        if version is None:  # lost while the topic was looked up
            raise ServiceUnavailableError(f"bundle {bundle.name}: its ownership is changing")
        return await parts.take_over(topic, replace(claim, version=version), first)

    async def _load(self, topic: str, create: bool) -> tuple[TopicClaim, FirstLog | None]:
        """What loading ``topic`` in an owned bundle finds, in as few store requests as loads
        come in (``TopicClaim``, its version left to the caller; and a new topic's first log,
        made with it): loads come in waves of one kind, as claims do. While they make their
        topics (first publishes), the topic is made first, with its log, in one request
        (``_make``: nothing else of it to read, no owner record of its own). While they find
        them (a take-over of a dead hub's bundles), its configuration and ledger list are read
        together (one ``multiRead`` or etcd request, or by the bundle's recovery), which the
        take-over then does not read again; a topic found missing is made then, if the
        request may make one."""
        preloaded = self.recovery.take(topic)
        if preloaded is not None:  # read by the recovery of the bundle's wave
            return preloaded, None
        if create and self._loads_create:
            if (made := await self._make(topic)) is not None:
                return made
            self._loads_create = False
        config, ranges = await asyncio.gather(
            self._store.topics.read_topic_config(topic),
            self._store.persistence.read_topic_persistence_info(topic),
        )
        if config is None:
            if not create:
                raise NoSuchTopicError(f"topic {topic!r} does not exist")
            self._loads_create = True
            # Gone meanwhile, or made by another request now: a take-over reads what it finds.
            made = await self._make(topic)
            return made if made is not None else (TopicClaim(None), None)
        found = TopicClaim(
            None, config=config, ranges=ranges or Versioned(LedgerRanges(), NEW_VERSION)
        )
        return found, None

    async def _make(self, topic: str) -> tuple[TopicClaim, FirstLog | None] | None:
        """``topic`` made with its first ledger and the record naming it, one store request
        (``create_topic_with_log``; the topic alone if its log cannot be planned now: its
        take-over starts it); ``None`` if it exists."""
        first = await self._parts.first_log(topic)
        if first is None:
            made = await self._store.topics.ensure_topic(topic)
            return (TopicClaim(None, new=True), None) if made else None
        started = await self._store.persistence.create_topic_with_log(topic, first.ledger)
        if started is None:
            return None
        return TopicClaim(None, new=True), replace(first, started=started)
