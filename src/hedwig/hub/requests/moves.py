"""Moves: handing a topic, or a bundle of topics, over gracefully.

RELEASE_TOPIC (from ``hedwig rebalance``, the operator) and the hub's own balancer both come
here. The topic is released make-before-break (``TopicOwnership.release``: marks flushed, the
ledger closed, clients told where it went), and the destination is asked to claim it at once
(a TOPIC_STATS with the redirected flag, on its internal listener), so the hand-off does not
wait for the next client request. A topic nobody owns is not ours to release: with a
destination, the destination is asked to claim it anyway, which is what the caller wants.

RELEASE_BUNDLE (``hedwig move --bundle``) hands a whole bundle to a named hub, as the hub's
bundle balancer does (``TopicOwnership.hand_over_bundle``); in a region owning topics by
bundle a topic is not moved alone (its bundle's owner loads it again), so this is how an
operator moves load there by hand.
"""

from __future__ import annotations

import asyncio
import logging

from hedwig.errors import (
    HedwigError,
    InvalidRequestError,
    NoSuchTopicError,
    NotResponsibleError,
    UsageError,
)
from hedwig.hub.front.server import ClientConnection
from hedwig.hub.owning.ownership import TopicOwnership
from hedwig.hub.owning.peers import HubDialer
from hedwig.hub.reporting.events import HubEvents
from hedwig.metadata.bundles import Bundle
from hedwig.metadata.managers import MetadataStore
from hedwig.protocol import MoveKind, ReleaseBundle, ReleaseTopic, TopicStats

log = logging.getLogger(__name__)

# How long a released topic's destination is given to claim it (a TOPIC_STATS with the
# redirected flag), and to be connected to.
CLAIM_TIMEOUT_S = 10.0
CLAIM_CONNECT_TIMEOUT_S = 2.0


class TopicMoves:
    def __init__(
        self,
        *,
        ownership: TopicOwnership,
        store: MetadataStore,
        dialer: HubDialer,
        events: HubEvents,
    ) -> None:
        self._ownership = ownership
        self._store = store
        self._dialer = dialer
        self._events = events
        self._asking: set[asyncio.Task[None]] = set()  # the loop keeps only weak references

    async def release_topic(self, conn: ClientConnection, req: ReleaseTopic) -> None:
        await self.move(req.topic, req.destination, req.kind, req.reason)

    async def release_bundle(self, conn: ClientConnection, req: ReleaseBundle) -> None:
        """Hand the bundle ``req.bundle`` to ``req.destination`` (see the module docstring)."""
        if not self._ownership.claims.by_bundle:
            raise InvalidRequestError(
                "this region owns topics one by one, not by bundle: move a topic with "
                "`hedwig move TOPIC`"
            )
        try:
            bundle = Bundle.parse(req.bundle)
        except UsageError as exc:
            raise InvalidRequestError(str(exc)) from exc
        here = self._ownership.address
        if req.destination != here:
            await self._check_alive(req.destination)
        owner = (await self._store.bundles.bundle_owners()).get(bundle.name)
        if owner is None:
            found = await self._store.bundles.read_bundle_map()
            if found is None or bundle not in found.value.bundles:
                raise InvalidRequestError(
                    f"{bundle.name} is not a bundle of this region's map (`hedwig bundles` "
                    "lists them)"
                )
            raise InvalidRequestError(
                f"bundle {bundle.name} is owned by no hub now: the next request for one of its "
                "topics places it"
            )
        if owner.value.address != here:
            raise NotResponsibleError(
                f"bundle {bundle.name} is owned by {owner.value.address}",
                owner=owner.value.address,
            )
        if req.destination == here:
            return  # where it was asked to be
        if not await self._ownership.hand_over_bundle(bundle, req.destination, req.reason):
            # Its record names this hub, but the hub let it go meanwhile (a hand-off of its own).
            raise NotResponsibleError(f"bundle {bundle.name} is being handed over by this hub")

    async def _check_alive(self, destination: str) -> None:
        alive = {h.address for h in await self._store.hubs.list_hubs() if h.alive}
        if destination not in alive:
            raise InvalidRequestError(f"destination {destination} is not an alive hub")

    async def move(self, topic: str, destination: str | None, kind: MoveKind, reason: str) -> bool:
        """Hand ``topic`` over gracefully (to ``destination`` if given); False if not ours."""
        here = self._ownership.address
        if destination is not None and destination != here:
            await self._check_alive(destination)
        await self._ownership.settled(topic)
        if topic not in self._ownership.topics:
            got = await self._store.ownership.read_owner_info(topic)
            if got is not None and got.value.address != here:
                raise NotResponsibleError(
                    f"topic {topic!r} is owned by {got.value.address}", owner=got.value.address
                )
            if not await self._store.topics.topic_exists(topic):
                raise NoSuchTopicError(f"topic {topic!r} does not exist")
            if destination is not None:
                # Nobody owns it: what the caller wants is the destination owning it.
                self._ask_soon(destination, topic)
            return False
        if destination == here:
            return True
        moved = await self._ownership.release(topic, reason, destination)
        if moved:
            self._events.released(topic, kind)
            if destination is not None:
                self._ask_soon(destination, topic)
        return moved

    def _ask_soon(self, destination: str, topic: str) -> None:
        task = asyncio.get_running_loop().create_task(self._ask_to_claim(destination, topic))
        self._asking.add(task)
        task.add_done_callback(self._asking.discard)

    async def _ask_to_claim(self, destination: str, topic: str) -> None:
        try:
            conn = await self._dialer.open(destination, CLAIM_CONNECT_TIMEOUT_S)
        except HedwigError:
            return
        try:
            await conn.request(
                TopicStats(request_id=conn.next_id(), topic=topic, redirected=True),
                CLAIM_TIMEOUT_S,
            )
        except HedwigError as exc:
            log.info("destination %s did not claim %r at once: %s", destination, topic, exc)
        finally:
            conn.close()
            # Claimed there, or not at once: either way the hand-off's hold is over (and a
            # topic handed back here soon after is not sent back).
            self._ownership.choices.hand_off_ended(topic)
