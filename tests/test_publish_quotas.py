"""Publish rate quotas on a manual clock: the meter, Kafka's throttle formula, the hold of a
namespace's publishes (in order, others untouched, large batches held their worth, a change
applied at once), the share across hubs from their load reports, and the records and CLI
parsing that carry the limits."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import CollectorRegistry, Counter

from hedwig.cli.namespaces import parse_bytes
from hedwig.clock import ManualClock
from hedwig.errors import MetadataError, UsageError
from hedwig.hub.front.quotas import PublishQuotas, RateMeter
from hedwig.hub.reporting.series import NamespaceSeries
from hedwig.metadata.records import HubLoad, HubStatus
from hedwig.metadata.records.namespaces import NamespacePolicy
from hedwig.protocol.names import lane_of, namespace_of

STEP_S = 0.005


def test_meter_rates_over_the_span_of_its_buckets() -> None:
    meter = RateMeter(window_s=1.0, bucket_s=0.1)
    meter.record(10.0, 5, 500)
    # One bucket spanned: at least one bucket's time.
    assert meter.span(10.0) == pytest.approx(0.1)
    assert meter.rates(10.0) == pytest.approx((50.0, 5000.0))
    meter.record(10.5, 5, 500)
    assert meter.span(10.5) == pytest.approx(0.5)
    assert meter.rates(10.5) == pytest.approx((20.0, 2000.0))
    # Past the window the first bucket leaves; past another, the meter is empty.
    assert meter.rates(11.2) == pytest.approx((5 / 0.7, 500 / 0.7))
    assert meter.rates(12.0) == (0.0, 0.0)


def test_throttle_time_is_kafkas_formula() -> None:
    meter = RateMeter(window_s=1.0, bucket_s=0.1)
    meter.record(10.0, 50, 0)
    meter.record(10.5, 100, 0)
    # O = 150 / 0.5 s = 300/s over T = 100/s: X = (O - T) / T * W = 2 * 0.5 = 1 s.
    assert meter.throttle_s(10.5, 100, 0) == pytest.approx(1.0)
    assert meter.throttle_s(10.5, 300, 0) == 0.0  # at the limit: no hold
    assert meter.throttle_s(10.5, 0, 0) == 0.0  # no limit
    meter.record(10.5, 0, 10_000)
    # The longer of the two limits' holds: bytes 10,000 / 0.5 s over 1,000/s -> 9.5 s.
    assert meter.throttle_s(10.5, 100, 1000) == pytest.approx(9.5)


class Region:
    """Policies by namespace, as a hub's ``NamespaceWatcher.policy_of`` gives them."""

    def __init__(self) -> None:
        self.policies: dict[str, NamespacePolicy] = {}
        self.throttled: dict[str, float] = {}

    def policy_of(self, topic: str) -> NamespacePolicy | None:
        return self.policies.get("/".join(namespace_of(lane_of(topic)[0])))

    def note(self, namespace: str, seconds: float) -> None:
        self.throttled[namespace] = self.throttled.get(namespace, 0.0) + seconds


def quotas_on(clock: ManualClock, region: Region) -> PublishQuotas:
    return PublishQuotas(policy_of=region.policy_of, clock=clock, throttled=region.note)


async def flat_out(
    quotas: PublishQuotas, clock: ManualClock, topic: str, seconds: float, *, batch: int = 1
) -> int:
    """Messages admitted to ``topic`` by eight publishers publishing as fast as the hub lets
    them for ``seconds`` of the manual clock (each offers far more than any limit here)."""
    admitted = 0
    running = True

    async def publisher() -> None:
        nonlocal admitted
        while running:
            await quotas.admit(topic, batch, 100 * batch)
            if running:  # (those let through after the time is up are not counted)
                admitted += batch
            await asyncio.sleep(0)

    tasks = [asyncio.create_task(publisher()) for _ in range(8)]
    for _ in range(round(seconds / STEP_S)):
        for _ in range(5):
            await asyncio.sleep(0)
        clock.advance(STEP_S)
    running = False
    await drained(clock, tasks)
    return admitted


