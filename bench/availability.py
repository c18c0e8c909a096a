"""Unavailability of a topic while it changes owner, with a publisher running.

    .venv/bin/python bench/availability.py move --moves 40
    .venv/bin/python bench/availability.py failover --rounds 20 --session-timeout 2 [--fault freeze]
    .venv/bin/python bench/availability.py zk-outage --outage 60
    .venv/bin/python bench/availability.py rolling-restart --hubs 5

``move``: graceful hand-offs (``RELEASE_TOPIC`` with a destination) back and forth between hubs
while a publisher sends 1,000 messages/s; for each move, the unavailability is the time from
the hand-off request to the first acknowledgement of a message published after it.

``failover``: ``kill -9`` (or, with ``--fault freeze``, SIGSTOP) of the owner; the time from the
fault until a message published after it is acknowledged by another hub. Expected: about the
ZooKeeper session timeout (the owner's ephemeral record must expire before anyone may claim)
plus recovery; the goal is at most the session timeout plus 2 s.

``zk-outage``: a publisher at 1,000 messages/s for ``--outage`` seconds with ZooKeeper up, then
as long with ZooKeeper stopped; for each window, the publish latency percentiles and the
longest gap between acknowledgements (the owner keeps publishing on its open ledger; the goal
is no pause over 100 ms beyond what the machine shows with ZooKeeper up).

``rolling-restart``: a pool of ``--hubs`` hubs at 3/3/2 with topics and a publisher; each hub
is stopped (SIGTERM), kept down past the session timeout and started again, in turn. Reports
the bytes the auditors copied, by kind: ``replace`` (replicas re-created elsewhere; the goal
is zero, as every hub is back within the re-replication delay) and ``catch-up`` (entries a
restarted replica missed while down, copied back to it).

Both print JSON with percentiles.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import time
from typing import Any

from hedwig.client import HedwigClient, RetryPolicy
from hedwig.devcluster.cluster import DevCluster
from hedwig.metadata import read_topic_owner


def pct(samples: list[float]) -> dict[str, float]:
    s = sorted(samples)
    if not s:
        return {}

    def at(q: float) -> float:
        return round(s[min(len(s) - 1, int(q * len(s)))] * 1000, 1)

    return {
        "n": len(s),
        "p50_ms": at(0.5),
        "p90_ms": at(0.9),
        "p99_ms": at(0.99),
        "max_ms": round(s[-1] * 1000, 1),
    }


class Publisher:
    """Publishes at a steady rate; records (sent_at, acked_at) of every message."""

    def __init__(self, client: HedwigClient, topic: str, rate: float) -> None:
        self.client, self.topic, self.rate = client, topic, rate
        self.acks: list[tuple[float, float]] = []
        self._stop = False
        self._tasks: list[asyncio.Task[None]] = []

    async def run(self) -> None:
        n = 0
        start = time.monotonic()
        while not self._stop:
            sent = time.monotonic()
            fut = self.client.publish_nowait(self.topic, b"x" * 100)
            self._tasks.append(asyncio.create_task(self._wait(sent, fut)))
            n += 1
            await asyncio.sleep(max(0.0, start + n / self.rate - time.monotonic()))

    async def _wait(self, sent: float, fut: asyncio.Future[Any]) -> None:
        await fut
        self.acks.append((sent, time.monotonic()))

    def first_ack_after(self, t: float) -> float | None:
        later = [a for s, a in self.acks if s >= t]
        return min(later) if later else None

    async def stop(self) -> None:
        self._stop = True
        await asyncio.gather(*self._tasks, return_exceptions=True)


async def bench_move(moves: int, rate: float) -> dict[str, Any]:
    with DevCluster(hubs=3, region="bench-move", hub_args=["--no-self-balance"]) as c:
        async with HedwigClient(c.addresses, retry=RetryPolicy(deadline_s=30)) as client:
            pub = Publisher(client, "moving", rate)
            task = asyncio.create_task(pub.run())
            await asyncio.sleep(1.0)
            gaps = []
            worst = []
            for i in range(moves):
                current = await read_topic_owner(c.zk, c.region, "moving")
                dest = next(a for a in c.addresses if a != current)
                t0 = time.monotonic()
                await client.move_topic("moving", dest)
                await asyncio.sleep(0.4)
                first = pub.first_ack_after(t0)
                if first is not None:
                    gaps.append(first - t0)
                window = [a - s for s, a in pub.acks if t0 <= s <= t0 + 0.3]
                if window:
                    worst.append(max(window))
                await asyncio.sleep(0.1 + 0.05 * (i % 3))
            await pub.stop()
            task.cancel()
            return {
                "benchmark": "graceful-move",
                "rate": rate,
                "unavailability": pct(gaps),
                "worst_publish_latency_per_move": pct(worst),
            }


async def bench_failover(rounds: int, session: float, rate: float, fault: str) -> dict[str, Any]:
    times = []
    for r in range(rounds):
        with DevCluster(
            hubs=3, region=f"bench-fo{r}", session_timeout_s=session, hub_args=["--no-self-balance"]
        ) as c:
            async with HedwigClient(c.addresses, retry=RetryPolicy(deadline_s=60)) as client:
                pub = Publisher(client, "failing", rate)
                task = asyncio.create_task(pub.run())
                await asyncio.sleep(1.5)
                victim = await read_topic_owner(c.zk, c.region, "failing")
                assert victim is not None
                hub = c.hub_at(victim)
                t0 = time.monotonic()
                hub.kill() if fault == "kill" else hub.freeze()
                first = None
                for _ in range(1200):  # poll for at most 60 s
                    first = pub.first_ack_after(t0)
                    if first is not None:
                        break
                    await asyncio.sleep(0.05)
                if first is not None:
                    times.append(first - t0)
                if fault == "freeze":
                    hub.thaw()
                await pub.stop()
                task.cancel()
    return {
        "benchmark": f"failover-after-{'kill-9' if fault == 'kill' else 'freeze'}",
        "session_timeout_s": session,
        "rate": rate,
        "rounds": rounds,
        "failed_rounds": rounds - len(times),
        "time_to_accept_again": pct(times),
    }


def _window(acks: list[tuple[float, float]], t0: float, t1: float) -> dict[str, Any]:
    during = sorted((s, a) for s, a in acks if t0 <= s <= t1)
    times = sorted(a for _, a in during)
    gaps = [b - a for a, b in itertools.pairwise(times)]
    return {
        "published": len(during),
        "publish_latency": pct([a - s for s, a in during]),
        "longest_gap_between_acks_ms": round(max(gaps, default=0.0) * 1000, 1),
    }


async def bench_zk_outage(outage: float, rate: float) -> dict[str, Any]:
    """The same publisher for ``outage`` seconds with ZooKeeper up, then as long with it down:
    the first window is the machine's own noise, to read the second against."""
    with DevCluster(hubs=3, region="bench-zk-outage", hub_args=["--no-self-balance"]) as c:
        assert c.zk_server is not None
        async with HedwigClient(c.addresses, retry=RetryPolicy(deadline_s=outage + 30)) as client:
            pub = Publisher(client, "through-outage", rate)
            task = asyncio.create_task(pub.run())
            await asyncio.sleep(2.0)
            loop = asyncio.get_running_loop()
            b0 = time.monotonic()
            await asyncio.sleep(outage)
            t0 = time.monotonic()
            await loop.run_in_executor(None, c.zk_server.stop)
            await asyncio.sleep(outage)
            t1 = time.monotonic()
            await loop.run_in_executor(None, c.zk_server.start)
            await asyncio.sleep(2.0)
            await pub.stop()
            task.cancel()
    return {
        "benchmark": "publishing-through-a-zookeeper-outage",
        "outage_s": outage,
        "rate": rate,
        "expected_per_window": int(outage * rate),
        "zookeeper_up": _window(pub.acks, b0, t0),
        "zookeeper_down": _window(pub.acks, t0, t1),
    }


