"""The producer and consumer roles against Hedwig, with its asyncio client.

Mirrors ``kafka_driver.py`` step for step. As fast as acknowledgements come, the producer keeps
a bounded window of unacknowledged messages: with ``each`` every message's future
(``publish_nowait``) is kept and its outcome read, oldest first, when the window is full and
at the end; with ``none`` only every 100th message has one (the rest go through ``send``), and
the window counts the messages those stand for. Every 100th message is timed from its send to
its future's callback. At a fixed rate it wakes every millisecond to publish what is due,
each message with a future whose callback times it from its due time. The consumer takes
every message of every subscription and times the measured ones from their stamp.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import sys
import time
from collections import deque
from collections.abc import Callable
from typing import Any

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
from hedwig.client import HedwigClient, PublishResult
from hedwig.errors import HedwigError
from hedwig.net.loop import install_uvloop

# How often a message's acknowledgement is timed when publishing as fast as possible (the
# window of unacknowledged messages there is the spec's).
SAMPLE_EVERY = 100
# Subscription flow control: delivered but unconsumed messages at most, and how often the
# consumer acknowledges (CONSUME, cumulative, not waited for).
MESSAGE_WINDOW = 20_000
CONSUME_EVERY = 1_000
# Subscriptions being set up at once by one consumer (workload 7c has 2,500 each).
SUBSCRIBING = 64

Emit = Callable[[dict[str, Any]], None]


class _Outcomes:
    """The outcomes the producer has read: a future's result, or its failure."""

    def __init__(self) -> None:
        self.ok = 0
        self.failed = 0

    async def read(self, fut: asyncio.Future[PublishResult]) -> None:
        try:
            await fut
        except HedwigError:
            self.failed += 1
        else:
            self.ok += 1


def _timer(lat: list[float], t_sent: float) -> Callable[[asyncio.Future[PublishResult]], None]:
    def acked(_fut: asyncio.Future[PublishResult]) -> None:
        lat.append(time.perf_counter() - t_sent)

    return acked


async def _as_fast_as_possible(
    client: HedwigClient, spec: ProduceSpec, n: int, flag: int
) -> dict[str, Any]:
    topics, k, off = spec.topics, len(spec.topics), spec.offset
    lat: list[float] = []
    outcomes = _Outcomes()
    pending: deque[asyncio.Future[PublishResult]] = deque()
    clock = time.perf_counter
    each = spec.kind == EACH
    # With ``none`` a kept future stands for the SAMPLE_EVERY messages sent with it.
    window = spec.window if each else max(1, spec.window // SAMPLE_EVERY)
    cpu0 = time.process_time()
    start_ns = now_ns()
    send, publish_nowait = client.send, client.publish_nowait
    for i in range(n):
        topic = topics[(i + off) % k]
        if i % SAMPLE_EVERY:
            if not each:
                # As the Kafka driver's ``produce`` without a delivery callback: no future.
                send(topic, payload(now_ns(), flag, spec.size))
                continue
            fut = publish_nowait(topic, payload(now_ns(), flag, spec.size))
        else:
            fut = publish_nowait(topic, payload(now_ns(), flag, spec.size))
            fut.add_done_callback(_timer(lat, clock()))
        pending.append(fut)
        if len(pending) >= window:
            await outcomes.read(pending.popleft())
    try:
        await client.flush()
    except HedwigError:
        # ``send``'s failures (``SendFailedError``): counted as one, which marks the run.
        outcomes.failed += 1
    while pending:
        await outcomes.read(pending.popleft())
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
        "failed": outcomes.failed,
    }


async def _fixed_rate(client: HedwigClient, spec: ProduceSpec) -> dict[str, Any]:
    topics, k, size, rate, off = spec.topics, len(spec.topics), spec.size, spec.rate, spec.offset
    total = spec.measured
    lat: list[float] = []
    failed = [0]
    # Acknowledgements whose callback has not run yet: ``flush`` can return before the last
    # one has, and a sample must not be lost to that ordering.
    outstanding: set[asyncio.Future[PublishResult]] = set()
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
            f = client.publish_nowait(topics[(sent + off) % k], payload(t_due, MEASURED, size))

            def acked(done: asyncio.Future[PublishResult], t: int = t_due) -> None:
                lat.append((now_ns() - t) / 1e9)
                if done.cancelled() or done.exception() is not None:
                    failed[0] += 1
                outstanding.discard(done)

            outstanding.add(f)
            f.add_done_callback(acked)
            sent += 1
        await asyncio.sleep(0.001)
    with contextlib.suppress(HedwigError):
        await client.flush()
    if outstanding:
        await asyncio.wait(outstanding)
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
        "outcomes": len(lat),
        "failed": failed[0],
    }


async def _barrier(spec: ProduceSpec, emit: Emit) -> None:
    """With other producers: say the warm-up is done and wait for the harness's word."""
    if spec.barrier:
        emit({"event": "warm"})
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)


async def produce(bootstrap: list[str], spec: ProduceSpec, emit: Emit) -> dict[str, Any]:
    async with HedwigClient(bootstrap) as client:
        for topic in spec.topics:
            for name in spec.subscriptions_first:
                sub = await client.subscribe(topic, name)
                await sub.close()
        if spec.warmup:
            await _as_fast_as_possible(client, spec, spec.warmup, WARMUP)
        await _barrier(spec, emit)
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
        gate = asyncio.Semaphore(SUBSCRIBING)

        async def subscribe(topic: str, name: str) -> Any:
            async with gate:
                return await client.subscribe(topic, name, message_window=MESSAGE_WINDOW)

        subs = await asyncio.gather(
            *(subscribe(t, name) for name in spec.subscription_names for t in spec.topics)
        )
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
        # The budget runs from when the producers are done (the harness's word on standard
        # input): a slow system's producers may take longer than any fixed budget.
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), spec.timeout_s)
        for task in tasks:
            task.cancel()
        # Each drain adds its figures as it ends.
        await asyncio.gather(*tasks, return_exceptions=True)
        gc.unfreeze()
    return delivery_report(
        spec.expected, counts, lat, t0, first_stamp[0], last_ns[0], time.process_time() - cpu0
    )


def run(role: str, bootstrap: list[str], spec: Any, emit: Emit) -> dict[str, Any]:
    install_uvloop()
    if role == "produce":
        return asyncio.run(produce(bootstrap, spec, emit))
    return asyncio.run(consume(bootstrap, spec, emit))