async def drained(clock: ManualClock, tasks: list[asyncio.Task[None]]) -> None:
    """``tasks`` finished, the clock moved on until every hold they wait for is over."""
    while not all(t.done() for t in tasks):
        clock.advance(1.0)
        for _ in range(20):
            await asyncio.sleep(0)
    await asyncio.gather(*tasks)


async def test_a_limited_namespace_is_held_to_its_rate_and_others_are_not() -> None:
    clock, region = ManualClock(), Region()
    region.policies["acme/slow"] = NamespacePolicy(max_publish_msgs_per_s=200)
    quotas = quotas_on(clock, region)
    admitted = await flat_out(quotas, clock, "acme/slow/t", 5.0)
    assert 900 <= admitted <= 1100, admitted
    assert region.throttled["acme/slow"] > 0
    # Another namespace publishes at once while the limited one is held.
    held = asyncio.create_task(quotas.admit("acme/slow/t", 200, 0))
    await asyncio.sleep(0)
    for _ in range(1000):
        await quotas.admit("acme/fast/t", 1, 100)  # returns without waiting
    assert "acme/fast" not in region.throttled
    await drained(clock, [held])


async def test_a_byte_limit_holds_by_bytes() -> None:
    clock, region = ManualClock(), Region()
    region.policies["acme/big"] = NamespacePolicy(max_publish_bytes_per_s=100_000)
    quotas = quotas_on(clock, region)
    # 100 bytes a message: 1,000 messages a second at most.
    admitted = await flat_out(quotas, clock, "acme/big/t", 4.0)
    assert 3600 <= admitted <= 4400, admitted


async def test_large_batches_are_held_what_they_are_worth() -> None:
    clock, region = ManualClock(), Region()
    region.policies["acme/slow"] = NamespacePolicy(max_publish_msgs_per_s=100)
    quotas = quotas_on(clock, region)
    # Batches of three seconds' worth: each holds three seconds, not the one-second cap.
    admitted = await flat_out(quotas, clock, "acme/slow/t", 9.0, batch=300)
    assert admitted <= 1200, admitted


async def test_held_publishes_pass_in_arrival_order() -> None:
    clock, region = ManualClock(), Region()
    region.policies["acme/slow"] = NamespacePolicy(max_publish_msgs_per_s=10)
    quotas = quotas_on(clock, region)
    await quotas.admit("acme/slow/t", 10, 0)  # the namespace is held now
    passed: list[int] = []

    async def publish(i: int) -> None:
        await quotas.admit("acme/slow/t", 1, 0)
        passed.append(i)

    tasks = [asyncio.create_task(publish(i)) for i in range(20)]
    for _ in range(100):
        await asyncio.sleep(0)
        clock.advance(0.05)
    await drained(clock, tasks)
    assert passed == list(range(20))


async def test_a_changed_quota_applies_at_once() -> None:
    clock, region = ManualClock(), Region()
    region.policies["acme/slow"] = NamespacePolicy(max_publish_msgs_per_s=100)
    quotas = quotas_on(clock, region)
    assert 180 <= await flat_out(quotas, clock, "acme/slow/t", 2.0) <= 220
    region.policies["acme/slow"] = NamespacePolicy(max_publish_msgs_per_s=400)
    assert 720 <= await flat_out(quotas, clock, "acme/slow/t", 2.0) <= 880
    region.policies["acme/slow"] = NamespacePolicy(max_publish_msgs_per_s=0)  # no limit
    assert await flat_out(quotas, clock, "acme/slow/t", 0.5) > 2000  # 400 a second no more


def report(namespaces: dict[str, tuple[float, float]], timestamp_ms: int) -> HubLoad:
    return HubLoad(timestamp_ms=timestamp_ms, namespaces=namespaces)


