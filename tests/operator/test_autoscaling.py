"""The pool autoscaler in the operator's rebalancing cycle, on a manual clock: a load step
scales the pool out and, when it ends, back in, the last hub drained first (hand-offs to named
hubs, its cold rest too); never a hub in the middle of a reconfiguration; guards hold it; a
pool pinned at its maximum is a Warning; status, Events and metrics say why."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from hedwig_operator import metrics
from hedwig_operator.builders.labels import hub_address
from hedwig_operator.rebalancing import RebalanceState, rebalance_cycle
from hedwig_operator.specs import AutoscalingSpec, PoolSpec, SpecError, parse_pool
from hedwig_operator.workers import PoolWorker

from hedwig.clock import ManualClock
from hedwig.metadata import NEW_VERSION, HubInfo, HubLoad, PlanMode, TopicLoad, TopicPlan
from hedwig.placement.pool_records import PoolScalingConfig

from .fakes import World, pool_body
from .test_rebalancing import settled_statefulset
from .test_specs_and_crds import schema

CAPACITY = 1000.0  # msg/s per hub: the line of 3 hubs at 0.6 is 1800 msg/s
AUTOSCALING = {
    "enabled": True,
    "minReplicas": 3,
    "maxReplicas": 5,
    "scaleOutWindowSeconds": 60,
    "scaleInWindowSeconds": 120,
    "cooldownSeconds": 60,
}
INTERVAL = 10.0


class Region:
    """A World whose hubs report what they own, at each topic's rate (topics at 0 msg/s are
    cold: owned, counted, not listed, as a report lists only a hub's hottest)."""

    def __init__(self, w: World, clock: ManualClock, autoscaling: Mapping[str, Any]) -> None:
        self.w, self.clock = w, clock
        self.rates: dict[str, float] = {}
        self.state = RebalanceState()
        w.kube.put(
            pool_body(
                spec={
                    "region": "r1",
                    "replicas": 3,
                    "rebalancing": {
                        "hubCapacity": CAPACITY,
                        "confirmations": 1,
                        "maxMovesPerCycle": 4,
                        "intervalSeconds": int(INTERVAL),
                    },
                    "autoscaling": dict(autoscaling),
                }
            )
        )
        w.kube.put(settled_statefulset(3))
        self.alive: list[str] = []

    @property
    def pool(self) -> PoolSpec:
        return parse_pool(self.w.kube.objects[("HubPool", "ns", "pool")])

    def address(self, ordinal: int) -> str:
        return hub_address(self.pool, ordinal)

    async def add_hub(self, ordinal: int) -> None:
        self.alive.append(self.address(ordinal))
        await self.w.hub_store.hubs.register_hub(self.address(ordinal), HubLoad(timestamp_ms=0))

    async def remove_hub(self, address: str) -> None:
        self.alive.remove(address)
        await self.w.hub_store.hubs.unregister_hub(address)

    async def own(self, topic: str, ordinal: int, rate: float) -> None:
        await self.w.hub_store.topics.ensure_topic(topic)
        await self.w.hub_store.ownership.write_owner_info(
            topic, HubInfo(self.address(ordinal), 1), NEW_VERSION
        )
        self.rates[topic] = rate

    async def owners(self) -> dict[str, str]:
        got = {}
        for topic in self.rates:
            owner = await self.w.hub_store.ownership.read_owner_info(topic)
            if owner is not None:
                got[topic] = owner.value.address
        return got

    async def report(self) -> None:
        owners = await self.owners()
        for address in self.alive:
            mine = {t: self.rates[t] for t, a in owners.items() if a == address}
            loads = {t: TopicLoad(msg_in=r) for t, r in mine.items() if r > 0}
            await self.w.hub_store.hubs.update_load(
                address,
                HubLoad(
                    timestamp_ms=self.clock.wall_ms(),
                    topics=len(mine),
                    msg_in=sum(mine.values()),
                    topic_loads=loads,
                ),
            )

    async def cycle(self) -> dict[str, Any]:
        """Advance one interval, report, run one cycle; the pool's status.autoscaling."""
        self.clock.advance(INTERVAL)
        await self.report()
        await rebalance_cycle(self.w.ctx, self.pool, self.state, lambda t: [])
        return self.state.autoscaling.status

    def replicas(self) -> int:
        return int(self.w.kube.objects[("HubPool", "ns", "pool")]["spec"]["replicas"])

    def reasons(self) -> list[str]:
        return [e["reason"] for e in self.w.kube.events_for("HubPool", "pool")]

    def scale_reasons(self) -> list[str]:
        return [r for r in self.reasons() if r != "TopicMoved"]


async def region(autoscaling: Mapping[str, Any] = AUTOSCALING) -> Region:
    w = await World(graceful=True).start()
    clock = ManualClock()
    w.ctx.clock = clock
    r = Region(w, clock, autoscaling)
    for i in range(3):
        await r.add_hub(i)
    return r


def sample(pool: str, name: str, **labels: str) -> float | None:
    return metrics.REGISTRY.get_sample_value(name, {"namespace": "ns", "pool": pool, **labels})


