"""``hedwig bench``: publish (and optionally subscribe) throughput and latency percentiles.

Two modes. Without ``--rate`` the client publishes as fast as acknowledgements come back
(throughput, batching client, ``--inflight`` batches in flight). With ``--rate`` it publishes on
a fixed schedule and reports the latency of each message from the moment it was due to its
durable acknowledgement (so a stalled client cannot hide latency: coordinated omission is
counted). ``--subscribe`` adds a subscriber in the same process and reports its delivery rate
and publish-to-delivery latency: every hundredth measured message carries the time it was
published (or due) in its first bytes, read back on delivery against the same clock.
``--embedded`` starts ZooKeeper and hub processes first, so the whole measurement is
one command (``docs/benchmarks.md``). Output is JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import struct
import time
from collections import deque
from typing import Any

from hedwig.cli.common import add_hub_options, client_security, report, resolve_hubs
from hedwig.client import BatchPublishResult, HedwigClient, PublishResult
from hedwig.devcluster.cluster import DevCluster
from hedwig.errors import HedwigError
from hedwig.net.loop import install_uvloop


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "bench",
        help="measure publish/subscribe throughput and latency (JSON)",
        description="Publish --messages messages of --size bytes to a topic (after --warmup "
        "more), flat out or at --rate, and print throughput and latency as JSON; "
        "--subscribe also measures delivery to a subscriber. Against the hubs the other "
        "commands find, or a cluster of its own (--embedded).",
    )
    add_hub_options(p)
    p.add_argument("--embedded", action="store_true", help="start ZooKeeper and hubs first")
    p.add_argument("--hubs", type=int, default=1, help="hubs to start with --embedded (default 1)")
    p.add_argument(
        "--messages", type=int, default=200_000, help="messages measured (default 200000)"
    )
    p.add_argument("--size", type=int, default=100, help="message size in bytes (default 100)")
    p.add_argument("--topic", default=None, help="default: a fresh topic per run")
    p.add_argument("--rate", type=float, default=0.0, help="messages/s (0: as fast as possible)")
    p.add_argument("--duration", type=float, default=10.0, help="seconds, with --rate (default 10)")
    p.add_argument("--inflight", type=int, default=16, help="batches in flight (default 16)")
    p.add_argument(
        "--batch", type=int, default=2000, help="messages per batch at most (default 2000)"
    )
    p.add_argument(
        "--per-call",
        type=int,
        default=1,
        help="messages per publish call: 1 publishes one by one (publish_nowait), more hands "
        "them over together (publish_batch_nowait); without --rate",
    )
    p.add_argument(
        "--send",
        action="store_true",
        help="one by one without a future per message (send; every 100th through "
        "publish_nowait, to time it), as Kafka's produce without a delivery callback",
    )
    p.add_argument("--subscribe", action="store_true", help="also measure delivery to a subscriber")
    p.add_argument(
        "--warmup", type=int, default=20_000, help="messages before measuring (default 20000)"
    )
    p.add_argument(
        "--secure",
        action="store_true",
        help="with --embedded: TLS, authentication and ACLs on (as hedwig dev up --secure)",
    )
    p.set_defaults(func=run_bench)


STAMP = b"T"
_STAMP = struct.Struct("!d")
STAMP_EVERY = 100


def stamped(size: int, t: float) -> bytes:
    """A payload of ``size`` bytes (at least 9) carrying the time ``t`` for the subscriber."""
    head = STAMP + _STAMP.pack(t)
    return head + b"x" * max(0, size - len(head))


def percentiles(samples: list[float]) -> dict[str, float]:
    if not samples:
        return {}
    s = sorted(samples)

    def pick(q: float) -> float:
        return round(s[min(len(s) - 1, int(q * len(s)))] * 1000, 3)

    return {
        "p50_ms": pick(0.50),
        "p90_ms": pick(0.90),
        "p99_ms": pick(0.99),
        "p999_ms": pick(0.999),
        "max_ms": round(s[-1] * 1000, 3),
    }


async def _throughput(
    client: HedwigClient,
    topic: str,
    n: int,
    size: int,
    window: int = 64_000,
    stamp: bool = False,
    per_call: int = 1,
    send: bool = False,
) -> dict[str, Any]:
    """Publish ``n`` messages keeping at most ``window`` unacknowledged (a sliding window);
    with ``send``, those not sampled go through ``send`` (no future).

    Latency here is time from ``publish`` to acknowledgement under saturation (queueing
    included), sampled every 100th message (with ``per_call`` above 1, every call of at least
    100 messages, else every call that starts at a multiple of 100).
    """
    if per_call > 1:
        return await _throughput_batched(client, topic, n, size, window, stamp, per_call)
    payload = b"x" * size
    lat: list[float] = []
    pending: deque[tuple[float, asyncio.Future[PublishResult]]] = deque()
    clock = time.perf_counter
    start = clock()
    for i in range(n):
        if send and i % 100:
            # Neither sampled nor stamped (both every 100th): no future needed.
            client.send(topic, payload)
            continue
        if stamp and i % STAMP_EVERY == 0:
            fut = client.publish_nowait(topic, stamped(size, clock()))
        else:
            fut = client.publish_nowait(topic, payload)
        if i % 100 == 0:
            pending.append((clock(), fut))
        if len(pending) * 100 >= window:
            t_sent, oldest = pending.popleft()
            await oldest
            lat.append(clock() - t_sent)
    await client.flush(topic)
    for t_sent, fut in pending:
        await fut
        lat.append(clock() - t_sent)
    return _throughput_row(n, size, clock() - start, lat)


def _throughput_row(
    n: int, size: int, elapsed: float, lat: list[float], **given: int
) -> dict[str, Any]:
    """What a throughput run of ``n`` messages of ``size`` bytes reports (``given``: how it
    published, after the count)."""
    return {
        "messages": n,
        **given,
        "seconds": round(elapsed, 3),
        "msgs_per_s": round(n / elapsed),
        "mb_per_s": round(n * size / elapsed / 1e6, 2),
        "saturated_latency": percentiles(lat),
    }


async def _throughput_batched(
    client: HedwigClient,
    topic: str,
    n: int,
    size: int,
    window: int,
    stamp: bool,
    per_call: int,
) -> dict[str, Any]:
    """``_throughput`` through ``publish_batch_nowait``, ``per_call`` messages a call."""
    payload = b"x" * size
    lat: list[float] = []
    pending: deque[tuple[float, int, asyncio.Future[BatchPublishResult]]] = deque()
    clock = time.perf_counter
    unacked = 0
    start = clock()
    for lo in range(0, n, per_call):
        k = min(per_call, n - lo)
        values = [payload] * k
        if stamp:
            for i in range(-lo % STAMP_EVERY, k, STAMP_EVERY):
                values[i] = stamped(size, clock())
        pending.append((clock(), k, client.publish_batch_nowait(topic, values)))
        unacked += k
        while unacked >= window:
            t_sent, done, oldest = pending.popleft()
            await oldest
            unacked -= done
            lat.append(clock() - t_sent)
    await client.flush(topic)
    for t_sent, _, fut in pending:
        await fut
        lat.append(clock() - t_sent)
    return _throughput_row(n, size, clock() - start, lat, per_call=per_call)


async def _fixed_rate(
    client: HedwigClient,
    topic: str,
    rate: float,
    duration: float,
    size: int,
    stamp: bool = False,
) -> dict[str, Any]:
    payload = b"x" * size
    lat: list[float] = []
    # Acknowledgements whose callback has not run yet: ``flush`` can return before the last
    # one has, and a sample must not be lost to that ordering.
    outstanding: set[asyncio.Future[PublishResult]] = set()
    total = int(rate * duration)
    tick = 0.001
    sent = 0
    clock = time.perf_counter
    # The measurement must not measure the benchmark's own garbage: freeze what exists so the
    # collector does not walk it, and keep no per-message objects beyond the latency floats.
    gc.collect()
    gc.freeze()
    start = clock()
    while sent < total:
        due = min(total, int((clock() - start) * rate) + 1)
        while sent < due:
            t_due = start + sent / rate
            if stamp and sent % STAMP_EVERY == 0:
                f = client.publish_nowait(topic, stamped(size, t_due))
            else:
                f = client.publish_nowait(topic, payload)

            def acked(done: asyncio.Future[PublishResult], t: float = t_due) -> None:
                lat.append(clock() - t)
                outstanding.discard(done)

            outstanding.add(f)
            f.add_done_callback(acked)
            sent += 1
        await asyncio.sleep(tick)
    await client.flush(topic)
    if outstanding:
        await asyncio.wait(outstanding)
    gc.unfreeze()
    elapsed = time.perf_counter() - start
    return {
        "target_rate": rate,
        "messages": total,
        "achieved_rate": round(total / elapsed),
        "latency": percentiles(lat),
    }


async def _bench(hubs: list[str], args: argparse.Namespace) -> dict[str, Any]:
    topic = args.topic or f"bench-{int(time.time() * 1000)}"
    result: dict[str, Any] = {"topic": topic, "size": args.size, "hubs": hubs}
    async with HedwigClient(
        hubs,
        max_inflight_batches=args.inflight,
        max_batch_messages=args.batch,
        security=client_security(args),
    ) as client:
        sub_task = None
        received = 0
        expected: int | None = None
        all_received = asyncio.Event()
        delivery_lat: list[float] = []
        measured_from = 0.0
        last_delivery = 0.0
        stamp = args.subscribe and args.size > _STAMP.size
        clock = time.perf_counter
        if args.subscribe:
            sub = await client.subscribe(topic, "bench-sub", message_window=0)

            async def drain() -> None:
                nonlocal received, last_delivery
                async for m in sub:
                    received += 1
                    if m.value[:1] == STAMP:
                        delivery_lat.append(clock() - _STAMP.unpack_from(m.value, 1)[0])
                    if received % 1000 == 0:
                        sub.consume(m)
                    if expected is not None and received >= expected:
                        last_delivery = clock()
                        all_received.set()

            sub_task = asyncio.create_task(drain())
        if args.warmup:
            await _throughput(client, topic, args.warmup, args.size)
        measured_from = clock()
        if args.rate:
            result["publish"] = await _fixed_rate(
                client, topic, args.rate, args.duration, args.size, stamp
            )
        else:
            result["publish"] = await _throughput(
                client,
                topic,
                args.messages,
                args.size,
                stamp=stamp,
                per_call=args.per_call,
                send=args.send,
            )
        if sub_task is not None:
            expected = args.warmup + result["publish"]["messages"]
            if received >= expected:
                last_delivery = clock()
                all_received.set()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(all_received.wait(), 60)
            sub_task.cancel()
            measured = result["publish"]["messages"]
            summary: dict[str, Any] = {"received": received, "expected": expected}
            if all_received.is_set() and last_delivery > measured_from:
                summary["delivered_per_s"] = round(measured / (last_delivery - measured_from))
            summary["publish_to_delivery"] = percentiles(delivery_lat)
            result["subscribe"] = summary
    return result


def run_bench(args: argparse.Namespace) -> int:
    cluster = None
    try:
        if args.embedded:
            cluster = DevCluster(hubs=args.hubs, region="bench", secure=args.secure).start()
            hubs = cluster.addresses
            if cluster.security is not None:
                # The benchmark's client is the dev cluster's super-user.
                env = cluster.security.client_env()
                args.tls_ca, args.cert, args.cert_key = (
                    env["HEDWIG_TLS_CA"],
                    env["HEDWIG_CERT"],
                    env["HEDWIG_KEY"],
                )
        else:
            hubs = resolve_hubs(args)
        install_uvloop()
        result = asyncio.run(_bench(hubs, args))
    except HedwigError as exc:
        return report("bench", exc)
    finally:
        if cluster is not None:
            cluster.stop()
    print(json.dumps(result, indent=2))
    return 0
