"""A hub's periodic work: load reports, consume-mark flushes, garbage collection, the ledger
audit and self-balancing, each on its own interval of the injected clock.

Each loop survives its own failures (logged, tried again next interval): a metadata store that
is briefly unreachable must not stop a hub from reporting load or collecting garbage later.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import replace
from typing import Any, TypeVar

from hedwig.clock import Clock
from hedwig.errors import HedwigError
from hedwig.hub.front.quotas import PublishQuotas
from hedwig.hub.owning.ownership import TopicOwnership
from hedwig.hub.owning.topic import TopicState
from hedwig.hub.process.balancing import HubBalancing
from hedwig.hub.reporting.load import LoadTracker
from hedwig.hub.reporting.metrics import HubMetrics
from hedwig.hub.requests.moves import TopicMoves
from hedwig.hub.serving.queue import QueueSubscription
from hedwig.hub.spreading.fanout import FanOut
from hedwig.hub.spreading.lanes import TopicLanes
from hedwig.ledger.auditor import Auditor, AuditReport
from hedwig.ledger.storage import LocalStorage
from hedwig.metadata.managers import MetadataStore
from hedwig.metadata.records import HubLoad, TopicLoad
from hedwig.placement.bundles import BundleMove
from hedwig.placement.rebalance import Move, Rebalancer
from hedwig.placement.scaling import ModeChange, ScalingPolicy
from hedwig.protocol.names import lane_of
from hedwig.settings import HubConfig

log = logging.getLogger(__name__)

# How /readyz starts its answer when the region has too few hubs for its replication.
SHORT_OF_HUBS = "too few hubs"
# A burst of claims or releases is reported once, this long after the first of them.
REPORT_SOON_S = 0.2
# A topic nobody published to or attached to for this long keeps no batches in memory (seen at
# the next expiry check, every ``gc_interval_s``): subscribers that keep up are served from
# memory, and one that comes back after this long reads from the ledgers anyway.
CACHE_IDLE_MS = 60_000
# A walk over every owned topic gives the event loop a turn after this many: a hub owning half
# a million topics stood still for 2 s in one walk (expiry), every client and replica waiting.
WALK_SLICE = 4096

T = TypeVar("T")


async def in_turns(items: list[T]) -> AsyncIterator[T]:
    """Every one of ``items``, letting the event loop run other work every ``WALK_SLICE``."""
    for i, item in enumerate(items):
        if i and not i % WALK_SLICE:
            await asyncio.sleep(0)
        yield item


class HubLoops:
    def __init__(
        self,
        *,
        config: HubConfig,
        store: MetadataStore,
        ownership: TopicOwnership,
        fanout: FanOut,
        lanes: TopicLanes,
        moves: TopicMoves,
        auditor: Auditor,
        storage: LocalStorage,
        metrics: HubMetrics,
        clock: Clock,
        connections: Callable[[], int],
        quotas: PublishQuotas,
    ) -> None:
        self.config = config
        # Publish rate quotas: what this hub admitted per namespace goes in its reports, and
        # the other hubs' reports say how many share each namespace's quota.
        self.quotas = quotas
        self.store = store
        self.ownership = ownership
        self.fanout = fanout
        self.lanes = lanes
        self.moves = moves
        self.auditor = auditor
        self._copied_seen: dict[str, int] = {}
        self.storage = storage
        self.metrics = metrics
        self.clock = clock
        # This hub's internal listener and id, published in its load reports
        # (``hedwig.hub.owning.peers``).
        self.internal_address = ""
        self.hub_id = ""
        self.external_address = ""  # where external clients reach it, if anywhere
        self._connections = connections
        self.rebalancer = Rebalancer(config.balance.rebalance, clock)
        self.scaler = ScalingPolicy(config.balance.scaling, clock)
        self.balancing = HubBalancing(
            store=store,
            ownership=ownership,
            moves=moves,
            fanout=fanout,
            rebalancer=self.rebalancer,
            scaler=self.scaler,
            clock=clock,
        )
        self._load = LoadTracker()
        # Fan-out topics this hub delivers for other owners: their rates, apart from its own.
        self._delivering = LoadTracker()
        self._delivered_seen: dict[str, tuple[int, int]] = {}
        # The owned topics the last load report listed (the hottest): the ones gauges look at.
        self._listed: list[str] = []
        # The last report written (before the hub's addresses are added): what a report of
        # claims between two regular ones starts from (``report_load(resample=False)``).
        self._last_report: HubLoad | None = None
        # Topics owned at the last change, and whether one was let go since the last report:
        # its rates must leave the totals, so that report samples them again.
        self._owned_count = 0
        self._released = False
        self._tasks: list[asyncio.Task[None]] = []
        self._report_pending = False
        self._running = False
        self._seen_written = 0
        self._seen_syncs = 0
        self._seen_compactions = 0
        # Why this region cannot serve topics at the default replication (too few hubs have
        # ever joined it), or None; shown at start and by /readyz.
        self.short_of_hubs: str | None = None

    def start(self) -> None:
        self._running = True
        c = self.config
        self._every(c.placement.load_report_interval_s, self.report_load)
        self._every(c.delivery.consume_flush_interval_s, self.flush_marks)
        self._every(c.retention.gc_interval_s, self.collect_garbage)
        self._every(
            c.retention.gc_interval_s, self.expire_idle, "expiring idle topics and subscriptions"
        )
        self._every(c.audit.audit_interval_s, self.audit_once, "ledger audit")
        if c.balance.self_balance:
            # The cycle that moves what this hub owns: bundles, or topics.
            cycle, what = {
                True: (self.balance_bundles_once, "bundle balancing cycle"),
                False: (self.balance_once, "self-balancing cycle"),
            }[self.ownership.claims.by_bundle]
            self._every(c.balance.balance_interval_s, cycle, what)
        if c.balance.auto_fan_out:
            self._every(c.balance.balance_interval_s, self.scale_once, "scaling cycle")

    def stop(self) -> None:
        self._running = False
        for t in self._tasks:
            t.cancel()

    def _every(
        self, interval_s: float, work: Callable[[], Coroutine[Any, Any, Any]], what: str = ""
    ) -> None:
        async def loop() -> None:
            while True:
                await self.clock.sleep(interval_s)
                try:
                    await work()
                except Exception as exc:
                    log.warning("%s failed: %s", what or work.__name__, exc)

        self._tasks.append(asyncio.get_running_loop().create_task(loop()))

    # load reports ---------------------------------------------------------------------------

    def load_report(self) -> HubLoad:
        """This hub's load now. Costs what the topics with traffic cost, not what it owns."""
        topics = self.ownership.topics
        now = time.monotonic()
        self._load.sample(now, self.metrics.take_traffic())
        self._load.forget(topics.__contains__)

        def extra(name: str) -> tuple[int, int]:
            t = topics.get(name)
            if t is None:
                return (0, 0)
            subs = t.subscriptions
            return (len(subs), max((s.backlog for s in subs.values()), default=0))

        return self._load.report(
            self.clock.wall_ms(),
            self._connections(),
            topics,
            len(topics),
            self.config.placement.load_report_topics,
            extra,
            self._delivering_loads(now),
        )

    def _delivering_loads(self, now: float) -> dict[str, TopicLoad]:
        """Rates of the fan-out topics this hub delivers for their owners (bounded by how
        many it delivers, not by how many topics it owns)."""
        fanout = self.fanout
        if not (fanout.delivering or self._delivering.active):
            return {}
        traffic: dict[str, tuple[int, int, int, int]] = {}
        for name, d in fanout.delivering.items():
            seen_msgs, seen_bytes = self._delivered_seen.get(name, (0, 0))
            traffic[name] = (0, 0, d.msg_out - seen_msgs, d.bytes_out - seen_bytes)
            self._delivered_seen[name] = (d.msg_out, d.bytes_out)
        self._delivered_seen = {
            n: v for n, v in self._delivered_seen.items() if n in fanout.delivering
        }
        self._delivering.sample(now, traffic)
        self._delivering.forget(fanout.delivering.__contains__)
        return self._delivering.loads()

    async def report_load(self, *, count_hubs: bool = True, resample: bool = True) -> None:
        """Write this hub's load report. A failed write is a warning and a metric: a hub whose
        report goes stale drops out of placement and rebalancing, and someone must notice.

        ``count_hubs``: then count the region's hubs (``check_hub_count``), which reads every
        hub's record: done at the regular interval, not at the reports a burst of claims brings
        (five a second; that read was a tenth of a claiming hub's time).

        ``resample=False``: the report a burst of claims brings says what changed, the topics
        owned and the connections, and keeps the rates of the last regular report. Sampling
        walks every topic that carried traffic since, and during a wave of first publishes
        that is every topic just claimed (a twelfth of a claiming hub's event loop, five
        times a second); placement needs the counts now, rates move at the regular pace."""
        if not self.ownership.accepting:
            return  # shutting down: the alive record is gone already, placement ignores us
        last = self._last_report
        if resample or last is None:
            report = replace(
                self.load_report(),
                namespaces=self.quotas.take_usage(self.config.placement.load_report_topics),
            )
            self._listed = list(report.topic_loads)
            self.metrics.export_load(report)
        else:
            owned = self.ownership.topics
            report = replace(
                last,
                timestamp_ms=self.clock.wall_ms(),
                topics=len(owned),
                connections=self._connections(),
                topic_loads={t: v for t, v in last.topic_loads.items() if t in owned},
            )
        self._last_report = report
        report = replace(
            report,
            internal=self.internal_address,
            hub_id=self.hub_id,
            bundles=self.ownership.claims.by_bundle,
            external=self.external_address,
        )
        try:
            await self.store.hubs.update_load(self.ownership.address, report)
        except Exception as exc:
            self.metrics.metadata_write_failed("load")
            log.warning("load report (%d topics) not written: %s", report.topics, exc)
            return
        if not count_hubs:
            return
        try:
            hubs = await self.store.hubs.list_hubs()
        except Exception as exc:
            log.info("cannot count the region's hubs: %s", exc)
            return
        # Reports older than three intervals are a hub's that stopped reporting.
        max_age_ms = int(3000 * self.config.placement.load_report_interval_s)
        self.quotas.observe(hubs, self.ownership.address, self.clock.wall_ms(), max_age_ms)
        self.check_hub_count(len(hubs))

    def check_hub_count(self, registered: int) -> None:
        """Note whether the region has ever had enough hubs for the default replication, from
        the ``registered`` hubs."""
        needed = self.config.storage.replication_config.ack_quorum
        if registered >= needed:
            self.short_of_hubs = None
            return
        self.short_of_hubs = (
            f"{SHORT_OF_HUBS}: region {self.config.connection.region!r} has {registered} "
            f"hub(s) and the replication {self.config.storage.replication} needs at least "
            f"{needed}: publishing fails until more hubs join; start more hubs, or run with "
            "--replication 1/1/1 for a single hub"
        )

    def topics_changed(self) -> None:
        """A topic was claimed or let go: report the new load now, not at the next interval,
        so placement and rebalancing elsewhere see it."""
        count = len(self.ownership.topics)
        if count < self._owned_count:
            self._released = True
        self._owned_count = count
        if self._running and not self._report_pending:
            self._report_pending = True
            asyncio.get_running_loop().create_task(self._report_soon())

    async def _report_soon(self) -> None:
        await self.clock.sleep(REPORT_SOON_S)
        self._report_pending = False
        # Claims only: the counts, with the last rates (``report_load``). A topic let go (a
        # move by the rebalancer): sampled again, or the totals still carry its rates and
        # the rebalancer, seeing the hub as loaded as before, moves more topics off it.
        resample, self._released = self._released, False
        try:
            await self.report_load(count_hubs=False, resample=resample)
        except Exception as exc:
            log.warning("load report failed: %s", exc)

    # consume marks, garbage, audit ---------------------------------------------------------

    async def flush_marks(self) -> None:
        # Every second: only topics with subscriptions in memory can have a mark to write.
        for t in [t for t in self.ownership.subscribed_topics() if t.subscriptions]:
            with contextlib.suppress(HedwigError):
                await t.flush_marks()
        with contextlib.suppress(HedwigError):
            await self.fanout.flush_marks()

    async def collect_garbage(self) -> None:
        """Delete ledgers every subscriber has consumed and retention lets go, and sealed
        lanes every subscriber has finished (``hedwig.hub.spreading.lanes``)."""
        async for owned in in_turns(list(self.ownership.topics.values())):
            if owned.state is TopicState.OPEN and lane_of(owned.name)[1]:
                try:
                    if await self.lanes.drop_if_finished(owned, self.ownership):
                        log.info(
                            "sealed lane %r dropped: its subscribers read all of it", owned.name
                        )
                        continue
                except HedwigError as exc:
                    log.info("lane %r: not dropped now: %s", owned.name, exc)
        async for owned in in_turns(list(self.ownership.topics.values())):
            if owned.state is not TopicState.OPEN or len(owned.log.ranges.ranges) < 2:
                continue  # the open ledger is never collected: nothing to read or write
            if not owned.collect_due():
                continue  # as the last collection found it: no store read
            try:
                await owned.flush_marks()
                keep = await owned.keep_from_seq()
                if not owned.log.collect_due(keep):
                    continue
                dropped = await owned.log.collect(
                    keep,
                    retention_ms=owned.config.retention_ms,
                    retention_bytes=owned.config.retention_bytes,
                )
                if dropped:
                    log.info("topic %r: collected ledgers %s", owned.name, dropped)
            except HedwigError as exc:
                log.info("topic %r: garbage collection skipped: %s", owned.name, exc)

    async def expire_idle(self) -> None:
        """Delete the subscriptions and then the topics that their expiry settings let go: a
        subscription nobody attached to or consumed from for ``subscription_expiry_ms``; a topic
        with no subscription left that nobody published to or attached to for
        ``inactive_topic_expiry_ms``. Both off unless configured. And a topic nobody published
        to or attached to for ``CACHE_IDLE_MS`` lets the batches it kept in memory go. By
        bundle, a topic idle for ``BundleSettings.unload_idle_s`` is unloaded."""
        await self.ownership.unload_idle(int(self.config.bundles.unload_idle_s * 1000))
        async for owned in in_turns(list(self.ownership.topics.values())):
            if owned.state is not TopicState.OPEN:
                continue
            idle = owned.idle_for_ms()
            if idle is not None and idle >= CACHE_IDLE_MS:
                owned.log.shed_cache()
            config = owned.config
            if config.subscription_expiry_ms is not None:
                for name in await owned.subs.expire(config.subscription_expiry_ms):
                    log.info("topic %r: subscription %r expired", owned.name, name)
                    self.metrics.subscription_expired(owned.name, name)
            limit = config.inactive_topic_expiry_ms
            idle = owned.idle_for_ms()
            if limit is None or idle is None or idle < limit:
                continue
            if await owned.subs.describe():
                continue  # subscriptions keep their messages: they expire first, if set to
            log.info("topic %r: idle for %.0f s, deleting it", owned.name, idle / 1000)
            try:
                await self.ownership.delete(owned.name, force=False, expired=True)
            except HedwigError as exc:
                log.info("topic %r: not deleted after all: %s", owned.name, exc)

    async def audit_once(self) -> AuditReport:
        async for owned in in_turns(list(self.ownership.topics.values())):
            if owned.log.degraded and await owned.log.restore_replication():
                log.info("topic %r: back to full replication", owned.name)
        report = await self.auditor.run_once()
        # Under-replicated: ledgers left so by a failed repair, and ledgers waiting for a gone
        # hub within the re-replication delay (one copy short either way).
        self.metrics.under_replicated.set(report.failed + report.waiting)
        self.metrics.ledger_repairs.inc(report.repaired)
        self.metrics.left_over_ledgers.inc(len(report.left_over_deleted))
        self.metrics.ledgers_waiting.set(report.waiting)
        self.metrics.hubs_waiting.set(report.hubs_waiting)
        for kind, total in self.auditor.copied_bytes.items():
            seen = self._copied_seen.get(kind, 0)
            self.metrics.rereplicated_bytes.labels(kind).inc(total - seen)
            self._copied_seen[kind] = total
        return report

    # self-balancing ------------------------------------------------------------------------

    async def balance_once(self) -> list[Move]:
        return await self.balancing.balance_once()

    async def balance_bundles_once(self) -> list[BundleMove]:
        return await self.balancing.balance_bundles_once()

    async def scale_once(self) -> list[ModeChange]:
        return await self.balancing.scale_once()

    def first_report(self, internal: str, hub_id: str) -> HubLoad:
        """The alive record a hub registers with, before its first load report: no load yet,
        its addresses, and whether it owns topics by bundle (hubs of the other kind refuse
        claims while it is alive)."""
        return HubLoad(
            timestamp_ms=self.clock.wall_ms(),
            internal=internal,
            hub_id=hub_id,
            bundles=self.ownership.claims.by_bundle,
            external=self.external_address,
        )

    # gauges --------------------------------------------------------------------------------

    def refresh_gauges(self) -> None:
        """Before a scrape: the gauges that describe the present."""
        m = self.metrics
        m.connections.set(self._connections())
        m.topics_owned.set(len(self.ownership.topics))
        fanout = self.fanout
        backlogs = [
            (name, sname, sub.backlog)
            for name, t in self.ownership.topics.items()
            if t.subscriptions
            for sname, sub in t.subscriptions.items()
        ]
        backlogs += [
            (name, sname, sub.backlog)
            for name, d in fanout.delivering.items()
            for sname, sub in d.subs.by_name.items()
        ]
        m.export_backlogs(backlogs, self.config.placement.load_report_topics)
        served = [t.subscriptions for t in self.ownership.topics.values()]
        served += [d.subs.by_name for d in fanout.delivering.values()]
        queues = [
            sub.stats()
            for subs in served
            for sub in subs.values()
            if isinstance(sub, QueueSubscription)
        ]
        m.export_queues(queues, self.config.placement.load_report_topics)
        owned = self.ownership.topics
        listed = [t for t in self._listed if t in owned]
        if not listed and len(owned) <= self.config.placement.load_report_topics:
            listed = list(owned)  # no report yet
        m.export_plans(fanout.plans.plans_to_export(listed), len(fanout.delivering))
        s = self.storage
        m.storage_bytes.inc(s.bytes_written - self._seen_written)
        m.storage_syncs.inc(s.syncs - self._seen_syncs)
        self._seen_written, self._seen_syncs = s.bytes_written, s.syncs
        m.storage_compactions.inc(s.compactions - self._seen_compactions)
        self._seen_compactions = s.compactions
        m.storage_logs.set(len(s.logs()))