async def test_a_load_step_scales_out_then_back_in_draining_the_last_hub_first() -> None:
    r = await region()
    # 2,400 msg/s over three hubs: above the target of three (1,800), four are needed.
    for k in range(12):
        await r.own(f"hot-{k}", k % 3, 200.0)
    for _ in range(6):  # 50 s above the line after the first sample: not yet the window
        status = await r.cycle()
    assert r.replicas() == 3
    assert status["state"] == "steady"
    assert "above the target for 50 of 60 s" in status["lastDecision"]["reason"]
    status = await r.cycle()
    assert r.replicas() == 4
    assert status["state"] == "scaling-out"
    assert r.scale_reasons() == ["ScalingOut"]
    (event,) = [e for e in r.w.kube.events_for("HubPool", "pool") if e["reason"] == "ScalingOut"]
    assert "more than 1800 msg/s (60% of 3 hubs) for 60 s" in event["message"]
    assert "scaling out to 4 hubs" in event["message"]
    assert status["lastChange"]["fromReplicas"] == 3 and status["lastChange"]["toReplicas"] == 4
    assert sample("pool", "hedwig_pool_autoscaling_decisions_total", action="ScalingOut") == 1

    # The StatefulSet rolls the new pod out: the autoscaler is held, and says so.
    r.w.kube.put(settled_statefulset(4) | {"status": {"readyReplicas": 3}})
    status = await r.cycle()
    assert status["lastDecision"]["action"] == "ScalingHeld"
    assert "rollout" in status["lastDecision"]["reason"]
    r.w.kube.put(settled_statefulset(4))
    await r.add_hub(3)
    status = await r.cycle()
    assert status["state"] == "cooling-down"
    assert r.scale_reasons() == ["ScalingOut", "ScaleCompleted"]
    # The rebalancer fills the new hub meanwhile.
    for _ in range(3):
        await r.cycle()
    owners = await r.owners()
    assert any(a == r.address(3) for a in owners.values())

    # The load ends (a trickle stays) and cold topics land on the new hub.
    for topic in r.rates:
        r.rates[topic] = 10.0
    for k in range(5):
        await r.own(f"cold-{k}", 3, 0.0)
    drained_at = None
    for n in range(40):
        status = await r.cycle()
        if status["state"] == "draining" and drained_at is None:
            drained_at = n
        if status["state"] == "scaling-in":
            break
    assert drained_at is not None
    assert status["state"] == "scaling-in"
    assert r.replicas() == 3
    assert r.scale_reasons() == [
        "ScalingOut",
        "ScaleCompleted",
        "DrainStarted",
        "ScalingIn",
    ]
    last = r.address(3)
    drain = next(e for e in r.w.kube.events_for("HubPool", "pool") if e["reason"] == "DrainStarted")
    assert f"draining {last}" in drain["message"] and "to scale in to 3" in drain["message"]
    # Nothing is left on the removed hub; every topic was handed over to a named hub.
    owners = await r.owners()
    assert last not in owners.values()
    from_last = [(src, t, dst) for src, t, dst in r.w.hubs.releases if src == last]
    assert {t for _, t, _ in from_last} >= {f"cold-{k}" for k in range(5)}
    assert all(dst is not None and dst != last for _, _, dst in from_last)
    # The pod goes: the scale-in completes.
    await r.remove_hub(last)
    status = await r.cycle()
    assert status["state"] == "steady"
    assert r.scale_reasons()[-1] == "ScaleCompleted"
    assert status["scaleChanges"] == 2
    assert sample("pool", "hedwig_pool_autoscaling_replicas", kind="desired") == 3
    assert sample("pool", "hedwig_pool_autoscaling_state", state="steady") == 1


async def test_a_hub_in_the_middle_of_a_reconfiguration_is_not_drained() -> None:
    r = await region({**AUTOSCALING, "reconfigurationSeconds": 200})
    spec = r.w.kube.objects[("HubPool", "ns", "pool")]["spec"]
    spec["replicas"] = 4
    # The fan-out policy would bring the idle topic back to one hub at once (a new plan).
    spec["rebalancing"]["fanOut"] = {"enabled": False}
    r.w.kube.put(settled_statefulset(4))
    await r.add_hub(3)
    for k in range(4):
        await r.own(f"t-{k}", k, 10.0)
    # t-0's plan changed just now and names the last hub as a delivery hub.
    plan = TopicPlan(
        mode=PlanMode.FAN_OUT,
        hubs=tuple(sorted([r.address(0), r.address(3)])),
        generation=1,
        changed_ms=r.clock.wall_ms(),
    )
    await r.w.hub_store.plans.write_plan("t-0", plan, NEW_VERSION)
    for _ in range(14):  # one hub fewer has fitted for the window (120 s) by 130 s
        status = await r.cycle()
    assert status["state"] == "steady"
    assert "every removable hub is busy" in status["lastDecision"]["reason"]
    assert "DrainStarted" not in r.reasons()
    # Once the plan has settled (200 s), the last hub is drained.
    for _ in range(6):
        status = await r.cycle()
    assert "DrainStarted" in r.reasons()
    assert status["drainingHub"] == r.address(3)


