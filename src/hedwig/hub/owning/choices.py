"""Where things go, as a hub decides it: which hub should own an unowned topic, and which
hubs store a new ledger.

An unowned topic's requests are answered consistently: once this hub has sent a topic's
request to some hub (its placement choice, or where it just handed the topic over), it sends
that topic's requests there for ``ASSIGNMENT_HOLD_S``, while the chosen hub is alive. Without
this, a client's pipelined requests to a hub that just lost the topic could be sent to two
would-be owners, and the later of them stored first.

A topic this hub has just handed over is held for its destination even against a request
that was redirected here (which a hub otherwise claims for at once): a client redirected here
before the hand-off would else claim the topic back from under its destination, and the move
would not happen. The hold ends when the destination has answered the request to claim (or is
seen to own the topic), is no longer alive, or after ``HANDOFF_HOLD_S``.

An unowned lane of an ingest topic goes to the hub its plan chose for it (``Lane.hub``), if
that hub is alive and fit: that is how a topic's lanes start on different hubs. After that a
lane is placed and moved like any topic.

Under the random and load-weighted policies a hub keeps an unowned topic a client asked it
for, instead of choosing again, while its load (its live topic count) is no more than
``LOCAL_MARGIN`` above the region's mean (``keeps_here``). Clients spread their requests over
the hubs, so this places as randomly as a random choice; a hub that one client's requests
all reach fills to its share and then chooses as before. A redirect is a round trip, a hub
reading the owner record and the client asking again: two thirds of a claim wave's topics
and half of a failover's took one.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable

from hedwig.clock import Clock
from hedwig.errors import NotEnoughHubsError, ServiceUnavailableError
from hedwig.hub.config import HubConfig
from hedwig.metadata.managers import MetadataStore
from hedwig.metadata.records import HubStatus
from hedwig.placement import PlacementPolicy, choose_hub
from hedwig.placement.choice import TOPIC_FLOOR, hub_load

# How long a placement decision for an unowned topic holds (a client follows a redirect in a
# round trip or two; a chosen hub that does not claim in this time is chosen afresh).
ASSIGNMENT_HOLD_S = 2.0
# How long a topic handed over to another hub is kept for it (the destination is asked to
# claim at once and usually has within a round trip or two; short, so that a topic handed back
# and forth is never held by both ends for long).
HANDOFF_HOLD_S = 3.0
# The alive hubs are read from the metadata store at most this often for placement.
HUBS_CACHE_S = 1.0
# ...and at most this long ago when choosing the owner of an unowned topic. The topic is
# usually unowned because its owner just died: a list a second old may still show that hub
# alive, and a client sent there waits until the assignment is dropped. A fresher list costs
# at most a few reads a second, and only while topics are being placed. New ledgers' ensembles
# are chosen from a list as fresh.
HUBS_FRESH_S = 0.2
# Assignments kept at most (expired ones are pruned first). Expired ones are also pruned every
# hold period: a claim wave leaves an assignment of most topics it placed on other hubs on each
# hub (a hundred bytes each, on a hub owning 67,000 of 200,000 topics the most of 100,000).
MAX_ASSIGNMENTS = 100_000
# After this hub lost a topic because it could not write its log (its storage replicas out of
# reach), it sends the topic's requests to other hubs for at most this long instead of claiming
# it again: a claim would only fail the same way, after a storage timeout. The hold ends
# sooner once this hub reaches enough hubs to write a ledger (``can_store``).
STORAGE_FAILURE_HOLD_S = 30.0
# A hub keeps an unowned topic while its load is at most this share above the region's mean
# (plus ``LOCAL_SLACK``: one topic's worth, so that a hub of an empty region keeps its first).
# Well inside the rebalancer's overload margin: what this keeps is never moved. The slack is
# one topic, not more: clients that all list the hubs in the same order all start with the
# first, and with twenty a region's first twenty topics went to it (the few topics of a
# test's workload all on one hub, which then did all of the work).
LOCAL_MARGIN = 0.05
LOCAL_SLACK = 1 * TOPIC_FLOOR


class HubChoices:
    def __init__(
        self,
        *,
        address: str,
        config: HubConfig,
        store: MetadataStore,
        clock: Clock,
        rng: random.Random | None = None,
        hub_id: str | None = None,
    ) -> None:
        self.address = address
        # How ledgers name this hub's replicas (``hedwig.hub.process.identity``).
        self.hub_id = hub_id or address
        self._config = config
        self._store = store
        self._clock = clock
        self._rng = rng or random.Random()
        self._hubs: tuple[float, list[HubStatus]] | None = None
        # The registry read under way, which every caller that finds the list stale awaits.
        self._reading: asyncio.Task[list[HubStatus]] | None = None
        self._assigned: dict[str, tuple[str, float]] = {}
        self._handed: dict[str, tuple[str, float]] = {}
        self._prune_at = 0.0  # when expired assignments and hand-offs are next dropped
        self._unfit: dict[str, float] = {}
        # Hubs the rebalancing policy has drained: new topics go elsewhere.
        self.drained: Callable[[], frozenset[str]] = frozenset
        # The hub a lane's plan chose for it ("" or None: none), by the lane's name.
        self.lane_hint: Callable[[str], Awaitable[str | None]] | None = None
        # Hubs (by hub id) this hub failed to reach just now: still registered, perhaps cut
        # off by a partition. Sending a client there would only make it wait until the hub's
        # session expires, so unowned topics go elsewhere meanwhile.
        self.unreachable: Callable[[str], bool] = lambda hub_id: False
        # The topics this hub owns or is claiming now (its load report lags them).
        self.owned: Callable[[], int] = lambda: 0

    async def _alive(self, max_age_s: float = HUBS_CACHE_S) -> list[HubStatus]:
        """The registered hubs, read at most ``max_age_s`` ago.

        Callers that find the list too old share one read. (Each used to read it: a claim
        wave of a few hundred topics at once read and parsed every hub's load report a few
        hundred times, a fifth of a claiming hub's time.)"""
        if self._hubs is not None and self._clock.monotonic() - self._hubs[0] <= max_age_s:
            return self._hubs[1]
        reading = self._reading
        if reading is None:
            reading = asyncio.get_running_loop().create_task(self._read_hubs())
            reading.add_done_callback(_retrieved)
            self._reading = reading
        return await asyncio.shield(reading)

    async def _read_hubs(self) -> list[HubStatus]:
        started = self._clock.monotonic()
        try:
            hubs = await self._store.hubs.list_hubs()
        finally:
            self._reading = None
        self._hubs = (started, hubs)
        return hubs

    # owners -------------------------------------------------------------------------------

    def cannot_store(self, topic: str) -> None:
        """This hub just failed to write ``topic``'s log: leave the topic to others a while."""
        now = self._clock.monotonic()
        self._unfit = {t: u for t, u in self._unfit.items() if u > now}
        self._unfit[topic] = now + STORAGE_FAILURE_HOLD_S
        held = self._assigned.get(topic)
        if held is not None and held[0] == self.address:
            del self._assigned[topic]

    def can_store(self, topic: str) -> bool:
        """Whether this hub may claim ``topic``: not if it failed to write the topic's log
        lately and still cannot reach an ack quorum of alive hubs (itself included).

        The failure alone is not enough: a log fenced by a new owner, or a partition healed
        since, leaves this hub as able to store as any. Two hubs each holding off a topic
        would send its clients back and forth between them until the holds ran out.
        """
        until = self._unfit.get(topic)
        if until is None:
            return True
        if self._clock.monotonic() >= until:
            del self._unfit[topic]
            return True
        if self._hubs is None:
            return False
        reachable = sum(
            1
            for h in self._hubs[1]
            if h.alive and (h.address == self.address or not self.unreachable(h.storage_id))
        )
        return reachable >= self._config.replication_config.ack_quorum

    async def owner_for(self, topic: str) -> str | None:
        """The hub that should claim unowned ``topic`` (maybe this one); ``None``: any (or,
        for a topic this hub cannot store now, none but this one is alive)."""
        hubs = await self._alive(HUBS_FRESH_S)
        fit = self.can_store(topic)
        drained = self.drained()
        cut_off = {
            h.address for h in hubs if h.address != self.address and self.unreachable(h.storage_id)
        }
        held = self._assigned.get(topic)
        if held is not None:
            target, until = held
            if (
                self._clock.monotonic() < until
                and target not in cut_off
                and any(h.alive and h.address == target for h in hubs)
            ):
                return target
            del self._assigned[topic]
        if self.lane_hint is not None:
            hint = await self.lane_hint(topic)
            if (
                hint
                and hint not in drained
                and hint not in cut_off
                and (hint != self.address or fit)
                and any(h.alive and h.address == hint for h in hubs)
            ):
                if hint != self.address:
                    self.assign(topic, hint)
                return hint

        # A hub that cannot reach some others may be the one cut off: then the policy decides.
        if not cut_off and self.keeps_here(hubs, fit, drained):
            return self.address

        def choose(avoid: set[str]) -> str | None:
            return choose_hub(
                hubs,
                self._config.placement,
                topic,
                rng=self._rng,
                now_ms=self._clock.wall_ms(),
                max_age_ms=int(self._config.load_report_max_age_s * 1000),
                exclude=lambda a: (a == self.address and not fit) or a in drained or a in avoid,
            )

        # Hubs this one cannot reach are a last resort, not excluded: when this hub is the
        # one cut off (from its replicas, say), the clients may well reach them.
        chosen = choose(cut_off)
        if chosen is None and cut_off:
            chosen = choose(set())
        if chosen is not None and chosen != self.address:
            self.assign(topic, chosen)
        return chosen

    async def keeps(self, topic: str) -> bool:
        """Whether ``owner_for`` would answer this hub for ``topic`` by the local rule, asked
        before anyone knows whether the topic is owned (the claim is then tried before the
        owner record is read): without ``owner_for``'s side effects, and no when anything but
        ``keeps_here`` would decide (an assignment held, a lane's hint, a hub cut off)."""
        if topic in self._assigned:
            return False
        hubs = await self._alive(HUBS_FRESH_S)
        if self.lane_hint is not None and await self.lane_hint(topic):
            return False
        if any(h.address != self.address and self.unreachable(h.storage_id) for h in hubs):
            return False
        return self.keeps_here(hubs, self.can_store(topic), self.drained())

    def keeps_here(self, hubs: list[HubStatus], fit: bool, drained: frozenset[str]) -> bool:
        """Whether this hub claims an unowned topic asked of it rather than choosing (see the
        module docstring): random or load-weighted placement, this hub fit and not drained,
        every other hub's load known, and this one's, with its live topic count, at most
        ``LOCAL_MARGIN`` above the mean."""
        policy = self._config.placement
        if policy not in (PlacementPolicy.RANDOM, PlacementPolicy.LOAD_WEIGHTED):
            return False
        if not fit or self.address in drained:
            return False
        now_ms = self._clock.wall_ms()
        max_age_ms = int(self._config.load_report_max_age_s * 1000)
        mine: float | None = None
        total = 0.0
        count = 0
        for h in hubs:
            if not h.alive or h.address in drained:
                continue
            load = hub_load(h, now_ms, max_age_ms)
            if load is None or h.load is None:
                return False  # not known: the policy chooses
            if h.address == self.address:
                load += TOPIC_FLOOR * (self.owned() - h.load.topics)
                mine = load
            total += load
            count += 1
        if mine is None:
            return False
        return mine <= total / count * (1 + LOCAL_MARGIN) + LOCAL_SLACK

    def assign(self, topic: str, hub: str) -> None:
        """Send ``topic``'s requests to ``hub`` for a while (it was chosen, or handed it)."""
        now = self._clock.monotonic()
        if len(self._assigned) >= MAX_ASSIGNMENTS or now >= self._prune_at:
            self._prune(now)
        self._assigned[topic] = (hub, now + ASSIGNMENT_HOLD_S)

    def _prune(self, now: float) -> None:
        """Drop the expired assignments and hand-offs (new tables: a dictionary never shrinks)."""
        self._assigned = {t: a for t, a in self._assigned.items() if a[1] > now}
        self._handed = {t: a for t, a in self._handed.items() if a[1] > now}
        self._prune_at = now + ASSIGNMENT_HOLD_S

    def handed_over(self, topic: str, hub: str) -> None:
        """This hub just handed ``topic`` to ``hub``: requests go there, redirected or not."""
        self.assign(topic, hub)
        now = self._clock.monotonic()
        if len(self._handed) >= MAX_ASSIGNMENTS:
            self._prune(now)
        self._handed[topic] = (hub, now + HANDOFF_HOLD_S)

    async def handed_to(self, topic: str) -> str | None:
        """The alive hub this hub just handed unowned ``topic`` to, if the hold is on."""
        held = self._handed.get(topic)
        if held is None:
            return None
        target, until = held
        if self._clock.monotonic() < until and any(
            h.alive and h.address == target for h in await self._alive()
        ):
            return target
        del self._handed[topic]
        return None

    def claimed(self, topic: str) -> None:
        self._assigned.pop(topic, None)
        self._handed.pop(topic, None)

    def owned_by(self, topic: str, hub: str) -> None:
        """``topic`` was seen owned by ``hub``: a hand-off to it is done."""
        held = self._handed.get(topic)
        if held is not None and held[0] == hub:
            del self._handed[topic]

    def hand_off_ended(self, topic: str) -> None:
        """The destination answered the request to claim ``topic`` (claimed, or would not)."""
        self._handed.pop(topic, None)

    # ensembles ----------------------------------------------------------------------------

    async def ensemble(
        self, size: int, minimum: int, exclude: frozenset[str] = frozenset()
    ) -> list[str]:
        """Storage replicas for a new ledger: this hub first (its writes are local), then
        other alive hubs at random, never one in ``exclude`` (replicas that just failed).

        With fewer than ``size`` hubs alive the ensemble shrinks, down to ``minimum`` (the ack
        quorum): every acknowledged entry still lands on ack-quorum replicas, so durability
        holds while a hub is down; the ledger is reported under-replicated, and the next
        roll-over goes back to full size.
        """
        me = self.hub_id
        if size <= 1 and me not in exclude:
            return [me]
        registered = await self._alive(HUBS_FRESH_S)
        hubs = [h.storage_id for h in registered if h.alive and h.storage_id]
        others = [a for a in hubs if a != me and a not in exclude]
        self._rng.shuffle(others)
        mine = [] if me in exclude else [me]
        chosen = [*mine, *others][:size]
        if len(chosen) < minimum:
            if len(registered) < minimum:
                # Not an outage: this region never had enough hubs. Say so, and how to fix it.
                raise NotEnoughHubsError(
                    f"the replication needs at least {minimum} hubs and this region has "
                    f"{len(registered)}: start more hubs, or use a smaller replication "
                    "(--replication 1/1/1 for a single hub)"
                )
            raise ServiceUnavailableError(
                f"need at least {minimum} storage replicas, only {len(chosen)} hubs are usable"
            )
        return chosen


def _retrieved(task: asyncio.Task[list[HubStatus]]) -> None:
    """A failed read whose waiters were all cancelled is not an unhandled error."""
    if not task.cancelled():
        task.exception()
