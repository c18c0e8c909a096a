"""The plans of the topics a hub serves, cached and watched (``hedwig.metadata.plans``).

A topic's plan says how it is spread: fan-out (several hubs deliver to its subscribers) or
ingest (several lanes take its publishers); most topics have none and are served by their
owner alone. Every hub that serves a topic reads its plan here and follows it
(``hedwig.hub.spreading.fanout``, ``hedwig.hub.spreading.lanes``).

Rules:

- Which topics have a plan is one set, read with a watch (``planned_topics``): a topic not in
  it is single-hub with no read, watch or cache entry of its own (most topics: a claim used
  to pay a store read for its plan, and a hub ~500 bytes per topic for the watch and cache
  entry). The plans of the topics in the set are cached with a watch each; when the set
  changes, the topics that joined or left it are told as a plan's own watch would.
- A plan read before a change must never be cached after it: a read whose watch fired while
  it was under way is made again.
- Which hub serves a subscriber of a fan-out topic is the plan's rendezvous hash over the
  plan's hubs that are alive; the alive hubs are read at most every ``ALIVE_REFRESH_S``, one
  read shared by every caller that finds the list stale.
- Whoever follows the plans is told of each change (``on_change``), once per topic and change.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable

from hedwig.clock import Clock
from hedwig.errors import HedwigError
from hedwig.metadata.managers import MetadataStore
from hedwig.metadata.plans import PlanMode, TopicPlan

log = logging.getLogger(__name__)

# The alive hubs are read at most this often (a dead delivery hub's subscribers move to the
# others within about this plus the metadata session timeout).
ALIVE_REFRESH_S = 1.0
# A read of the planned topics after their watch fired is retried this often, doubling up to
# the second figure, until it succeeds (the store unreachable meanwhile).
PLANNED_RETRY_S = 0.5
PLANNED_RETRY_MAX_S = 8.0
_UNKNOWN = object()


class TopicPlans:
    def __init__(self, *, store: MetadataStore, clock: Clock) -> None:
        self._store = store
        self._clock = clock
        self._plans: dict[str, TopicPlan | None] = {}
        # The topics that have a plan (None: not read yet), the read of it under way, and
        # whether the set's watch fired since that read began (it is read again).
        self._planned: frozenset[str] | None = None
        self._planned_reading: asyncio.Future[frozenset[str]] | None = None
        self._planned_fired = False
        self._loading: dict[str, asyncio.Future[TopicPlan | None]] = {}
        # Topics whose plan changed while a read of it was under way (see ``plan``).
        self._changed_while_loading: set[str] = set()
        self._alive: frozenset[str] = frozenset()
        self._alive_at = float("-inf")
        # The registry read under way, which every caller that finds the list stale awaits.
        self._alive_reading: asyncio.Task[None] | None = None
        self._later: set[asyncio.Task[None]] = set()
        # Told the topic whose plan changed (or that joined or left the planned set).
        self.on_change: Callable[[str], None] = lambda topic: None

    async def plan(self, topic: str) -> TopicPlan | None:
        """The topic's plan, from the cache (a watch keeps it current)."""
        if topic in self._plans:
            return self._plans[topic]
        planned = self._planned
        if planned is None:
            planned = await self._planned_topics()
        if topic not in planned:
            return None
        pending = self._loading.get(topic)
        if pending is not None:
            return await asyncio.shield(pending)
        fut: asyncio.Future[TopicPlan | None] = asyncio.get_running_loop().create_future()
        self._loading[topic] = fut
        try:
            # The watch a read sets can fire before the read's answer is handled here (both
            # come back through the loop, the answer first, and the waiting coroutine resumes
            # a step later): an answer read before a change must not be cached after it, or
            # the old plan stays for good, with no watch left to replace it. Read again.
            while True:
                self._changed_while_loading.discard(topic)
                plan = await self._read(topic)
                if topic not in self._changed_while_loading:
                    break
        except BaseException as exc:
            fut.set_exception(exc)
            fut.exception()
            raise
        finally:
            self._loading.pop(topic, None)
            self._changed_while_loading.discard(topic)
        self._plans[topic] = plan
        fut.set_result(plan)
        return plan

    def peek(self, topic: str) -> tuple[bool, TopicPlan | None]:
        """``(True, plan)`` if the topic's plan is known without a read (``None``: single,
        no lanes)."""
        plan = self._plans.get(topic, _UNKNOWN)
        if plan is not _UNKNOWN:
            return True, plan  # type: ignore[return-value]
        if self._planned is not None and topic not in self._planned:
            return True, None
        return False, None

    async def _planned_topics(self) -> frozenset[str]:
        """The set of planned topics, read now if it is not known (callers share a read)."""
        reading = self._planned_reading
        if reading is None:
            reading = self._planned_reading = asyncio.get_running_loop().create_future()
            task = asyncio.get_running_loop().create_task(self._read_planned(reading))
            self._later.add(task)
            task.add_done_callback(self._later.discard)
        return await asyncio.shield(reading)

    async def _read_planned(self, reading: asyncio.Future[frozenset[str]]) -> None:
        """Read the set (again if its watch fired during the read: the answer may be older
        than the change), then recheck every topic that joined or left it.

        The first read's failure goes to the callers waiting for it (the next caller reads
        again). A read after the watch fired is retried until it succeeds: the set changed,
        and nothing else would correct the one kept meanwhile."""
        delay = PLANNED_RETRY_S
        try:
            while True:
                try:
                    self._planned_fired = False
                    planned = await self._store.plans.planned_topics(watch=self._planned_changed)
                except HedwigError as exc:
                    if self._planned is None:
                        raise
                    log.info("reading the planned topics failed (retrying): %s", exc)
                    await self._clock.sleep(delay)
                    delay = min(delay * 2, PLANNED_RETRY_MAX_S)
                    continue
                if not self._planned_fired:
                    break
        except asyncio.CancelledError:
            self._planned_reading = None
            reading.cancel()
            raise
        except Exception as exc:
            self._planned_reading = None
            if not reading.done():
                reading.set_exception(exc)
                reading.exception()
            return
        before, self._planned = self._planned, planned
        self._planned_reading = None
        reading.set_result(planned)
        if before is not None:
            for topic in before ^ planned:
                self._changed(topic)

    def _planned_changed(self) -> None:
        self._planned_fired = True
        if self._planned_reading is None:
            self._planned_reading = asyncio.get_running_loop().create_future()
            task = asyncio.get_running_loop().create_task(self._read_planned(self._planned_reading))
            self._later.add(task)
            task.add_done_callback(self._later.discard)

    async def _read(self, topic: str) -> TopicPlan | None:
        got = await self._store.plans.read_plan(topic, watch=lambda: self._changed(topic))
        if got is None or (got.value.mode is PlanMode.SINGLE and not got.value.lanes):
            return None
        return got.value

    def plans_to_export(self, candidates: Iterable[str]) -> dict[str, tuple[str, int]]:
        """Mode and serving hubs of the ``candidates`` known to be spread, for the gauges.

        The caller passes the owned topics its load report lists (the hottest, a bounded
        number: a topic is spread because it is hot), so neither the reads here nor the series
        grow with the topics a hub owns. A plan not read yet is read in the background for
        the next time; single-hub topics get no series.
        """
        out: dict[str, tuple[str, int]] = {}
        for topic in candidates:
            if topic not in self._plans:
                if self._planned is not None and topic not in self._planned:
                    continue
                if topic not in self._loading:
                    task = asyncio.get_running_loop().create_task(self._load_for_gauges(topic))
                    task.add_done_callback(lambda t: t.cancelled() or t.exception())
                continue
            plan = self._plans[topic]
            if plan is not None:
                out[topic] = (plan.mode.value, self._serving(plan))
        if out and self._clock.monotonic() - self._alive_at >= ALIVE_REFRESH_S:
            refresh = asyncio.get_running_loop().create_task(self.alive_hubs())
            refresh.add_done_callback(lambda t: t.cancelled() or t.exception())
        return out

    def _serving(self, plan: TopicPlan) -> int:
        if plan.mode is PlanMode.FAN_OUT:
            return len([h for h in plan.hubs if h in self._alive]) or 1
        return plan.serving

    async def _load_for_gauges(self, topic: str) -> None:
        if await self.plan(topic) is not None:
            await self.alive_hubs()

    def _changed(self, topic: str) -> None:
        self._plans.pop(topic, None)
        if topic in self._loading:
            self._changed_while_loading.add(topic)
        self.on_change(topic)

    async def assigned(self, topic: str, subscriber: str) -> str | None:
        """The hub that serves ``subscriber`` of ``topic``; None: the owner (no plan)."""
        plan = await self.plan(topic)
        if plan is None:
            return None
        return plan.delivery_hub(subscriber, await self.alive_hubs())

    async def alive_hubs(self, *, fresh: bool = False) -> frozenset[str]:
        """The hubs alive, read at most every ``ALIVE_REFRESH_S`` (``fresh``: read now).

        Callers that find the list stale share one read and all wait for it. (Each used to
        mark the list fresh before reading, so a second caller during the first one's read got
        the old list, empty at first: a topic's owner that checked its subscribers then found
        no delivery hub alive, kept them all, and nothing checked again.)"""
        if fresh or self._clock.monotonic() - self._alive_at >= ALIVE_REFRESH_S:
            reading = self._alive_reading
            if reading is None:
                reading = asyncio.get_running_loop().create_task(self._read_alive())
                self._alive_reading = reading
            await asyncio.shield(reading)
        return self._alive

    async def _read_alive(self) -> None:
        started = self._clock.monotonic()
        try:
            hubs = await self._store.hubs.list_hubs()
        finally:
            self._alive_reading = None
        self._alive = frozenset(h.address for h in hubs if h.alive)
        self._alive_at = started

    @property
    def alive(self) -> frozenset[str]:
        """The alive hubs as last read."""
        return self._alive

    def without(self, address: str) -> None:
        """Count ``address`` out of the alive hubs until the next read (this hub, stopping)."""
        self._alive = self._alive - {address}

    def spread(self) -> list[str]:
        """The topics whose plans are known and spread (for rechecks when a hub comes or goes)."""
        return [t for t, p in self._plans.items() if p is not None]

    def stop(self) -> None:
        for task in self._later:
            task.cancel()
