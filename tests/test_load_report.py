"""Load reports stay small whatever the number of topics a hub owns.

Each hub rewrites its report into one record every few seconds; ZooKeeper refuses records over
1 MB and drops the session of a client that sends one, so a report with a line per topic put a
ceiling of about 9,000 topics on a hub. Reports now carry totals and the hottest topics only:
checked here on the records, on the policy that reads them, and on a hub owning 12,000 topics
against the real ZooKeeper.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import asdict, replace

import pytest

from hedwig.clock import ManualClock
from hedwig.devcluster.zookeeper import ZooKeeperServer
from hedwig.errors import MetadataError, MetadataUnavailableError
from hedwig.hub import Hub, HubConfig
from hedwig.hub.reporting.load import LoadTracker
from hedwig.hub.reporting.metrics import HubMetrics
from hedwig.metadata.memory import MemoryBackend, MemoryMetadataStore
from hedwig.metadata.records import HubLoad, HubStatus, TopicLoad
from hedwig.placement.rebalance import RebalanceConfig, Rebalancer
from hedwig.settings import ConnectionSettings, PlacementSettings, StorageSettings
from tests import scratch
from tests.cluster_helpers import eventually, lone_hub

# The longest topic names a report may list.
LONG = "t" * 200


def report_for(count: int, top: int = 100) -> HubLoad:
    tracker = LoadTracker()
    names = [f"{LONG}-{i}" for i in range(count)]
    tracker.sample(0.0, {})
    tracker.sample(5.0, {n: (i, i * 100, i, i * 100) for i, n in enumerate(names) if i})
    return tracker.report(1, 0, names, count, top, lambda _: (3, 1_000_000))


def test_report_size_does_not_grow_with_the_topics() -> None:
    sizes = {n: len(report_for(n).to_json()) for n in (10, 1_000, 20_000, 100_000)}
    assert sizes[20_000] == pytest.approx(sizes[1_000], rel=0.05)
    assert sizes[100_000] == pytest.approx(sizes[1_000], rel=0.05)
    assert sizes[100_000] < 64 * 1024  # far below ZooKeeper's 1 MB (and etcd's 1.5 MB)


def test_report_totals_cover_every_topic_and_list_the_hottest() -> None:
    report = report_for(5_000, top=10)
    assert report.topics == 5_000
    assert len(report.topic_loads) == 10
    # Topic i carried i messages in 5 s: i/5 msg/s in and out, halved by the EWMA.
    hottest_rates = sorted((t.msg_in for t in report.topic_loads.values()), reverse=True)
    assert hottest_rates[0] == pytest.approx(4_999 / 5 * 0.5)
    assert report.msg_in == pytest.approx(sum(i / 5 * 0.5 for i in range(5_000)), rel=1e-3)
    assert all(t.subscribers == 3 for t in report.topic_loads.values())
    assert report.unlisted_rate == pytest.approx(
        report.rate - sum(t.msg_in + t.msg_out for t in report.topic_loads.values())
    )
    assert HubLoad.from_json(report.to_json()) == report


def test_a_report_is_written_with_every_field_of_its_records() -> None:
    """``HubLoad.to_json`` names each field itself (``asdict`` was a third of writing a
    report): it must write what ``asdict`` would, whatever fields the records gain."""
    report = replace(
        report_for(300, top=5),
        internal="10.0.0.1:4081",
        hub_id="hub-0",
        delivering={"fan": TopicLoad(msg_out=3.0, bytes_out=30.0, subscribers=2)},
        namespaces={"acme/web": (12.5, 1250.0)},
    )
    written = asdict(report)
    written["namespaces"] = {n: list(r) for n, r in report.namespaces.items()}  # JSON arrays
    assert json.loads(report.to_json()) == written
    assert HubLoad.from_json(report.to_json()) == report
    # One report compared with itself: its CPU share is sampled from this process, so two
    # reports built one after the other may differ in it.
    small = report_for(3)
    plain = json.loads(small.to_json())
    assert "delivering" not in plain  # as hubs before fan-out wrote it
    assert "namespaces" not in plain  # as hubs before publish rate quotas wrote it
    left_out = ("delivering", "namespaces")
    assert plain == {k: v for k, v in asdict(small).items() if k not in left_out}


def test_idle_topics_fill_the_list_in_claim_order() -> None:
    """With fewer busy topics than the report lists, idle ones fill it in the order the hub
    claimed them: a drain sees the next ones in the next report once the listed ones moved."""
    tracker = LoadTracker()
    owned = [f"t{i:03d}" for i in range(50)] + ["busy"]
    tracker.sample(0.0, {})
    tracker.sample(1.0, {"busy": (10, 100, 0, 0)})
    report = tracker.report(1, 0, owned, len(owned), 5)
    assert list(report.topic_loads) == ["busy", "t000", "t001", "t002", "t003"]
    assert report.topics == 51 and report.msg_in == 5.0
    assert tracker.report(1, 0, owned, len(owned), 0).topic_loads == {}
    ranked = LoadTracker()
    ranked.sample(0.0, {})
    ranked.sample(
        1.0, {"a": (1, 10, 0, 0), "b": (2, 10, 0, 0), "c": (1, 20, 0, 0), "d": (1, 10, 0, 0)}
    )
    assert ranked.hottest(3) == ["b", "c", "a"]  # messages, then bytes, then the name


def test_idle_topics_cost_nothing_to_track() -> None:
    """A topic's rates are dropped once they decay to nothing: reports cost what the topics
    with traffic cost, not what the hub owns."""
    tracker = LoadTracker()
    tracker.sample(0.0, {})
    tracker.sample(1.0, {"a": (1, 1, 0, 0), "b": (1, 1, 0, 0)})
    assert tracker.active == 2
    for second in range(2, 40):
        tracker.sample(float(second), {"a": (1, 1, 0, 0)})
    assert tracker.active == 1
    tracker.forget(lambda topic: topic != "a")
    assert tracker.active == 0


def test_unlisted_traffic_counts_in_the_rebalancing_policy() -> None:
    """A hub whose traffic is mostly in topics its report does not list still looks busy."""
    clock = ManualClock()
    now = clock.wall_ms()
    busy = HubLoad(
        timestamp_ms=now, topics=1_000, msg_in=900.0, topic_loads={"hot": TopicLoad(msg_in=100)}
    )
    idle = HubLoad(timestamp_ms=now, topics=1, topic_loads={"cold": TopicLoad()})
    hubs = [HubStatus("a:1", True, 1, busy), HubStatus("b:1", True, 1, idle)]
    moves = Rebalancer(RebalanceConfig(confirmations=1), clock).plan(hubs)
    assert [(m.topic, m.source, m.destination) for m in moves] == [("hot", "a:1", "b:1")]
    assert "900 msg/s" in moves[0].reason


def test_a_drain_counts_the_unlisted_topics() -> None:
    """A hub is not drained onto others that could take its listed topics but not the rest."""
    clock = ManualClock()
    now = clock.wall_ms()
    config = RebalanceConfig(low_load_drain=True, hub_capacity=1_000.0, drain_target=0.3)

    def region(rest: float) -> list[HubStatus]:
        small = HubLoad(
            timestamp_ms=now, topics=500, msg_in=rest + 1, topic_loads={"x": TopicLoad(msg_in=1)}
        )
        other = HubLoad(timestamp_ms=now, topics=1, msg_in=100, topic_loads={"y": TopicLoad(100)})
        return [HubStatus("a:1", True, 1, small), HubStatus("b:1", True, 1, other)]

    def drained(rest: float) -> frozenset[str]:
        policy = Rebalancer(config, clock)
        policy.plan(region(rest), drain_first=["a:1"])
        return policy.drained

    assert drained(0.0) == {"a:1"}
    # Region at 351 msg/s, under 20 % of 2,000: a drain, but b would carry 351 > 0.3 x 1,000.
    assert drained(250.0) == set()


def test_metric_series_are_bounded_by_the_report() -> None:
    metrics = HubMetrics(series_limit=20)
    report = report_for(5_000, top=20)
    metrics.export_load(report)
    samples = [s for m in metrics.topic_rate.collect() for s in m.samples]
    assert len(samples) == 20 * 4
    for i in range(5_000):
        metrics.published(f"{LONG}-{i}", 1, 10)
    counted = [
        s for m in metrics.messages_in.collect() for s in m.samples if s.name.endswith("_total")
    ]
    assert {s.labels["topic"] for s in counted} == set(report.topic_loads) | {""}
    total = sum(s.value for s in counted)
    assert total == 5_000  # every message counted once: per listed topic, or in the rest
    assert sum(t[0] for t in metrics.take_traffic().values()) == 5_000
    assert metrics.take_traffic() == {}
    metrics.export_backlogs(((f"t{i}", "s", i) for i in range(1_000)), 20)
    backlogs = [s for m in metrics.subscriber_backlog.collect() for s in m.samples]
    assert sorted(s.value for s in backlogs) == list(range(980, 1_000))
    floor = metrics.registry.get_sample_value("hedwig_topic_rate_floor")
    assert floor is not None and floor > 0  # the hub lists only some of its topics
    metrics.export_load(report_for(10, top=20))
    assert metrics.registry.get_sample_value("hedwig_topic_rate_floor") == 0


def failures(hub: Hub) -> float | None:
    labels = {"record": "load"}
    return hub.metrics.registry.get_sample_value("hedwig_metadata_write_failures_total", labels)


class _FailingHubs:
    """The hub registry of a store whose writes of load reports fail."""

    def __init__(self, inner: object) -> None:
        self._inner = inner

    async def update_load(self, address: str, load: HubLoad) -> None:
        raise MetadataUnavailableError("write refused")

    def __getattr__(self, name: str) -> object:
        return getattr(self._inner, name)


async def test_a_failed_report_is_a_warning_and_a_metric(caplog: pytest.LogCaptureFixture) -> None:
    config = HubConfig(
        connection=ConnectionSettings(listen="127.0.0.1:0"),
        storage=StorageSettings(data_dir=scratch.mkdtemp("hub-"), replication="1/1/1"),
    )
    hub = Hub(config, store=MemoryMetadataStore(MemoryBackend(), "mem"))
    await hub.start()
    try:
        hub.loops.store = _FailingStore(hub.store)  # type: ignore[assignment]
        await hub.loops.report_load()
        assert failures(hub) == 1
        assert any(
            r.levelname == "WARNING" and "load report" in r.getMessage() for r in caplog.records
        )
    finally:
        await hub.stop()


class _FailingStore:
    def __init__(self, inner: object) -> None:
        self._inner = inner
        self.hubs = _FailingHubs(getattr(inner, "hubs"))  # noqa: B009 - typed as object

    def __getattr__(self, name: str) -> object:
        return getattr(self._inner, name)


# Past the old ceiling: about 9,000 topics filled ZooKeeper's 1 MB.
MANY = 12_000


@pytest.mark.integration
@pytest.mark.timeout(600)  # claiming 12,000 topics takes about two minutes on a shared machine
async def test_a_hub_with_many_topics_keeps_its_report(
    zk_server: ZooKeeperServer, region: str
) -> None:
    """A hub owning 12,000 topics against the real ZooKeeper: every report is written."""
    hub = lone_hub(
        zk_server.address, region, placement=PlacementSettings(load_report_interval_s=0.5)
    )
    await hub.start()
    try:
        names = [f"{LONG[:100]}-{i}" for i in range(MANY)]
        for start in range(0, MANY, 500):
            chunk = names[start : start + 500]
            await asyncio.gather(*(hub.topics.acquire(n, redirected=True) for n in chunk))
        assert len(hub.topics.topics) == MANY

        async def reported() -> bool:
            mine = [h for h in await hub.store.hubs.list_hubs() if h.address == hub.address]
            return bool(mine) and mine[0].load is not None and mine[0].load.topics == MANY

        await eventually(reported, timeout=30)
        assert failures(hub) == 0
        status = next(h for h in await hub.store.hubs.list_hubs() if h.address == hub.address)
        assert status.load is not None
        assert len(status.load.topic_loads) == hub.config.placement.load_report_topics
        assert hub.store.session.state.value == "connected"
    finally:
        await hub.stop()


def test_a_new_topic_on_a_small_hub_is_counted_on_its_own_at_once() -> None:
    metrics = HubMetrics(series_limit=2)
    for topic in ("a", "b", "c"):
        metrics.published(topic, 1, 1)
    values = {
        s.labels["topic"]: s.value
        for m in metrics.messages_in.collect()
        for s in m.samples
        if s.name.endswith("_total")
    }
    assert values == {"a": 1, "b": 1, "": 1}


async def test_a_report_of_claims_counts_the_topics_and_keeps_the_last_rates() -> None:
    """The report a burst of claims brings is written at once with the new topic count and
    connections, and the rates of the last regular report; it does not sample the topics'
    traffic (a walk over every topic that carried any), and no traffic is lost for that: the
    next regular report has it."""
    from tests.memory_region import memory_region

    async for region in memory_region(1, replication="1/1/1"):
        (hub,) = region.hubs

        async def written(hub: Hub = hub) -> HubLoad:
            (status,) = await hub.store.hubs.list_hubs()
            assert status.load is not None
            return status.load

        async with region.client() as client:
            await hub.loops.report_load()  # rates are per second since the one before
            for i in range(20):
                await client.publish("hot", b"%d" % i)
            await asyncio.sleep(0.01)
            await hub.loops.report_load()
            first = await written()
            assert first.topics == 1 and first.topic_loads["hot"].msg_in > 0
            for i in range(5):
                await client.publish(f"cold-{i}", b"x")
            await hub.loops.report_load(count_hubs=False, resample=False)
            quick = await written()
            assert quick.topics == 6
            assert quick.msg_in == first.msg_in
            assert quick.topic_loads == first.topic_loads
            assert quick.timestamp_ms >= first.timestamp_ms
            await asyncio.sleep(0.01)
            await hub.loops.report_load()
            regular = await written()
            assert all(regular.topic_loads[f"cold-{i}"].msg_in > 0 for i in range(5))

            # A topic let go leaves the totals at once: the report it brings samples again.
            await hub.topics.release("hot", "test")

            async def released() -> bool:
                got = await written()
                return got.topics == 5 and "hot" not in got.topic_loads

            await eventually(released, timeout=5)
            assert (await written()).msg_in < regular.msg_in


def test_the_same_report_is_parsed_once() -> None:
    """A claiming hub reads the registry up to five times a second while reports change every
    few seconds: the same bytes give the same record without parsing them again; other bytes
    (the next report) a new one; bytes that are not a report fail every time."""
    report = HubLoad(
        timestamp_ms=1,
        topics=3,
        msg_in=5.0,
        topic_loads={f"t{i}": TopicLoad(msg_in=float(i)) for i in range(3)},
        hub_id="h",
    ).to_json()
    first = HubLoad.from_json(report)
    assert HubLoad.from_json(bytes(bytearray(report))) is first  # equal bytes, new object
    assert first.topic_loads["t2"] == TopicLoad(msg_in=2.0) and first.hub_id == "h"
    nxt = HubLoad.from_json(report.replace(b'"timestamp_ms":1', b'"timestamp_ms":2'))
    assert nxt is not first and nxt.timestamp_ms == 2
    for _ in range(2):
        with pytest.raises(MetadataError):
            HubLoad.from_json(b'{"topic_loads": {"t": {"nope": 1}}}')
