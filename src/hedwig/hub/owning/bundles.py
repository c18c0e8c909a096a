"""The bundles this hub owns, and what it knows of the others' (``BundleSettings.enabled``).

With bundles on, a hub owns a topic because it owns the topic's bundle (``hedwig.metadata.
bundles``): one owner record per bundle, claimed test-and-set on the hub's session or lease as
a topic's was, and no owner record per topic. A topic of an owned bundle is loaded when a
request first asks for it (``hedwig.hub.owning.claims``: its log taken over, fenced and
recovered, as before), so a bundle's claim costs one record however many topics it holds, and
a take-over of a dead hub's bundles costs one claim each; the topics their old owner left open
are then recovered in bulk (``on_won``: ``hedwig.hub.owning.bundle_recovery``), the others
only when used.

The rules kept:

- **The map** is read at start (made, ``BundleSettings.initial_bundles`` equal bundles, by the
  first hub of a region to find none; a compare-and-set, so two first hubs make one) and
  watched; a change is read again.
- **Other hubs' bundles** are known from one listing of the owner records, watched: any claim
  or release marks it stale, and the next request that needs it lists again (one listing at
  a time). A stale answer costs a redirect, never a wrong owner: the owner itself checks its
  own records (below), and a hub that does not own the bundle redirects again.
- **Its own bundles** are those whose claim it won; each record is watched. When a watch
  fires the record is read: still ours, watched again; gone or another's, the bundle is lost
  and every topic of it with it (``on_lost``). A read that fails leaves it to the session's
  listener, as for topics.
- **One claim at a time per bundle**: concurrent requests for topics of an unowned bundle
  share one. A record in the way that names this hub with an older epoch is a leftover of its
  previous session: deleted (at its version), then claimed again. One naming this hub and
  this epoch is a claim whose answer was lost: taken as won.
- **A hand-off** (``hand_off``, then the owner lets the bundle's loaded topics go naming the
  destination, then deletes the record) holds the bundle for its destination for
  ``HANDOFF_HOLD_S``: requests for its topics here are sent there, even redirected ones,
  rather than claimed back (a client redirected here just before would else undo the move).
  The hold ends early once the listing shows the destination owning it.
- **Losing the session** (``forget_all``) forgets every owned bundle: their records went with
  the session. **Stopping** (``release_all``) deletes the records, after the topics have been
  let go, so the next owners find every log closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from hedwig.clock import Clock
from hedwig.errors import BadVersionError, HedwigError, MetadataError, NoTopicOwnerInfoError
from hedwig.metadata.bundles import Bundle, BundleMap
from hedwig.metadata.managers import MetadataStore
from hedwig.metadata.records import NEW_VERSION, HubInfo, Version
from hedwig.settings import BundleSettings

log = logging.getLogger(__name__)

# Tries of a bundle's claim when records in the way go meanwhile (a leftover deleted, a
# holder's record gone between the claim and its read).
CLAIM_TRIES = 3
# How long a bundle handed over is kept for its destination (the destination claims it at its
# clients' first redirected request, within a round trip or two of the release).
HANDOFF_HOLD_S = 3.0


def _retrieved(task: asyncio.Task[None]) -> None:
    if not task.cancelled():
        task.exception()


class HubBundles:
    def __init__(
        self,
        *,
        store: MetadataStore,
        settings: BundleSettings,
        me: Callable[[], HubInfo],
        on_lost: Callable[[Bundle, str | None], None],
        on_won: Callable[[Bundle], None],
        clock: Clock,
    ) -> None:
        self._store = store
        self._clock = clock
        # Bundles handed over lately: their destination and until when they are held for it.
        self.handed: dict[str, tuple[str, float]] = {}
        self.settings = settings
        self._me = me  # this hub's address and epoch, as its records name it
        self._on_lost = on_lost  # told (bundle, new owner or None) when one is no longer ours
        self._on_won = on_won  # told of a bundle whose claim this hub won
        self.map: BundleMap | None = None
        self._reading_map: asyncio.Task[None] | None = None
        self._map_changes = 0  # the map's watch fired this often (a read under way is stale)
        # The bundles this hub owns: their owner records' versions, by name.
        self.owned: dict[str, Version] = {}
        # Other hubs' bundles, by name, as the last listing had them; ``_stale``: a claim or
        # release happened since.
        self.others: dict[str, str] = {}
        self._stale = True
        self._listing: asyncio.Task[None] | None = None
        self._claims: dict[str, asyncio.Future[str | None]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    # the map ------------------------------------------------------------------------------

    async def current_map(self) -> BundleMap:
        """The region's bundle map (read, or made, the first time)."""
        while self.map is None:
            if self._reading_map is None:
                self._reading_map = asyncio.get_running_loop().create_task(self._read_map())
                self._reading_map.add_done_callback(_retrieved)
            reading = self._reading_map
            try:
                await asyncio.shield(reading)
            finally:
                if self._reading_map is reading and reading.done():
                    self._reading_map = None
        return self.map

    async def _read_map(self) -> None:
        changes = self._map_changes
        got = await self._store.bundles.read_bundle_map(watch=self._map_changed)
        if got is None:
            first = BundleMap.uniform(self.settings.initial_bundles)
            with contextlib.suppress(BadVersionError):  # another hub made it first
                await self._store.bundles.write_bundle_map(first, NEW_VERSION)
                log.info("made the region's bundle map: %d bundles", len(first))
            got = await self._store.bundles.read_bundle_map()  # (the watch set fires)
            if got is None:
                raise MetadataError("the region's bundle map went as it was made")
        if changes == self._map_changes:  # else changed while read: read again
            self.map = got.value

    def _map_changed(self) -> None:
        self._map_changes += 1
        self.map = None  # read again at the next request (and watched again then)

    # owners -------------------------------------------------------------------------------

    def owns(self, bundle: Bundle) -> bool:
        return bundle.name in self.owned

    async def owner_of(self, bundle: Bundle) -> str | None:
        """The address of ``bundle``'s owner as known here (``None``: unowned)."""
        if bundle.name in self.owned:
            return self._me().address
        while self._stale:
            if self._listing is None:
                self._listing = asyncio.get_running_loop().create_task(self._list())
                self._listing.add_done_callback(_retrieved)
            listing = self._listing
            try:
                await asyncio.shield(listing)
            finally:
                if self._listing is listing and listing.done():
                    self._listing = None
        return self.others.get(bundle.name)

    async def _list(self) -> None:
        self._stale = False  # a change from here on marks it stale again
        me = self._me().address
        try:
            owners = await self._store.bundles.bundle_owners(watch=self._owners_changed)
        except BaseException:
            self._stale = True
            raise
        self.others = {n: o.value.address for n, o in owners.items() if o.value.address != me}

    def _owners_changed(self) -> None:
        self._stale = True

    async def known_owners(self) -> dict[str, str]:
        """Every owned bundle's owner as known here (the listing read again if stale)."""
        bundles = await self.current_map()
        if bundles.bundles:
            await self.owner_of(bundles.bundles[0])  # (refreshes the listing if stale)
        me = self._me().address
        return {**self.others, **dict.fromkeys(self.owned, me)}

    async def claim(self, bundle: Bundle) -> str | None:
        """Claim ``bundle``; the address of its owner after: this hub's if it won, the
        holder's if not (``None``: the ownership kept changing)."""
        pending = self._claims.get(bundle.name)
        if pending is not None:
            return await asyncio.shield(pending)
        fut: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        self._claims[bundle.name] = fut
        try:
            owner = await self._claim(bundle.name)
        except BaseException as exc:
            fut.set_exception(exc)
            fut.exception()
            del fut
            raise
        finally:
            self._claims.pop(bundle.name, None)
        fut.set_result(owner)
        return owner

    async def _claim(self, name: str) -> str | None:
        for _ in range(CLAIM_TRIES):
            me = self._me()
            claim = await self._store.bundles.claim_bundle(name, me)
            held = claim.owner
            if claim.version is not None:
                self._won(name, claim.version)
                return me.address
            if held is None:
                continue  # released between the claim and its read: claim again
            if held.value == me:
                self._won(name, held.version)  # our own claim, its answer lost
                return me.address
            if held.value.address == me.address:
                # Left by an earlier session of ours: remove it and claim afresh.
                with contextlib.suppress(BadVersionError, NoTopicOwnerInfoError):
                    await self._store.bundles.release_bundle(name, held.version)
                continue
            self.others[name] = held.value.address
            return held.value.address
        return None

    def _won(self, name: str, version: Version) -> None:
        self.owned[name] = version
        self.others.pop(name, None)
        self._store.bundles.watch_bundle_owner(name, self._fired, version)
        log.info("claimed bundle %s", name)
        self._on_won(Bundle.parse(name))

    def _fired(self, name: str) -> None:
        if name not in self.owned:
            return
        task = asyncio.get_running_loop().create_task(self._check(name))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _check(self, name: str) -> None:
        try:
            got = await self._store.bundles.read_bundle_owner(name)
        except MetadataError:
            # Out of reach: the session's listener decides; watch again meanwhile.
            if name in self.owned:
                self._store.bundles.watch_bundle_owner(name, self._fired)
            return
        if name not in self.owned:
            return
        if got is not None and got.value == self._me():
            self.owned[name] = got.version
            self._store.bundles.watch_bundle_owner(name, self._fired, got.version)
            return
        del self.owned[name]
        log.warning("lost bundle %s: its owner record is gone or not ours", name)
        self._on_lost(Bundle.parse(name), None if got is None else got.value.address)

    def hand_off(self, bundle: Bundle, destination: str) -> Version | None:
        """Stop owning ``bundle`` here for ``destination``: its record's version (for its
        deletion once its topics are let go), ``None`` if it is not owned here."""
        version = self.owned.pop(bundle.name, None)
        if version is not None:
            self.handed[bundle.name] = (destination, self._clock.monotonic() + HANDOFF_HOLD_S)
        return version

    def handed_to(self, bundle: Bundle) -> str | None:
        """The hub ``bundle`` was just handed to, while it is held for it."""
        held = self.handed.get(bundle.name)
        if held is None:
            return None
        destination, until = held
        if self._clock.monotonic() >= until or self.others.get(bundle.name) == destination:
            del self.handed[bundle.name]
            return None
        return destination

    def forget_all(self) -> None:
        """The session ended: every owned bundle's record went with it."""
        if self.owned:
            log.warning("forgetting %d bundles: the session ended", len(self.owned))
        self.owned.clear()
        self._stale = True

    async def release_all(self) -> None:
        """Delete every owned bundle's record (the hub stops; its topics are let go first)."""
        owned, self.owned = self.owned, {}

        async def release(name: str, version: Version) -> None:
            try:
                await self._store.bundles.release_bundle(name, version)
            except HedwigError as exc:
                log.info("releasing bundle %s: %s", name, exc)

        await asyncio.gather(*(release(n, v) for n, v in owned.items()))
