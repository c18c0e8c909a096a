"""The nemesis: a seeded random schedule of faults against a lab cluster under load.

Three hubs at 3/3/2, ZooKeeper and the client each in a namespace (``tests/failure/lab``), the
history workload running throughout. One fault at a time, each held for a random time (from
well under the session timeout to twice it), then undone, then a quiet spell:

- partitions: the owner of a topic from ZooKeeper, from its replicas, the clients from the
  owner, a one-way cut between two random nodes, a hub isolated from everything;
- a slow link (the owner's connection to a replica through a delaying relay);
- a slow disk (hub 0's fsync delayed; where the machine has none, this fault is left out);
- ``kill -9`` of a hub (restarted on the same address and data when the fault is undone);
- a freeze (SIGSTOP, then SIGCONT);
- a ZooKeeper restart.

At the end every fault is undone, the cluster settles, and the whole history is checked
(``history.check``). The seed is printed first, so a failing run can be replayed with
``--seed``; the summary lists each injection with its time, target and the longest publish
pause it caused. ``make nemesis DURATION=600 [SEED=n]`` runs a long one;
``tests/failure/test_nemesis.py`` a short one in ``make test``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from hedwig.devcluster.hosts import Host
from tests.failure.history import History, check
from tests.failure.lab.cluster import LabCluster, ProcessFault, longest_pause
from tests.failure.lab.disk import SlowDisk, slow_disk_unavailable
from tests.failure.lab.netns import Lab, sweep, unavailable_reason
from tests.failure.lab.partitions import cut, isolate, one_way
from tests.failure.lab.relay import SlowLink
from tests.failure.lab.remote import history_to_json

SESSION = 4.0
TOPICS = ["n/a", "n/b", "n/c"]
KINDS = [
    "owner-from-zookeeper",
    "owner-from-replicas",
    "client-from-owner",
    "one-way",
    "isolate",
    "slow-link",
    "slow-disk",
    "kill-9",
    "freeze",
    "zookeeper-restart",
]


@dataclass
class Injection:
    at: float  # seconds since the load started
    kind: str
    description: str
    held_s: float
    longest_pause_s: float = 0.0


@dataclass
class NemesisReport:
    seed: int
    duration_s: float
    injections: list[Injection] = field(default_factory=list)
    history: History | None = None
    pauses_s: dict[str, float] = field(default_factory=dict)

    def summary(self) -> str:
        assert self.history is not None
        kinds = Counter(i.kind for i in self.injections)
        lines = [
            f"nemesis seed {self.seed}, {self.duration_s:.0f} s, "
            f"{len(self.injections)} faults: "
            + ", ".join(f"{k} x{n}" for k, n in sorted(kinds.items())),
            f"acknowledged {self.history.acked_count}, failed {self.history.failed}, "
            f"log {sum(len(v) for v in self.history.log.values())} messages; "
            f"longest pause per topic {self.pauses_s}",
        ]
        lines += [
            f"  {i.at:7.2f}s  {i.kind:22} held {i.held_s:5.2f}s  "
            f"pause {i.longest_pause_s:5.2f}s  {i.description}"
            for i in self.injections
        ]
        return "\n".join(lines)


class Nemesis:
    def __init__(self, lc: LabCluster, rng: random.Random, disk: SlowDisk | None) -> None:
        self.lc = lc
        self.rng = rng
        self.disk = disk
        self.kinds = [k for k in KINDS if k != "slow-disk" or disk is not None]

    async def _owner(self, rng: random.Random) -> str:
        try:
            owner = await asyncio.wait_for(self.lc.owner(rng.choice(TOPICS)), 5)
        except Exception:
            owner = None
        return owner or rng.choice(self.lc.dev.addresses)

    async def inject(self, kind: str, rng: random.Random) -> str:
        """Start one fault of ``kind`` (registered with the cluster, so it is undone); what.

        Targets are drawn from ``rng``, a generator of this step alone, so the schedule of
        kinds and times stays the seed's whatever the targets turn out to be."""
        lc = self.lc
        owner = await self._owner(rng)
        node = lc.hub_node(owner)
        if kind == "owner-from-zookeeper":
            return lc.add_fault(cut(node, [lc.zk_node])).description
        if kind == "owner-from-replicas":
            return lc.add_fault(cut(node, lc.other_hubs(owner))).description
        if kind == "client-from-owner":
            return lc.add_fault(cut(lc.client, [node])).description
        if kind == "one-way":
            everyone = [lc.zk_node, lc.client, *(lc.hub_node(a) for a in lc.dev.addresses)]
            src, dst = rng.sample(everyone, 2)
            return lc.add_fault(one_way(src, dst)).description
        if kind == "isolate":
            victim = lc.hub_node(rng.choice(lc.dev.addresses))
            return lc.add_fault(isolate(lc.lab, victim)).description
        if kind == "slow-link":
            replica = rng.choice(lc.other_hubs(owner))
            port = next(h.port for h in lc.dev.hub_procs if h.host.address == replica.ip)
            delay = round(rng.uniform(0.05, 0.5), 2)
            return lc.add_fault(SlowLink(lc.lab, node, replica, port, delay).start()).description
        if kind == "slow-disk":
            assert self.disk is not None
            disk, delay = self.disk, rng.choice([50, 200, 1000, 3000])
            disk.set_delay(delay)
            what = f"hub0 fsync +{delay} ms ({disk.kind})"
            fault = ProcessFault(what, lambda: disk.set_delay(0))
            return lc.add_fault(fault).description
        hub = lc.hub(owner if rng.random() < 0.7 else rng.choice(lc.dev.addresses))
        if kind == "kill-9":
            hub.kill()
            restart = ProcessFault(f"kill -9 {hub.address}", lambda: hub.start(wait=False))
            return lc.add_fault(restart).description
        if kind == "freeze":
            hub.freeze()
            return lc.add_fault(ProcessFault(f"freeze {hub.address}", hub.thaw)).description
        assert kind == "zookeeper-restart"
        zk = lc.dev.zk_server
        assert zk is not None
        await asyncio.get_running_loop().run_in_executor(None, zk.restart)
        lc.note("zookeeper restarted")
        return "ZooKeeper stopped and started again"

    async def run(self, duration_s: float, report: NemesisReport, t0: float) -> None:
        deadline = time.monotonic() + duration_s
        while time.monotonic() < deadline:
            await asyncio.sleep(self.rng.uniform(1.0, 4.0))  # quiet spell
            if time.monotonic() >= deadline:
                break
            kind = self.rng.choice(self.kinds)
            hold = 0.0 if kind == "zookeeper-restart" else self.rng.uniform(1.0, 2 * SESSION)
            step = random.Random(self.rng.getrandbits(64))
            start = time.monotonic()
            what = await self.inject(kind, step)
            await asyncio.sleep(min(hold, max(0.0, deadline - time.monotonic()) + 1.0))
            for fault in list(self.lc.faults):
                await asyncio.get_running_loop().run_in_executor(None, self.lc.undo, fault)
            report.injections.append(
                Injection(round(start - t0, 2), kind, what, round(time.monotonic() - start, 2))
            )


