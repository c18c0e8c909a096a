"""Replication health: under-replicated ledgers are visible and repaired."""

from __future__ import annotations

import asyncio
import json
import shutil
import urllib.request
from pathlib import Path

import pytest

from hedwig.client import HedwigClient
from hedwig.devcluster.cluster import DevCluster
from tests.cluster_helpers import eventually, hedwig, owner_of
from tests.failure.clusters import cluster_332
from tests.failure.history import Workload, check, read_all
from tests.failure.test_faults import TOPICS

pytestmark = pytest.mark.integration


def scrape(url: str) -> str:
    with urllib.request.urlopen(url + "/metrics", timeout=5) as r:
        return str(r.read().decode())


def under_replicated(cluster: DevCluster) -> list[dict[str, object]]:
    out = hedwig(
        "ledgers", "--zk", cluster.zk, "--region", cluster.region, "--under-replicated", "--json"
    )
    assert out.returncode == 0, out.stderr
    rows: list[dict[str, object]] = json.loads(out.stdout)
    return rows


def copied(cluster: DevCluster, kind: str) -> float:
    """Bytes the hubs' audits copied, of ``kind`` (replace, catch-up, grow), summed."""
    total = 0.0
    for h in cluster.hub_procs:
        if not h.running:
            continue
        for line in scrape(h.metrics_url).splitlines():
            if line.startswith(f'hedwig_rereplicated_bytes_total{{kind="{kind}"}}'):
                total += float(line.rsplit(" ", 1)[1])
    return total


async def test_lost_replica_is_visible_then_repaired_elsewhere() -> None:
    with cluster_332(
        None,
        "rerep",
        hub_args=["--audit-interval", "1", "--no-self-balance", "--rereplication-delay", "4"],
    ) as c:
        async with HedwigClient(c.addresses) as client:
            sent = [b"m%d" % i for i in range(300)]
            for v in sent[:150]:
                await client.publish("rerep", v)
            owner = await owner_of(c.zk, c.region, "rerep")
            victim = next(h for h in c.hub_procs if h.address != owner)
            # Ledgers name replicas by hub id (hedwig.hub.process.identity).
            victim_id = Path(victim.data_dir, "hub-id").read_text().strip()
            victim.kill()
            for v in sent[150:]:
                await client.publish("rerep", v)  # ack quorum 2 of 3: publishing goes on

            async def listed() -> bool:
                rows = under_replicated(c)
                return any(victim_id in str(r["dead"]) for r in rows)

            await eventually(listed, timeout=10)
            c.add_hub()  # a fresh hub: the auditors copy the lost replicas there
            # ... once the victim has been gone for the re-replication delay, not before.
            await asyncio.sleep(1.5)  # the test: nothing copied in this window
            assert copied(c, "replace") == 0

            async def healthy() -> bool:
                return under_replicated(c) == []

            await eventually(healthy, timeout=30)
            log = await read_all(client, "rerep")
            assert [v for _, v in log] == sent
            # the repaired ledgers hold every entry on three live replicas
            rows = json.loads(
                hedwig("ledgers", "--zk", c.zk, "--region", c.region, "--json").stdout
            )
            closed = [r for r in rows if r["state"] == "CLOSED" and r["entries"]]
            assert closed and all(len(str(r["replicas"]).split(",")) == 3 for r in closed)
            assert all(victim_id not in str(r["replicas"]) for r in closed)


async def test_restarted_empty_replica_is_caught_up() -> None:
    with cluster_332(None, "catchup", hub_args=["--audit-interval", "1", "--no-self-balance"]) as c:
        async with HedwigClient(c.addresses) as client:
            for i in range(100):
                await client.publish("catchup", b"%d" % i)
            owner = await owner_of(c.zk, c.region, "catchup")
            victim = next(h for h in c.hub_procs if h.address != owner)
            # graceful move closes the ledger (before it is answered), so it is audited
            await client.move_topic("catchup", victim.address)
            victim.kill()
            shutil.rmtree(victim.data_dir + "/ledgers")
            victim.start()

            async def healthy() -> bool:
                rows = under_replicated(c)
                return not any(r["lagging"] for r in rows) and not any(r["dead"] for r in rows)

            await eventually(healthy, timeout=30)
            log = await read_all(client, "catchup")
            assert [v for _, v in log] == [b"%d" % i for i in range(100)]