async def test_a_pool_pinned_at_its_maximum_is_a_warning_and_a_metric() -> None:
    r = await region({**AUTOSCALING, "maxReplicas": 3})
    for k in range(6):
        await r.own(f"hot-{k}", k % 3, 600.0)  # 3,600 msg/s: six hubs at the target
    for _ in range(3):
        status = await r.cycle()
    assert r.replicas() == 3
    assert status["pinned"] is True and status["neededHubs"] == 6
    assert "at the maximum of 3 hubs" in status["lastDecision"]["reason"]
    (pinned,) = [
        e for e in r.w.kube.events_for("HubPool", "pool") if e["reason"] == "ScalingPinned"
    ]
    assert pinned["type"] == "Warning"
    assert "needs 6 hubs" in pinned["message"]
    assert sample("pool", "hedwig_pool_autoscaling_pinned") == 1
    assert sample("pool", "hedwig_pool_autoscaling_replicas", kind="needed") == 6
    # A hold (a rollout) reads no load: the flag and the figures stand, no second Warning.
    r.w.kube.put(settled_statefulset(3) | {"status": {"readyReplicas": 2}})
    status = await r.cycle()
    assert status["lastDecision"]["action"] == "ScalingHeld"
    assert status["pinned"] is True and status["neededHubs"] == 6
    r.w.kube.put(settled_statefulset(3))
    await r.cycle()
    assert r.reasons().count("ScalingPinned") == 1
    assert sample("pool", "hedwig_pool_autoscaling_pinned") == 1


async def test_paused_rebalancing_holds_the_autoscaler_and_off_clears_it() -> None:
    r = await region()
    r.w.kube.objects[("HubPool", "ns", "pool")]["spec"]["rebalancing"]["paused"] = True
    status = await r.cycle()
    assert status["lastDecision"]["action"] == "ScalingHeld"
    assert "paused" in status["lastDecision"]["reason"]
    r.w.kube.objects[("HubPool", "ns", "pool")]["spec"]["autoscaling"]["enabled"] = False
    assert await r.cycle() == {}
    assert sample("pool", "hedwig_pool_autoscaling_pinned") is None
    assert r.replicas() == 3


def test_autoscaling_spec_defaults_are_the_crds_and_the_policys() -> None:
    props = schema("hubpools")["properties"]["spec"]["properties"]["autoscaling"]["properties"]
    d, p = AutoscalingSpec(), PoolScalingConfig()
    pairs = {
        "enabled": d.enabled,
        "minReplicas": p.min_hubs,
        "maxReplicas": p.max_hubs,
        "targetUtilisation": p.target_utilisation,
        "scaleInBelow": p.scale_in_below,
        "scaleOutWindowSeconds": p.scale_out_window_s,
        "scaleInWindowSeconds": p.scale_in_window_s,
        "cooldownSeconds": p.cooldown_s,
        "maxScaleOutStep": p.max_scale_out_step,
        "reconfigurationSeconds": p.reconfiguration_s,
        "stallAfterSeconds": p.stall_after_s,
    }
    assert set(pairs) == set(props)
    for key, value in pairs.items():
        assert props[key]["default"] == value, key
    assert d.enabled is False
    assert parse_pool(pool_body()).autoscaling == d


@pytest.mark.parametrize(
    ("autoscaling", "problem"),
    [
        ({"minReplicas": 5, "maxReplicas": 4}, "minReplicas: must not be above maxReplicas"),
        ({"targetUtilisation": 1.5}, "target_utilisation"),
        ({"maxScaleOutStep": 0}, "maxScaleOutStep"),
    ],
)
def test_autoscaling_spec_refused(autoscaling: dict[str, Any], problem: str) -> None:
    with pytest.raises(SpecError, match=problem):
        parse_pool(pool_body(spec={"autoscaling": autoscaling}))


async def test_the_pools_worker_writes_status_autoscaling_and_removes_it_when_off() -> None:
    r = await region()
    for k in range(3):
        await r.own(f"t-{k}", k, 100.0)
    body = r.w.kube.objects[("HubPool", "ns", "pool")]
    worker = PoolWorker(r.w.ctx, body, lambda key: [])
    worker.rebalance = r.state
    r.clock.advance(INTERVAL)
    await r.report()
    await worker.rebalance_once(r.pool)
    written = r.w.kube.objects[("HubPool", "ns", "pool")]["status"]["autoscaling"]
    assert written["state"] == "steady"
    assert written["desiredReplicas"] == 3
    assert written["loadMessagesPerSecond"] == 300.0
    assert "300 msg/s, 10% of 3 hubs (target 60%)" in written["lastDecision"]["reason"]
    worker.body = r.w.kube.objects[("HubPool", "ns", "pool")]
    body["spec"]["autoscaling"]["enabled"] = False
    await worker.rebalance_once(r.pool)
    assert "autoscaling" not in r.w.kube.objects[("HubPool", "ns", "pool")]["status"]
