"""``hedwig demo``: a cluster on this machine with traffic flowing, for a first look.

Starts ZooKeeper and three hubs, publishes a message every ``--interval`` seconds to a few
topics through different hubs, and subscribes to them through yet another hub, printing every
delivery with the hub that owns its topic. Ctrl-C stops everything.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys

from hedwig.client import HedwigClient
from hedwig.devcluster.cluster import DevCluster
from hedwig.errors import HedwigError


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("demo", help="start a local cluster and show messages flowing")
    p.add_argument("--hubs", type=int, default=3)
    p.add_argument("--topics", type=int, default=4)
    p.add_argument("--interval", type=float, default=0.5, help="seconds between publishes")
    p.add_argument("--duration", type=float, default=None, help="stop after this many seconds")
    p.set_defaults(func=run_demo)


async def _traffic(cluster: DevCluster, args: argparse.Namespace) -> None:
    topics = [f"demo/quadrant-{i}" for i in range(args.topics)]
    hubs = cluster.addresses
    async with HedwigClient(hubs[0]) as pub, HedwigClient(hubs[-1]) as subc:
        subs = [await subc.subscribe(t, "demo-viewer") for t in topics]

        async def show(sub: object) -> None:
            from hedwig.client import Subscriber

            assert isinstance(sub, Subscriber)
            async for m in sub:
                owner = subc.owner_of(sub.topic)
                print(
                    f"  delivered {sub.topic} #{m.seq}: {m.value.decode()}  (owner {owner})",
                    flush=True,
                )
                sub.consume(m)

        tasks = [asyncio.create_task(show(s)) for s in subs]
        n = 0
        loop = asyncio.get_running_loop()
        end = None if args.duration is None else loop.time() + args.duration
        while end is None or loop.time() < end:
            topic = topics[n % len(topics)]
            r = await pub.publish(topic, f"vehicle-{n % 7} at ({n % 13},{n % 11})".encode())
            print(f"published {topic} #{r.seq}", flush=True)
            n += 1
            await asyncio.sleep(args.interval)
        for t in tasks:
            t.cancel()


def run_demo(args: argparse.Namespace) -> int:
    try:
        cluster = DevCluster(hubs=args.hubs, region="demo").start()
    except HedwigError as exc:
        print(f"hedwig demo: {exc}", file=sys.stderr)
        return 1
    try:
        print(f"READY hubs={','.join(cluster.addresses)} zk={cluster.zk}", flush=True)
        print(
            f"watch ownership with: hedwig topics --metadata {cluster.zk} --region demo",
            flush=True,
        )

        async def main() -> None:
            task = asyncio.create_task(_traffic(cluster, args))
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, task.cancel)
            with contextlib.suppress(asyncio.CancelledError):
                await task

        asyncio.run(main())
    finally:
        cluster.stop()
    return 0