async def test_a_rolling_restart_copies_no_ledger() -> None:
    """Four hubs at 3/3/2 (so there is always a spare), each restarted in turn: every hub is
    back within the re-replication delay, so no replica is re-created elsewhere."""
    with cluster_332(
        None,
        "rolling",
        hubs=4,
        hub_args=["--audit-interval", "1", "--no-self-balance", "--rereplication-delay", "60"],
    ) as c:
        async with HedwigClient(c.addresses) as client:
            topics = [f"rolling-{i}" for i in range(6)]
            for topic in topics:
                for i in range(50):
                    await client.publish(topic, b"%d" % i)
                await client.move_topic(topic)  # closes its ledger, so it is audited
            loop = asyncio.get_running_loop()
            for hub in list(c.hub_procs):
                await loop.run_in_executor(None, hub.stop)
                # the test: down past its session (2 s), seen gone by a few audits
                await asyncio.sleep(3)
                await loop.run_in_executor(None, hub.start)
            await asyncio.sleep(3)  # the test: a few audits with every hub back, none copies
            assert copied(c, "replace") == 0
            for topic in topics:
                log = await read_all(client, topic)
                assert [v for _, v in log] == [b"%d" % i for i in range(50)]


async def test_a_hub_back_and_another_gone_while_the_auditors_wait_under_load(
    tmp_path: Path,
) -> None:
    """Under load, ledgers rolling over every 4 KB: a hub dies, a second one dies while the
    auditors wait out the first one's re-replication delay, and the first comes back within
    it. Only the second one's replicas are re-created elsewhere (the first one's are kept:
    it is back), every closed ledger ends on three live replicas, and the whole history holds:
    nothing acknowledged lost, nothing twice, each publisher's order kept."""
    with cluster_332(
        tmp_path,
        "waits",
        hubs=4,
        hub_args=[
            *("--audit-interval", "0.5", "--no-self-balance"),
            *("--rereplication-delay", "6", "--ledger-max-bytes", "4096"),
        ],
    ) as c:
        loop = asyncio.get_running_loop()
        work = Workload(c.addresses, TOPICS, senders=1)
        await work.start()
        await asyncio.sleep(2.0)  # load before the faults
        first, second = c.hub_procs[:2]
        first_id, second_id = (
            Path(h.data_dir, "hub-id").read_text().strip() for h in (first, second)
        )
        on_first = {
            int(str(r["ledger"]))
            for r in ledger_rows(c)
            if r["state"] == "CLOSED" and first_id in str(r["replicas"])
        }
        first.kill()
        # The scenario's timeline (the test): 2.5 s, past the first one's session (the
        # auditors see it gone, and wait); the second killed; 1.5 s; the first back.
        await asyncio.sleep(2.5)
        second.kill()
        await asyncio.sleep(1.5)
        await loop.run_in_executor(None, first.start)  # back about 4 s after, within the delay
        await asyncio.sleep(10.0)  # the second one's delay ends: its replicas are re-created
        history = await work.finish()
        check(history)

        async def healthy() -> bool:
            return under_replicated(c) == []

        try:
            await eventually(healthy, timeout=60)
        except AssertionError:
            # What is left, for whoever reads the hubs' logs next (2 runs of 50 once).
            raise AssertionError(f"still under-replicated: {under_replicated(c)}") from None
        assert copied(c, "replace") > 0
        rows = {int(str(r["ledger"])): r for r in ledger_rows(c) if r["state"] == "CLOSED"}
        for r in rows.values():
            replicas = str(r["replicas"]).split(",")
            if r["entries"]:
                assert len(replicas) == 3 and second_id not in replicas, r
        kept = [lid for lid in on_first if lid in rows]
        assert kept, "no ledger of the first hub to look at"
        assert all(first_id in str(rows[lid]["replicas"]) for lid in kept)


def ledger_rows(cluster: DevCluster) -> list[dict[str, object]]:
    out = hedwig("ledgers", "--zk", cluster.zk, "--region", cluster.region, "--json")
    assert out.returncode == 0, out.stderr
    rows: list[dict[str, object]] = json.loads(out.stdout)
    return rows
