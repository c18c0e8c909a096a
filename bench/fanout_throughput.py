"""Messages delivered per second to many subscribers of one topic: one hub against fan-out.

    .venv/bin/python bench/fanout_throughput.py --subscribers 200 --delivery-hubs 3 \\
        --cpu-quota 0.25 --duration 10 --procs 2

Four hubs (1/1/1: the storage path is not what is measured), each capped by a cgroup to the
same CPU share (``--cpu-quota``, CPUs per hub) so that one hub's limit, not the machine's
other load, bounds what it delivers. One publisher publishes as fast as acknowledgements come,
in calls of ``PUBLISH_BATCH`` messages.
Phase 1: the topic is single, ``--subscribers`` subscribers attach (to the owner). Phase 2:
the topic is fanned out over ``--delivery-hubs`` hubs (not the owner) and as many fresh
subscribers attach, each sent to its delivery hub. In each phase every subscriber counts the
messages delivered to it during ``--duration`` seconds after a warm-up.

Subscribers are raw hub connections in ``--procs`` worker processes (SUBSCRIBE, count each
DELIVER's batch, CONSUME its last sequence id), so the clients cost little per message and
the hubs are what is measured. Prints JSON: delivered messages per second per phase and
their ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import struct
import time
from typing import Any

from bench.workers import results, spawn
from hedwig.clock import SystemClock
from hedwig.devcluster.cluster import DevCluster
from hedwig.errors import NotResponsibleError
from hedwig.metadata import PlanMode, open_store
from hedwig.net.connection import HubConnection
from hedwig.placement.plans import set_topic_mode
from hedwig.protocol import Consume, Deliver, Event, Subscribe

TOPIC = "bench/hot"
# A fixed-rate run's messages start with their send time (CLOCK_MONOTONIC, shared by the
# processes of one machine), in nanoseconds.
STAMP = struct.Struct("<q")
WARMUP_S = 2.0
# The publisher sends calls of this many messages, this many at once: the owner, capped like
# the others, then takes publishes far faster than one hub can deliver them to the
# subscribers, so delivery is what the two phases compare (one message per call, the owner's
# per-request cost bounded the fan-out phase instead).
PUBLISH_BATCH = 50
PUBLISH_PENDING = 40


# The worker: raw subscribers -------------------------------------------------------------------


async def worker(
    hubs: list[str], names: list[str], duration: float, *, stamped: bool = False
) -> dict[str, Any]:
    counted = 0
    window = [float("inf"), float("-inf")]
    # With ``stamped`` messages (a fixed-rate run): each one's publish-to-delivery latency, ms.
    latencies: list[float] = []

    def on_event(conn: HubConnection, event: Event) -> None:
        nonlocal counted
        if not isinstance(event, Deliver):
            return
        now = time.monotonic()
        if window[0] <= now <= window[1]:
            counted += event.batch.count
            if stamped:
                now_ns = time.monotonic_ns()
                for m in event.batch.iter_delivered():
                    (sent,) = STAMP.unpack_from(m.value)
                    latencies.append((now_ns - sent) / 1e6)
        conn.send_nowait(
            Consume(
                request_id=conn.next_id(),
                topic=event.topic,
                subscriber=event.subscriber,
                seq=event.batch.last_seq,
            )
        ).add_done_callback(lambda f: f.cancelled() or f.exception())

    conns: list[HubConnection] = []
    for i, name in enumerate(names):
        address, redirected = hubs[i % len(hubs)], False
        for _ in range(4):
            conn = await HubConnection.open(address, on_event)
            try:
                await conn.request(
                    Subscribe(
                        request_id=conn.next_id(),
                        topic=TOPIC,
                        subscriber=name,
                        message_window=0,
                        redirected=redirected,
                    )
                )
            except NotResponsibleError as exc:
                conn.close()
                if exc.owner is None:
                    raise
                address, redirected = exc.owner, True
                continue
            conns.append(conn)
            break
    print("ATTACHED", flush=True)
    start = time.monotonic() + WARMUP_S
    window[0], window[1] = start, start + duration
    await asyncio.sleep(WARMUP_S + duration + 0.2)
    for conn in conns:
        conn.close()
    return {
        "delivered": counted,
        "seconds": duration,
        "connections": len(conns),
        "latencies_ms": [round(x, 3) for x in latencies],
    }


# The driver ----------------------------------------------------------------------------------


def start_workers(hubs: list[str], prefix: str, args: argparse.Namespace) -> list[Any]:
    per = args.subscribers // args.procs
    return spawn(
        [
            [
                "-m",
                "bench.fanout_throughput",
                "--worker",
                ",".join(hubs),
                "--names",
                ",".join(f"{prefix}-{p}-{i}" for i in range(per)),
                "--duration",
                str(args.duration),
                *(["--stamped"] if args.rate else []),
            ]
            for p in range(args.procs)
        ],
        "ATTACHED",
    )


def collect(procs: list[Any]) -> tuple[float, list[float]]:
    """Messages delivered per second over all workers, and every latency sample (ms)."""
    got = results(procs, timeout=120)
    seconds = got[0]["seconds"] if got else 1.0
    latencies = [x for g in got for x in g["latencies_ms"]]
    return sum(g["delivered"] for g in got) / seconds, latencies


def percentiles(samples: list[float]) -> dict[str, float]:
    if not samples:
        return {"n": 0}
    s = sorted(samples)

    def at(q: float) -> float:
        return round(s[min(len(s) - 1, int(q * len(s)))], 2)

    return {"n": len(s), "p50_ms": at(0.50), "p99_ms": at(0.99), "p999_ms": at(0.999)}


async def publish_flat_out(hubs: list[str], stop: asyncio.Event) -> int:
    from hedwig.client import HedwigClient

    sent = 0
    batch = [b"x" * 100] * PUBLISH_BATCH
    async with HedwigClient(hubs) as pub:
        pending: set[asyncio.Future[Any]] = set()
        while not stop.is_set():
            while len(pending) < PUBLISH_PENDING:
                pending.add(pub.publish_batch_nowait(TOPIC, batch))
                sent += PUBLISH_BATCH
            _, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        await asyncio.gather(*pending, return_exceptions=True)
    return sent


async def publish_at_rate(hubs: list[str], stop: asyncio.Event, rate: float) -> int:
    """One message at a time at ``rate`` per second, each stamped with its send time."""
    from hedwig.client import HedwigClient

    sent = 0
    pad = b"x" * (100 - STAMP.size)
    async with HedwigClient(hubs) as pub:
        pending: set[asyncio.Future[Any]] = set()
        start = time.monotonic()
        while not stop.is_set():
            due = int((time.monotonic() - start) * rate) + 1
            while sent < due:
                fut = pub.publish_nowait(TOPIC, STAMP.pack(time.monotonic_ns()) + pad)
                pending.add(fut)
                fut.add_done_callback(pending.discard)
                sent += 1
            await asyncio.sleep(0.001)
        await asyncio.gather(*pending, return_exceptions=True)
    return sent


async def phase(
    hubs: list[str], prefix: str, args: argparse.Namespace
) -> tuple[float, list[float]]:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    procs = await loop.run_in_executor(None, start_workers, hubs, prefix, args)
    if args.rate:
        publisher = asyncio.create_task(publish_at_rate(hubs, stop, args.rate))
    else:
        publisher = asyncio.create_task(publish_flat_out(hubs, stop))
    got = await loop.run_in_executor(None, collect, procs)
    stop.set()
    await publisher
    return got


async def drive(args: argparse.Namespace) -> dict[str, Any]:
    from bench.fanout import capped
    from hedwig.client import HedwigClient

    with (
        DevCluster(hubs=4, region="bench-throughput", replication="1/1/1") as cluster,
        capped(cluster, args.cpu_quota),
    ):
        hubs = cluster.addresses
        async with open_store(cluster.zk, region=cluster.region) as store:
            async with HedwigClient(hubs) as c:
                await c.publish(TOPIC, b"first")
            single, single_lat = await phase(hubs, "single", args)
            await set_topic_mode(
                store, TOPIC, PlanMode.FAN_OUT, hubs=args.delivery_hubs, clock=SystemClock()
            )
            await asyncio.sleep(1.0)
            fanned, fanned_lat = await phase(hubs, "fanout", args)
    return {
        "subscribers": args.subscribers,
        "delivery_hubs": args.delivery_hubs,
        "cpu_quota": args.cpu_quota,
        "publish_rate": args.rate or "as fast as acknowledgements come",
        "delivered_per_s": {"single": round(single), "fan_out": round(fanned)},
        "ratio": round(fanned / single, 2) if single else None,
        **(
            {
                "latency": {
                    "single": percentiles(single_lat),
                    "fan_out": percentiles(fanned_lat),
                }
            }
            if args.rate
            else {}
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--subscribers", type=int, default=200)
    parser.add_argument("--delivery-hubs", type=int, default=3)
    parser.add_argument("--cpu-quota", type=float, default=0.25, help="CPUs per hub (cgroup)")
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--procs", type=int, default=2, help="subscriber worker processes")
    parser.add_argument(
        "--rate",
        type=float,
        default=0.0,
        help="publish at this fixed rate with stamped messages and report publish-to-delivery "
        "latency per phase (default: as fast as acknowledgements come)",
    )
    parser.add_argument("--stamped", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--names", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        got = asyncio.run(
            worker(
                args.worker.split(","), args.names.split(","), args.duration, stamped=args.stamped
            )
        )
        print(json.dumps(got), flush=True)
        return
    print(json.dumps(asyncio.run(drive(args)), indent=2))


if __name__ == "__main__":
    main()
