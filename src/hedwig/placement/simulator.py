"""A simulator that runs the rebalancing policy against synthetic workloads.

Each cycle the simulated hubs report their load (optionally lagging like the real EWMA
reports), the policy plans moves, and the moves are applied. Scenarios:

- ``skewed``: topics with Zipf-distributed rates, all starting on one hub.
- ``join``: a balanced region; a new, empty hub joins after a few cycles.
- ``leave``: a hub leaves; its topics land on random survivors (as forced moves would).
- ``hot``: a balanced region; one topic turns hot (20x the others) after a few cycles.

The report gives imbalance (max/mean hub load) per cycle, the number of moves, and how many
topics moved more than once, which is what ``hedwig sim`` prints and the tests check. The hub
pool's autoscaling scenarios (``hour``, ``step``: hubs coming and going under a changing load)
are ``hedwig.placement.pool_simulator``'s.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from hedwig.clock import ManualClock
from hedwig.metadata.records import HubLoad, HubStatus, TopicLoad
from hedwig.placement.rebalance import Move, RebalanceConfig, Rebalancer

SCENARIOS = ("skewed", "join", "leave", "hot")


@dataclass
class Region:
    hubs: dict[str, dict[str, float]] = field(default_factory=dict)  # hub -> topic -> rate
    epochs: dict[str, int] = field(default_factory=dict)
    reported: dict[str, dict[str, float]] = field(default_factory=dict)  # lagged rates

    def load(self, hub: str) -> float:
        return sum(self.hubs[hub].values())

    def imbalance(self) -> float:
        loads = [self.load(h) for h in self.hubs]
        mean = sum(loads) / len(loads)
        return max(loads) / mean if mean else 1.0

    def snapshot(self, now_ms: int, lag: float) -> list[HubStatus]:
        out = []
        for hub, topics in self.hubs.items():
            old = self.reported.setdefault(hub, {})
            rates = {t: lag * old.get(t, 0.0) + (1 - lag) * r for t, r in topics.items()}
            self.reported[hub] = rates
            loads = {t: TopicLoad(msg_in=r) for t, r in rates.items()}
            out.append(
                HubStatus(
                    hub,
                    True,
                    self.epochs[hub],
                    HubLoad(timestamp_ms=now_ms, topics=len(loads), topic_loads=loads),
                )
            )
        return out

    def apply(self, move: Move, rng: random.Random) -> None:
        rate = self.hubs[move.source].pop(move.topic)
        dst = move.destination if move.destination in self.hubs else rng.choice(list(self.hubs))
        assert dst is not None
        self.hubs[dst][move.topic] = rate


def build(scenario: str, *, hubs: int, topics: int, rng: random.Random) -> Region:
    region = Region()
    names = [f"hub-{i}" for i in range(hubs)]
    for i, h in enumerate(names):
        region.hubs[h] = {}
        region.epochs[h] = i + 1
    rates = (
        [1000.0 / (k + 1) ** 0.8 for k in range(topics)]
        if scenario == "skewed"
        else [100.0 * rng.uniform(0.5, 1.5) for _ in range(topics)]
    )
    for k, rate in enumerate(rates):
        hub = names[0] if scenario == "skewed" else names[k % hubs]
        region.hubs[hub][f"topic-{k}"] = rate
    return region


def simulate(
    scenario: str,
    *,
    hubs: int = 3,
    topics: int = 60,
    cycles: int = 15,
    event_cycle: int = 5,
    lag: float = 0.5,
    config: RebalanceConfig | None = None,
    seed: int = 1,
) -> dict[str, Any]:
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown scenario {scenario!r}; choose from {', '.join(SCENARIOS)}")
    rng = random.Random(seed)
    clock = ManualClock()
    policy = Rebalancer(config or RebalanceConfig(confirmations=2, cooldown_s=300), clock)
    region = build(scenario, hubs=hubs, topics=topics, rng=rng)
    imbalance: list[float] = []
    moves_per_cycle: list[int] = []
    all_moves: list[Move] = []
    for cycle in range(cycles):
        if cycle == event_cycle:
            if scenario == "join":
                region.hubs["hub-new"] = {}
                region.epochs["hub-new"] = 100
            elif scenario == "leave":
                gone = region.hubs.pop("hub-0")
                region.reported.pop("hub-0", None)
                for topic, rate in gone.items():
                    region.hubs[rng.choice(list(region.hubs))][topic] = rate
            elif scenario == "hot":
                hub = next(iter(region.hubs))
                topic = next(iter(region.hubs[hub]))
                region.hubs[hub][topic] *= 20
        moves = policy.plan(region.snapshot(clock.wall_ms(), lag))
        for m in moves:
            region.apply(m, rng)
        all_moves += moves
        moves_per_cycle.append(len(moves))
        imbalance.append(round(region.imbalance(), 3))
        clock.advance(60)
    counts: dict[str, int] = {}
    for m in all_moves:
        counts[m.topic] = counts.get(m.topic, 0) + 1
    return {
        "scenario": scenario,
        "hubs": len(region.hubs),
        "topics": topics,
        "imbalance": imbalance,
        "moves_per_cycle": moves_per_cycle,
        "moves": len(all_moves),
        "topics_moved_more_than_once": sum(1 for c in counts.values() if c > 1),
        "max_moves_of_one_topic": max(counts.values(), default=0),
        "reasons": [m.reason for m in all_moves[:5]],
    }
