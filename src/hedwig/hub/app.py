"""The hub process: wires storage, metadata, ownership and the front ends, runs until told to stop.

Startup order matters: storage first (so recovered ledgers are readable), then the ZooKeeper
session, then the client port, and only then the ``alive`` record, so no hub redirects a client
here before we can answer. Shutdown runs it backwards and hands every topic over first, so
clients move on at once instead of waiting for a session to expire.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import random
import signal
import time
from collections.abc import Coroutine
from typing import Any

from hedwig.clock import Clock, SystemClock
from hedwig.errors import HedwigError
from hedwig.hub.config import HubConfig
from hedwig.hub.http import HealthServer
from hedwig.hub.load import LoadTracker
from hedwig.hub.metrics import HubMetrics
from hedwig.hub.ownership import TopicManager
from hedwig.hub.reasons import loss_label, reason_label
from hedwig.hub.server import ClientConnection, HubFrontEnd, HubOperations
from hedwig.hub.topic import OwnedTopic, TopicState
from hedwig.ledger.auditor import Auditor, AuditReport
from hedwig.ledger.pool import HubPool
from hedwig.ledger.storage import LocalStorage
from hedwig.metadata import open_store
from hedwig.metadata.managers import MetadataStore, SessionState
from hedwig.metadata.records import HubLoad
from hedwig.net.connection import HubConnection
from hedwig.placement.rebalance import Move, Rebalancer
from hedwig.protocol import status
from hedwig.protocol.connection import DEFAULT_MAX_FRAME_SIZE
from hedwig.protocol.frames import (
    CloseSubscription,
    Consume,
    Frame,
    Publish,
    Read,
    ReleaseTopic,
    Subscribe,
    TopicInfo,
    TopicStats,
    Unsubscribe,
)

log = logging.getLogger(__name__)


class Hub(HubOperations):
    def __init__(
        self,
        config: HubConfig,
        *,
        store: MetadataStore | None = None,
        clock: Clock | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.config = config
        self.clock = clock or SystemClock()
        self.store: MetadataStore = store or open_store(
            config.zk, region=config.region, session_timeout_s=config.zk_session_timeout_s
        )
        self.metrics = HubMetrics()
        self.address = config.advertise or config.listen
        self.storage: LocalStorage = LocalStorage(config.data_dir, self.address)
        self.pool = HubPool(self.storage)
        self.topics = TopicManager(
            address=self.address,
            config=config,
            store=self.store,
            pool=self.pool,
            clock=self.clock,
            rng=rng,
            on_change=self._topics_changed,
            stats_hook=self._count,
            on_claimed=self.metrics.ownerless.observe,
            on_lost=lambda reason: self.metrics.losses.labels(loss_label(reason)).inc(),
        )
        max_frame = max(DEFAULT_MAX_FRAME_SIZE, 2 * config.max_message_size + 65536)
        self.front = HubFrontEnd(
            self,
            max_frame_size=max_frame,
            on_answer=lambda op, st: self.metrics.requests.labels(op, st).inc(),
        )
        self._server: asyncio.AbstractServer | None = None
        self._http: HealthServer | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._load = LoadTracker()
        self.rebalancer = Rebalancer(config.rebalance, self.clock)
        self.auditor = Auditor(
            address=self.address, store=self.store, pool=self.pool, wanted_size=self._wanted_size
        )
        self._ready = False
        self._report_pending = False
        self._stopping = False
        self.stopped = asyncio.Event()

    # lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        self.store.session.add_listener(self._on_session)
        await self.store.start()
        self.topics.defaults = await self.store.topics.read_region_defaults()
        host, _, port = self.config.listen.rpartition(":")
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(self.front.protocol, host, int(port))
        bound = self._server.sockets[0].getsockname()[1]
        if not self.config.advertise:
            self.address = f"{host}:{bound}"
            self.storage.address = self.address
            self.topics.address = self.address
            self.auditor.address = self.address
        if self.config.metrics_port is not None:
            self._http = HealthServer(
                self.metrics.registry,
                self._readiness,
                before_scrape=self._refresh_gauges,
                drain=self.drain,
            )
            await self._http.start(self.config.metrics_host, self.config.metrics_port)
        await self._register()
        self._spawn(self._load_loop())
        self._spawn(self._flush_loop())
        self._spawn(self._gc_loop())
        self._spawn(self._audit_loop())
        if self.config.self_balance:
            self._spawn(self._balance_loop())
        self._ready = True
        self._set_session_metric(SessionState.CONNECTED)
        log.info(
            "hub %s serving region %r (epoch %d)",
            self.address,
            self.config.region,
            self.topics.epoch,
        )

    async def _register(self) -> None:
        self.topics.epoch = await self.store.hubs.register_hub(
            self.address, HubLoad(timestamp_ms=self.clock.wall_ms())
        )

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        self._tasks.append(asyncio.get_running_loop().create_task(coro))

    async def drain(self) -> int:
        """Stop taking topics and hand over every topic this hub owns; keeps serving the
        storage role (other hubs' ledgers) until the process is stopped. Returns the number of
        topics handed over."""
        self._ready = False
        self.topics.accepting = False
        with contextlib.suppress(Exception):
            await self.store.hubs.unregister_hub(self.address)
        count = len(self.topics.topics)
        self.metrics.releases.labels("drain").inc(count)
        await self.topics.release_all("hub draining")
        return count

    async def stop(self) -> None:
        """Graceful: stop claiming, hand every topic over, flush, deregister, close."""
        if self._stopping:
            await self.stopped.wait()
            return
        self._stopping = True
        self._ready = False
        self.topics.accepting = False
        log.info("hub %s stopping: releasing %d topics", self.address, len(self.topics.topics))
        # Without ZooKeeper a hand-off cannot complete (kazoo queues the requests until it
        # reconnects): bound the graceful part, then stop anyway. The ledgers' fencing keeps
        # an unfinished hand-off safe; the next owner recovers.
        budget = max(5.0, self.config.zk_session_timeout_s)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.store.hubs.unregister_hub(self.address), budget / 2)
        self.metrics.releases.labels("shutdown").inc(len(self.topics.topics))
        try:
            await asyncio.wait_for(self.topics.release_all("hub shutting down"), budget)
        except TimeoutError:
            log.warning("hand-offs did not finish within %.0f s; stopping anyway", budget)
            self.topics.drop_all("hub stopped")
        for t in self._tasks:
            t.cancel()
        if self._server is not None:
            self._server.close()
        for conn in list(self.front.connections):
            conn.close()
        if self._http is not None:
            await self._http.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.store.close(), 5.0)
        self.pool.close()
        await self.storage.close()
        self.stopped.set()

    def _readiness(self) -> tuple[bool, str]:
        if not self._ready:
            return False, "starting or stopping"
        if self.topics.suspended:
            return False, "ZooKeeper connection suspended"
        return True, "ready"

    def _on_session(self, state: SessionState) -> None:
        self._set_session_metric(state)
        if state is SessionState.LOST:
            self.metrics.session_losses.inc()
        self.topics.on_session(state)
        if state is SessionState.CONNECTED and self._ready:
            # A new session after an expiry: our alive record is gone; register again.
            asyncio.get_running_loop().create_task(self._reregister())

    async def _reregister(self) -> None:
        try:
            hubs = await self.store.hubs.list_hubs()
            mine = [h for h in hubs if h.address == self.address and h.alive]
            if not mine:
                await self._register()
                log.info("re-registered after session loss (epoch %d)", self.topics.epoch)
        except Exception as exc:
            log.warning("re-registering failed: %s", exc)

    def _set_session_metric(self, state: SessionState) -> None:
        for s in SessionState:
            self.metrics.zk_session.labels(s.value).set(1 if s is state else 0)

    # background loops ---------------------------------------------------------------------

    async def _load_loop(self) -> None:
        while True:
            await self.clock.sleep(self.config.load_report_interval_s)
            await self._report_load()

    async def _report_load(self) -> None:
        try:
            report = self.load_report()
            self._export_load(report)
            await self.store.hubs.update_load(self.address, report)
        except Exception as exc:
            log.debug("load report failed: %s", exc)

    async def _report_soon(self) -> None:
        # Coalesces a burst of claims or releases into one report shortly after.
        await self.clock.sleep(0.2)
        self._report_pending = False
        await self._report_load()

    def load_report(self) -> HubLoad:
        counters = {
            name: (t.msg_in, t.bytes_in, t.msg_out, t.bytes_out)
            for name, t in self.topics.topics.items()
        }
        extra = {
            name: (
                len(t.subscriptions),
                max((s.backlog for s in t.subscriptions.values()), default=0),
            )
            for name, t in self.topics.topics.items()
        }
        loads = self._load.sample(time.monotonic(), counters, extra)
        return self._load.report(self.clock.wall_ms(), len(self.front.connections), loads)

    def _export_load(self, report: HubLoad) -> None:
        """The load report, as Prometheus gauges too (same numbers the policy sees)."""
        m = self.metrics
        m.topic_rate.clear()
        for topic, tl in report.topic_loads.items():
            m.topic_rate.labels(topic, "in", "messages").set(tl.msg_in)
            m.topic_rate.labels(topic, "out", "messages").set(tl.msg_out)
            m.topic_rate.labels(topic, "in", "bytes").set(tl.bytes_in)
            m.topic_rate.labels(topic, "out", "bytes").set(tl.bytes_out)
        m.hub_rate.labels("in", "messages").set(report.msg_in)
        m.hub_rate.labels("out", "messages").set(report.msg_out)
        m.hub_rate.labels("in", "bytes").set(report.bytes_in)
        m.hub_rate.labels("out", "bytes").set(report.bytes_out)
        m.hub_cpu.set(report.cpu)

    async def _flush_loop(self) -> None:
        while True:
            await self.clock.sleep(self.config.consume_flush_interval_s)
            for t in list(self.topics.topics.values()):
                with contextlib.suppress(Exception):
                    await t.flush_marks()

    async def _gc_loop(self) -> None:
        while True:
            await self.clock.sleep(self.config.gc_interval_s)
            await self.topics.collect_garbage()

    async def _wanted_size(self, topic: str) -> int:
        config = await self.topics.topic_config(topic)
        return (config.replication or self.config.replication_config).ensemble

    async def _audit_loop(self) -> None:
        while True:
            await self.clock.sleep(self.config.audit_interval_s)
            try:
                await self.audit_once()
            except Exception as exc:
                log.warning("ledger audit failed: %s", exc)

    async def audit_once(self) -> AuditReport:
        for owned in list(self.topics.topics.values()):
            if owned.log.degraded and await owned.log.restore_replication():
                log.info("topic %r: back to full replication", owned.name)
        await self._collect_orphan_ledgers()
        report = await self.auditor.run_once()
        self.metrics.under_replicated.set(report.failed)
        self.metrics.ledger_repairs.inc(report.repaired)
        return report

    async def _collect_orphan_ledgers(self) -> list[int]:
        """Delete local replicas of ledgers whose metadata is gone (the topic was deleted, or
        a collection's delete did not reach this hub). Ledger ids only grow, so a file with an
        id above the highest known one may belong to a ledger being created: it is kept."""
        known = set(await self.store.ledgers.list_ledgers())
        if not known:
            return []
        ceiling = max(known)
        orphans = [lid for lid in self.storage.ledgers() if lid <= ceiling and lid not in known]
        for lid in orphans:
            await self.storage.delete_ledger(lid)
        if orphans:
            log.info("deleted %d orphan ledger replicas: %s", len(orphans), orphans[:10])
        return orphans

    async def _balance_loop(self) -> None:
        """Seed 000's self-shedding: every hub runs the shared policy on the region's load
        reports and hands over the topics the policy moves off *this* hub. Off when an
        operator balances the pool (``--no-self-balance``)."""
        while True:
            await self.clock.sleep(self.config.balance_interval_s)
            try:
                await self.balance_once()
            except Exception as exc:
                log.warning("self-balancing cycle failed: %s", exc)

    async def balance_once(self) -> list[Move]:
        hubs = await self.store.hubs.list_hubs()
        mine = [m for m in self.rebalancer.plan(hubs) if m.source == self.address]
        for m in mine:
            log.info("shedding: %s", m.reason)
            try:
                await self.move(m.topic, m.destination, m.reason)
            except HedwigError as exc:
                log.info("moving %r failed: %s", m.topic, exc)
        return mine

    def _topics_changed(self) -> None:
        """A topic was claimed or let go: report the new load now, not at the next interval,
        so placement and rebalancing elsewhere see it."""
        self.metrics.topics_owned.set(len(self.topics.topics))
        if self._ready and not self._report_pending:
            self._report_pending = True
            asyncio.get_running_loop().create_task(self._report_soon())

    def _count(self, topic: str, direction: str, count: int, size: int) -> None:
        if direction == "in":
            self.metrics.messages_in.labels(topic).inc(count)
            self.metrics.bytes_in.labels(topic).inc(size)
        else:
            self.metrics.messages_out.labels(topic).inc(count)
            self.metrics.bytes_out.labels(topic).inc(size)

    def _refresh_gauges(self) -> None:
        self.metrics.connections.set(len(self.front.connections))
        self.metrics.topics_owned.set(len(self.topics.topics))
        self.metrics.subscriber_backlog.clear()
        for name, t in self.topics.topics.items():
            for sname, sub in t.subscriptions.items():
                self.metrics.subscriber_backlog.labels(name, sname).set(sub.backlog)
        s = self.storage
        written = s.bytes_written - getattr(self, "_seen_written", 0)
        syncs = s.syncs - getattr(self, "_seen_syncs", 0)
        self.metrics.storage_bytes.inc(written)
        self.metrics.storage_syncs.inc(syncs)
        self._seen_written, self._seen_syncs = s.bytes_written, s.syncs

    # operations ---------------------------------------------------------------------------

    async def publish(self, conn: ClientConnection, req: Publish) -> Frame:
        start = time.perf_counter()
        owned = await self._acquire(conn, req.topic, req.redirected)
        answer = await owned.publish(conn, req)
        self.metrics.publish_latency.observe(time.perf_counter() - start)
        return answer

    async def _acquire(self, conn: ClientConnection, topic: str, redirected: bool) -> OwnedTopic:
        try:
            owned = await self.topics.acquire(topic, redirected=redirected)
        except status.NotResponsibleError:
            self.metrics.redirects.inc()
            raise
        conn.topics.add(topic)
        return owned

    async def subscribe(self, conn: ClientConnection, req: Subscribe) -> Frame:
        try:
            from hedwig.protocol.names import validate_name

            validate_name(req.subscriber, what="subscriber")
        except Exception as exc:
            raise status.InvalidRequestError(str(exc)) from None
        owned = await self._acquire(conn, req.topic, req.redirected)
        return await owned.subscribe(conn, req)

    def consume(self, conn: ClientConnection, req: Consume) -> None:
        owned = self.topics.topics.get(req.topic)
        if owned is None or owned.state is not TopicState.OPEN:
            raise status.NoSuchSubscriptionError(
                f"topic {req.topic!r} is not served here; subscribe again"
            )
        owned.consume(conn, req.subscriber, req.seq)

    async def unsubscribe(self, conn: ClientConnection, req: Unsubscribe) -> None:
        owned = await self._acquire(conn, req.topic, False)
        await owned.unsubscribe(conn, req.subscriber)

    async def close_subscription(self, conn: ClientConnection, req: CloseSubscription) -> None:
        owned = self.topics.topics.get(req.topic)
        if owned is None:
            raise status.NoSuchSubscriptionError(f"topic {req.topic!r} is not served here")
        await owned.close_subscription(conn, req.subscriber)

    async def read(self, conn: ClientConnection, req: Read) -> Frame:
        owned = await self._acquire(conn, req.topic, req.redirected)
        return await owned.read(req)

    async def topic_stats(self, conn: ClientConnection, req: TopicStats) -> TopicInfo:
        owned = await self._acquire(conn, req.topic, req.redirected)
        return TopicInfo(
            req.request_id, owned.log.first_seq, owned.log.last_seq, len(owned.subscriptions)
        )

    async def release_topic(self, conn: ClientConnection, req: ReleaseTopic) -> None:
        await self.move(req.topic, req.destination, req.reason)

    async def move(self, topic: str, destination: str | None, reason: str) -> bool:
        """Hand ``topic`` over gracefully (to ``destination`` if given); False if not ours.

        The destination is asked to claim the topic right away (a redirected request), so the
        hand-off does not wait for the next client request.
        """
        if topic not in self.topics.topics:
            got = await self.store.ownership.read_owner_info(topic)
            if got is not None and got.value.address != self.address:
                raise status.NotResponsibleError(
                    f"topic {topic!r} is owned by {got.value.address}", detail=got.value.address
                )
            return False
        if destination is not None:
            if destination == self.address:
                return True
            alive = {h.address for h in await self.store.hubs.list_hubs() if h.alive}
            if destination not in alive:
                raise status.InvalidRequestError(f"destination {destination} is not an alive hub")
        moved = await self.topics.release(topic, reason, destination)
        if moved:
            self.metrics.releases.labels(reason_label(reason)).inc()
            if destination is not None:
                asyncio.get_running_loop().create_task(self._ask_to_claim(destination, topic))
        return moved

    async def _ask_to_claim(self, destination: str, topic: str) -> None:
        try:
            conn = await HubConnection.open(destination, _ignore_event, _ignore_close, timeout=2)
        except HedwigError:
            return
        try:
            await conn.request(TopicStats(conn.next_id(), topic, True), timeout=10)
        except HedwigError as exc:
            log.info("destination %s did not claim %r at once: %s", destination, topic, exc)
        finally:
            conn.close()

    def disconnected(self, conn: ClientConnection) -> None:
        for topic in conn.topics:
            owned = self.topics.topics.get(topic)
            if owned is not None:
                owned.detach_peer(conn)


def _ignore_event(*_: object) -> None:
    return None


def _ignore_close(*_: object) -> None:
    return None


async def serve(config: HubConfig) -> None:
    """Run a hub until SIGTERM or SIGINT, then stop it gracefully."""
    hub = Hub(config)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await hub.start()
    # Almost everything a hub allocates is freed by reference counting; the cycle collector
    # only adds pauses to the publish path. Freeze what startup allocated and run it rarely.
    gc.collect()
    gc.freeze()
    gc.set_threshold(100_000, 50, 100)
    print(f"HUB {hub.address}", flush=True)
    await stop.wait()
    await hub.stop()