def scrape_copied(cluster: DevCluster) -> dict[str, float]:
    import urllib.request

    totals: dict[str, float] = {}
    for h in cluster.hub_procs:
        with urllib.request.urlopen(h.metrics_url + "/metrics", timeout=5) as r:
            for line in r.read().decode().splitlines():
                if line.startswith("hedwig_rereplicated_bytes_total{"):
                    kind = line.split('kind="', 1)[1].split('"', 1)[0]
                    totals[kind] = totals.get(kind, 0.0) + float(line.rsplit(" ", 1)[1])
    return totals


async def bench_rolling_restart(hubs: int, rate: float, session: float) -> dict[str, Any]:
    args = ["--no-self-balance", "--audit-interval", "2"]
    with DevCluster(
        hubs=hubs,
        region="bench-rolling",
        session_timeout_s=session,
        replication="3/3/2",
        hub_args=args,
    ) as c:
        async with HedwigClient(c.addresses, retry=RetryPolicy(deadline_s=60)) as client:
            topics = [f"rolling-{i}" for i in range(2 * hubs)]
            for t in topics:
                await client.publish(t, b"x" * 100)
            pubs = [Publisher(client, t, rate / len(topics)) for t in topics]
            tasks = [asyncio.create_task(p.run()) for p in pubs]
            loop = asyncio.get_running_loop()
            t0 = time.monotonic()
            for hub in list(c.hub_procs):
                await loop.run_in_executor(None, hub.stop)
                await asyncio.sleep(session + 1)
                await loop.run_in_executor(None, hub.start)
                await asyncio.sleep(2)
            elapsed = time.monotonic() - t0
            await asyncio.sleep(6)  # audits with every hub back
            for p in pubs:
                await p.stop()
            for task in tasks:
                task.cancel()
            copied = scrape_copied(c)
    return {
        "benchmark": "rolling-restart",
        "hubs": hubs,
        "replication": "3/3/2",
        "rate": rate,
        "restart_seconds": round(elapsed, 1),
        "acknowledged": sum(len(p.acks) for p in pubs),
        "copied_bytes": {k: int(v) for k, v in sorted(copied.items())},
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="what", required=True)
    m = sub.add_parser("move")
    m.add_argument("--moves", type=int, default=40)
    m.add_argument("--rate", type=float, default=1000)
    f = sub.add_parser("failover")
    f.add_argument("--rounds", type=int, default=5)
    f.add_argument("--session-timeout", type=float, default=2.0)
    f.add_argument("--rate", type=float, default=500)
    f.add_argument("--fault", choices=["kill", "freeze"], default="kill")
    z = sub.add_parser("zk-outage")
    z.add_argument("--outage", type=float, default=60.0)
    z.add_argument("--rate", type=float, default=1000)
    r = sub.add_parser("rolling-restart")
    r.add_argument("--hubs", type=int, default=5)
    r.add_argument("--rate", type=float, default=500)
    r.add_argument("--session-timeout", type=float, default=2.0)
    args = p.parse_args()
    if args.what == "move":
        out = asyncio.run(bench_move(args.moves, args.rate))
    elif args.what == "failover":
        out = asyncio.run(bench_failover(args.rounds, args.session_timeout, args.rate, args.fault))
    elif args.what == "zk-outage":
        out = asyncio.run(bench_zk_outage(args.outage, args.rate))
    else:
        out = asyncio.run(bench_rolling_restart(args.hubs, args.rate, args.session_timeout))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