async def test_hubs_serving_a_namespace_share_its_quota() -> None:
    clock, region = ManualClock(), Region()
    policy = region.policies["acme/slow"] = NamespacePolicy(
        max_publish_msgs_per_s=300, max_publish_bytes_per_s=300_000
    )
    quotas = quotas_on(clock, region)
    now = clock.wall_ms()
    busy = {"acme/slow": (100.0, 1000.0)}
    hubs = [
        HubStatus("me:1", True, load=report(busy, now)),  # this hub: not counted twice
        HubStatus("b:1", True, load=report(busy, now - 1000)),
        HubStatus("c:1", True, load=report(busy, now)),
        HubStatus("d:1", True, load=report(busy, now - 60_000)),  # stale
        HubStatus("e:1", False, load=report(busy, now)),  # gone
        HubStatus("f:1", True, load=report({"other/ns": (1.0, 1.0)}, now)),
    ]
    quotas.observe(hubs, "me:1", now, 15_000)
    assert quotas.sharing == {"acme/slow": 2, "other/ns": 1}
    assert quotas.share("acme/slow", policy) == (100.0, 100_000.0)
    # Held to its share: a third of 300 a second.
    assert 180 <= await flat_out(quotas, clock, "acme/slow/t", 2.0) <= 220
    quotas.observe([], "me:1", now, 15_000)  # the others stopped serving it
    assert quotas.share("acme/slow", policy) == (300.0, 300_000.0)


async def test_usage_reported_for_the_busiest_limited_namespaces() -> None:
    clock, region = ManualClock(), Region()
    for i in range(5):
        region.policies[f"acme/n{i}"] = NamespacePolicy(max_publish_msgs_per_s=1_000_000)
    quotas = quotas_on(clock, region)
    for i in range(5):
        await quotas.admit(f"acme/n{i}/t", 10 * (i + 1), 1)
    await quotas.admit("acme/unlimited/t", 10_000, 1)  # no quota: neither counted nor listed
    clock.advance(2.0)
    used = quotas.take_usage(3)
    assert used == {"acme/n4": (25.0, 0.5), "acme/n3": (20.0, 0.5), "acme/n2": (15.0, 0.5)}
    clock.advance(2.0)
    assert quotas.take_usage(3) == {}  # nothing since


def test_load_reports_carry_namespace_rates() -> None:
    load = HubLoad(timestamp_ms=5, namespaces={"acme/slow": (1.5, 200.0)})
    assert HubLoad.from_json(load.to_json()) == load
    assert b"namespaces" not in HubLoad(timestamp_ms=5).to_json()
    with pytest.raises(MetadataError):
        HubLoad.from_json(b'{"namespaces": {"acme/slow": [1]}}')
    with pytest.raises(MetadataError):
        HubLoad.from_json(b'{"namespaces": {"acme/slow": ["a", 1]}}')


def test_policy_rate_fields_round_trip_and_are_checked() -> None:
    policy = NamespacePolicy(max_publish_msgs_per_s=200, max_publish_bytes_per_s=10 << 20)
    assert NamespacePolicy.from_json(policy.to_json()) == policy
    assert policy.publish_limits == (200, 10 << 20)
    assert NamespacePolicy().publish_limits == (0, 0)
    for bad in (-1, 1.5, True, "10"):
        with pytest.raises(MetadataError):
            NamespacePolicy(max_publish_msgs_per_s=bad)  # type: ignore[arg-type]
        with pytest.raises(MetadataError):
            NamespacePolicy(max_publish_bytes_per_s=bad)  # type: ignore[arg-type]
    with pytest.raises(MetadataError):
        NamespacePolicy.from_json(b'{"max_publish_msgs_per_s": "fast"}')


@pytest.mark.parametrize(
    ("text", "expected"),
    [("4096", 4096), ("10MiB", 10 << 20), ("500KB", 500_000), ("1.5 kib", 1536), ("0", 0)],
)
def test_byte_rates_take_units(text: str, expected: int) -> None:
    assert parse_bytes(text, "max-publish-bytes") == expected


@pytest.mark.parametrize("text", ["", "MiB", "ten", "10 parsecs", "nan", "inf", "1e999"])
def test_bad_byte_rates_are_refused(text: str) -> None:
    with pytest.raises(UsageError):
        parse_bytes(text, "max-publish-bytes")


def test_throttled_time_series_are_bounded() -> None:
    counter = Counter("t_throttled", "t", ["namespace"], registry=CollectorRegistry())
    series = NamespaceSeries(counter, 2)
    for i in range(5):
        series(f"acme/n{i}", 1.0)
    samples = next(iter(counter.collect())).samples
    values = {s.labels["namespace"]: s.value for s in samples if s.name.endswith("_total")}
    assert values == {"": 3.0, "acme/n0": 1.0, "acme/n1": 1.0}
