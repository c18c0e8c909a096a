"""Many topics on one hub: what claiming, owning and listing them costs.

    .venv/bin/python -m bench.scale --topics 100000 [--store zookeeper|etcd|URL]

Starts a ZooKeeper or an etcd (unless ``--store`` is a URL) and one hub in this process (1/1/1
replication), claims ``--topics`` topics through the hub's normal claim path (the one a first
publish takes: topic node, owner record, ledger, persistence info) ``--concurrency`` at a time,
then measures, with every topic owned and idle:

- claims per second;
- hub memory per owned idle topic: the growth of this process's resident memory over the
  claims, divided by the topics (the process holds the hub only: the store's server runs apart);
- the hub's CPU per second while idle for ``--idle`` seconds (the per-second cost of owning
  idle topics: timers, loops, reports);
- the size of its load report, the number of series on its ``/metrics``;
- the time to list every topic of the region from the store.

Prints one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import tempfile
import time
from typing import Any

from prometheus_client import generate_latest

from hedwig.devcluster.etcd import EtcdServer
from hedwig.devcluster.zookeeper import ZooKeeperServer
from hedwig.hub import Hub, HubConfig
from hedwig.metadata import open_store


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


async def run(args: argparse.Namespace) -> dict[str, Any]:
    zk: ZooKeeperServer | None = None
    etcd: EtcdServer | None = None
    store_url = args.store
    if store_url == "zookeeper":
        zk = ZooKeeperServer(data_dir=tempfile.mkdtemp(prefix="hedwig-scale-zk-"))
        zk.start()
        store_url = f"zk://{zk.address}"
    elif store_url == "etcd":
        etcd = EtcdServer(data_dir=tempfile.mkdtemp(prefix="hedwig-scale-etcd-"))
        etcd.start()
        store_url = etcd.url
    region = f"scale-{os.getpid()}"
    config = HubConfig(
        zk=store_url,
        region=region,
        listen="127.0.0.1:0",
        data_dir=tempfile.mkdtemp(prefix="hedwig-scale-hub-"),
        replication="1/1/1",
        zk_session_timeout_s=args.session_timeout,
    )
    hub = Hub(config)
    out: dict[str, Any] = {"store": store_url.split("://")[0], "topics": args.topics}
    try:
        await hub.start()
        names = [f"scale/{i:07d}" for i in range(args.topics)]
        rss0 = rss_bytes()
        t0 = time.monotonic()
        for start in range(0, len(names), args.concurrency):
            chunk = names[start : start + args.concurrency]
            await asyncio.gather(*(hub.topics.acquire(n, redirected=True) for n in chunk))
            if args.progress and (start // args.concurrency) % 20 == 0:
                print(f"{start + len(chunk)} claimed", flush=True)
        claim_s = time.monotonic() - t0
        out["claim_s"] = round(claim_s, 1)
        out["claims_per_s"] = round(args.topics / claim_s, 1)
        await asyncio.sleep(2)
        out["hub_bytes_per_idle_topic"] = round((rss_bytes() - rss0) / args.topics)
        c0, w0 = cpu_s(), time.monotonic()
        await asyncio.sleep(args.idle)
        out["idle_cpu_per_s"] = round((cpu_s() - c0) / (time.monotonic() - w0), 4)
        report = hub.loops.load_report()
        out["load_report_bytes"] = len(report.to_json())
        hub.loops.refresh_gauges()
        exposition = generate_latest(hub.metrics.registry).decode()
        out["metric_series"] = sum(
            1 for line in exposition.splitlines() if line and not line.startswith("#")
        )
        async with open_store(store_url, region=region) as reader:
            t0 = time.monotonic()
            listed = await reader.topics.list_topics()
            out["list_s"] = round(time.monotonic() - t0, 2)
            out["listed"] = len(listed)
    finally:
        await hub.stop()
        if zk is not None:
            zk.stop()
        if etcd is not None:
            etcd.stop()
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--topics", type=int, default=10_000)
    p.add_argument(
        "--store",
        default="zookeeper",
        help="zookeeper or etcd (a server started here), or a metadata store URL",
    )
    p.add_argument("--concurrency", type=int, default=500, help="claims in flight")
    p.add_argument("--idle", type=float, default=30.0, help="seconds of idle CPU measured")
    p.add_argument("--session-timeout", type=float, default=6.0)
    p.add_argument("--progress", action="store_true")
    print(json.dumps(asyncio.run(run(p.parse_args()))))


if __name__ == "__main__":
    main()
