"""The producer and consumer roles against Hedwig, with its asyncio client.

Mirrors ``kafka_driver.py`` step for step: the producer keeps a bounded window of
unacknowledged messages when running as fast as acknowledgements come, and wakes every
millisecond to publish what is due when running at a fixed rate; the consumer takes every
message of every subscription and times the measured ones from their stamp.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from collections import deque
from collections.abc import Callable
from typing import Any

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
from hedwig.client import HedwigClient, PublishResult
from hedwig.net.loop import install_uvloop

# Unacknowledged messages at most when publishing as fast as possible (the window of
# ``hedwig bench``), and how often a message's acknowledgement is timed there.
WINDOW = 64_000
SAMPLE_EVERY = 100
# Subscription flow control: delivered but unconsumed messages at most, and how often the
# consumer acknowledges (CONSUME, cumulative, not waited for).
MESSAGE_WINDOW = 20_000
CONSUME_EVERY = 1_000

Emit = Callable[[dict[str, Any]], None]


async def _as_fast_as_possible(
    client: HedwigClient, spec: ProduceSpec, n: int, flag: int
) -> dict[str, Any]:
    topics, k = spec.topics, len(spec.topics)
    lat: list[float] = []
    pending: deque[tuple[float, asyncio.Future[PublishResult]]] = deque()
    clock = time.perf_counter
    cpu0 = time.process_time()
    start = clock()
    send, publish_nowait = client.send, client.publish_nowait
    for i in range(n):
        if i % SAMPLE_EVERY:
            # As the Kafka driver's ``produce`` without a delivery callback: no future.
            send(topics[i % k], payload(now_ns(), flag, spec.size))
        else:
            fut = publish_nowait(topics[i % k], payload(now_ns(), flag, spec.size))
            pending.append((clock(), fut))
            if len(pending) * SAMPLE_EVERY >= WINDOW:
                t_sent, oldest = pending.popleft()
                await oldest
                lat.append(clock() - t_sent)
    await client.flush()
    for t_sent, fut in pending:
        await fut
        lat.append(clock() - t_sent)
    elapsed = clock() - start
    return {
        "messages": n,
        "seconds": round(elapsed, 3),
        "msgs_per_s": round(n / elapsed),
        "client_cpu_us_per_msg": round((time.process_time() - cpu0) / n * 1e6, 2),
        # Sampled, from send to acknowledgement, under saturation (queueing included).
        "publish": percentiles(lat),
    }


async def _fixed_rate(client: HedwigClient, spec: ProduceSpec) -> dict[str, Any]:
    topics, k, size, rate = spec.topics, len(spec.topics), spec.size, spec.rate
    total = int(rate * spec.duration_s)
    lat: list[float] = []
    # Acknowledgements whose callback has not run yet: ``flush`` can return before the last
    # one has, and a sample must not be lost to that ordering.
    outstanding: set[asyncio.Future[PublishResult]] = set()
    sent = 0
    gc.collect()
    gc.freeze()
    start = now_ns()
    step = 1e9 / rate
    while sent < total:
        due = min(total, int((now_ns() - start) / step) + 1)
        while sent < due:
            t_due = start + int(sent * step)
            f = client.publish_nowait(topics[sent % k], payload(t_due, MEASURED, size))

            def acked(done: asyncio.Future[PublishResult], t: int = t_due) -> None:
                lat.append((now_ns() - t) / 1e9)
                outstanding.discard(done)

            outstanding.add(f)
            f.add_done_callback(acked)
            sent += 1
        await asyncio.sleep(0.001)
    await client.flush()
    if outstanding:
        await asyncio.wait(outstanding)
    gc.unfreeze()
    elapsed = (now_ns() - start) / 1e9
    return {
        "messages": total,
        "seconds": round(elapsed, 3),
        "achieved_rate": round(total / elapsed),
        "publish": percentiles(lat),
    }


async def produce(bootstrap: list[str], spec: ProduceSpec, emit: Emit) -> dict[str, Any]:
    async with HedwigClient(bootstrap) as client:
        for topic in spec.topics:
            for name in spec.subscriptions_first:
                sub = await client.subscribe(topic, name)
                await sub.close()
        if spec.warmup:
            await _as_fast_as_possible(client, spec, spec.warmup, WARMUP)
        emit({"event": "measuring"})
        if spec.rate:
            return await _fixed_rate(client, spec)
        return await _as_fast_as_possible(client, spec, spec.messages, MEASURED)


async def consume(bootstrap: list[str], spec: ConsumeSpec, emit: Emit) -> dict[str, Any]:
    lat: list[float] = []
    counts = [0] * spec.subscribers
    first_stamp = [0]
    last_ns = [0]
    t0 = now_ns()
    cpu0 = time.process_time()
    async with HedwigClient(bootstrap) as client:
        subs = [
            await client.subscribe(topic, name, message_window=MESSAGE_WINDOW)
            for name in spec.subscription_names
            for topic in spec.topics
        ]
        done = asyncio.Event()
        finished: set[int] = set()
        per_name = {name: i for i, name in enumerate(spec.subscription_names)}

        async def drain(index: int, sub: Any) -> None:
            # As the Kafka driver's loop: a list of what has arrived at a time (Kafka:
            # ``poll`` then ``consume(999)``), the figures kept in locals.
            mine: list[float] = []
            low = n = t = 0
            expected = spec.expected
            try:
                async for got in sub.batches(1000):
                    for m in got:
                        due, flag = read_stamp(m.value)
                        t = now_ns()
                        if flag == MEASURED:
                            mine.append((t - due) / 1e9)
                        if low == 0 or due < low:
                            low = due
                    n += len(got)
                    if n // CONSUME_EVERY != (n - len(got)) // CONSUME_EVERY:
                        sub.consume(got[-1])
                    # One subscriber (name) may read several topics: its count is theirs.
                    counts[index] += len(got)
                    if counts[index] >= expected:
                        break
            finally:
                lat.extend(mine)
                if low and (first_stamp[0] == 0 or low < first_stamp[0]):
                    first_stamp[0] = low
                last_ns[0] = max(last_ns[0], t)
            if counts[index] >= expected and index not in finished:
                finished.add(index)
                if len(finished) == spec.subscribers:
                    done.set()

        gc.collect()
        gc.freeze()
        emit({"event": "ready"})
        tasks = [asyncio.create_task(drain(per_name[s.name], s)) for s in subs]
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), spec.timeout_s)
        for task in tasks:
            task.cancel()
        # Each drain adds its figures as it ends.
        await asyncio.gather(*tasks, return_exceptions=True)
        gc.unfreeze()
    return delivery_result(
        spec.expected, counts, lat, t0, first_stamp[0], last_ns[0], time.process_time() - cpu0
    )


def run(role: str, bootstrap: list[str], spec: Any, emit: Emit) -> dict[str, Any]:
    install_uvloop()
    if role == "produce":
        return asyncio.run(produce(bootstrap, spec, emit))
    return asyncio.run(consume(bootstrap, spec, emit))
