"""The workloads, after the OpenMessaging Benchmark's, and what each driver process is told.

A workload is ``producers`` producer processes and, where delivery is measured, ``consumers``
consumer processes; the same two roles exist for every system (``bench/peers/driver.py``), so
the process model and the measurement are the same whichever system is under test. Each run
uses fresh topics, so consumers attached before the producers start see exactly the run's
messages. Producer ``p`` sends its ``i``-th message to topic ``(i + p * topics / producers) %
topics``: every producer writes every topic, as in the OpenMessaging Benchmark, from a different
start. Consumer ``c`` of ``consumers`` reads its contiguous share of the topics under the
workload's subscription names, as the consumers of one subscription share its partitions.

**Publishing kinds.** A workload that publishes as fast as acknowledgements come runs once for
each of its ``kinds``: ``each``, every message with its own outcome (Hedwig a future from
``publish_nowait``, Kafka ``produce(..., on_delivery=callback)``; the OpenMessaging Benchmark's
producers work so), and ``none``, no outcome but for every 100th message, which is timed
(Hedwig ``send``, Kafka ``produce`` alone). A fixed-rate workload times every message from its
outcome, so it is ``each`` only; the producers of a delivery workload (backlog, fan-out) fill
the topic and are ``none``.

**The OpenMessaging shapes, scaled to two cores** (workloads 7 and 8). The reference runs
(``workloads/100-topic-1kb-4p-4c-500k.yaml``, ``10k-topic-1kb-4p-4c-100k.yaml``,
``max-rate-*``) use 1 KB messages, 4 producers and 4 consumers (one subscription), for five
minutes, at 100,000-2,000,000 msg/s, servers and clients on machines of their own. Here all
processes share two cores: the same shape at 10,000 msg/s in all (10 MB/s), 8 s; the same as
fast as acks come (60,000 messages); the same on three nodes at replication 3 with 2 acks
(1,000 msg/s, and 12,000 messages as fast as acks come, in the first round only: Kafka
flushing every append of 100 partitions on three replicas does a few hundred msg/s here); and
10,000 topics at 1,000 msg/s in all (0.1 msg/s a topic, each topic's every
message a batch of one), where the servers' memory is the figure, in the first round only
and not on Kafka's default line.
Hedwig has no partitions: its topic is Kafka's topic of one partition, so "100 partitions" is
100 topics for both.

``scale`` shrinks message counts and durations for a smoke test of the harness itself.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

EACH = "each"
NONE = "none"
KIND_LABELS = {
    EACH: "an outcome per message (future / delivery callback)",
    NONE: "no per-message outcome (send / produce)",
}


@dataclass(frozen=True)
class ProduceSpec:
    """What one producer does: ``messages`` as fast as acknowledgements come, or ``rate``
    messages/s (over all topics, round-robin from ``offset``) for ``duration_s``; first
    ``warmup`` messages as fast as possible, delivered but not timed. With ``barrier`` it
    waits after the warm-up for a line on its standard input (all producers start
    together)."""

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
    kind: str = NONE
    offset: int = 0
    barrier: bool = False
    # Hedwig's bound on unacknowledged messages as fast as acks come (``hedwig bench``'s);
    # Kafka's is librdkafka's queue, 100,000 messages by default.
    window: int = 64_000

    @property
    def measured(self) -> int:
        return int(self.rate * self.duration_s) if self.rate else self.messages

    @property
    def total(self) -> int:
        return self.warmup + self.measured


@dataclass(frozen=True)
class ConsumeSpec:
    """What one consumer does: ``subscribers`` independent subscriptions (Kafka: consumer
    groups) each reading every one of ``topics`` from the start, until each has ``expected``
    messages, or ``timeout_s`` has passed since the producers were done."""

    topics: list[str]
    subscribers: int
    expected: int
    timeout_s: float
    subscription_names: list[str]
    replication: int = 1
    min_insync: int = 1


def sent_to(total: int, offset: int, k: int, indices: range) -> int:
    """How many of ``total`` messages sent round-robin over ``k`` topics from ``offset`` go
    to the topics numbered ``indices``."""
    count = 0
    for t in indices:
        first = (t - offset) % k
        if first < total:
            count += (total - first + k - 1) // k
    return count


def _split(n: int, parts: int, i: int) -> int:
    return n // parts + (1 if i < n % parts else 0)


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
    producers: int = 1
    consumers: int = 1
    # Empty: the one kind the workload's shape implies (fixed rate each, else none).
    kinds: tuple[str, ...] = ()
    # At most this many rounds of a run (0: every round): creating 10,000 topics takes a
    # Kafka broker here 80-90 s, too long to repeat within the run's half hour.
    max_rounds: int = 0
    # The lines that run it (empty: every line).
    lines: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.kinds:
            object.__setattr__(self, "kinds", (EACH,) if self.rate else (NONE,))
        if self.rate and self.kinds != (EACH,):
            raise ValueError(f"workload {self.key}: a fixed rate times every outcome: each only")
        if not set(self.kinds) <= {EACH, NONE}:
            raise ValueError(f"workload {self.key}: unknown kinds {self.kinds}")
        if self.consumers > self.topics:
            raise ValueError(f"workload {self.key}: more consumers than topics")

    def scaled(self, scale: float) -> Workload:
        return replace(
            self,
            messages=max(1000, int(self.messages * scale)) if self.messages else 0,
            duration_s=max(1.0, self.duration_s * scale) if self.duration_s else 0.0,
            warmup=int(self.warmup * scale),
        )

    def topic_names(self, run_id: str) -> list[str]:
        return [f"peer-{run_id}-{i}" for i in range(self.topics)]

    def subscription_names(self) -> list[str]:
        return [f"sub{i}" for i in range(self.subscribers)]

    def produce_specs(self, run_id: str, kind: str) -> list[ProduceSpec]:
        if kind not in self.kinds:
            raise ValueError(f"workload {self.key} does not publish {kind!r}")
        topics = self.topic_names(run_id)
        return [
            ProduceSpec(
                topics=topics,
                size=self.size,
                messages=_split(self.messages, self.producers, p),
                rate=self.rate / self.producers,
                duration_s=self.duration_s,
                warmup=_split(self.warmup, self.producers, p),
                subscriptions_first=self.subscription_names() if self.backlog else [],
                replication=self.replication,
                min_insync=self.min_insync,
                kind=kind,
                offset=p * self.topics // self.producers,
                barrier=self.producers > 1,
            )
            for p in range(self.producers)
        ]

    def produce_spec(self, run_id: str, kind: str | None = None) -> ProduceSpec:
        """The one producer of a one-producer workload."""
        (spec,) = self.produce_specs(run_id, kind or self.kinds[0])
        return spec

    def consume_specs(self, run_id: str) -> list[ConsumeSpec]:
        if not self.subscribers:
            return []
        produce = self.produce_specs(run_id, self.kinds[0])
        topics = produce[0].topics
        out = []
        for c in range(self.consumers):
            lo = c * self.topics // self.consumers
            hi = (c + 1) * self.topics // self.consumers
            expected = sum(sent_to(p.total, p.offset, self.topics, range(lo, hi)) for p in produce)
            out.append(
                ConsumeSpec(
                    topics=topics[lo:hi],
                    subscribers=self.subscribers,
                    expected=expected,
                    timeout_s=60.0 + expected * self.subscribers / 20_000,
                    subscription_names=self.subscription_names(),
                    replication=self.replication,
                    min_insync=self.min_insync,
                )
            )
        return out

    def consume_spec(self, run_id: str) -> ConsumeSpec | None:
        """The one consumer of a one-consumer workload (``None`` without delivery)."""
        specs = self.consume_specs(run_id)
        if not specs:
            return None
        (spec,) = specs
        return spec


def _omb(key: str, title: str, nodes: int, topics: int, **kw: Any) -> Workload:
    """An OpenMessaging-shaped workload: 1 KB, 4 producers, 4 consumers of one subscription."""
    return Workload(
        key=key,
        title=title,
        nodes=nodes,
        topics=topics,
        size=1024,
        subscribers=1,
        producers=4,
        consumers=4,
        replication=3 if nodes == 3 else 1,
        min_insync=2 if nodes == 3 else 1,
        **kw,
    )


BOTH = (EACH, NONE)

WORKLOADS: list[Workload] = [
    Workload(
        key="1",
        title="one topic, 100 B, as fast as acks come",
        nodes=1,
        topics=1,
        size=100,
        messages=500_000,
        warmup=20_000,
        kinds=BOTH,
    ),
    Workload(
        key="2a",
        title="one topic, 100 B, 10,000 msg/s",
        nodes=1,
        topics=1,
        size=100,
        rate=10_000,
        duration_s=8,
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
        duration_s=5,
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
    _omb(
        "7a",
        "OMB: 100 topics, 1 KB, 4 producers, 4 consumers, 10,000 msg/s in all",
        1,
        100,
        rate=10_000,
        duration_s=8,
        warmup=4_000,
    ),
    _omb(
        "7b",
        "OMB: 100 topics, 1 KB, 4 producers, 4 consumers, as fast as acks come",
        1,
        100,
        messages=60_000,
        warmup=4_000,
        kinds=BOTH,
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
    # It leaves a million messages on the servers' disks.
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
    # Last of the single-node runs: 10,000 topics stay on the servers for the rest of the
    # turn.
    _omb(
        "7c",
        "OMB: 10,000 topics, 1 KB, 4 producers, 4 consumers, 1,000 msg/s in all (first round only)",
        1,
        10_000,
        rate=1_000,
        duration_s=15,
        max_rounds=1,
        # Kafka's default line would spend the same two minutes making the partitions to
        # show the same broker without the flush: the durable line is the comparison.
        lines=("hedwig", "kafka-durable", "kafka-4.1.1-durable"),
        # One message to every topic first: each is created (Kafka) or claimed (Hedwig)
        # before the measured part.
        warmup=10_000,
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
        kinds=BOTH,
    ),
    _omb(
        "8a",
        "OMB on three nodes, replication 3, 2 acks: 100 topics, 1 KB, 4+4, 1,000 msg/s"
        " (first round only)",
        3,
        100,
        rate=1_000,
        duration_s=8,
        max_rounds=1,
        warmup=4_000,
    ),
    _omb(
        "8b",
        "OMB on three nodes, replication 3, 2 acks: 100 topics, 1 KB, 4+4, as fast as acks come"
        " (first round only)",
        3,
        100,
        messages=12_000,
        max_rounds=1,
        warmup=4_000,
        kinds=BOTH,
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