async def run_nemesis(lab: Lab, base_dir: Path, duration_s: float, seed: int) -> NemesisReport:
    rng = random.Random(seed)
    report = NemesisReport(seed, duration_s)
    disk = None if slow_disk_unavailable() else SlowDisk(lab.id).create()
    hub0 = lab.add_node("hub0")
    hosts = {}
    if disk is not None:
        if disk.kind == "dm-delay":
            (base_dir / "hub0").symlink_to(disk.path, target_is_directory=True)
        hosts[0] = Host(hub0.ip, hub0.host.launch + disk.launch)
    try:
        with LabCluster(lab, base_dir, session_timeout_s=SESSION, hub_hosts=hosts) as lc:
            work = lc.workload(TOPICS, rate=100.0, retry_deadline_s=60.0)
            await work.start()
            t0 = time.monotonic()
            await asyncio.sleep(2.0)  # load before the nemesis
            await Nemesis(lc, rng, disk).run(duration_s, report, t0)
            end = lc.note("nemesis over, healing and settling")
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, lc.heal_all)
            for hub in lc.dev.hub_procs:  # killed hubs were started without waiting
                await loop.run_in_executor(None, hub.wait_ready)
            await asyncio.sleep(2 * SESSION)  # load on, healed, settling: the test's last part
            lc.note("reading the logs back")
            # healthy subscribers catch up within seconds; a stalled one fails the check
            history = await work.finish(timeout=30.0)
            lc.note("history read")
            (base_dir / "history.json").write_text(json.dumps(history_to_json(history)))
            report.history = history
            report.pauses_s = {
                t: round(longest_pause(history.topic_ack_times[t], t0, end), 2) for t in TOPICS
            }
            for i in report.injections:
                lo, hi = t0 + i.at, t0 + i.at + i.held_s + 2 * SESSION
                i.longest_pause_s = round(
                    max(longest_pause(history.topic_ack_times[t], lo, hi) for t in TOPICS), 2
                )
            (base_dir / "nemesis.log").write_text(report.summary() + "\n\n" + lc.summary())
    finally:
        if disk is not None:
            disk.remove()
    return report


def main() -> None:
    p = argparse.ArgumentParser(description="Random faults against a lab cluster under load.")
    p.add_argument("--duration", type=float, default=600.0, help="seconds of faults")
    p.add_argument("--seed", type=int, default=None, help="replay a run (default: random)")
    p.add_argument("--dir", default=None, help="keep logs here (default: a temporary dir)")
    args = p.parse_args()
    reason = unavailable_reason()
    if reason:
        sys.exit(f"cannot run the nemesis: {reason}")
    sweep()
    seed = args.seed if args.seed is not None else random.randrange(1 << 32)
    print(f"nemesis seed {seed}", flush=True)
    base = Path(args.dir or tempfile.mkdtemp(prefix="hedwig-nemesis-"))
    base.mkdir(parents=True, exist_ok=True)
    with Lab() as lab:
        report = asyncio.run(run_nemesis(lab, base, args.duration, seed))
    print(report.summary())
    print(f"logs: {base}")
    assert report.history is not None
    try:
        check(report.history)
    except AssertionError as exc:
        sys.exit(f"history check FAILED (seed {seed}; logs in {base}):\n{exc}")
    print("history check passed")
    print(json.dumps({"seed": seed, "acked": report.history.acked_count}))


if __name__ == "__main__":
    main()
