"""The producer and consumer roles against Kafka, with ``confluent-kafka`` (librdkafka).

Mirrors ``hedwig_driver.py`` step for step. librdkafka runs its network threads in C; the
Python thread serves delivery callbacks in ``poll``, as asyncio serves Hedwig's futures, so a
fixed-rate producer publishes what is due and then polls for at most a millisecond, and an
as-fast-as-possible producer polls every 1,000 messages and whenever its queue is full. With
``each`` every message carries a delivery callback that reads its outcome (the count is
checked against the messages published, ``bench.peers.merge.problem``); with ``none`` only
every 100th does, to be timed. Topics are created by whichever
role starts first (one partition each, the workload's replication and ``min.insync.replicas``);
consumers are assigned their partitions from the beginning (no group rebalance to wait for),
take each message as soon as it is there (then whatever else is queued, up to 1,000) and
commit with the client's default auto-commit.

``confluent_kafka`` is not among the project's dependencies: ``bench/peers/fetch.py`` installs
it under the cache and the harness puts it on ``PYTHONPATH`` for this driver only.
"""

from __future__ import annotations

import gc
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
)

from bench.peers.measure import (
    MEASURED,
    WARMUP,
    delivery_report,
    histogram,
    now_ns,
    payload,
    read_stamp,
)
from bench.peers.workloads import EACH, ConsumeSpec, ProduceSpec

SAMPLE_EVERY = 100
CREATE_AT_ONCE = 1000
Emit = Callable[[dict[str, Any]], None]


