"""Two linked regions of real processes, each with its own ZooKeeper: region ``a`` of one hub
(1/1/1), region ``b`` of three (3/3/2), linked both ways (``--region-links``). A workload runs in
each (its own publishers and subscribers, ``history.Workload``); under it the hub of ``b``
that owns, and so replicates, the first topic is killed with ``kill -9`` and started again.
Each region's history is checked as every fault scenario's is (``history.check``), and the
two together across regions (``regions.problems_across``): everything acknowledged in one
region is in the other's log exactly once, in its origin's order per publisher, and nothing
comes back to where it came from.

Plaintext: the two regions' development clusters each make a CA of their own, and a hub of
one region presenting itself to the other needs that region to trust its certificate and an
ACL there (``docs/operations.md``, "Linking regions"); that secured run is not here yet.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hedwig.client import HedwigClient
from hedwig.devcluster.cluster import DevCluster
from hedwig.devcluster.zookeeper import free_port
from tests.cluster_helpers import owner_of
from tests.failure.clusters import SESSION
from tests.failure.history import Workload, check
from tests.failure.regions import problems_across, read_with_origins

pytestmark = pytest.mark.integration

TOPICS = ["r/x", "r/y"]


def _ports(n: int) -> list[tuple[int, int]]:
    return [(free_port(), free_port()) for _ in range(n)]


@pytest.fixture
def linked(tmp_path: Path) -> Iterator[dict[str, DevCluster]]:
    """Region ``a`` (one hub) and ``b`` (three), linked both ways on fixed ports."""
    ports = {"a": _ports(1), "b": _ports(3)}
    links = {r: ",".join(f"127.0.0.1:{p}" for p, _ in ps) for r, ps in ports.items()}
    clusters = {
        r: DevCluster(
            hubs=len(ports[r]),
            region=r,
            session_timeout_s=SESSION,
            base_dir=str(tmp_path / r),
            hub_ports=ports[r],
            hub_args=["--region-links", f"{other}={links[other]}"],
        )
        for r, other in (("a", "b"), ("b", "a"))
    }
    try:
        for c in clusters.values():
            c.start()
        yield clusters
    finally:
        for c in clusters.values():
            c.stop()


async def converged(clusters: dict[str, DevCluster], acked: int, timeout: float = 60.0) -> None:
    """Until each region's logs hold as many messages as both workloads had acknowledged
    (replication catching up after the publishing stopped)."""
    deadline = time.monotonic() + timeout
    for c in clusters.values():
        async with HedwigClient(c.addresses) as client:
            while True:
                total = 0
                for t in TOPICS:
                    total += (await client.topic_info(t)).last_seq
                if total >= acked or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.2)


async def test_kill9_of_the_replicating_owner_loses_and_repeats_nothing(
    linked: dict[str, DevCluster],
) -> None:
    works = {
        r: Workload(c.addresses, TOPICS, publishers=2, subscribers=1, rate=100.0, prefix=f"pub{r}")
        for r, c in linked.items()
    }
    for w in works.values():
        await w.start()
    await asyncio.sleep(2.0)  # load before the fault
    b = linked["b"]
    owner = await owner_of(b.zk, "b", TOPICS[0])
    assert owner is not None
    victim = b.hub_at(owner)
    acked_before = sum(w.history.acked_count for w in works.values())
    victim.kill()
    await asyncio.sleep(SESSION + 3)  # load while b's topics are taken over
    victim.start()
    await asyncio.sleep(3.0)  # load after the restart
    for w in works.values():
        await w.stop_publishing()
    acked = sum(w.history.acked_count for w in works.values())
    assert acked > acked_before, "publishing did not resume after the fault"
    await converged(linked, acked)
    histories = {r: await w.finish() for r, w in works.items()}
    for h in histories.values():
        check(h)
    logs = {}
    for r, c in linked.items():
        async with HedwigClient(c.addresses) as client:
            logs[r] = {t: await read_with_origins(client, t) for t in TOPICS}
    problems = problems_across(logs, histories)
    assert not problems, "\n".join(problems[:20])
    # Both directions carried messages.
    for r, other in (("a", "b"), ("b", "a")):
        assert any(pid.startswith(f"@{other}/") for t in TOPICS for _, pid, _ in logs[r][t])
