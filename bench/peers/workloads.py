"""The workloads, after the OpenMessaging Benchmark's, and what each driver role is told.

A workload is one producer process and, where delivery is measured, one consumer process; the
same two roles exist for every system (``bench/peers/driver.py``), so the process model and the
measurement are the same whichever system is under test. Each run uses fresh topics, so a
consumer attached before the producer starts sees exactly the run's messages.

``scale`` shrinks message counts and durations for a smoke test of the harness itself.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any


@dataclass(frozen=True)
class ProduceSpec:
    """What the producer does: ``messages`` as fast as acknowledgements come, or ``rate``
    messages/s (over all topics, round-robin) for ``duration_s``; first ``warmup`` messages
    as fast as possible, delivered but not timed."""

    topics: list[str]
    size: int
    messages: int = 0
    rate: float = 0.0
    duration_s: float = 0.0
    warmup: int = 0
    # Subscriptions to create before publishing (Hedwig starts a new subscription at the end
    # of the topic; a Kafka consumer assigned from the beginning needs nothing).
    subscriptions_first: list[str] = field(default_factory=list)
    # Replication of the topics a Kafka driver creates (Hedwig's is the hubs' setting).
    replication: int = 1
    min_insync: int = 1

    @property
    def total(self) -> int:
        return self.warmup + (int(self.rate * self.duration_s) if self.rate else self.messages)


@dataclass(frozen=True)
class ConsumeSpec:
    """What the consumer does: ``subscribers`` independent subscriptions (Kafka: consumer
    groups) each reading every topic from the start, until each has ``expected`` messages."""

    topics: list[str]
    subscribers: int
    expected: int
    timeout_s: float
    subscription_names: list[str]
    replication: int = 1
    min_insync: int = 1


@dataclass(frozen=True)
class Workload:
    key: str
    title: str
    nodes: int
    topics: int
    size: int
    messages: int = 0
    rate: float = 0.0
    duration_s: float = 0.0
    warmup: int = 0
    subscribers: int = 0
    # The consumer starts once the producer is done and reads the backlog (workload 5).
    backlog: bool = False
    replication: int = 1
    min_insync: int = 1

    def scaled(self, scale: float) -> Workload:
        return replace(
            self,
            messages=max(1000, int(self.messages * scale)) if self.messages else 0,
            duration_s=max(1.0, self.duration_s * scale) if self.duration_s else 0.0,
            warmup=int(self.warmup * scale),
        )

    def topic_names(self, run_id: str) -> list[str]:
        return [f"peer-{run_id}-{i}" for i in range(self.topics)]

    def produce_spec(self, run_id: str) -> ProduceSpec:
        return ProduceSpec(
            topics=self.topic_names(run_id),
            size=self.size,
            messages=self.messages,
            rate=self.rate,
            duration_s=self.duration_s,
            warmup=self.warmup,
            subscriptions_first=self.subscription_names() if self.backlog else [],
            replication=self.replication,
            min_insync=self.min_insync,
        )

    def subscription_names(self) -> list[str]:
        return [f"sub{i}" for i in range(self.subscribers)]

    def consume_spec(self, run_id: str) -> ConsumeSpec | None:
        if not self.subscribers:
            return None
        produce = self.produce_spec(run_id)
        return ConsumeSpec(
            topics=produce.topics,
            subscribers=self.subscribers,
            expected=produce.total,
            timeout_s=60.0 + produce.total / 20_000,
            subscription_names=self.subscription_names(),
            replication=self.replication,
            min_insync=self.min_insync,
        )


WORKLOADS: list[Workload] = [
    Workload(
        key="1",
        title="one topic, 100 B, as fast as acks come",
        nodes=1,
        topics=1,
        size=100,
        messages=500_000,
        warmup=20_000,
    ),
    Workload(
        key="2a",
        title="one topic, 100 B, 10,000 msg/s",
        nodes=1,
        topics=1,
        size=100,
        rate=10_000,
        duration_s=10,
        warmup=20_000,
        subscribers=1,
    ),
    Workload(
        key="2b",
        title="one topic, 100 B, 50,000 msg/s",
        nodes=1,
        topics=1,
        size=100,
        rate=50_000,
        duration_s=10,
        warmup=20_000,
        subscribers=1,
    ),
    Workload(
        key="3",
        title="100 topics, 1 KB, 10,000 msg/s in all",
        nodes=1,
        topics=100,
        size=1024,
        rate=10_000,
        duration_s=10,
        warmup=2_000,
        subscribers=1,
    ),
    Workload(
        key="4",
        title="three nodes, replication 3, 2 acks, 100 B, as fast as acks come",
        nodes=3,
        topics=1,
        size=100,
        messages=300_000,
        warmup=20_000,
        replication=3,
        min_insync=2,
    ),
    Workload(
        key="6",
        title="one topic, 100 B, 16 subscribers",
        nodes=1,
        topics=1,
        size=100,
        messages=100_000,
        subscribers=16,
    ),
    # Last of the single-node runs: it leaves a million messages on the servers' disks.
    Workload(
        key="5",
        title="backlog of 1,000,000 x 100 B read from the start",
        nodes=1,
        topics=1,
        size=100,
        messages=1_000_000,
        subscribers=1,
        backlog=True,
    ),
]


def by_key(keys: list[str] | None) -> list[Workload]:
    if not keys:
        return list(WORKLOADS)
    known = {w.key: w for w in WORKLOADS}
    unknown = [k for k in keys if k not in known]
    if unknown:
        raise SystemExit(f"unknown workloads {unknown}; known: {sorted(known)}")
    return [known[k] for k in keys]


def to_json(spec: ProduceSpec | ConsumeSpec) -> dict[str, Any]:
    return asdict(spec)
