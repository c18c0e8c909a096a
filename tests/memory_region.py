"""Hubs and clients wired together in memory, for tests of client and hub behaviour that run
in milliseconds: real hub code on the in-memory metadata store and a ``MemoryNetwork``, with
the hubs' ledgers on a tmpfs (so fsync costs nothing)."""

from __future__ import annotations

import asyncio
import functools
import shutil
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hedwig.client import HedwigClient, RetryPolicy
from hedwig.clock import Clock, SystemClock
from hedwig.hub import Hub, HubConfig
from hedwig.ledger.remote import RemoteStorage
from hedwig.metadata import PlanMode, TopicPlan
from hedwig.metadata.memory import MemoryBackend, MemoryMetadataStore
from hedwig.net import MemoryNetwork
from hedwig.placement.plans import set_topic_mode
from hedwig.protocol import Message, MoveKind
from hedwig.settings import (
    BalanceSettings,
    BundleSettings,
    ConnectionSettings,
    QueueSettings,
    RetentionSettings,
    StorageSettings,
)

SCRATCH = "/dev/shm" if Path("/dev/shm").is_dir() else None
FAST_RETRY = RetryPolicy(initial_delay_s=0.005, max_delay_s=0.05, deadline_s=10)


async def stored(client: HedwigClient, topic: str) -> list[Message]:
    """Every message ``topic`` holds, read back from its first."""
    answer = await client.read(topic, 1, max_messages=100_000)
    return [m.message for b in answer.batches for m in b.delivered()]


@dataclass
class Region:
    network: MemoryNetwork
    backend: MemoryBackend
    hubs: list[Hub] = field(default_factory=list)
    dirs: list[str] = field(default_factory=list)
    # Every hub's bundle settings (off by default: topics owned one by one).
    bundles: BundleSettings = field(default_factory=BundleSettings)

    async def set_mode(self, topic: str, mode: PlanMode, hubs: int = 2) -> TopicPlan:
        """``topic``'s plan changed as ``hedwig topic mode`` does, through the first hub's
        store."""
        store = self.hubs[0].store
        return await set_topic_mode(store, topic, mode, hubs=hubs, clock=SystemClock())

    async def add_hub(
        self,
        replication: str = "2/2/2",
        *,
        clock: Clock | None = None,
        ledger_max_bytes: int | None = None,
        retention: RetentionSettings | None = None,
        balance: BalanceSettings | None = None,
        queues: QueueSettings | None = None,
    ) -> Hub:
        data_dir = tempfile.mkdtemp(prefix="hedwig-mem-", dir=SCRATCH)
        self.dirs.append(data_dir)
        config = HubConfig(
            connection=ConnectionSettings(listen="memory:0", metadata_session_timeout_s=2.0),
            storage=StorageSettings(
                data_dir=data_dir,
                replication=replication,
                ledger_max_bytes=ledger_max_bytes or StorageSettings().ledger_max_bytes,
            ),
            retention=retention or RetentionSettings(),
            balance=balance or BalanceSettings(self_balance=False),
            queues=queues or QueueSettings(),
            bundles=self.bundles,
        )
        hub = Hub(
            config,
            store=MemoryMetadataStore(self.backend, "mem"),
            network=self.network,
            clock=clock,
        )
        await hub.start()
        self.hubs.append(hub)
        return hub

    def hub_at(self, address: str | None) -> Hub:
        return next(h for h in self.hubs if h.address == address)

    def owner(self, topic: str) -> Hub:
        return next(h for h in self.hubs if topic in h.topics.topics)

    def owner_among(self, topic: str, hubs: list[Hub]) -> Hub | None:
        return next((h for h in hubs if topic in h.topics.topics), None)

    async def move_away(self, topic: str) -> Hub:
        """``topic`` moved (a requested move) from its owner to another hub, which it returns."""
        source = self.owner(topic)
        dest = next(h for h in self.hubs if h is not source)
        await source.requests.moves.move(topic, dest.address, MoveKind.REQUESTED, "test")
        return dest

    def storage_client(self, hub: Hub) -> RemoteStorage:
        """A client of ``hub``'s storage role, as another hub's replica connection is."""

        async def resolve(_member: str) -> str:
            return hub.address

        return RemoteStorage(hub.storage.address, network=self.network, resolve=resolve)

    def client(self, **options: object) -> HedwigClient:
        options.setdefault("retry", FAST_RETRY)
        return HedwigClient(
            [h.address for h in self.hubs],
            network=self.network,
            **options,  # type: ignore[arg-type]
        )


def answered(hub: Hub, op: str, status: str = "ok") -> float:
    """How many ``op`` requests ``hub`` answered with ``status`` (its request metric)."""
    value = hub.metrics.registry.get_sample_value(
        "hedwig_requests_total", {"op": op, "status": status}
    )
    return value or 0.0


class ToldOrder:
    """The futures added, and the order they resolve in (their indexes, noted as each one
    resolves). A future is added as soon as it is made: a done callback added to a future
    already resolved would be noted in the order of adding, whatever order it resolved in."""

    def __init__(self) -> None:
        self.futures: list[asyncio.Future[Any]] = []
        self.order: list[int] = []

    def add(self, future: asyncio.Future[Any]) -> None:
        future.add_done_callback(functools.partial(self._told, len(self.futures)))
        self.futures.append(future)

    def _told(self, i: int, _future: object) -> None:
        self.order.append(i)


async def memory_region(
    hubs: int = 2, *, bundles: BundleSettings | None = None, **settings: Any
) -> AsyncIterator[Region]:
    """A region of ``hubs`` hubs in memory, stopped and cleaned up afterwards."""
    r = Region(MemoryNetwork(), MemoryBackend(), bundles=bundles or BundleSettings())
    for _ in range(hubs):
        await r.add_hub(**settings)
    try:
        yield r
    finally:
        for hub in r.hubs:
            await hub.stop()
        for d in r.dirs:
            shutil.rmtree(d, ignore_errors=True)
