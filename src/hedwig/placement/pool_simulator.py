"""The hub pool's autoscaling simulated: a load that rises and falls, the pool scaling policy
(``hedwig.placement.pool_scaling``) or a plain CPU-based HPA (``hedwig.placement.hpa``) sizing
the pool, and the rebalancer (``hedwig.placement.rebalance``) moving topics onto new hubs and
off retiring ones, as the operator would run them. ``hedwig sim --scenario hour`` (or
``step``) prints what each did with the same workload.

The model, tick by tick (``tick_s``, the HPA's 15 s sync period):

- Topics have fixed shares of the region's load, each with its own noise (``topic_noise``),
  under a profile: ``hour`` rises from ``low`` to ``high`` msg/s over half an hour and falls
  back over the next (a squared sine); ``step`` jumps from ``low`` to ``high`` at a sixth of the
  run and back at two thirds. A region-wide wobble (``region_noise``, an AR(1) series) moves
  every topic together, as a day's traffic does.
- Hubs report EWMA rates as a real hub does (weight 0.5 every 5 s: a tick keeps an eighth of
  the old rate); a topic that moved starts from nothing at its new hub. Reports list a hub's
  hottest 100 topics, and totals over all of them.
- A new hub (pod) is ready and reports ``startup_s`` after it is created; a pool is a
  StatefulSet: a new pod takes the next ordinal, and the HPA's scale-down removes the
  highest. A removed pod drains first (its preStop ``hedwig drain``): every topic handed
  over at once to a hub the placement policy (``load-weighted``) picks.
- The operator's cycle runs every ``cycle_s``: the pool policy decides (it may remove only
  the highest ordinal, as a StatefulSet does, unless ``drain_any``), then the rebalancer
  plans moves with the retiring hub named; a draining hub asked to hand over its cold rest
  does so through placement, as ``hedwig drain`` does. Under the HPA the same rebalancer
  runs, with no retiring hub.
- CPU, for the HPA: a hub's utilisation of its CPU request is ``cpu_floor`` plus its share of
  ``hub_capacity`` (true rates, not the reports: metrics-server's window is short), times
  ``1 + cpu_noise`` noise. Moves cost no CPU here (they do in reality, which would only add
  to the HPA's scale-outs).

The report counts scale changes (changes of the pool's replicas) and reversals (a change
against the previous one's direction), topic moves (of which the drains'), pauses (each
hand-off one pause of its topic, ``PAUSE_S`` long: the measured p99 publish latency of a
message caught in a graceful hand-off, ``docs/benchmarks.md``), the messages caught in them,
hub-hours (pods existing, starting and draining ones included), the hub-minutes spent
above ``hub_capacity``, and the topics a hub still owned when its pod was deleted (moved by
its preStop drain in one burst, to destinations placement picks).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from hedwig.clock import ManualClock
from hedwig.metadata.records import HubLoad, HubStatus, TopicLoad
from hedwig.placement.choice import PlacementPolicy, choose_hub
from hedwig.placement.hpa import HpaConfig, HpaModel
from hedwig.placement.pool_records import PoolScalingConfig, ScaleAction
from hedwig.placement.pool_scaling import PoolScaler
from hedwig.placement.rebalance import Move, RebalanceConfig, Rebalancer
from hedwig.protocol.kinds import MoveKind

POOL_SCENARIOS = ("hour", "step")
AUTOSCALERS = ("hedwig", "hpa")
# The p99 publish latency of a message caught in a graceful hand-off (docs/benchmarks.md,
# "Moving topics": 140-200 ms): what one move costs its topic, at the top of that range.
PAUSE_S = 0.2
# The hub's EWMA keeps half the old rate every 5 s report: over a 15 s tick, an eighth.
REPORT_LAG = 0.125
REPORT_TOPICS = 100


@dataclass(frozen=True, slots=True)
class Workload:
    topics: int = 240
    hub_capacity: float = 10_000.0  # msg/s one hub carries comfortably
    low: float = 15_000.0  # msg/s at the start and end (the step's low)
    high: float = 48_000.0  # msg/s at the peak (the step's high)
    duration_s: float = 3600.0
    tick_s: float = 15.0
    cycle_s: float = 60.0  # the operator's rebalancing interval
    startup_s: float = 30.0  # a new pod until it is ready and reports
    start_hubs: int = 3
    min_hubs: int = 3
    max_hubs: int = 12
    target: float = 0.6  # of capacity (Hedwig) or of the CPU request (HPA)
    topic_noise: float = 0.05
    region_noise: float = 0.03
    cpu_floor: float = 0.05
    cpu_noise: float = 0.05
    # The pool policy may drain any hub (the cheapest), not only a StatefulSet's last ordinal.
    drain_any: bool = False


@dataclass
class _Pod:
    name: str
    ordinal: int
    epoch: int
    ready_at: float
    topics: set[str] = field(default_factory=set)
    reported: dict[str, float] = field(default_factory=dict)


def _profile(w: Workload, scenario: str, t: float) -> float:
    if scenario == "hour":
        return w.low + (w.high - w.low) * math.sin(math.pi * t / w.duration_s) ** 2
    step = w.duration_s / 6 <= t < w.duration_s * 2 / 3
    return w.high if step else w.low


@dataclass
class _Run:
    w: Workload
    scenario: str
    autoscaler: str
    rebalance: RebalanceConfig
    seed: int
    clock: ManualClock = field(default_factory=ManualClock)
    pods: dict[str, _Pod] = field(default_factory=dict)
    owner: dict[str, str] = field(default_factory=dict)
    replicas: int = 0
    epochs: int = 0
    moves: int = 0
    drain_moves: int = 0
    # Topics a hub still owned when its pod was deleted (handed over by its preStop drain).
    left_on_removed: int = 0
    caught: float = 0.0
    moved: dict[str, int] = field(default_factory=dict)
    changes: list[tuple[float, int, int, str]] = field(default_factory=list)
    hub_s: float = 0.0
    overloaded_s: float = 0.0
    peak_hub_share: float = 0.0

    def __post_init__(self) -> None:
        self.load_rng = random.Random(self.seed)
        self.rng = random.Random(self.seed + 1)
        self.shares = [self.load_rng.uniform(0.5, 1.5) for _ in range(self.w.topics)]
        total = sum(self.shares)
        self.shares = [s / total for s in self.shares]
        self.names = [f"topic-{k}" for k in range(self.w.topics)]
        self.rates = dict.fromkeys(self.names, 0.0)
        self.wobble = 0.0
        for _ in range(self.w.start_hubs):
            self._add_pod(ready=True)
        self.replicas = self.w.start_hubs
        pods = list(self.pods.values())
        for k, name in enumerate(self.names):
            self._place(name, pods[k % len(pods)])

    # -- the pool -------------------------------------------------------------------------

    def _add_pod(self, *, ready: bool = False) -> None:
        ordinal = max((p.ordinal + 1 for p in self.pods.values()), default=0)
        self.epochs += 1
        at = self.clock.monotonic() + (0.0 if ready else self.w.startup_s)
        self.pods[f"hub-{ordinal}"] = _Pod(f"hub-{ordinal}", ordinal, self.epochs, at)

    def _place(self, topic: str, pod: _Pod) -> None:
        old = self.owner.get(topic)
        if old is not None:
            self.pods[old].topics.discard(topic)
            self.pods[old].reported.pop(topic, None)
        self.owner[topic] = pod.name
        pod.topics.add(topic)

    def _move(self, topic: str, destination: str, drain: bool) -> None:
        self._place(topic, self.pods[destination])
        self.moves += 1
        self.drain_moves += drain
        self.caught += self.rates[topic] * PAUSE_S
        self.moved[topic] = self.moved.get(topic, 0) + 1

    def ready(self) -> list[_Pod]:
        now = self.clock.monotonic()
        return [p for p in self.pods.values() if p.ready_at <= now]

    def _hand_over(self, pods: Sequence[_Pod]) -> None:
        """``hedwig drain`` on ``pods`` (at once, as a StatefulSet stops them): every topic to
        a hub the placement policy picks among the others."""
        leaving = {p.name for p in pods}
        others = [h for h in self.statuses() if h.address not in leaving]
        if not others:
            return
        for pod in pods:
            for topic in sorted(pod.topics):
                dst = choose_hub(others, PlacementPolicy.LOAD_WEIGHTED, topic, rng=self.rng)
                assert dst is not None
                self._move(topic, dst, drain=True)

    def _remove(self, pods: Sequence[_Pod]) -> None:
        self.left_on_removed += sum(len(p.topics) for p in pods)
        self._hand_over(pods)
        for pod in pods:
            del self.pods[pod.name]

    def resize(self, replicas: int, why: str) -> None:
        if replicas == self.replicas:
            return
        self.changes.append((self.clock.monotonic(), self.replicas, replicas, why))
        self.replicas = replicas
        while len(self.pods) < replicas:
            self._add_pod()

    # -- load and reports -----------------------------------------------------------------

    def tick_load(self) -> None:
        w = self.w
        t = self.clock.monotonic() - self.start
        self.wobble = 0.9 * self.wobble + self.load_rng.gauss(0.0, w.region_noise)
        level = _profile(w, self.scenario, t) * (1 + self.wobble)
        for name, share in zip(self.names, self.shares, strict=True):
            noise = max(0.0, 1 + self.load_rng.gauss(0.0, w.topic_noise))
            self.rates[name] = level * share * noise
        for pod in self.ready():
            pod.reported = {
                topic: REPORT_LAG * pod.reported.get(topic, 0.0)
                + (1 - REPORT_LAG) * self.rates[topic]
                for topic in pod.topics
            }
        self.hub_s += len(self.pods) * w.tick_s
        for pod in self.ready():
            share = sum(self.rates[t] for t in pod.topics) / w.hub_capacity
            self.peak_hub_share = max(self.peak_hub_share, share)
            if share > 1:
                self.overloaded_s += w.tick_s

    def statuses(self) -> list[HubStatus]:
        now_ms = self.clock.wall_ms()
        out = []
        for pod in self.ready():
            hottest = sorted(pod.reported.items(), key=lambda kv: -kv[1])[:REPORT_TOPICS]
            load = HubLoad(
                timestamp_ms=now_ms,
                topics=len(pod.topics),
                msg_in=sum(pod.reported.values()),
                topic_loads={t: TopicLoad(msg_in=r) for t, r in hottest},
            )
            out.append(HubStatus(pod.name, True, pod.epoch, load))
        return out

    def cpu(self, pod: _Pod) -> float:
        share = sum(self.rates[t] for t in pod.topics) / self.w.hub_capacity
        noise = 1 + self.rng.gauss(0.0, self.w.cpu_noise)
        return max(0.0, (self.w.cpu_floor + share) * noise)

    # -- the run --------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        w = self.w
        self.start = self.clock.monotonic()
        rebalancer = Rebalancer(self.rebalance, self.clock)
        pool = PoolScaler(
            PoolScalingConfig(
                min_hubs=w.min_hubs,
                max_hubs=w.max_hubs,
                hub_capacity=w.hub_capacity,
                target_utilisation=w.target,
            ),
            self.clock,
        )
        hpa = HpaModel(
            HpaConfig(
                target_utilisation=w.target,
                min_replicas=w.min_hubs,
                max_replicas=w.max_hubs,
                sync_period_s=w.tick_s,
            ),
            self.clock,
        )
        ticks = round(w.duration_s / w.tick_s)
        every = max(1, round(w.cycle_s / w.tick_s))
        retiring: str | None = None
        for tick in range(ticks):
            self.tick_load()
            if self.autoscaler == "hpa":
                self._hpa_step(hpa)
            if tick % every == 0:
                if self.autoscaler == "hedwig":
                    retiring = self._pool_step(pool)
                moves = rebalancer.plan(self.statuses(), retiring=[retiring] if retiring else [])
                self._apply(moves)
            self.clock.advance(w.tick_s)
        return self._report()

    def _hpa_step(self, hpa: HpaModel) -> None:
        ready = self.ready()
        unready = len(self.pods) - len(ready)
        desired = hpa.decide(self.replicas, [self.cpu(p) for p in ready], unready)
        if desired < self.replicas:
            doomed = sorted(self.pods.values(), key=lambda p: -p.ordinal)[: self.replicas - desired]
            self.resize(desired, "CPU")
            self._remove(doomed)
        else:
            self.resize(desired, "CPU")

    def _pool_step(self, pool: PoolScaler) -> str | None:
        ready = self.ready()
        last = max(ready, key=lambda p: p.ordinal).name
        removable = None if self.w.drain_any else [last]
        decision = pool.decide(self.statuses(), replicas=self.replicas, removable=removable)
        if decision.hand_off_rest and decision.drain in self.pods:
            self._hand_over([self.pods[decision.drain]])
        if decision.action is ScaleAction.SCALE_IN:
            assert decision.drain is not None
            self.resize(decision.replicas, decision.reason)
            self._remove([self.pods[decision.drain]])
        elif decision.action is ScaleAction.SCALE_OUT:
            self.resize(decision.replicas, decision.reason)
        return decision.drain

    def _apply(self, moves: Sequence[Move]) -> None:
        for m in moves:
            if m.destination in self.pods and self.owner.get(m.topic) == m.source:
                self._move(m.topic, m.destination, drain=m.kind is MoveKind.DRAIN)

    def _report(self) -> dict[str, Any]:
        steps = [after - before for _, before, after, _ in self.changes]
        reversals = sum(1 for a, b in itertools.pairwise(steps) if (a > 0) != (b > 0))
        return {
            "scenario": self.scenario,
            "autoscaler": self.autoscaler,
            "minutes": round(self.w.duration_s / 60),
            "scale_changes": len(self.changes),
            "reversals": reversals,
            "replicas": [
                [round((t - self.start) / 60, 1), before, after]
                for t, before, after, _ in self.changes
            ],
            "max_replicas": max([self.w.start_hubs, *(a for _, _, a, _ in self.changes)]),
            "topic_moves": self.moves,
            "drain_moves": self.drain_moves,
            "topics_on_removed_hubs": self.left_on_removed,
            "topics_moved_more_than_twice": sum(1 for n in self.moved.values() if n > 2),
            "max_moves_of_one_topic": max(self.moved.values(), default=0),
            "pauses": self.moves,
            "pause_s": round(self.moves * PAUSE_S, 1),
            "messages_in_pauses": round(self.caught),
            "hub_hours": round(self.hub_s / 3600, 2),
            "overloaded_hub_minutes": round(self.overloaded_s / 60, 1),
            "peak_hub_load": round(self.peak_hub_share, 2),
            "reasons": [why for _, _, _, why in self.changes[:3]],
        }


def simulate_pool(
    scenario: str,
    autoscaler: str,
    *,
    workload: Workload | None = None,
    rebalance: RebalanceConfig | None = None,
    seed: int = 1,
) -> dict[str, Any]:
    """One run of ``scenario`` under ``autoscaler`` ("hedwig" or "hpa")."""
    if scenario not in POOL_SCENARIOS:
        raise ValueError(f"unknown scenario {scenario!r}; choose from {', '.join(POOL_SCENARIOS)}")
    if autoscaler not in AUTOSCALERS:
        raise ValueError(f"unknown autoscaler {autoscaler!r}; choose from {AUTOSCALERS}")
    w = workload or Workload()
    config = rebalance or RebalanceConfig(confirmations=2, cooldown_s=300)
    config = dataclasses.replace(config, hub_capacity=w.hub_capacity)
    return _Run(w, scenario, autoscaler, config, seed).run()
