"""Recovering a dead owner's topics in bulk, when this hub wins their bundle.

A bundle won here may have been another hub's until its session ended (it died, froze or was
cut off): the topics it served then still end on an open ledger, which must be fenced and
recovered before anyone may write them again. Loaded only by their first request, each of
them waited for its clients' retries, and their take-overs came one at a time, in the order
the retries happened to arrive. Here they are recovered as soon as the bundle is won, in bulk:

- **A wave shares one listing.** A dead hub's bundles are won within a round trip or two of
  one another; every bundle won while a listing of the region's topics is under way is served
  by the next one (``TopicCatalog.list_topics``, one read), and only its topics are kept.
- **Reads in one turn.** The configuration and ledger list of every topic of the wave are read
  ``READS_AT_ONCE`` at a time in one turn of the event loop (on ZooKeeper, one ``multiRead``
  per 64 records; on etcd, the turn's reads together), and handed to the take-over
  (``preloaded``), which does not read them again.
- **Only what was in use.** A topic whose log ends on a closed ledger was let go cleanly
  (unloaded when idle, handed over): nothing to fence, it stays unloaded until its first
  request, as lazy loading wants. One whose log ends on an open ledger was served by the old
  owner: it is taken over now.
- **Bounded, pipelined take-overs.** ``TAKE_OVERS_AT_ONCE`` take-overs run at a time, each
  through the ownership's own path (``recover``: the claim a client's request for the topic
  then shares, never a second one), so the fences of one turn go to each replica as one
  FENCE_LEDGERS and the ledger-list writes of one turn as one ``multi``.
- **Nothing forced.** A take-over that fails (the bundle lost meanwhile, a replica out of
  reach) is left to the topic's next request, as before. Losing the session or stopping ends
  the recovery under way (``stop``).
"""

from __future__ import annotations

import asyncio
import bisect
import logging
from collections.abc import Awaitable, Callable

from hedwig.clock import Clock
from hedwig.errors import HedwigError
from hedwig.hub.reporting.events import HubEvents
from hedwig.metadata.bundles import Bundle, topic_hash
from hedwig.metadata.managers import MetadataStore
from hedwig.metadata.records import TopicClaim

log = logging.getLogger(__name__)

# Topics whose records are read in one turn (a wave of a dead hub's bundles holds tens of
# thousands: all at once would hold every record and every request in memory together).
READS_AT_ONCE = 1024
# Take-overs of recovered topics under way at once (as ``RELEASES_AT_ONCE``: enough for the
# fences and writes of a turn to fill their batched requests).
TAKE_OVERS_AT_ONCE = 256
# Listed names sorted into the wave's bundles in one turn of the event loop.
FILTERED_PER_TURN = 4096


class BundleRecovery:
    def __init__(
        self,
        *,
        store: MetadataStore,
        clock: Clock,
        events: HubEvents,
        loaded: Callable[[str], bool],
        recover: Callable[[str], Awaitable[object]],
    ) -> None:
        self._store = store
        self._clock = clock
        self._events = events
        self._loaded = loaded  # whether a topic is served (or being claimed) here already
        self._recover = recover  # the ownership's take-over of one topic of an owned bundle
        # What the wave's reads found, by topic, until its take-over reads it (``take``).
        self.preloaded: dict[str, TopicClaim] = {}
        self._waiting: list[Bundle] = []  # won, not yet listed
        self._task: asyncio.Task[None] | None = None

    def won(self, bundle: Bundle) -> None:
        """``bundle`` was just won here: recover its topics with the rest of its wave."""
        self._waiting.append(bundle)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())

    def take(self, topic: str) -> TopicClaim | None:
        """What the wave read of ``topic`` (once), for its take-over."""
        return self.preloaded.pop(topic, None)

    def stop(self) -> None:
        """The session ended or the hub stops: the recovery under way ends."""
        self._waiting.clear()
        self.preloaded.clear()
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _run(self) -> None:
        while self._waiting:
            began = self._clock.monotonic()
            try:
                names = await self._store.topics.list_topics()
            except HedwigError as exc:
                log.info("recovering %d bundles: listing failed: %s", len(self._waiting), exc)
                self._waiting.clear()
                return
            wave, self._waiting = self._waiting, []  # every bundle won until the listing came
            mine = await self._of(wave, names)
            recovered = 0
            for i in range(0, len(mine), READS_AT_ONCE):
                recovered += await self._recover_some(mine[i : i + READS_AT_ONCE])
            self._events.recovered_in_bulk(recovered)
            log.info(
                "bundle recovery: %d of %d topics taken over, of %d bundles won, in %.3f s",
                recovered,
                len(mine),
                len(wave),
                self._clock.monotonic() - began,
            )

    async def _of(self, wave: list[Bundle], names: list[str]) -> list[str]:
        """The topics of ``names`` in ``wave``'s bundles not loaded here: each name hashed
        once and its bundle found by bisection, ``FILTERED_PER_TURN`` names a turn (a test of
        every name against every bundle of a wave stalled a loaded hub's loop for seconds, and
        its lease with it)."""
        spans = sorted((b.start, b.end) for b in wave)
        starts = [start for start, _ in spans]
        mine = []
        for i in range(0, len(names), FILTERED_PER_TURN):
            for topic in names[i : i + FILTERED_PER_TURN]:
                point = topic_hash(topic)
                at = bisect.bisect_right(starts, point) - 1
                if at >= 0 and point < spans[at][1] and not self._loaded(topic):
                    mine.append(topic)
            await asyncio.sleep(0)  # the loop's other work between turns
        return mine

    async def _recover_some(self, topics: list[str]) -> int:
        """Read ``topics``' records in one turn, take over those whose log ends open."""
        catalog, persistence = self._store.topics, self._store.persistence
        try:
            configs, ranges = await asyncio.gather(
                asyncio.gather(*(catalog.read_topic_config(t) for t in topics)),
                asyncio.gather(*(persistence.read_topic_persistence_info(t) for t in topics)),
            )
        except HedwigError as exc:
            log.info("recovering %d topics: reading their records failed: %s", len(topics), exc)
            return 0
        open_ended = []
        for topic, config, got in zip(topics, configs, ranges, strict=True):
            if config is None or got is None or not got.value.ranges:
                continue  # deleted meanwhile, or no log yet: nothing to fence
            if got.value.ranges[-1].end_seq is not None:
                continue  # let go cleanly: loaded at its first request
            if not self._loaded(topic):
                self.preloaded[topic] = TopicClaim(None, config=config, ranges=got)
                open_ended.append(topic)
        at_once = asyncio.Semaphore(TAKE_OVERS_AT_ONCE)

        async def one(topic: str) -> bool:
            async with at_once:
                try:
                    await self._recover(topic)
                    return True
                except HedwigError as exc:
                    log.debug("recovering %r: left to its next request: %s", topic, exc)
                    return False
                finally:
                    self.preloaded.pop(topic, None)

        return sum(await asyncio.gather(*(one(t) for t in open_ended)))
