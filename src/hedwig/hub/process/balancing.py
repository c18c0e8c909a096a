"""A hub's balancing cycles (``hedwig.hub.process.loops`` runs them on their intervals): the
shared rebalancing policy on the region's load reports (topics it owns one by one), the
joining policy by bundle, and the fan-out scaling policy; each acts on what this hub owns."""

from __future__ import annotations

import logging

from hedwig.clock import Clock
from hedwig.errors import HedwigError
from hedwig.hub.owning.ownership import TopicOwnership
from hedwig.hub.requests.moves import TopicMoves
from hedwig.hub.spreading.fanout import FanOut
from hedwig.metadata.bundles import Bundle
from hedwig.metadata.managers import MetadataStore
from hedwig.placement.bundles import BundleMove, joining_moves
from hedwig.placement.plans import set_topic_mode
from hedwig.placement.rebalance import Move, Rebalancer
from hedwig.placement.scaling import ModeChange, ScalingPolicy

log = logging.getLogger(__name__)


class HubBalancing:
    def __init__(
        self,
        *,
        store: MetadataStore,
        ownership: TopicOwnership,
        moves: TopicMoves,
        fanout: FanOut,
        rebalancer: Rebalancer,
        scaler: ScalingPolicy,
        clock: Clock,
    ) -> None:
        self.store = store
        self.ownership = ownership
        self.moves = moves
        self.fanout = fanout
        self.rebalancer = rebalancer
        self.scaler = scaler
        self.clock = clock

    async def balance_once(self) -> list[Move]:
        """The shared rebalancing policy, run on the region's load reports; this hub hands
        over the topics the policy moves off it. Off when an operator balances the pool
        (``--no-self-balance``)."""
        hubs = await self.store.hubs.list_hubs()
        mine = [m for m in self.rebalancer.plan(hubs) if m.source == self.ownership.address]
        for m in mine:
            log.info("shedding: %s", m.reason)
            try:
                await self.moves.move(m.topic, m.destination, m.kind, m.reason)
            except HedwigError as exc:
                log.info("moving %r failed: %s", m.topic, exc)
        return mine

    async def balance_bundles_once(self) -> list[BundleMove]:
        """By bundle: hubs short of their share of the region's bundles take them from the
        consistent-hash ring (``hedwig.placement.bundles.joining_moves``, which a joining hub's
        first cycles are); this hub hands over the bundles the policy moves off it."""
        owners = {n: o.value.address for n, o in (await self.store.bundles.bundle_owners()).items()}
        drained = self.rebalancer.drained
        alive = [h.address for h in await self.store.hubs.list_hubs() if h.alive]
        me = self.ownership.address
        moves = joining_moves(owners, [a for a in alive if a not in drained])
        mine = [m for m in moves if m.source == me]
        for m in mine:
            log.info("handing bundle %s to the ring: %s", m.bundle, m.reason)
            try:
                await self.ownership.hand_over_bundle(
                    Bundle.parse(m.bundle), m.destination, m.reason
                )
            except HedwigError as exc:
                log.info("handing bundle %s over failed: %s", m.bundle, exc)
        return mine

    async def scale_once(self) -> list[ModeChange]:
        """The shared scaling policy on the region's load reports; this hub changes the plans
        of the topics it owns (``--auto-fan-out``)."""
        hubs = await self.store.hubs.list_hubs()
        plans = {}
        for topic in list(self.ownership.topics):
            plan = await self.fanout.plans.plan(topic)
            if plan is not None:
                plans[topic] = plan
        mine = [c for c in self.scaler.plan(hubs, plans) if c.owner == self.ownership.address]
        for change in mine:
            log.info("scaling: %s", change.reason)
            try:
                await set_topic_mode(
                    self.store,
                    change.topic,
                    change.mode,
                    hubs=max(1, change.hubs),
                    reason=change.reason,
                    clock=self.clock,
                )
            except HedwigError as exc:
                log.info("changing the plan of %r failed: %s", change.topic, exc)
        return mine
