"""The rebalancing policy: a load snapshot in, a list of explained moves out.

Shared by the hubs' self-shedding and the operator, and pure apart from the history it keeps
between cycles (which hub has looked overloaded for how long, which topic moved when).
It answers the complaints users have about Pulsar's and Hedwig's balancers
(``docs/architecture.md``, "Moving topics"):

- Load is traffic, not topic counts: messages per second in plus out (EWMA from the hubs'
  reports), so one hot topic weighs what it costs. A report lists the hub's hottest topics
  only (its totals cover all): those are the ones worth moving; a drain empties a hub a
  report's worth at a time, the next report listing the next ones.
- A hub is overloaded when its load exceeds the mean by ``overload_margin`` (relative), and
  only after ``confirmations`` consecutive cycles, so a burst does not trigger moves.
- There is a lower bound too: a hub below the mean by ``underload_margin`` (an idle or newly
  added hub) pulls load towards itself, so new hubs do not stay empty. No move takes its
  source below this bound (it would pull a topic back).
- Each moved topic cools down for ``cooldown_s``; at most ``max_moves_per_cycle`` moves per
  cycle; topics below ``min_topic_rate`` are not worth a move (unless draining).
- A hub whose epoch changed (it restarted) starts with a clean history.
- A destination is never a dead hub, a hub with a stale report, or one that the move would
  push above the overload line; a move must bring its two hubs' loads closer by a tenth of
  the gap (one that just swaps which is heavier would move back after its cooldown).
- Optional low-load drain: when the region's total load is below
  ``low_load_threshold`` of its capacity (and, after moves that balanced the region, a tenth
  below its load then, so a region at the line does not fill a hub and then drain it), the
  least loaded hub's topics (or, with
  ``drain_first``, those of the first hub named there: the one a StatefulSet removes first)
  are moved to the others as long as they stay below ``drain_target`` of their capacity, so
  that hub can be removed. A drained hub stays drained, neither a destination nor counted in
  the mean (else the under-load rule refills it the next cycle, and the two rules flap), until
  the load on the serving hubs passes ``drain_target`` of their capacity; topics that land on
  it meanwhile move off again. One hub is drained at a time (the next once it has been
  removed, so no topic moves twice for one drop in load), never leaving fewer than
  ``min_hubs`` serving hubs.
- Retiring hubs (named by the caller: the pool's scaling policy, ``hedwig.placement.pool_scaling``,
  is removing them) are emptied first, at most ``max_moves_per_cycle`` topics a cycle, hottest
  first, each to the least loaded serving hub, whatever its cooldown (the hub is going away);
  they are neither destinations nor counted in the mean, so nothing pulls load back onto them.

Every move carries a reason string saying which rule produced it and with which numbers.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from hedwig.clock import Clock, SystemClock
from hedwig.metadata.records import HubStatus, TopicLoad
from hedwig.protocol.kinds import MoveKind


@dataclass(frozen=True, slots=True)
class RebalanceConfig:
    # Relative distance from the mean that counts as over/under loaded (0.2 = 20 %).
    overload_margin: float = 0.2
    underload_margin: float = 0.3
    # Consecutive cycles a hub must look overloaded before topics move off it.
    confirmations: int = 3
    # A moved topic stays put this long (seconds).
    cooldown_s: float = 600.0
    max_moves_per_cycle: int = 10
    # Topics slower than this (messages/s) are not worth the pause a move costs.
    min_topic_rate: float = 1.0
    # Load reports older than this are ignored (the hub may be gone).
    max_report_age_s: float = 60.0
    # Low-load drain, off by default.
    low_load_drain: bool = False
    hub_capacity: float = 50_000.0  # messages/s one hub handles comfortably
    low_load_threshold: float = 0.2  # drain when total load < this share of total capacity
    drain_target: float = 0.6  # receivers stay below this share of their capacity
    min_hubs: int = 1  # a drain never leaves fewer serving hubs (at least the ensemble size)

    def __post_init__(self) -> None:
        if self.overload_margin < 0 or self.underload_margin < 0:
            raise ValueError("margins must not be negative")
        if self.confirmations < 1 or self.max_moves_per_cycle < 0:
            raise ValueError("confirmations must be >= 1 and max_moves_per_cycle >= 0")
        if self.min_hubs < 1:
            raise ValueError("min_hubs must be at least 1")


@dataclass(frozen=True, slots=True)
class Move:
    """One topic to hand over: from where, to where, why (``kind`` for metrics and events,
    ``reason`` with the numbers for people), and the rate it carried when it was chosen."""

    topic: str
    source: str
    destination: str | None
    reason: str
    rate: float = 0.0
    kind: MoveKind = MoveKind.REQUESTED


# A moved topic counts at its rate before the move until its new hub reports this share of it,
# for at most this many cooldowns.
SETTLED_SHARE = 0.97
SETTLE_COOLDOWNS = 3
# A destination may be filled up to this share of the overload margin above the mean.
DESTINATION_SHARE_OF_MARGIN = 0.75
# A move must leave the two hubs' loads closer by a tenth of the gap between them: one that
# (nearly) swaps which hub is the heavier helps nothing, and with rates read a hair
# differently next time (lagging reports, rounding) moves the topic back after its cooldown,
# for good.
MOVE_SHARE_OF_GAP = 0.9
# After moves that balance the region, a low-load drain starts only once its load is below
# this share of what it was then. Reports lag: a topic that moved counts at its old rate only
# until its new hub reports 97 % of it (``SETTLED_SHARE``), so a region sitting right at the
# low-load line reads a few percent under it after moves; without this it fills an empty hub
# one cycle (under-load rule) and drains it again a few cycles later, every topic moved twice
# for no change in load. (A band below the line alone only moves the line.)
DRAIN_START_SHARE = 0.9


def topic_rate(load: TopicLoad) -> float:
    return load.msg_in + load.msg_out


@dataclass
class _HubView:
    address: str
    load: float
    topics: dict[str, float]
    # Traffic of topics the report does not list (each no busier than the least listed one).
    unlisted: float = 0.0


@dataclass
class Rebalancer:
    config: RebalanceConfig = field(default_factory=RebalanceConfig)
    clock: Clock = field(default_factory=SystemClock)
    _streaks: dict[str, int] = field(default_factory=dict)
    _epochs: dict[str, int] = field(default_factory=dict)
    _moved_at: dict[str, float] = field(default_factory=dict)
    _moved_rate: dict[str, float] = field(default_factory=dict)
    moves_per_topic: dict[str, int] = field(default_factory=dict)
    _drained: set[str] = field(default_factory=set)
    # The region's load when moves last balanced it (``DRAIN_START_SHARE``).
    _balanced_at: float | None = None

    @property
    def drained(self) -> frozenset[str]:
        """Hubs emptied by a low-load drain that is still in force (removable)."""
        return frozenset(self._drained)

    def forget_hub(self, address: str) -> None:
        self._streaks.pop(address, None)
        self._epochs.pop(address, None)

    def in_cooldown(self, topic: str) -> bool:
        at = self._moved_at.get(topic)
        return at is not None and self.clock.monotonic() - at < self.config.cooldown_s

    def _rate(self, topic: str, load: TopicLoad) -> float:
        # A topic that just moved reports a low rate at its new hub until the EWMA catches
        # up; count it at the rate it had when it moved, or the new hub looks idle and pulls
        # more than its share, or its old hub looks overloaded still (overshoot, then moves
        # back: flapping). Until the report has caught up, not merely for the cooldown: a
        # slow average can take longer than that (bounded, in case the topic really slowed).
        reported = topic_rate(load)
        moved = self._moved_rate.get(topic)
        if moved is None:
            return reported
        at = self._moved_at.get(topic, 0.0)
        settle_s = max(self.config.cooldown_s, 1.0) * SETTLE_COOLDOWNS
        if reported >= moved * SETTLED_SHARE or self.clock.monotonic() - at > settle_s:
            del self._moved_rate[topic]
            return reported
        return max(reported, moved)

    def _views(self, hubs: Sequence[HubStatus]) -> list[_HubView]:
        now_ms = self.clock.wall_ms()
        max_age_ms = self.config.max_report_age_s * 1000
        views = []
        for h in hubs:
            if not h.alive or h.load is None or now_ms - h.load.timestamp_ms > max_age_ms:
                continue
            if self._epochs.get(h.address) not in (None, h.epoch):
                self.forget_hub(h.address)  # it restarted: its old streak means nothing
            self._epochs[h.address] = h.epoch
            rates = {t: self._rate(t, tl) for t, tl in h.load.topic_loads.items()}
            # Reports list the hottest topics only; the rest of the hub's traffic counts too.
            rest = h.load.unlisted_rate
            views.append(_HubView(h.address, sum(rates.values()) + rest, rates, rest))
        present = {v.address for v in views}
        for gone in set(self._streaks) - present:
            self.forget_hub(gone)
        self._drained &= present  # removed (scaled down) or gone: nothing left to hold
        return views

    def plan(
        self,
        hubs: Sequence[HubStatus],
        *,
        drain_first: Sequence[str] = (),
        retiring: Collection[str] = (),
    ) -> list[Move]:
        """Moves for this cycle (possibly none). Call once per cycle: it counts confirmations.

        ``drain_first`` orders the hubs a low-load drain should empty (the first one present
        and serving is chosen); without it the least loaded hub is. ``retiring`` names hubs
        being removed (the pool's scaling policy, ``hedwig.placement.pool_scaling``): neither
        destinations nor counted in the mean, their topics moved to the least loaded serving
        hubs before anything else, whatever their cooldown (the hub is going away).
        """
        all_views = self._views(hubs)
        cfg = self.config
        leaving = [v for v in all_views if v.address in retiring]
        staying = [v for v in all_views if v.address not in retiring]
        total = sum(v.load for v in staying)
        views = [v for v in staying if v.address not in self._drained]
        if self._drained and (
            not cfg.low_load_drain or total >= cfg.drain_target * cfg.hub_capacity * len(views)
        ):
            self._drained.clear()  # the load came back: every hub serves again
            views = staying
        if leaving:
            moves = self._evacuate(leaving, views, leaving=True)
            if moves:
                return self._commit(moves)
        if len(views) < 2 and not self._drained:
            return []
        moves = self._evacuate([v for v in staying if v.address in self._drained], views)
        if moves:
            return self._commit(moves)
        if len(views) < 2:
            return []
        mean = total / len(views)
        high = mean * (1 + cfg.overload_margin)
        low = mean * (1 - cfg.underload_margin)
        for v in views:
            self._streaks[v.address] = self._streaks.get(v.address, 0) + 1 if v.load > high else 0
        if (
            cfg.low_load_drain
            and not self._drained  # one at a time: the next once this one has been removed
            and len(views) > cfg.min_hubs
            and total < cfg.low_load_threshold * cfg.hub_capacity * len(views)
            and (self._balanced_at is None or total < self._balanced_at * DRAIN_START_SHARE)
        ):
            drain = self._drain(views, total, drain_first)
            if drain is not None:
                return self._commit(drain)
        confirmed = [v for v in views if self._streaks.get(v.address, 0) >= cfg.confirmations]
        # Idle or newly added hubs pull load even when nobody is overloaded enough yet, from
        # hubs that are above the mean (never from ones below it).
        pullers = [v for v in views if v.load < low]
        sources = confirmed or ([v for v in views if v.load > mean] if pullers else [])
        if not sources:
            return []
        candidates = list(sources)
        while candidates and len(moves) < cfg.max_moves_per_cycle:
            src = max(candidates, key=lambda v: v.load)
            dst = min(views, key=lambda v: v.load)
            if src is dst or src.load <= mean or dst.load >= src.load:
                candidates.remove(src)
                continue
            move = self._pick(src, dst, mean, high, src in confirmed, {m.topic for m in moves})
            if move is None:
                # Nothing on this hub can move (cooling down, too big, too small): the next
                # busiest hub may still help the underloaded one.
                candidates.remove(src)
                continue
            rate = src.topics.pop(move.topic)
            src.load -= rate
            dst.load += rate
            dst.topics[move.topic] = rate
            moves.append(move)
        if moves:
            self._balanced_at = total
        return self._commit(moves)

    def _pick(
        self,
        src: _HubView,
        dst: _HubView,
        mean: float,
        high: float,
        confirmed: bool,
        moved: set[str],
    ) -> Move | None:
        cfg = self.config
        excess = src.load - mean
        # Never push the destination near the line: it must stay a quarter of the margin below
        # it, so a report a few percent off cannot make the next cycle see it overloaded (and
        # move the topic back).
        room = mean * (1 + cfg.overload_margin * DESTINATION_SHARE_OF_MARGIN) - dst.load
        # Nor may it leave its source under the low line: the source would pull a topic
        # back, one that has just moved, for no change in load.
        floor = mean * (1 - cfg.underload_margin)
        gap = src.load - dst.load
        best: tuple[float, str, float] | None = None
        for topic, rate in src.topics.items():
            if rate < cfg.min_topic_rate or self.in_cooldown(topic) or rate > room:
                continue
            if src.load - rate < floor:
                continue
            if topic in moved:
                continue  # already moving this cycle (onto this hub): never twice at once
            if rate > gap * MOVE_SHARE_OF_GAP:
                continue  # the move would (nearly) swap which hub is the heavier one
            # Prefer the topic that closes the gap best: as close to the excess as possible.
            score = abs(excess - rate)
            if best is None or score < best[0]:
                best = (score, topic, rate)
        if best is None:
            return None
        _, topic, rate = best
        if confirmed:
            why = (
                f"hub {src.address} carries {src.load:.0f} msg/s, more than "
                f"{1 + cfg.overload_margin:.2f}x the mean {mean:.0f} for "
                f"{self._streaks.get(src.address, 0)} checks"
            )
        else:
            why = (
                f"hub {dst.address} carries {dst.load:.0f} msg/s, under "
                f"{1 - cfg.underload_margin:.2f}x the mean {mean:.0f}; "
                f"{src.address} is above it with {src.load:.0f} msg/s"
            )
        reason = f"{why}: moving {topic} ({rate:.0f} msg/s) to {dst.address}"
        kind = MoveKind.OVERLOAD if confirmed else MoveKind.UNDERLOAD
        return Move(topic, src.address, dst.address, reason, rate, kind)

    def _drain(
        self, views: list[_HubView], total: float, drain_first: Sequence[str]
    ) -> list[Move] | None:
        """Start draining one hub: its moves (maybe none, if it is empty already), or None if
        no hub can be emptied without pushing the others past ``drain_target``."""
        cfg = self.config
        by_address = {v.address: v for v in views}
        preferred = [by_address[a] for a in drain_first if a in by_address]
        victim = preferred[0] if preferred else min(views, key=lambda v: v.load)
        others = [v for v in views if v is not victim]
        limit = cfg.drain_target * cfg.hub_capacity
        planned = {v.address: v.load for v in others}
        for _topic, rate in sorted(victim.topics.items(), key=lambda kv: -kv[1]):
            dst = min(planned, key=lambda a: planned[a])
            if planned[dst] + rate > limit:
                return None  # cannot drain it entirely: do not start
            planned[dst] += rate
        # Topics not listed yet must fit too; each is no busier than the least listed one, so
        # they spread: the room left on all the others together is what counts.
        if sum(planned.values()) + victim.unlisted > limit * len(planned):
            return None
        self._drained.add(victim.address)
        why = (
            f"low-load drain: region at {total:.0f} msg/s is under "
            f"{cfg.low_load_threshold:.0%} of capacity; emptying {victim.address}"
        )
        return self._evacuate([victim], others, why)

    def _evacuate(
        self,
        drained: list[_HubView],
        serving: list[_HubView],
        why: str | None = None,
        leaving: bool = False,
    ) -> list[Move]:
        """Move the topics of drained (or, ``leaving``, retiring) hubs to the least loaded
        serving hubs."""
        cfg = self.config
        moves: list[Move] = []
        if not serving:
            return moves
        for victim in drained:
            reason = why or (
                f"{victim.address} is retiring (the pool scales in)"
                if leaving
                else f"{victim.address} is drained (low load)"
            )
            for topic, rate in sorted(victim.topics.items(), key=lambda kv: -kv[1]):
                if len(moves) >= cfg.max_moves_per_cycle:
                    return moves
                if self.in_cooldown(topic) and not leaving:
                    continue
                dst = min(serving, key=lambda v: v.load)
                dst.load += rate
                moves.append(
                    Move(
                        topic,
                        victim.address,
                        dst.address,
                        f"{reason}: moving {topic} ({rate:.0f} msg/s) to {dst.address}",
                        rate,
                        MoveKind.DRAIN,
                    )
                )
        return moves

    def _commit(self, moves: list[Move]) -> list[Move]:
        now = self.clock.monotonic()
        for m in moves:
            self._moved_at[m.topic] = now
            self._moved_rate[m.topic] = m.rate
            self.moves_per_topic[m.topic] = self.moves_per_topic.get(m.topic, 0) + 1
        # Streaks are not reset: the loads of the next cycle already count moved topics at
        # their new hubs (``_rate``), so a hub still above the line after its moves keeps its
        # confirmation and sheds again, instead of waiting ``confirmations`` more cycles.
        return moves
