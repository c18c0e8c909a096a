"""Failover time after a partition of the owner, over many rounds, in the network lab.

    .venv/bin/python -m tests.failure.failover_rounds --fault zookeeper --rounds 20

One lab cluster (three hubs at 3/3/2, a 4 s session, the history workload at 300 msg/s over
three topics). Each round cuts the current owner of the first topic off (``--fault``):

- ``zookeeper``: from ZooKeeper only; once its owner records are gone another client makes
  another hub take its topics over (``LabCluster.force_takeover``), fencing its ledger;
- ``replicas``: from both other hubs only (it must give its topics up);
- ``isolate``: from every node.

The fault holds 8 s (past the goal of session + 2 s, so a missing failover shows), then heals,
and the cluster settles for two sessions. A round's failover time is the longest time the
victim's topics went without an acknowledgement while the fault held. At the end the whole
history is checked. Prints one JSON object: the rounds and their percentiles.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.cluster_helpers import eventually
from tests.failure.history import History, check
from tests.failure.lab.cluster import LabCluster, longest_pause
from tests.failure.lab.netns import Lab, sweep, unavailable_reason
from tests.failure.lab.partitions import cut, isolate
from tests.failure.lab.remote import history_to_json

SESSION = 4.0
HOLD = 8.0
TOPICS = ["r/a", "r/b", "r/c"]


def percentiles(samples: list[float]) -> dict[str, float]:
    s = sorted(samples)

    def at(q: float) -> float:
        return s[min(len(s) - 1, int(q * len(s)))]

    return {"n": len(s), "p50_s": at(0.5), "p90_s": at(0.9), "p99_s": at(0.99), "max_s": s[-1]}


async def rounds(lab: Lab, base: Path, fault: str, count: int) -> dict[str, Any]:
    with LabCluster(lab, base, session_timeout_s=SESSION) as lc:
        work = lc.workload(TOPICS, rate=100.0)
        await work.start()
        await asyncio.sleep(2.0)  # load before the first round
        windows: list[tuple[float, float, list[str]]] = []
        extra: dict[str, list[tuple[bytes, int]]] = {}
        for n in range(count):
            owners = await lc.owners(TOPICS)

            async def owned() -> bool:  # a hand-off by the balancer may be under way
                nonlocal owners
                owners = await lc.owners(TOPICS)
                return owners[TOPICS[0]] is not None

            await eventually(owned, timeout=10, interval=0.1, what=f"{TOPICS[0]} owned")
            victim = owners[TOPICS[0]]
            assert victim is not None, owners
            topics = [t for t in TOPICS if owners[t] == victim]
            node = lc.hub_node(victim)
            start = lc.note(f"round {n}: {fault} of {victim}")
            if fault == "zookeeper":
                lc.add_fault(cut(node, [lc.zk_node]))
                await asyncio.gather(
                    asyncio.sleep(HOLD), lc.force_takeover(victim, topics, extra, start)
                )
            else:
                lc.add_fault(cut(node, lc.other_hubs(victim)) if fault == "replicas"
                             else isolate(lab, node))  # fmt: skip
                await asyncio.sleep(HOLD)
            lc.heal_all()
            windows.append((start, lc.note("healed"), topics))
            await asyncio.sleep(2 * SESSION)  # the test: load on, healed, before the next round
        history = await work.finish(timeout=30.0)
        for topic, acks in extra.items():
            history.acked[topic].extend(acks)
        (base / "history.json").write_text(json.dumps(history_to_json(history)))
        times = [
            round(max(longest_pause(history.topic_ack_times[t], a, b) for t in ts), 2)
            for a, b, ts in windows
        ]
        return {
            "fault": fault,
            "session_s": SESSION,
            "goal_s": SESSION + 2,
            "failover": percentiles(times),
            "rounds_s": times,
            "acked": history.acked_count,
            "history": history_problems(history),
        }


def history_problems(history: History) -> str:
    """``"ok"``, or what the history check found (the report goes on regardless)."""
    try:
        check(history)
    except AssertionError as exc:
        return str(exc)
    return "ok"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--fault", choices=["zookeeper", "replicas", "isolate"], required=True)
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--dir", default=None, help="keep logs here (default: a temporary dir)")
    args = p.parse_args()
    reason = unavailable_reason()
    if reason:
        sys.exit(f"cannot run: {reason}")
    sweep()
    base = Path(args.dir or tempfile.mkdtemp(prefix="hedwig-failover-"))
    base.mkdir(parents=True, exist_ok=True)
    t = time.monotonic()
    with Lab() as lab:
        result = asyncio.run(rounds(lab, base, args.fault, args.rounds))
    result["wall_s"] = round(time.monotonic() - t)
    result["logs"] = str(base)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