def ensure_topics(bootstrap: str, topics: list[str], replication: int, min_insync: int) -> None:
    """Create those of ``topics`` that do not exist (1,000 to a request: workload 7c has
    10,000) and wait until the metadata lists each with a leader, so the first produce or
    fetch does not race the creation."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    existing = admin.list_topics(timeout=30).topics
    missing = [t for t in topics if t not in existing]
    for lo in range(0, len(missing), CREATE_AT_ONCE):
        new = [
            NewTopic(
                t,
                num_partitions=1,
                replication_factor=replication,
                config={"min.insync.replicas": str(min_insync)},
            )
            for t in missing[lo : lo + CREATE_AT_ONCE]
        ]
        for future in admin.create_topics(new, operation_timeout=60).values():
            try:
                future.result()
            except KafkaException as exc:
                if "TOPIC_ALREADY_EXISTS" not in str(exc):
                    raise
    # A broker here makes 100-200 partitions a second: 10,000 take it a minute or two.
    deadline = time.monotonic() + 120 + 0.03 * len(topics)
    pause = 0.05 if len(topics) <= 1000 else 0.5
    while time.monotonic() < deadline:
        meta = admin.list_topics(timeout=30).topics
        if all(
            t in meta and meta[t].partitions and meta[t].partitions[0].leader >= 0 for t in topics
        ):
            return
        time.sleep(pause)
    raise RuntimeError(f"topics not ready: {topics[:3]}...")


class _Outcomes:
    """The delivery reports the producer has been handed (in ``poll`` and ``flush``)."""

    def __init__(self) -> None:
        self.ok = 0
        self.failed = 0

    def read(self, err: Any, _msg: Any) -> None:
        if err is None:
            self.ok += 1
        else:
            self.failed += 1


def _as_fast_as_possible(producer: Any, spec: ProduceSpec, n: int, flag: int) -> dict[str, Any]:
    topics, k, size, off = spec.topics, len(spec.topics), spec.size, spec.offset
    lat: list[float] = []
    outcomes = _Outcomes()
    read = outcomes.read
    each = spec.kind == EACH
    clock = time.perf_counter

    def sampled(err: Any, msg: Any, t: float) -> None:
        read(err, msg)
        lat.append(clock() - t)

    cpu0 = time.process_time()
    start_ns = now_ns()
    for i in range(n):
        value = payload(now_ns(), flag, size)
        topic = topics[(i + off) % k]
        while True:
            try:
                if i % SAMPLE_EVERY == 0:
                    t = clock()
                    producer.produce(topic, value, on_delivery=lambda e, m, t=t: sampled(e, m, t))
                elif each:
                    producer.produce(topic, value, on_delivery=read)
                else:
                    producer.produce(topic, value)
                break
            except BufferError:
                # librdkafka's queue (100,000 messages) is the window: wait for room, serving
                # the delivery callbacks meanwhile.
                producer.poll(0.001)
        if i % 1000 == 0:
            producer.poll(0)
    left = producer.flush(120)
    end_ns = now_ns()
    return {
        "kind": spec.kind,
        "messages": n,
        "start_ns": start_ns,
        "end_ns": end_ns,
        "cpu_s": time.process_time() - cpu0,
        # Sampled, from send to acknowledgement, under saturation (queueing included).
        "publish_histogram": histogram(lat),
        "outcomes": outcomes.ok + outcomes.failed,
        "failed": outcomes.failed + left,
    }


def _fixed_rate(producer: Any, spec: ProduceSpec) -> dict[str, Any]:
    topics, k, size, rate, off = spec.topics, len(spec.topics), spec.size, spec.rate, spec.offset
    total = spec.measured
    lat: list[float] = []
    outcomes = _Outcomes()
    read = outcomes.read
    sent = 0
    gc.collect()
    gc.freeze()
    cpu0 = time.process_time()
    start = now_ns()
    step = 1e9 / rate
    while sent < total:
        due = min(total, int((now_ns() - start) / step) + 1)
        while sent < due:
            t_due = start + int(sent * step)

            def acked(err: Any, msg: Any, t: int = t_due) -> None:
                read(err, msg)
                lat.append((now_ns() - t) / 1e9)

            value = payload(t_due, MEASURED, size)
            while True:
                try:
                    producer.produce(topics[(sent + off) % k], value, on_delivery=acked)
                    break
                except BufferError:
                    producer.poll(0.001)
            sent += 1
        producer.poll(0.001)
    left = producer.flush(120)
    end = now_ns()
    gc.unfreeze()
    return {
        "kind": spec.kind,
        "fixed_rate": True,
        "messages": total,
        "start_ns": start,
        "end_ns": end,
        "cpu_s": time.process_time() - cpu0,
        "publish_histogram": histogram(lat),
        "outcomes": outcomes.ok + outcomes.failed,
        "failed": outcomes.failed + left,
    }


def produce(
    bootstrap: str, spec: ProduceSpec, config: dict[str, Any], emit: Emit
) -> dict[str, Any]:
    ensure_topics(bootstrap, spec.topics, spec.replication, spec.min_insync)
    producer = Producer({"bootstrap.servers": bootstrap, **config})
    if spec.warmup:
        _as_fast_as_possible(producer, spec, spec.warmup, WARMUP)
    if spec.barrier:
        # With other producers: say the warm-up is done and wait for the harness's word.
        emit({"event": "warm"})
        sys.stdin.readline()
    emit({"event": "measuring"})
    if spec.rate:
        return _fixed_rate(producer, spec)
    return _as_fast_as_possible(producer, spec, spec.messages, MEASURED)


def consume(bootstrap: str, spec: ConsumeSpec, emit: Emit) -> dict[str, Any]:
    t0 = now_ns()
    cpu0 = time.process_time()
    ensure_topics(bootstrap, spec.topics, spec.replication, spec.min_insync)
    lat: list[float] = []
    counts = [0] * spec.subscribers
    first = [0]
    last = [0]
    lock = threading.Lock()
    stop = threading.Event()
    consumers = []
    for name in spec.subscription_names:
        c = Consumer(
            {
                "bootstrap.servers": bootstrap,
                # One group per subscription, whichever share of its topics this process reads.
                "group.id": f"{spec.topics[0].rsplit('-', 1)[0]}-{name}",
                "auto.offset.reset": "earliest",
            }
        )
        c.assign([TopicPartition(t, 0, OFFSET_BEGINNING) for t in spec.topics])
        consumers.append(c)

    def drain(index: int, consumer: Any) -> None:
        mine: list[float] = []
        low = 0
        n = 0
        t = 0
        while n < spec.expected and not stop.is_set():
            # ``consume(n, timeout)`` waits until it has n messages or the timeout passed, which
            # would hold messages back at low rates: wait for one, then take what is there.
            head = consumer.poll(0.1)
            if head is None:
                continue
            for m in [head, *consumer.consume(num_messages=999, timeout=0)]:
                if m.error() is not None:
                    continue
                due, flag = read_stamp(m.value())
                t = now_ns()
                if flag == MEASURED:
                    mine.append((t - due) / 1e9)
                if low == 0 or due < low:
                    low = due
                n += 1
        with lock:
            counts[index] = n
            lat.extend(mine)
            if low and (first[0] == 0 or low < first[0]):
                first[0] = low
            last[0] = max(last[0], t)

    gc.collect()
    gc.freeze()
    emit({"event": "ready"})
    threads = [
        threading.Thread(target=drain, args=(i, c), daemon=True) for i, c in enumerate(consumers)
    ]
    for th in threads:
        th.start()
    # The budget runs from when the producers are done (the harness's word on standard
    # input): a slow system's producers may take longer than any fixed budget.
    sys.stdin.readline()
    deadline = time.monotonic() + spec.timeout_s
    for th in threads:
        th.join(max(0.0, deadline - time.monotonic()))
    stop.set()
    for th in threads:
        th.join(5)
    gc.unfreeze()
    for c in consumers:
        c.close()
    return delivery_report(
        spec.expected, counts, lat, t0, first[0], last[0], time.process_time() - cpu0
    )


def run(
    role: str, bootstrap: list[str], spec: Any, config: dict[str, Any], emit: Emit
) -> dict[str, Any]:
    servers = ",".join(bootstrap)
    if role == "produce":
        return produce(servers, spec, config, emit)
    return consume(servers, spec, emit)
