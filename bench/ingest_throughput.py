"""Messages acknowledged per second from many publishers of one topic: one lane against several.

    .venv/bin/python -m bench.ingest_throughput --publishers 30 --lanes 3 \\
        --cpu-quota 0.05 --duration 8 --procs 4 --pending 64

Three hubs (1/1/1: the storage path is the owner's own disk; what is measured is what one hub
takes), each capped by a cgroup to the same CPU share (``--cpu-quota``, CPUs per hub) so that
one hub's limit, not the machine's other load, bounds what a lane takes. Their ledgers are on
tmpfs (``--data-dir``): on this machine the hubs would otherwise share one disk, and three
hubs' fsyncs on it would measure the disk, not the hubs.
Phase 1: the topic is single; ``--publishers`` publishers (each its own client and publisher
id, spread over ``--procs`` worker processes) publish flat out, each keeping
``PUBLISH_PENDING`` calls of ``PUBLISH_BATCH`` messages in flight. Phase 2: the topic is
switched to ``--lanes`` lanes (``hedwig topic mode ingest``; each new lane meant for a hub no
other lane is meant for) and as many fresh publishers publish the same way, each sent to its
lane by its id. In each phase every publisher counts the messages acknowledged in one window
of ``--duration`` seconds, the same for every worker, which the driver sends once all of them
are publishing (``bench.workers.open_window``), after a warm-up. Prints JSON: acknowledged
messages per second per phase, their ratio, how the second phase's publishers were spread
over the lanes, and the CPU the machine and each hub used in each window (hubs at their quota
and the machine short of its cores: the hubs were the limit).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import tempfile
import time
from collections import Counter
from typing import Any

from bench.workers import CpuUse, open_window, pin, results, spawn, window_from_driver
from hedwig.clock import SystemClock
from hedwig.devcluster.cluster import DevCluster
from hedwig.metadata import PlanMode, open_store
from hedwig.placement.plans import set_topic_mode
from hedwig.protocol import lane_name

TOPIC = "bench/ingest"
# From the moment every worker is publishing to the window's start. The hubs' rates settle in
# about three seconds (a lane phase's fresh publishers are first refused by lane 0 and
# switch; connections and pipelines fill); the window must not count that.
WARMUP_S = 4.0
# Each publisher keeps this many calls of this many messages in flight: enough that a lane's
# hub, not the round trip, bounds what it takes, and that a lane's hub (a third of the
# publishers) gets group commits as large as the single hub's (all of them) did.
PUBLISH_BATCH = 50
PUBLISH_PENDING = 64
MESSAGE = b"x" * 100
# With ``--pin``: the hubs share one CPU and the load generators get the others, so that in
# both phases the hubs run beside each other only, not beside the generators' bursts.
HUB_CPUS = {0}
WORKER_CPUS = set(range(1, os.cpu_count() or 2))


# The worker: publishers ---------------------------------------------------------------------


async def worker(
    hubs: list[str], ids: list[str], duration: float, in_flight: int = PUBLISH_PENDING
) -> dict[str, Any]:
    from hedwig.client import HedwigClient

    window = [float("inf"), float("-inf")]
    acked = 0
    lanes: Counter[int] = Counter()
    stop = asyncio.Event()
    batch = [MESSAGE] * PUBLISH_BATCH

    async def publisher(publisher_id: str) -> None:
        nonlocal acked
        async with HedwigClient(hubs, publisher_id=publisher_id) as client:
            pending: set[asyncio.Future[Any]] = set()
            while not stop.is_set():
                while len(pending) < in_flight:
                    pending.add(client.publish_batch_nowait(TOPIC, batch))
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                now = time.monotonic()
                for fut in done:
                    result = fut.result()
                    if window[0] <= now <= window[1]:
                        acked += len(result)
                        lanes[result[0].lane] += 1
            await asyncio.gather(*pending, return_exceptions=True)

    tasks = [asyncio.create_task(publisher(i)) for i in ids]
    print("STARTED", flush=True)
    window[0], window[1] = await window_from_driver()
    await asyncio.sleep(max(0.0, window[1] - time.monotonic()) + 0.2)
    stop.set()
    await asyncio.gather(*tasks)
    return {"acked": acked, "seconds": duration, "calls_by_lane": dict(lanes)}


# The driver ---------------------------------------------------------------------------------


def start_workers(hubs: list[str], prefix: str, args: argparse.Namespace) -> list[Any]:
    return spawn(
        [
            [
                "-m",
                "bench.ingest_throughput",
                "--worker",
                ",".join(hubs),
                "--ids",
                ",".join(f"{prefix}-{i}" for i in range(p, args.publishers, args.procs)),
                "--duration",
                str(args.duration),
                "--pending",
                str(args.pending),
            ]
            for p in range(args.procs)
        ],
        "STARTED",
    )


def collect(procs: list[Any]) -> tuple[float, dict[int, int]]:
    """Messages acknowledged per second over all workers, and calls acknowledged per lane."""
    got = results(procs)
    lanes: Counter[int] = Counter()
    for g in got:
        lanes.update({int(k): v for k, v in g["calls_by_lane"].items()})
    seconds = got[0]["seconds"] if got else 1.0
    return sum(g["acked"] for g in got) / seconds, dict(sorted(lanes.items()))


async def phase(
    cluster: DevCluster, prefix: str, args: argparse.Namespace
) -> tuple[float, Any, dict[str, Any]]:
    """Acknowledged messages per second, calls per lane, and the CPU used in the window."""
    loop = asyncio.get_running_loop()
    procs = await loop.run_in_executor(None, start_workers, cluster.addresses, prefix, args)
    if args.pin:
        pin([p.pid for p in procs], WORKER_CPUS)
    start = time.monotonic() + WARMUP_S
    open_window(procs, start, start + args.duration)
    await asyncio.sleep(WARMUP_S)
    cpu = CpuUse([h.proc.pid for h in cluster.hub_procs if h.proc is not None])
    await asyncio.sleep(args.duration)
    used = cpu.stop()
    rate, by_lane = await loop.run_in_executor(None, collect, procs)
    return rate, by_lane, used


async def drive(args: argparse.Namespace) -> dict[str, Any]:
    from bench.fanout import capped
    from hedwig.client import HedwigClient

    # Each hub of a real region has its disk; here they would share one, and three hubs'
    # fsyncs on one disk would measure the disk. tmpfs keeps the CPU share the limit.
    base = tempfile.mkdtemp(prefix="hedwig-bench-ingest-", dir=args.data_dir)
    with (
        DevCluster(hubs=3, region="bench-ingest", replication="1/1/1", base_dir=base) as cluster,
        capped(cluster, args.cpu_quota),
    ):
        hubs = cluster.addresses
        if args.pin:
            pin([h.proc.pid for h in cluster.hub_procs if h.proc is not None], HUB_CPUS)
        async with open_store(cluster.zk, region=cluster.region) as store:
            async with HedwigClient(hubs) as c:
                await c.publish(TOPIC, b"first")
            single, _, single_cpu = await phase(cluster, "single", args)
            plan = await set_topic_mode(
                store, TOPIC, PlanMode.INGEST, hubs=args.lanes, clock=SystemClock()
            )
            # Each lane claimed by the hub it was meant for before the clock starts.
            async with HedwigClient(hubs) as c:
                for lane in plan.lanes:
                    await c.topic_info(lane_name(TOPIC, lane.index))
            owners = {}
            for lane in plan.lanes:
                got = await store.ownership.read_owner_info(lane_name(TOPIC, lane.index))
                owners[lane.index] = got.value.address if got is not None else None
            lanes, by_lane, lanes_cpu = await phase(cluster, "lanes", args)
            owners_after = {}
            for lane in plan.lanes:
                got = await store.ownership.read_owner_info(lane_name(TOPIC, lane.index))
                owners_after[lane.index] = got.value.address if got is not None else None
    shutil.rmtree(base, ignore_errors=True)
    return {
        "publishers": args.publishers,
        "lanes": args.lanes,
        "cpu_quota": args.cpu_quota,
        "pinned": args.pin,
        "lane_owners": owners,
        "lane_owners_after": owners_after,
        "acked_per_s": {"single": round(single), "lanes": round(lanes)},
        "ratio": round(lanes / single, 2) if single else None,
        "calls_by_lane": by_lane,
        "cpu": {"single": single_cpu, "lanes": lanes_cpu},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--publishers", type=int, default=30)
    parser.add_argument("--lanes", type=int, default=3)
    parser.add_argument("--cpu-quota", type=float, default=0.05, help="CPUs per hub (cgroup)")
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--procs", type=int, default=4, help="publisher worker processes")
    parser.add_argument(
        "--pending",
        type=int,
        default=PUBLISH_PENDING,
        help="calls each publisher keeps in flight (flat out: enough that the hubs, not the "
        "round trips, bound what is acknowledged)",
    )
    parser.add_argument(
        "--data-dir",
        default="/dev/shm" if os.path.isdir("/dev/shm") else None,
        help="where the hubs keep their ledgers (default tmpfs: the hubs share one disk here)",
    )
    parser.add_argument(
        "--pin",
        action="store_true",
        help="run the hubs on CPU 0 and the publishers on the other CPUs",
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--ids", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        got = asyncio.run(
            worker(args.worker.split(","), args.ids.split(","), args.duration, args.pending)
        )
        print(json.dumps(got), flush=True)
        return
    print(json.dumps(asyncio.run(drive(args)), indent=2))


if __name__ == "__main__":
    main()
