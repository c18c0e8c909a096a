"""The producer and consumer roles against Kafka, with ``confluent-kafka`` (librdkafka).

Mirrors ``hedwig_driver.py`` step for step. librdkafka runs its network threads in C; the
Python thread serves delivery callbacks in ``poll``, as asyncio serves Hedwig's futures, so a
fixed-rate producer publishes what is due and then polls for at most a millisecond, and an
as-fast-as-possible producer polls whenever its queue is full. Topics are created by whichever
role starts first (one partition each, the workload's replication and ``min.insync.replicas``);
consumers are assigned their partitions from the beginning (no group rebalance to wait for),
take each message as soon as it is there (then whatever else is queued, up to 1,000) and
commit with the client's default auto-commit.

``confluent_kafka`` is not among the project's dependencies: ``bench/peers/fetch.py`` installs
it under the cache and the harness puts it on ``PYTHONPATH`` for this driver only.
"""

from __future__ import annotations

import gc
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
    delivery_result,
    now_ns,
    payload,
    percentiles,
    read_stamp,
)
from bench.peers.workloads import ConsumeSpec, ProduceSpec

SAMPLE_EVERY = 100
Emit = Callable[[dict[str, Any]], None]


def ensure_topics(bootstrap: str, topics: list[str], replication: int, min_insync: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = [
        NewTopic(
            t,
            num_partitions=1,
            replication_factor=replication,
            config={"min.insync.replicas": str(min_insync)},
        )
        for t in topics
    ]
    for future in admin.create_topics(new, operation_timeout=30).values():
        try:
            future.result()
        except KafkaException as exc:
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise
    # Wait until the metadata lists every topic with a leader, so the first produce or fetch
    # does not race the creation.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        meta = admin.list_topics(timeout=10).topics
        if all(
            t in meta and meta[t].partitions and meta[t].partitions[0].leader >= 0 for t in topics
        ):
            return
        time.sleep(0.05)
    raise RuntimeError(f"topics not ready: {topics[:3]}...")


def _as_fast_as_possible(producer: Any, spec: ProduceSpec, n: int, flag: int) -> dict[str, Any]:
    topics, k, size = spec.topics, len(spec.topics), spec.size
    lat: list[float] = []
    errors = [0]
    clock = time.perf_counter

    def sampled(err: Any, _msg: Any, t: float) -> None:
        if err is not None:
            errors[0] += 1
        lat.append(clock() - t)

    cpu0 = time.process_time()
    start = clock()
    for i in range(n):
        value = payload(now_ns(), flag, size)
        topic = topics[i % k]
        while True:
            try:
                if i % SAMPLE_EVERY == 0:
                    t = clock()
                    producer.produce(topic, value, on_delivery=lambda e, m, t=t: sampled(e, m, t))
                else:
                    producer.produce(topic, value)
                break
            except BufferError:
                producer.poll(0.001)
        if i % 1000 == 0:
            producer.poll(0)
    producer.flush(120)
    elapsed = clock() - start
    return {
        "messages": n,
        "seconds": round(elapsed, 3),
        "msgs_per_s": round(n / elapsed),
        "client_cpu_us_per_msg": round((time.process_time() - cpu0) / n * 1e6, 2),
        # Sampled, from send to acknowledgement, under saturation (queueing included).
        "publish": percentiles(lat),
        "errors": errors[0],
    }


def _fixed_rate(producer: Any, spec: ProduceSpec) -> dict[str, Any]:
    topics, k, size, rate = spec.topics, len(spec.topics), spec.size, spec.rate
    total = int(rate * spec.duration_s)
    lat: list[float] = []
    errors = [0]
    sent = 0
    gc.collect()
    gc.freeze()
    start = now_ns()
    step = 1e9 / rate
    while sent < total:
        due = min(total, int((now_ns() - start) / step) + 1)
        while sent < due:
            t_due = start + int(sent * step)

            def acked(err: Any, _msg: Any, t: int = t_due) -> None:
                if err is not None:
                    errors[0] += 1
                lat.append((now_ns() - t) / 1e9)

            value = payload(t_due, MEASURED, size)
            while True:
                try:
                    producer.produce(topics[sent % k], value, on_delivery=acked)
                    break
                except BufferError:
                    producer.poll(0.001)
            sent += 1
        producer.poll(0.001)
    producer.flush(120)
    gc.unfreeze()
    elapsed = (now_ns() - start) / 1e9
    return {
        "messages": total,
        "seconds": round(elapsed, 3),
        "achieved_rate": round(total / elapsed),
        "publish": percentiles(lat),
        "errors": errors[0],
    }


def produce(
    bootstrap: str, spec: ProduceSpec, config: dict[str, Any], emit: Emit
) -> dict[str, Any]:
    ensure_topics(bootstrap, spec.topics, spec.replication, spec.min_insync)
    producer = Producer({"bootstrap.servers": bootstrap, **config})
    if spec.warmup:
        _as_fast_as_possible(producer, spec, spec.warmup, WARMUP)
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
                "group.id": f"{spec.topics[0]}-{name}",
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
    deadline = time.monotonic() + spec.timeout_s
    for th in threads:
        th.join(max(0.0, deadline - time.monotonic()))
    stop.set()
    for th in threads:
        th.join(5)
    gc.unfreeze()
    for c in consumers:
        c.close()
    return delivery_result(
        spec.expected, counts, lat, t0, first[0], last[0], time.process_time() - cpu0
    )


def run(
    role: str, bootstrap: list[str], spec: Any, config: dict[str, Any], emit: Emit
) -> dict[str, Any]:
    servers = ",".join(bootstrap)
    if role == "produce":
        return produce(servers, spec, config, emit)
    return consume(servers, spec, emit)
