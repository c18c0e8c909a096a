"""Metadata operations per second of each store, side by side in one run.

    .venv/bin/python -m bench.metadata_ops [--ops 2000] [--concurrency 50] [--subscriptions 100]

Starts a ZooKeeper and an etcd on loopback and, for each store (and the in-process one for
reference), runs ``--concurrency`` workers at a time over fresh topics:

- **claim**: what a hub's claim writes and reads of the store: ensure the topic, read its owner
  record, create it (compare-and-set, session- or lease-bound);
- **consume mark**: a compare-and-set update of a subscription's record (what a subscriber's
  consume mark costs the owner);
- **read subscriptions**: every subscription of a topic holding ``--subscriptions`` of them.

Prints one JSON object per store.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable
from typing import Any

from hedwig.devcluster.etcd import EtcdServer
from hedwig.devcluster.zookeeper import ZooKeeperServer
from hedwig.metadata import (
    NEW_VERSION,
    HubInfo,
    MetadataStore,
    SubscriptionData,
    SubscriptionPreferences,
    SubscriptionState,
    open_store,
)


async def rate(n: int, concurrency: int, op: Callable[[int], Awaitable[None]]) -> float:
    """Operations per second of ``op(i)`` for i in range(n), ``concurrency`` in flight."""
    todo = iter(range(n))

    async def worker() -> None:
        for i in todo:
            await op(i)

    t0 = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return n / (time.monotonic() - t0)


async def measure(store: MetadataStore, args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    owner = HubInfo("127.0.0.1:1", 1)

    async def claim(i: int) -> None:
        topic = f"claim/{i}"
        await store.topics.ensure_topic(topic)
        await store.ownership.read_owner_info(topic)
        await store.ownership.write_owner_info(topic, owner, NEW_VERSION)

    out["claims_per_s"] = round(await rate(args.ops, args.concurrency, claim))

    prefs = SubscriptionPreferences(message_window=100)
    versions = {}
    for i in range(args.concurrency):
        await store.topics.ensure_topic(f"marks/{i}")
        data = SubscriptionData(prefs, SubscriptionState(0, 0))
        versions[i] = await store.subscriptions.create_subscription_data(f"marks/{i}", "s", data)

    async def marks(k: int) -> None:
        # One writer per subscription, in order (a CAS on the version it wrote last), as an
        # owner writes each subscription's marks.
        for seq in range(1, args.ops // args.concurrency + 1):
            data = SubscriptionData(prefs, SubscriptionState(seq, 0))
            versions[k] = await store.subscriptions.replace_subscription_data(
                f"marks/{k}", "s", data, versions[k]
            )

    per_writer = args.ops // args.concurrency
    t0 = time.monotonic()
    await asyncio.gather(*(marks(k) for k in range(args.concurrency)))
    elapsed = time.monotonic() - t0
    out["consume_marks_per_s"] = round(per_writer * args.concurrency / elapsed)

    await store.topics.ensure_topic("many-subs")
    for j in range(args.subscriptions):
        await store.subscriptions.create_subscription_data("many-subs", f"s{j}", SubscriptionData())

    async def read_all(i: int) -> None:
        got = await store.subscriptions.read_subscriptions("many-subs")
        assert len(got) == args.subscriptions

    reads = max(1, args.ops // 10)
    out["subscription_reads_per_s"] = round(await rate(reads, args.concurrency, read_all), 1)
    out["subscriptions_per_topic"] = args.subscriptions
    return out


async def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    # The servers' data directories go at the end (each run left two behind).
    dirs = [tempfile.mkdtemp(prefix="hedwig-ops-zk-"), tempfile.mkdtemp(prefix="hedwig-ops-etcd-")]
    zk = ZooKeeperServer(data_dir=dirs[0])
    etcd = EtcdServer(data_dir=dirs[1])
    zk.start()
    etcd.start()
    results = []
    try:
        for name, url in (
            ("zookeeper", f"zk://{zk.address}"),
            ("etcd", etcd.url),
            ("memory", "memory://bench"),
        ):
            async with open_store(url, region=f"ops-{os.getpid()}") as store:
                results.append({"store": name, **await measure(store, args)})
    finally:
        zk.stop()
        etcd.stop()
        for d in dirs:
            shutil.rmtree(d, ignore_errors=True)
    return results


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--ops", type=int, default=2000, help="claims and consume marks per store")
    p.add_argument("--concurrency", type=int, default=50)
    p.add_argument("--subscriptions", type=int, default=100)
    for row in asyncio.run(run(p.parse_args())):
        print(json.dumps(row))


if __name__ == "__main__":
    main()
