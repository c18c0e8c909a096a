"""One owned topic replicated from one linked region: the hub subscription there, and the
appends here (``applying`` says what is appended; this is where it happens).

Rules:

- The hub is a subscriber of the topic in the remote region, as the original Hedwig's were:
  subscription ``__region/<this region>``, exclusive, durable, flow-controlled by
  ``replication_window``, attached with force (a new owner here takes it from the old one,
  whose appends here fail on its fenced ledger anyway).
- Before subscribing, the highest origin sequence of the remote region already in the local
  log is read back from its end (``applied_in_log``): deliveries at or below it are skipped,
  so a take-over here, a crash between append and acknowledgement, or a redelivery there
  never stores a message twice.
- A subscription made now starts at the remote topic's earliest kept message (so what was
  published there before this region was linked arrives too); one that exists resumes at its
  consume mark (what it acknowledged was applied here or skipped).
- Each delivery is appended here as ``RemoteApplier.plan`` says, a batch per run, through the
  owned topic's own publish (its state checks, duplicate detection, loss handling); the
  remote subscription is consumed up to the delivery only once every run is durable.
- Any failure (the remote region out of reach, the topic moving on either side, a refusal)
  ends the attempt; it is tried again after a pause doubling up to ``replication_retry_max_s``,
  for as long as this hub owns the topic. Nothing is acknowledged that is not stored, so a
  failure costs redelivery, never loss.
- Lag (``lag``, messages) is the remote topic's last sequence id minus the last handled,
  asked of the remote region every ``LAG_INTERVAL_S``; ``pending_since_ms`` is the publish
  time of the oldest message delivered and not yet applied (0: none).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from hedwig.client import HedwigClient, SubscribeMode
from hedwig.clock import Clock
from hedwig.errors import HedwigError, SubscriptionExistsError
from hedwig.hub.owning.topic import OwnedTopic
from hedwig.hub.replicating.applying import RemoteApplier, Run, learn_applied
from hedwig.hub.replicating.metrics import ReplicationMetrics
from hedwig.ledger.topic_log import TopicLog
from hedwig.protocol import (
    EncodedMessage,
    EncodedMessages,
    Frame,
    Publish,
    ResetTo,
    SubscriptionType,
    encode_message,
)
from hedwig.security.principal import Principal, PrincipalKind
from hedwig.settings.replication import ReplicationSettings

log = logging.getLogger(__name__)

# The remote topic's last sequence id is asked for this often (one small request a topic).
LAG_INTERVAL_S = 5.0
# The local log is read back this many messages (and bytes) at a time, from its end.
SCAN_MESSAGES = 10_000
SCAN_BYTES = 8 * 1024 * 1024
FIRST_RETRY_S = 0.1
# A run is appended in batches of at most this many bytes, as a client's publish would be.
APPEND_BYTES = 1024 * 1024


def subscription_name(local_region: str) -> str:
    """The hub subscription a region holds on each topic it replicates from another."""
    return f"__region/{local_region}"


async def applied_in_log(tlog: TopicLog, region: str) -> int:
    """The highest origin sequence of ``region`` in ``tlog``: its last batch from ``region``
    holds it (runs are appended in origin order), so the log is read back from its end until
    one is found (0: none)."""
    end = tlog.last_seq
    first = max(1, tlog.first_seq)
    while end >= first:
        start = max(first, end - SCAN_MESSAGES + 1)
        stored: list[tuple[str, int, int]] = []
        pos = start
        while pos <= end:
            batches = await tlog.read(pos, end - pos + 1, SCAN_BYTES)
            if not batches:
                break
            stored += [(b.publisher_id, b.publisher_seq, b.count) for b in batches]
            pos = batches[-1].first_seq + batches[-1].count
        highest = learn_applied(region, stored)
        if highest:
            return highest
        end = start - 1
    return 0


class _ReplicatorPeer:
    """The publisher an owned topic sees for replicated batches (``hedwig.hub.serving.peer``):
    nothing to tell, it follows the ownership itself."""

    def __init__(self, region: str) -> None:
        self.name = f"replicator from {region}"
        self.principal = Principal(f"hub:replicator/{region}", PrincipalKind.HUB)

    @property
    def closed(self) -> bool:
        return False

    def send(self, frame: Frame) -> None:
        return None

    async def writable(self) -> None:
        return None


class TopicReplication:
    """Replicates ``owned`` from ``region`` for as long as it runs (``start``, ``stop``)."""

    def __init__(
        self,
        *,
        owned: OwnedTopic,
        region: str,
        local_region: str,
        client: HedwigClient,
        settings: ReplicationSettings,
        clock: Clock,
        metrics: ReplicationMetrics,
    ) -> None:
        self.owned = owned
        self.region = region
        self._name = subscription_name(local_region)
        self._client = client
        self._settings = settings
        self._clock = clock
        self._metrics = metrics
        self._peer = _ReplicatorPeer(region)
        self._task: asyncio.Task[None] | None = None
        self.lag = 0
        self.pending_since_ms = 0
        self.applier: RemoteApplier | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _run(self) -> None:
        delay = FIRST_RETRY_S
        while True:
            try:
                await self._once()
                delay = FIRST_RETRY_S
            except HedwigError as exc:
                self._metrics.errors.labels(self.region).inc()
                log.log(
                    logging.INFO if delay == FIRST_RETRY_S else logging.DEBUG,
                    "replicating %r from region %r: %s; trying again",
                    self.owned.name,
                    self.region,
                    exc,
                )
            self.pending_since_ms = 0
            await self._clock.sleep(delay)
            delay = min(delay * 2, self._settings.replication_retry_max_s)

    async def _once(self) -> None:
        topic, client = self.owned.name, self._client
        applier = self.applier = RemoteApplier(
            self.region, applied=await applied_in_log(self.owned.log, self.region)
        )
        try:
            await client.create_subscription(topic, self._name, type=SubscriptionType.EXCLUSIVE)
            created = True
        except SubscriptionExistsError:
            created = False
        if created:
            start: ResetTo | int = applier.applied + 1 if applier.applied else ResetTo.EARLIEST
            await client.reset_subscription(topic, self._name, start)
        sub = await client.subscribe(
            topic,
            self._name,
            mode=SubscribeMode.ATTACH,
            message_window=self._settings.replication_window,
            force_attach=True,
        )
        lag = asyncio.get_running_loop().create_task(self._measure_lag(applier))
        try:
            async for got in sub.batches(self._settings.replication_window):
                self.pending_since_ms = got[0].publish_time_ms
                plan = applier.plan(got)
                for run in plan.runs:
                    await self._append(run)
                    applier.applied_run(run)
                    self._metrics.appended(self.region, len(run.messages))
                if plan.ack:
                    sub.consume(plan.ack)
                applier.done(plan)
                self.pending_since_ms = 0
        finally:
            lag.cancel()
            await sub.close()

    async def _append(self, run: Run) -> None:
        """``run`` stored durably here, under its origin publisher id and sequence, in
        batches of at most ``APPEND_BYTES`` (a delivery may hold more than a publish would)."""
        parts: list[EncodedMessage] = []
        size = 0
        first = run.origin_seq
        for m in run.messages:
            encoded = encode_message(m)
            if parts and size + len(encoded) > APPEND_BYTES:
                await self._publish(run.publisher_id, first, parts)
                first += len(parts)
                parts, size = [], 0
            parts.append(encoded)
            size += len(encoded)
        if parts:
            await self._publish(run.publisher_id, first, parts)

    async def _publish(
        self, publisher_id: str, origin_seq: int, parts: list[EncodedMessage]
    ) -> None:
        await self.owned.publish(
            self._peer,
            Publish(
                request_id=0,
                topic=self.owned.name,
                publisher_id=publisher_id,
                publisher_seq=origin_seq,
                messages=EncodedMessages.of(parts),
            ),
        )

    async def _measure_lag(self, applier: RemoteApplier) -> None:
        while True:
            with contextlib.suppress(HedwigError):
                info = await self._client.topic_info(self.owned.name)
                self.lag = applier.lag(info.last_seq)
            await self._clock.sleep(LAG_INTERVAL_S)
