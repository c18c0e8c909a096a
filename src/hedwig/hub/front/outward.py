"""The addresses a hub names to external clients: every hub by its external address.

A hub is known to the region by its client address (its pod's DNS name): the owner records,
the redirects and the moves name it, and only clients inside the hubs' network can reach it.
A hub with an external listener (``ConnectionSettings.external_listen``) serves clients from
outside that network on a second port, and publishes where they reach it
(``external_advertise``: a NodePort on its node, a load balancer) in its alive record
(``HubLoad.external``). The listener a connection came in on says where its client is, so
what is sent on an external connection names hubs by their external addresses, rewritten on
the way out in one place (``RewritingConnection.send``: the external listener's connections),
not by every request handler:

- ``Error.address`` of NOT_RESPONSIBLE_FOR_TOPIC and TOPIC_MOVING (the owner, the
  destination); USE_LANE's is a topic, left alone;
- ``TopicMoved.new_owner`` and ``SubscriptionMoved.hub``;
- ``Region.hubs`` and ``Region.owners`` (DESCRIBE_REGION: where else to go, who owns each
  bundle).

An answer naming a hub whose external address is not known (it registered after the last read
of the registry) waits for a read of the registry before it is sent (``prepare``); an event
pushed to a connection (a move) is sent at once, with what is known. A hub still not known (it
has no external listener) is never named by its internal address, which an external client
cannot reach: an address becomes none (the client asks again, as after a redirect to no one),
a hub in a list is left out, a bundle's owner becomes unknown (""). A lookup once the last
read is ``REFRESH_S`` old starts another (a hub that came back on another node has another
NodePort address); at most one read is under way at a time.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace

from hedwig.clock import Clock
from hedwig.errors import HedwigError
from hedwig.metadata.managers import MetadataStore
from hedwig.protocol import Error, Frame, Region, SubscriptionMoved, TopicMoved
from hedwig.protocol.status import Status

log = logging.getLogger(__name__)

# How old the registry's external addresses may get before a lookup reads them again.
REFRESH_S = 5.0
# The statuses whose ``Error.address`` is a hub (USE_LANE's is a topic).
HUB_STATUSES = frozenset({Status.NOT_RESPONSIBLE_FOR_TOPIC, Status.TOPIC_MOVING})


class ExternalAddresses:
    """Each alive hub's external address, by its client address, read from the registry."""

    def __init__(self, store: MetadataStore, clock: Clock, *, own: tuple[str, str]) -> None:
        self._store = store
        self._clock = clock
        self._own = own
        self._external: dict[str, str] = {}
        self._read_at = float("-inf")
        self._reading: asyncio.Task[None] | None = None

    def set_own(self, address: str, external: str) -> None:
        """This hub's client and external addresses (the client one known once bound)."""
        self._own = (address, external)

    async def prepare(self, frame: Frame) -> None:
        """Read the registry first if ``frame`` names a hub not known yet."""
        if any(self._external.get(h) is None and h != self._own[0] for h in _named(frame)):
            self._read_soon()
            assert self._reading is not None
            await asyncio.shield(self._reading)

    def of(self, address: str) -> str | None:
        """``address``'s external address, or None if not known (a read is started)."""
        if address == self._own[0]:
            return self._own[1]
        got = self._external.get(address)
        if got is None or self._clock.monotonic() - self._read_at >= REFRESH_S:
            self._read_soon()
        return got

    def _read_soon(self) -> None:
        if self._reading is None or self._reading.done():
            self._reading = asyncio.get_running_loop().create_task(self.read())

    async def read(self) -> None:
        """Read every alive hub's external address from the registry."""
        self._read_at = self._clock.monotonic()
        try:
            hubs = await self._store.hubs.list_hubs()
        except HedwigError as exc:  # the store is away: the addresses known are kept
            log.info("cannot read the hubs' external addresses: %s", exc)
            return
        self._external = {
            h.address: h.load.external
            for h in hubs
            if h.alive and h.load is not None and h.load.external
        }

    def rewrite(self, frame: Frame) -> Frame:
        """``frame`` as sent to an external client: every hub named by its external address."""
        if isinstance(frame, Error):
            if frame.address and frame.status in HUB_STATUSES:
                return replace(frame, address=self.of(frame.address))
        elif isinstance(frame, TopicMoved):
            if frame.new_owner:
                return replace(frame, new_owner=self.of(frame.new_owner))
        elif isinstance(frame, SubscriptionMoved):
            if frame.hub:
                return replace(frame, hub=self.of(frame.hub))
        elif isinstance(frame, Region):
            hubs = tuple(e for e in (self.of(h) for h in frame.hubs) if e)
            owners = tuple((self.of(o) or "") if o else "" for o in frame.owners)
            return replace(frame, hubs=hubs, owners=owners)
        return frame


def _named(frame: Frame) -> tuple[str, ...]:
    """The hubs ``frame`` names."""
    if isinstance(frame, Error):
        return (frame.address,) if frame.address and frame.status in HUB_STATUSES else ()
    if isinstance(frame, TopicMoved):
        return (frame.new_owner,) if frame.new_owner else ()
    if isinstance(frame, SubscriptionMoved):
        return (frame.hub,) if frame.hub else ()
    if isinstance(frame, Region):
        return (*frame.hubs, *(o for o in frame.owners if o))
    return ()
