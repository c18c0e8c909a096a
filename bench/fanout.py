"""A fan-out topic under load: delivery latency single versus fan-out, and the pause a
subscriber sees when the topic switches between them.

    .venv/bin/python bench/fanout.py --subscribers 20 --rate 200 --rounds 3 --phase 4 \\
        [--cpu-quota 0.5]

One topic, one publisher at ``--rate`` messages/s (each message carries its send time), and
``--subscribers`` subscribers in this process, consuming everything. The topic alternates:
``--phase`` seconds single, ``--phase`` seconds fan-out over two delivery hubs, ``--rounds``
times, and ends single. Reported, as JSON:

- ``latency``: publish-to-delivery latency percentiles per mode, from the steady part of each
  phase (its first second is left out);
- ``switch_pause``: for each switch, the longest gap between two deliveries any subscriber saw
  in the two seconds after it, and the same over the steady phases (``steady_gap``), which is
  what the machine shows without a switch;
- ``lost``: sequence ids a subscriber never received (must be 0).

``--cpu-quota F`` puts each hub process in a cgroup (v1 ``cpu`` controller) limited to ``F``
CPUs, so hubs compete on equal terms on a shared machine; the cgroups are removed afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hedwig.client import HedwigClient, Subscriber
from hedwig.clock import SystemClock
from hedwig.devcluster.cluster import DevCluster
from hedwig.metadata import PlanMode, open_store
from hedwig.placement.plans import set_topic_mode

CGROUP_CPU = Path("/sys/fs/cgroup/cpu")
TOPIC = "bench/fanout"


def pct(samples: list[float]) -> dict[str, float]:
    s = sorted(samples)
    if not s:
        return {}

    def at(q: float) -> float:
        return round(s[min(len(s) - 1, int(q * len(s)))] * 1000, 2)

    return {"n": len(s), "p50_ms": at(0.5), "p99_ms": at(0.99), "max_ms": round(s[-1] * 1000, 2)}


class Quotas:
    """One cgroup per hub process, each limited to the same CPU share."""

    def __init__(self, cpus: float) -> None:
        self.cpus = cpus
        self.made: list[Path] = []

    def limit(self, pid: int) -> None:
        group = CGROUP_CPU / f"hedwig-bench-{os.getpid()}-{pid}"
        group.mkdir()
        self.made.append(group)
        period = 100_000
        (group / "cpu.cfs_period_us").write_text(str(period))
        (group / "cpu.cfs_quota_us").write_text(str(int(self.cpus * period)))
        (group / "cgroup.procs").write_text(str(pid))

    def remove(self) -> None:
        for group in self.made:
            with contextlib.suppress(OSError):
                for pid in (group / "cgroup.procs").read_text().split():
                    (CGROUP_CPU / "cgroup.procs").write_text(pid)
                group.rmdir()


@contextlib.contextmanager
def capped(cluster: DevCluster, cpus: float) -> Iterator[None]:
    """Every hub of ``cluster`` limited to ``cpus`` CPUs (0: no limit) while in the block."""
    quotas = Quotas(cpus) if cpus else None
    try:
        if quotas is not None:
            for hub in cluster.hub_procs:
                assert hub.proc is not None
                quotas.limit(hub.proc.pid)
        yield
    finally:
        if quotas is not None:
            quotas.remove()


class Recorder:
    def __init__(self) -> None:
        self.arrivals: dict[str, list[tuple[float, int]]] = {}
        self.latency: list[tuple[float, float]] = []  # (arrival, latency)

    async def drain(self, sub: Subscriber) -> None:
        got = self.arrivals.setdefault(sub.name, [])
        async for m in sub:
            now = time.monotonic()
            (sent,) = struct.unpack_from(">d", m.value)
            got.append((now, m.seq))
            self.latency.append((now, time.time() - sent))
            sub.consume(m)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    with (
        DevCluster(hubs=3, region="bench-fanout", session_timeout_s=4.0) as cluster,
        capped(cluster, args.cpu_quota),
    ):
        return await measure(cluster, args)


async def measure(cluster: DevCluster, args: argparse.Namespace) -> dict[str, Any]:
    rec = Recorder()
    store = open_store(cluster.zk, region=cluster.region)
    await store.start()
    pub = HedwigClient(cluster.addresses)
    subc = HedwigClient(cluster.addresses)
    tasks: list[asyncio.Task[None]] = []
    try:
        await pub.publish(TOPIC, struct.pack(">d", time.time()))
        for i in range(args.subscribers):
            sub = await subc.subscribe(TOPIC, f"s{i:03d}", message_window=2000)
            tasks.append(asyncio.create_task(rec.drain(sub)))
        stop = asyncio.Event()
        sent: list[int] = []

        async def publish() -> None:
            interval = 1.0 / args.rate
            due = time.monotonic()
            pending: list[asyncio.Future[Any]] = []
            while not stop.is_set():
                pending.append(pub.publish_nowait(TOPIC, struct.pack(">d", time.time())))
                due += interval
                await asyncio.sleep(max(0.0, due - time.monotonic()))
            for f in pending:
                sent.append((await f).seq)

        publisher = asyncio.create_task(publish())
        phases: list[tuple[str, float, float]] = []  # (mode, start, end)
        switches: list[tuple[str, float]] = []
        modes = [PlanMode.SINGLE, PlanMode.FAN_OUT] * args.rounds + [PlanMode.SINGLE]
        current = PlanMode.SINGLE
        for m in modes:
            if m is not current:
                at = time.monotonic()
                await set_topic_mode(store, TOPIC, m, hubs=2, clock=SystemClock())
                switches.append((f"{current.value}->{m.value}", at))
                current = m
            start = time.monotonic()
            await asyncio.sleep(args.phase)
            phases.append((m.value, start, time.monotonic()))
        stop.set()
        await publisher
        last = max(sent)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(  # noqa: ASYNC110 - polls other tasks' lists
            not a or a[-1][1] < last for a in rec.arrivals.values()
        ):
            await asyncio.sleep(0.1)
    finally:
        for t in tasks:
            t.cancel()
        await pub.close()
        await subc.close()
        await store.close()

    def gaps(lo: float, hi: float) -> list[float]:
        out = []
        for arrivals in rec.arrivals.values():
            times = [t for t, _ in arrivals if lo <= t <= hi]
            out += [b - a for a, b in itertools.pairwise(times)]
        return out

    latency: dict[str, list[float]] = {}
    steady: list[float] = []
    for mode, start, end in phases:
        latency.setdefault(mode, []).extend(
            lat for t, lat in rec.latency if start + 1.0 <= t <= end
        )
        steady += gaps(start + 2.0, end)
    lost = 0
    for arrivals in rec.arrivals.values():
        seen = {q for _, q in arrivals}
        lost += sum(1 for q in range(2, last + 1) if q not in seen)
    return {
        "subscribers": args.subscribers,
        "rate": args.rate,
        "cpu_quota": args.cpu_quota,
        "load_average": os.getloadavg()[0],
        "latency": {mode: pct(samples) for mode, samples in latency.items()},
        "switch_pause": [
            {"switch": name, "longest_gap_ms": round(max(gaps(at, at + 2.0), default=0) * 1000, 1)}
            for name, at in switches
        ],
        "steady_gap": pct(steady),
        "messages": last,
        "lost": lost,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--subscribers", type=int, default=20)
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--phase", type=float, default=4.0, help="seconds per phase")
    parser.add_argument("--cpu-quota", type=float, default=0.0, help="CPUs per hub (cgroup)")
    print(json.dumps(asyncio.run(run(parser.parse_args())), indent=2))


if __name__ == "__main__":
    main()
